// Exponential moving average of the weights (timm's ModelEma; the trainer's --ema), the CPU twin of
// kernels/ema.cu. Per element, with a = 1 - decay computed in float:
//   ema = ema + a * (w - ema)          (torch.lerp(ema, w, a) for a < 0.5, unfused)
// The same three float operations in the same order on both backends: bit-identical averages.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void ema_update(float *ema, const float *w, size_t n, float decay);
// Exchanges a[0, n) and b[0, n): evaluating the averaged model puts it in the live buffers and back.
void ema_swap(float *a, float *b, size_t n);

#ifdef __cplusplus
}
#endif
