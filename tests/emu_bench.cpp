// Cost of the emulator's primitives, so kernel tests can size their shapes:
//   launch overhead (empty kernel, one block), per-block cost, one __syncthreads, one warp
//   shuffle, one mma.sync, at several block sizes.
// Run: build/tests/emu_bench  (EMU_BENCH_SCALE=10 for longer, steadier runs). As a test it also
// bounds each cost's CPU time generously (wall time on a shared machine includes waiting for a
// core), so that a regression to pathological waiting (e.g. long spinning) fails the suite.
#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "tests/test.h"

#include <time.h>
#include <unistd.h>

__global__ void empty_kernel() {}

__global__ void barrier_kernel(int iters, int *sink) {
    int v = 0;
    for (int i = 0; i < iters; i++) {
        v += i;
        __syncthreads();
    }
    if (v == -1) sink[0] = v;
}

__global__ void shfl_kernel(int iters, int *sink) {
    int v = threadIdx.x;
    for (int i = 0; i < iters; i++) v += __shfl_xor_sync(0xffffffffu, v, 1 + (i & 15));
    if (v == -1) sink[0] = v;
}

__global__ void mma_kernel(int iters, float *sink) {
    uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u}, b[2] = {0x3f803f80u, 0x3f803f80u};
    float c[4] = {0, 0, 0, 0};
    for (int i = 0; i < iters; i++) ct_mma_m16n8k16_bf16(c, a, b, c);
    if (c[0] == -1.f) sink[0] = c[0];
}

// Process CPU time: on a machine shared with other jobs it is steadier than wall time, which
// includes waiting for a core.
static double cpu_now() {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double g_cpu;  // CPU seconds of the last time_launches call, per launch

static double time_launches(int reps, dim3 grid, dim3 block, int kind, int iters, void *sink) {
    double t0 = ct_now(), c0 = cpu_now();
    for (int r = 0; r < reps; r++) {
        if (kind == 0) CT_LAUNCH(empty_kernel, grid, block, 0, 0);
        else if (kind == 1) CT_LAUNCH(barrier_kernel, grid, block, 0, 0, iters, (int *)sink);
        else if (kind == 2) CT_LAUNCH(shfl_kernel, grid, block, 0, 0, iters, (int *)sink);
        else CT_LAUNCH(mma_kernel, grid, block, 0, 0, iters, (float *)sink);
    }
    CT_CHECK_LAUNCH("bench kernel");
    g_cpu = (cpu_now() - c0) / reps;
    return (ct_now() - t0) / reps;
}

int main() {
    int scale = getenv("EMU_BENCH_SCALE") ? atoi(getenv("EMU_BENCH_SCALE")) : 1;
    if (scale < 1) scale = 1;
    void *sink;
    CT_CUDA_CHECK(cudaMalloc(&sink, 64));
    printf("emu_bench on %ld cores (numbers from a shared machine are noisy)\n", sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-34s %8s %12s %12s\n", "what", "threads", "wall", "cpu");
    for (int bs : {32, 128, 256, 1024}) time_launches(1, 1, bs, 0, 0, sink);  // grow the pool first
    for (int bs : {1, 32, 128, 256, 1024}) {
        double t = time_launches(20 * scale, 1, bs, 0, 0, sink);
        printf("%-34s %8d %9.1f us %9.1f us\n", "launch (empty kernel, 1 block)", bs, t * 1e6, g_cpu * 1e6);
        CHECK(g_cpu < 100e-6 * bs + 20e-3, "launch of %d threads takes %g s of CPU", bs, g_cpu);
    }
    for (int bs : {32, 128, 256}) {
        int nb = 64;
        double t1 = time_launches(5 * scale, 1, bs, 0, 0, sink), c1 = g_cpu;
        double tn = time_launches(5 * scale, nb, bs, 0, 0, sink), cn = g_cpu;
        double per = (tn - t1) / (nb - 1);
        printf("%-34s %8d %9.1f us %9.1f us\n", "per extra block (empty kernel)", bs, per * 1e6, (cn - c1) / (nb - 1) * 1e6);
        CHECK((cn - c1) / (nb - 1) < 100e-6 * bs, "a block of %d threads takes %g s of CPU", bs, (cn - c1) / (nb - 1));
    }
    for (int bs : {32, 128, 256, 1024}) {
        int iters = 200;
        double t0 = time_launches(2 * scale, 1, bs, 1, 0, sink), c0 = g_cpu;
        double t = time_launches(2 * scale, 1, bs, 1, iters, sink), c = g_cpu;
        double per = (t - t0) / iters;
        printf("%-34s %8d %9.1f us %9.1f us\n", "__syncthreads", bs, per * 1e6, (c - c0) / iters * 1e6);
        CHECK((c - c0) / iters < 100e-6 * bs, "__syncthreads of %d threads takes %g s of CPU", bs, (c - c0) / iters);
    }
    for (int bs : {32, 256}) {
        int iters = 200;
        double t0 = time_launches(2 * scale, 1, bs, 2, 0, sink), c0 = g_cpu;
        double t = time_launches(2 * scale, 1, bs, 2, iters, sink), c = g_cpu;
        double per = (t - t0) / iters;
        printf("%-34s %8d %9.1f us %9.1f us\n", "__shfl_xor_sync (all warps)", bs, per * 1e6, (c - c0) / iters * 1e6);
        CHECK((c - c0) / iters < 100e-6 * bs, "a shuffle in %d threads takes %g s of CPU", bs, (c - c0) / iters);
    }
    {
        int iters = 100;
        double t0 = time_launches(2 * scale, 1, 32, 3, 0, sink), c0 = g_cpu;
        double t = time_launches(2 * scale, 1, 32, 3, iters, sink), c = g_cpu;
        double per = (t - t0) / iters;
        printf("%-34s %8d %9.1f us %9.1f us\n", "mma.sync m16n8k16 (one warp)", 32, per * 1e6, (c - c0) / iters * 1e6);
        CHECK((c - c0) / iters < 10e-3, "an mma takes %g s of CPU", (c - c0) / iters);
    }
    emu::Stats s = emu::stats();
    printf("totals: %llu launches, %llu blocks, %llu block barriers, %llu warp operations\n",
           s.launches, s.blocks, s.block_barriers, s.warp_ops);
    cudaFree(sink);
    return test_summary("emu_bench");
}
