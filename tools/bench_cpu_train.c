// Whole-model CPU training throughput: forward, softmax cross-entropy, backward and an SGD step
// (momentum 0.9, weight decay 5e-4) on random data, the loop a trainer runs minus data loading.
//   build/tools/bench_cpu_train ARCH SIZE BATCH [STEPS] [WARMUP] [CLASSES]
// Prints one line: img/s from the median wall time of a step, img/s from CPU time (process CPU
// seconds / threads: what the step costs when the cores are not shared), and peak RSS.
// tools/bench_cpu.sh runs it beside tools/bench_cpu_torch.py (the same model in PyTorch).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nn/gemm.h"
#include "nn/model_cpu.h"
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "util/common.h"
#include "util/rng.h"
#include "tools/exec_env.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ARCH SIZE BATCH [STEPS=10] [WARMUP=2] [CLASSES]\n", argv[0]);
        return 2;
    }
    const char *arch = argv[1];
    if (!resnet_arch_valid(arch)) ct_die("bench_cpu_train: unknown ARCH '%s' (one of %s)", arch, resnet_arch_list());
    const int S = ct_parse_int("SIZE", argv[2], 8, 1 << 20), N = ct_parse_int("BATCH", argv[3], 1, 1 << 20);
    const int steps = argc > 4 ? ct_parse_int("STEPS", argv[4], 1, 1 << 20) : 10;
    const int warmup = argc > 5 ? ct_parse_int("WARMUP", argv[5], 0, 1 << 20) : 2;
    ResNet *m = resnet_create(arch, 3, 10);
    const int classes = argc > 6 ? ct_parse_int("CLASSES", argv[6], 2, 1 << 20) : (m->cifar ? 10 : 1000);
    resnet_free(m);
    m = resnet_create(arch, 3, classes);
    resnet_init(m, 1, 0);

    const size_t npix = (size_t)N * S * S * 3;
    float *x = ct_alloc(npix * sizeof(float));
    int32_t *labels = ct_alloc((size_t)N * sizeof(int32_t));
    Rng r = rng_make(7, 0, 0);
    for (size_t i = 0; i < npix; i++) x[i] = rng_normal(&r);
    for (int i = 0; i < N; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)classes);

    ExecOptions eo = tool_exec_options();  // CTRAIN_CPU_WINOGRAD=0, CTRAIN_FUSE_BN_ADD=0, ...
    CpuExec *e = cpu_exec_create_opts(m, &eo);
    float *grads = ct_alloc(m->n_params * sizeof(float));
    SgdState st;
    sgd_init(&st, m->n_params);
    const SgdConfig cfg = {0.9f, 5e-4f, 0, 0, 0, 0};
    double *wall = ct_alloc((size_t)steps * sizeof(double));
    double cpu_total = 0;
    float loss = 0;
    for (int it = 0; it < warmup + steps; it++) {
        const double t0 = ct_now(), c0 = cpu_seconds();
        loss = cpu_train_step(e, m, x, labels, N, S, S, 0.0f, grads, NULL);
        sgd_step(&cfg, &st, m, m->params, grads, 0.01f);
        const double t1 = ct_now(), c1 = cpu_seconds();
        if (it >= warmup) {
            wall[it - warmup] = t1 - t0;
            cpu_total += c1 - c0;
        }
    }
    const double med = ct_median(wall, steps);
    const int threads = omp_get_max_threads();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("ctrain  %-9s %3dx%-3d batch %-4d threads %d gemm %-7s: %8.1f img/s (median step %.1f ms), "
           "%8.1f img/s by CPU time, peak RSS %.0f MB, arena %.0f MB, final loss %.3f\n",
           arch, S, S, N, threads, sgemm_kernel_name(), N / med, med * 1e3, N * steps / (cpu_total / threads),
           ru.ru_maxrss / 1024.0, cpu_exec_arena_bytes(e) / 1048576.0, loss);
    sgd_free(&st);
    cpu_exec_free(e);
    resnet_free(m);
    free(x), free(labels), free(grads), free(wall);
    return 0;
}
