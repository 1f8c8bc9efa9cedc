// Whole-step GPU training throughput of ctrain's CUDA executor: the uint8 batch copied from pinned
// host memory and normalised on the device, forward, softmax cross-entropy, backward and an SGD
// step (train's defaults: lr 0.1, momentum 0.9, weight decay 1e-4, no Nesterov), on one random
// batch. This is the loop a trainer runs minus data loading; the peer is tools/bench_gpu_torch.py.
//   build/tools/bench_gpu_train ARCH SIZE BATCH [STEPS=20] [WARMUP=5] [--precision bf16|fp32]
//                               [--step fused|trainer] [--classes N] [--graphs on|off] [--profile]
// --profile: events between the ops of every step (eager launches), then a per-op table after the
//   line: what to make faster. Its img/s includes the events' cost.
// --graphs (default on, as train's --cuda-graphs): passes replayed as CUDA graphs after the first
//   step; off launches every kernel from the host (the step is then labelled "...-eager").
// --step fused (default): gpu_train_step_u8 (loss on the device) + gpu_sgd_step.
// --step trainer: the sequence trainer/step.c's step_train runs for one rank: BN snapshot,
//   gpu_forward_u8_dev, gpu_loss_xent (the loss back to the host), gpu_backward_dev, the device
//   finiteness check, gpu_sgd_step; it shows what those synchronisations cost.
// Each step ends synchronised (the loss comes back to the host), so a step's wall time is its cost.
// Prints one line (tools/bench_gpu_train.sh parses it): img/s from the median step, the executor's
// device memory (gpu_exec_device_bytes) and the growth of the device's used memory over the run
// (cudaMemGetInfo: adds the lazily loaded kernels and the runtime's own allocations), final loss;
// exits 3 after the line when that loss is not finite.
// build.sh links it twice: build/tools/ against the real kernels (when nvcc exists) and
// build/emu-tools/ against the emulated ones (tests/test_bench_gpu_train.sh; not a speed).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/model_cuda.h"
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "util/common.h"
#include "util/rng.h"
#include "tools/exec_env.h"

// Declared here rather than through <cuda_runtime_api.h> so this stays plain C with no CUDA include
// path, like the trainer: the real runtime and the emulator (kernels/emu/runtime.cpp) both export these
// C symbols; cudaError_t is an int-sized enum, cudaSuccess is 0.
int cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
int cudaRuntimeGetVersion(int *version);
int cudaDriverGetVersion(int *version);

static size_t device_free_bytes(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != 0) ct_die("bench_gpu_train: cudaMemGetInfo failed");
    return free_b;
}

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s ARCH SIZE BATCH [STEPS=20] [WARMUP=5] [--precision bf16|fp32] [--step fused|trainer] "
            "[--classes N] [--graphs on|off] [--profile]\n",
            prog);
    exit(2);
}

