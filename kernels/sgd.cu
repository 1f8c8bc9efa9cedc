// SGD on the GPU over the flat parameter buffer: the twin of nn/sgd.h's sgd_update_range
// (PyTorch's torch.optim.SGD, dampening 0, same operation order), in one launch for the whole
// model. Weight decay is switched per element by a byte mask (BN weight/bias and biases are
// excluded when asked), so no per-tensor launches are needed. When a bf16 copy of the weights
// exists (the operands of the bf16 convolutions), it is refreshed in the same pass.
#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "kernels/kernels.h"

__global__ void sgd_k(float *p, const float *g, float *buf, const uint8_t *decay, size_t n, float lr,
                      float momentum, float wd, int nesterov, int first, uint16_t *p_bf16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float pi = p[i];
        float d = g[i];
        float w = (decay && !decay[i]) ? 0.0f : wd;
        if (w != 0.0f) d = d + w * pi;
        if (momentum != 0.0f) {
            float b = first ? d : momentum * buf[i] + d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        pi = pi + (-lr) * d;
        p[i] = pi;
        if (p_bf16) p_bf16[i] = ct_f32_to_bf16(pi);
    }
}

extern "C" void sgd_step_gpu(float *params, const float *grads, float *buf, const uint8_t *decay,
                             size_t n, float lr, float momentum, float wd, int nesterov, int first,
                             uint16_t *params_bf16, ct_stream_t stream) {
    if (!n) return;
    CT_LAUNCH(sgd_k, ct_grid_for(n, 256), 256, 0, stream, params, grads, buf, decay, n, lr, momentum,
              wd, nesterov, first, params_bf16);
    CT_CHECK_LAUNCH("sgd_step_gpu");
}
