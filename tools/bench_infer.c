// CPU inference throughput of a ResNet: the eval forward that `train predict` and evaluation run,
// BN-folded (nn/fold.h) or through the reference executor (nn/model_cpu.h), on a fixed input.
//   build/tools/bench_infer save ARCH FILE
//       write ARCH (1000 classes, 3 channels) initialised from seed 1 with non-trivial BN state
//   build/tools/bench_infer run ARCH SIZE BATCH ITERS WARMUP fold|direct|ref FILE
//       fold: BN-folded with Winograd for the 3x3 stride-1 convs (what predict and eval run),
//       direct: BN-folded without Winograd, ref: the reference executor (nn/model_cpu.h)
//       load FILE and time ITERS forwards of BATCH images of SIZE x SIZE after WARMUP untimed ones
// The input is the same in every peer of tools/bench_infer.sh: uint8 NHWC pixel i is
// (i * 2654435761 mod 2^32) >> 13 & 255, normalised with ImageNet's mean and std; the line ends
// with the first three logits of image 0 so the peers' answers can be compared.
// Prints one line: img/s from the median wall time of a batch, images per CPU-second (process CPU
// time: what an image costs whoever else shares the cores), and peak RSS.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nn/fold.h"
#include "nn/model_cpu.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "util/common.h"
#include "util/rng.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s save ARCH FILE\n       %s run ARCH SIZE BATCH ITERS WARMUP fold|ref FILE\n", prog, prog);
    exit(2);
}

static ResNet *make(const char *arch) {
    if (!resnet_arch_valid(arch)) ct_die("bench_infer: unknown ARCH '%s' (one of %s)", arch, resnet_arch_list());
    return resnet_create(arch, 3, 1000);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "save")) {
        ResNet *m = make(argv[2]);
        resnet_init(m, 1, 0);
        Rng r = rng_make(2, 0, 0);  // BN state as a trained model has it, not the identity
        for (int i = 0; i < m->n_entries; i++) {
            const StateEntry *e = &m->entries[i];
            if (e->kind == ENTRY_BUF)
                for (size_t j = 0; j < e->count; j++)
                    m->bufs[e->offset + j] = strstr(e->name, "var") ? 0.5f + rng_uniform(&r) : 0.1f * rng_normal(&r);
        }
        st_save_resnet(argv[3], m, NULL, 0, NULL, NULL, 0);
        resnet_free(m);
        return 0;
    }
    if (argc != 9 || strcmp(argv[1], "run")) usage(argv[0]);
    const char *arch = argv[2];
    const int S = ct_parse_int("SIZE", argv[3], 8, 1 << 16), N = ct_parse_int("BATCH", argv[4], 1, 1 << 16);
    const int iters = ct_parse_int("ITERS", argv[5], 1, 1 << 20), warmup = ct_parse_int("WARMUP", argv[6], 0, 1 << 20);
    const int fold = !strcmp(argv[7], "fold") || !strcmp(argv[7], "direct");
    if (!fold && strcmp(argv[7], "ref")) ct_die("bench_infer: mode '%s' (fold, direct or ref)", argv[7]);
    ResNet *m = make(arch);
    st_load_resnet(argv[8], m);

    const size_t npix = (size_t)N * S * S * 3;
    uint8_t *x = ct_alloc(npix);
    for (size_t i = 0; i < npix; i++) x[i] = (uint8_t)(((uint32_t)((uint64_t)i * 2654435761u) >> 13) & 255);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};

    // The folded executor owns a copy of the weights: the ResNet is freed, as an inference
    // process that loaded only to fold would.
    FoldNet *f = NULL;
    CpuExec *e = NULL;
    double fold_ms = 0;
    if (fold) {
        const double t0 = ct_now();
        f = fold_create_ex(m, !strcmp(argv[7], "fold"));
        fold_ms = (ct_now() - t0) * 1e3;
        if (!f) ct_die("bench_infer: %s does not fold", arch);
        resnet_free(m);
        m = NULL;
    } else {
        e = cpu_exec_create(m);
    }
    double *wall = ct_alloc((size_t)iters * sizeof(double));
    double cpu_total = 0;
    const float *logits = NULL;
    for (int it = 0; it < warmup + iters; it++) {
        const double t0 = ct_now(), c0 = cpu_seconds();
        logits = fold ? fold_forward_u8(f, x, N, S, S, mean, std) : cpu_forward_u8(e, m, x, N, S, S, mean, std, 0);
        const double t1 = ct_now(), c1 = cpu_seconds();
        if (it >= warmup) {
            wall[it - warmup] = t1 - t0;
            cpu_total += c1 - c0;
        }
    }
    const double med = ct_median(wall, iters);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("ctrain-%-6s %-9s %dx%d batch %-3d threads %d: %7.2f img/s (median batch %.1f ms), %7.2f img/CPU-s, "
           "peak RSS %4.0f MB, logits[0][:3] %.5f %.5f %.5f, fold %.0f ms\n",
           argv[7], arch, S, S, N, omp_get_max_threads(), N / med, med * 1e3,
           (double)N * iters / cpu_total, ru.ru_maxrss / 1024.0, logits[0], logits[1], logits[2], fold_ms);
    fold_free(f);
    cpu_exec_free(e);
    resnet_free(m);
    free(wall);
    free(x);
    return 0;
}