int main(int argc, char **argv) {
    const char *precision = "bf16", *step_kind = "fused", *graphs = "on";
    const char *pos[5];
    int npos = 0, classes = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--precision") || !strcmp(a, "--step") || !strcmp(a, "--classes") || !strcmp(a, "--graphs")) {
            if (i + 1 >= argc) ct_die("bench_gpu_train: %s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--precision")) precision = v;
            else if (!strcmp(a, "--step")) step_kind = v;
            else if (!strcmp(a, "--graphs")) graphs = v;
            else classes = ct_parse_int("--classes", v, 2, 1 << 20);
        } else if (!strcmp(a, "--profile")) {
            profile = 1;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "bench_gpu_train: unknown flag '%s'\n", a);
            usage(argv[0]);
        } else if (npos < 5) {
            pos[npos++] = a;
        } else {
            usage(argv[0]);
        }
    }
    if (npos < 3) usage(argv[0]);
    if (strcmp(precision, "bf16") && strcmp(precision, "fp32"))
        ct_die("bench_gpu_train: --precision must be bf16 or fp32 (got '%s')", precision);
    if (strcmp(step_kind, "fused") && strcmp(step_kind, "trainer"))
        ct_die("bench_gpu_train: --step must be fused or trainer (got '%s')", step_kind);
    if (strcmp(graphs, "on") && strcmp(graphs, "off"))
        ct_die("bench_gpu_train: --graphs must be on or off (got '%s')", graphs);
    const int trainer = !strcmp(step_kind, "trainer"), use_graphs = !strcmp(graphs, "on");
    char step_label[32];  // "fused", or "fused-eager" without CUDA graphs
    snprintf(step_label, sizeof step_label, "%s%s", step_kind, use_graphs ? "" : "-eager");
    const char *arch = pos[0];
    if (!resnet_arch_valid(arch)) ct_die("bench_gpu_train: unknown ARCH '%s' (one of %s)", arch, resnet_arch_list());
    const int S = ct_parse_int("SIZE", pos[1], 8, 1 << 20), N = ct_parse_int("BATCH", pos[2], 1, 1 << 20);
    const int steps = npos > 3 ? ct_parse_int("STEPS", pos[3], 1, 1 << 20) : 20;
    const int warmup = npos > 4 ? ct_parse_int("WARMUP", pos[4], 0, 1 << 20) : 5;

    if (!gpu_available())
        ct_die("bench_gpu_train: no usable CUDA device (none found, or the driver/runtime failed to start): "
               "this benchmark needs an NVIDIA GPU");
    gpu_select_device(0);
    int rt_version = 0, drv_version = 0;
    cudaRuntimeGetVersion(&rt_version);
    cudaDriverGetVersion(&drv_version);
    // The context exists by now (cudaSetDevice makes it, cudaMemGetInfo at the latest), so the
    // baseline leaves it out, as the PyTorch peer's does (read after CUDA initialised).
    const size_t free_before = device_free_bytes();

    ResNet *m = resnet_create(arch, 3, 10);
    if (!classes) classes = m->cifar ? 10 : 1000;
    resnet_free(m);
    m = resnet_create(arch, 3, classes);
    resnet_init(m, 1, 0);

    // The batch lives in pinned memory like the loader's ring, so its copy is a true DMA transfer;
    // it is copied and normalised every step, as in training (both sides pay for it).
    const size_t nbytes = (size_t)N * S * S * 3;
    uint8_t *x = gpu_pinned_alloc(nbytes, NULL);
    int32_t *labels = ct_alloc((size_t)N * sizeof(int32_t));
    Rng r = rng_make(7, 0, 0);
    for (size_t i = 0; i < nbytes; i++) x[i] = (uint8_t)(rng_u32(&r) & 0xff);
    for (int i = 0; i < N; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)classes);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};

    ExecOptions eo = tool_exec_options();  // CTRAIN_CONV_ENGINE=... (tools/gpu_session.sh's variants)
    GpuExec *e = gpu_exec_create_opts(m, !strcmp(precision, "bf16") ? CT_BF16 : CT_F32, &eo);
    gpu_exec_use_graphs(e, use_graphs);  // train's default is on
    if (profile) gpu_exec_profile(e, m, 1);
    SgdState st;
    sgd_init(&st, m->n_params);
    const SgdConfig cfg = {0.9f, 1e-4f, 0, 0, 0, 0};
    const float lr = 0.1f;
    double *wall = ct_alloc((size_t)steps * sizeof(double));
    float loss = 0;
    for (int it = 0; it < warmup + steps; it++) {
        const double t0 = ct_now();
        if (trainer) {
            gpu_bufs_snapshot(e);
            gpu_forward_u8_dev(e, m, x, N, S, S, mean, std, 1);
            loss = gpu_loss_xent(e, m, labels, N, 0.0f, 1.0f, NULL);
            gpu_backward_dev(e, m, NULL, NULL);
            // As trainer/step.c: a non-finite gradient skips the update and restores the BN statistics.
            if (gpu_grads_finite(e)) gpu_sgd_step(e, m, &cfg, &st, lr);
            else gpu_bufs_rollback(e);
        } else {
            loss = gpu_train_step_u8(e, m, x, labels, N, S, S, mean, std, 0.0f, NULL, NULL);
            gpu_sgd_step(e, m, &cfg, &st, lr);
        }
        const double t1 = ct_now();
        if (it >= warmup) wall[it - warmup] = t1 - t0;
    }
    const size_t free_after = device_free_bytes();
    const double med = ct_median(wall, steps);
    const double mib = 1048576.0;
    const double used = free_before > free_after ? (double)(free_before - free_after) : 0.0;
    printf("ctrain  %-9s %3dx%-3d batch %-4d %-4s %-7s: %9.1f img/s (median step %.2f ms), "
           "memory %.1f MiB held, %.1f MiB device used, final loss %.4f, cuda runtime %d driver %d\n",
           arch, S, S, N, precision, step_label, N / med, med * 1e3, gpu_exec_device_bytes(e) / mib, used / mib,
           loss, rt_version, drv_version);
    if (profile) gpu_exec_profile_report(e, m, 15, stdout);
    // The line still comes out, but a diverged run's timings are suspect and callers must notice.
    const int status = isfinite(loss) ? 0 : 3;
    if (status) fprintf(stderr, "bench_gpu_train: the final loss is not finite (exit 3)\n");
    gpu_exec_free(e);
    sgd_free(&st);
    resnet_free(m);
    gpu_pinned_free(x, NULL);
    free(labels), free(wall);
    return status;
}
