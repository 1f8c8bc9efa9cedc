// Exponential moving average of the weights (timm's ModelEma; the trainer's --ema), the CPU twin of
// kernels/ema.cu. The average is one state tensor over the flat buffers, kept like an optimizer's
// state tensors: ema[n_params + n_bufs], the average of ResNet.params then of ResNet.bufs (the
// layout checkpoints store it in: nn/checkpoint.h's ema_params, ema_buffers). One operation
// applies to it and the live buffers (ema_apply here, gpu_ema on the device):
//   EMA_UPDATE: per element, with a = 1 - decay computed in float,
//               ema = ema + a * (w - ema)   (torch.lerp(ema, w, a) for a < 0.5, unfused)
//   EMA_SWAP:   exchanges the live buffers and the average (evaluating the average is swap,
//               evaluate, swap; the live buffers come back bit for bit)
// The same three float operations in the same order on both backends: bit-identical averages.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { EMA_UPDATE = 0, EMA_SWAP = 1 } EmaOp;

// op over (params[0, n_params), ema[0, n_params)) and (bufs[0, n_bufs), ema[n_params, n_params + n_bufs)).
void ema_apply(EmaOp op, float decay, float *params, size_t n_params, float *bufs, size_t n_bufs, float *ema);

// The elementwise cores, twins of ema_update_gpu and ema_swap_gpu (kernels/kernels.h).
void ema_update(float *ema, const float *w, size_t n, float decay);
// Exchanges a[0, n) and b[0, n).
void ema_swap(float *a, float *b, size_t n);

#ifdef __cplusplus
}
#endif
