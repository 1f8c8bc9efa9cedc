// The GPU executor's losses (struct GpuExec in nn/model_cuda_impl.h): cross-entropy (with label
// smoothing and the soft targets of mixup/cutmix), timm's binary cross-entropy and knowledge
// distillation on the logits of the
// last training forward, written as dlogits on the device for the backward (nn/model_cuda.cu),
// with the loss and hit count copied back to pinned host scalars. The kernels are
// kernels/loss.cu's multi-block ones.
#include <math.h>
#include <string.h>

#include "kernels/mutable.h"
#include "nn/model_cuda_impl.h"

static void check_labels(const ResNet *m, const int32_t *labels, int N) {
    for (int n = 0; n < N; n++)
        if (labels[n] < 0 || labels[n] >= m->num_classes)
            ct_die("gpu: label %d of batch row %d is outside [0, %d)", labels[n], n, m->num_classes);
}

// (nn/model_cuda_impl.h says what it enqueues.)
void enqueue_xent(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam, int N,
                  float smoothing, float grad_scale) {
    if (N != e->fwd_train_N) ct_die("gpu: loss of %d rows after a training forward of %d", N, e->fwd_train_N);
    check_labels(m, labels, N);
    CK(cudaMemcpyAsync(e->mem.labels, labels, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, e->st));
    const int32_t *lb_dev = e->mem.labels;
    if (labels_b != labels) {
        check_labels(m, labels_b, N);
        CK(cudaMemcpyAsync(e->mem.labels_b, labels_b, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, e->st));
        lb_dev = e->mem.labels_b;
    }
    softmax_xent_mix_gpu(e->mem.dlogits, e->mem.logits, e->mem.labels, lb_dev, lam, N, m->num_classes, smoothing, grad_scale,
                         e->mem.loss_work, e->scalars, (int *)(e->scalars + 1), e->st);
    CK(cudaMemcpyAsync(e->h_scalars, e->scalars, 2 * sizeof(float), cudaMemcpyDeviceToHost, e->st));
}
float xent_result(const GpuExec *e, int *correct) {
    if (correct) memcpy(correct, e->h_scalars + 1, sizeof(int));
    return e->h_scalars[0];
}

float gpu_loss_xent_mix(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam,
                        int N, float smoothing, float grad_scale, int *correct) {
    if (!(lam >= 0 && lam <= 1)) ct_die("gpu: mix lam %g is outside [0, 1]", lam);
    enqueue_xent(e, m, labels, labels_b, lam, N, smoothing, grad_scale);
    CT_MUTABLE("loss-sync") CK(cudaStreamSynchronize(e->st));
    return xent_result(e, correct);
}

float gpu_loss_xent(GpuExec *e, const ResNet *m, const int32_t *labels, int N, float smoothing,
                    float grad_scale, int *correct) {
    return gpu_loss_xent_mix(e, m, labels, labels, 1.0f, N, smoothing, grad_scale, correct);
}

float gpu_loss_bce_mix(GpuExec *e, const ResNet *m, const int32_t *labels, const int32_t *labels_b, float lam,
                       int N, float smoothing, float threshold, int sum_classes, float grad_scale, int *correct) {
    if (!(lam >= 0 && lam <= 1)) ct_die("gpu: mix lam %g is outside [0, 1]", lam);
    if (N != e->fwd_train_N) ct_die("gpu: loss of %d rows after a training forward of %d", N, e->fwd_train_N);
    check_labels(m, labels, N);
    check_labels(m, labels_b, N);
    CK(cudaMemcpyAsync(e->mem.labels, labels, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, e->st));
    CK(cudaMemcpyAsync(e->mem.labels_b, labels_b, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, e->st));
    bce_mix_gpu(e->mem.dlogits, e->mem.logits, e->mem.labels, e->mem.labels_b, lam, N, m->num_classes, smoothing, threshold,
                sum_classes, grad_scale, e->mem.loss_work, e->scalars, (int *)(e->scalars + 1), e->st);
    CK(cudaMemcpyAsync(e->h_scalars, e->scalars, 2 * sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CT_MUTABLE("loss-sync") CK(cudaStreamSynchronize(e->st));
    return xent_result(e, correct);
}

float gpu_loss_kd(GpuExec *e, const ResNet *m, const float *teacher_logits, int N, float temperature,
                  float grad_scale) {
    if (N != e->fwd_train_N) ct_die("gpu: loss of %d rows after a training forward of %d", N, e->fwd_train_N);
    kd_loss_gpu(e->mem.dlogits, e->mem.logits, teacher_logits, N, m->num_classes, temperature, grad_scale, e->mem.loss_work,
                e->scalars + 2, e->st);
    CK(cudaMemcpyAsync(e->h_scalars + 2, e->scalars + 2, sizeof(float), cudaMemcpyDeviceToHost, e->st));
    CK(cudaStreamSynchronize(e->st));
    return e->h_scalars[2];
}

void gpu_dlogits_poison(GpuExec *e) {
    static const float nan = NAN;
    CK(cudaMemcpyAsync(e->mem.dlogits, &nan, sizeof nan, cudaMemcpyHostToDevice, e->st));
    CK(cudaStreamSynchronize(e->st));  // &nan is pageable: the copy must be done before returning
}

