// Test of the test: kernels with classic synchronisation bugs must fail under emulation, and
// their correct twins must pass. Each bug is caught because the emulator runs the threads of a
// block concurrently (and, with jitter, in a shuffled, yielding order):
//   1. a block reduction that forgets the __syncthreads after filling shared memory;
//   2. a "warp-synchronous" shared-memory reduction without __syncwarp (broken since Volta);
//   3. lanes waiting in different barriers (a shuffle vs __syncthreads): the emulator reports the
//      deadlock and aborts instead of hanging (checked in a child process);
//   4. a shuffle mask that leaves out calling lanes: aborts with a message;
//   5. a kernel writing one element past its buffer (a missing bounds check): the red zone
//      after the allocation is found written after the launch, and the report names the kernel.
//   7. a 16-byte vector load from an address that is not 16-byte aligned (kernels/act.cuh's
//      ct_ldv): the emulator's host load would work, a GPU faults; the access aborts.
//   6. a kernel handed another device's buffer (a rank using a pointer of its neighbour), directly
//      or inside a struct argument: emulated devices share memory, so this would run; the
//      launch aborts naming the kernel, the argument and both devices. The same kernel on the
//      owning device passes.
#include <string>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/act.cuh"
#include "tests/emu_child.h"
#include "tests/test.h"
#include "util/rng.h"

#define BS 256

__global__ void reduce_ok(const float *x, float *out) {
    __shared__ float buf[BS];
    int tid = threadIdx.x;
    buf[tid] = x[blockIdx.x * BS + tid];
    __syncthreads();
    for (int s = BS / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = buf[0];
}

__global__ void reduce_missing_sync(const float *x, float *out) {
    __shared__ float buf[BS];
    int tid = threadIdx.x;
    buf[tid] = x[blockIdx.x * BS + tid];
    // BUG: no __syncthreads() here: thread 0 may add buf[128] before thread 128 stored it.
    for (int s = BS / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = buf[0];
}

// Last 64 elements reduced by one warp without barriers, relying on lockstep execution.
__global__ void reduce_warp_nosync(const float *x, float *out) {
    __shared__ float buf[BS];
    int tid = threadIdx.x;
    buf[tid] = x[blockIdx.x * BS + tid];
    __syncthreads();
    for (int s = BS / 2; s > 32; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid < 32) {
        volatile float *v = buf;
        // BUG: each step needs __syncwarp() (independent thread scheduling).
        v[tid] += v[tid + 32];
        v[tid] += v[tid + 16];
        v[tid] += v[tid + 8];
        v[tid] += v[tid + 4];
        v[tid] += v[tid + 2];
        v[tid] += v[tid + 1];
    }
    if (tid == 0) out[blockIdx.x] = buf[0];
}

__global__ void reduce_warp_sync(const float *x, float *out) {
    __shared__ float buf[BS];
    int tid = threadIdx.x;
    buf[tid] = x[blockIdx.x * BS + tid];
    __syncthreads();
    for (int s = BS / 2; s > 32; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid < 32) {
        float v = buf[tid] + buf[tid + 32];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (tid == 0) out[blockIdx.x] = v;
    }
}

__global__ void deadlock_kernel(int *out) {
    int v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);  // waits for lanes 16..31
    else __syncthreads();                                            // waits for lanes 0..15
    out[threadIdx.x] = v;
}

// A mask that leaves out the calling lanes (a half-warp mask used by the whole warp).
__global__ void mask_excludes_self_kernel(int *out) {
    out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 1);
}

// BUG: no `if (i < n)`: the last block writes past the end of x.
__global__ void missing_bounds_check_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = 1.0f;
    (void)n;
}

// Correct on its own device; the bug is the caller's (cases "wrongdev" and "wrongdev_struct").
__global__ void scale_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
struct CopyArgs {
    const float *src;
    float *dst;
    int n;
};
__global__ void copy_struct_kernel(CopyArgs a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.dst[i] = a.src[i];
}

// BUG when called with x + 1: a bf16 vector load needs 16-byte alignment.
__global__ void misaligned_vector_kernel(const uint16_t *x, float *out) {
    float v[8];
    ct_ldv<8>(v, x, 0);
    out[threadIdx.x] = v[0];
}

typedef void (*Kern)(const float *, float *);

// Runs `k` `reps` times on fresh inputs; returns how many launches produced a wrong sum.
static int count_wrong(Kern k, const char *name, int nblocks, int reps, uint64_t seed) {
    std::vector<float> h(nblocks * BS);
    float *dx, *dout;
    CT_CUDA_CHECK(cudaMalloc(&dx, h.size() * sizeof(float)));
    CT_CUDA_CHECK(cudaMalloc(&dout, nblocks * sizeof(float)));
    int wrong = 0;
    for (int r = 0; r < reps; r++) {
        Rng rng = rng_make(seed, (uint64_t)r, 0);
        // Small integers: every summation order gives the exact sum, so any difference is a race.
        for (auto &v : h) v = (float)(int)rng_below(&rng, 100);
        CT_CUDA_CHECK(cudaMemcpy(dx, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
        CT_LAUNCH(k, nblocks, BS, 0, 0, dx, dout);
        CT_CHECK_LAUNCH(name);
        std::vector<float> o(nblocks);
        CT_CUDA_CHECK(cudaMemcpy(o.data(), dout, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
        bool bad = false;
        for (int b = 0; b < nblocks; b++) {
            float ref = 0;
            for (int i = 0; i < BS; i++) ref += h[b * BS + i];
            bad |= o[b] != ref;
        }
        wrong += bad;
    }
    cudaFree(dx);
    cudaFree(dout);
    return wrong;
}

// Runs case `arg` in a child (with two emulated devices, for the wrong-device cases) and prints
// how it ended.
static ChildRun child_case(const char *arg, const char *what) {
    ChildRun r = run_child(arg, "CTRAIN_EMU_DEVICES=2");
    printf("%s case: %s after %.1f s: %s", what, r.aborted ? "aborted" : "NOT aborted", r.seconds, r.err.c_str());
    return r;
}

int main(int argc, char **argv) {
    if (argc == 2) {  // child cases: expected to abort
        int *d;
        CT_CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(int)));
        if (!strcmp(argv[1], "deadlock")) CT_LAUNCH(deadlock_kernel, 1, 32, 0, 0, d);
        if (!strcmp(argv[1], "mask")) CT_LAUNCH(mask_excludes_self_kernel, 1, 32, 0, 0, d);
        if (!strcmp(argv[1], "oob")) {
            float *x;
            CT_CUDA_CHECK(cudaMalloc(&x, 100 * sizeof(float)));
            CT_LAUNCH(missing_bounds_check_kernel, 4, 32, 0, 0, x, 100);  // 128 threads
        }
        if (!strcmp(argv[1], "misaligned")) {
            uint16_t *x;
            float *o;
            CT_CUDA_CHECK(cudaMalloc(&x, 64 * sizeof(uint16_t)));
            CT_CUDA_CHECK(cudaMalloc(&o, 32 * sizeof(float)));
            CT_CUDA_CHECK(cudaMemset(x, 0, 64 * sizeof(uint16_t)));
            CT_LAUNCH(misaligned_vector_kernel, 1, 32, 0, 0, x + 8, o);  // 16 bytes in: aligned
            CT_CHECK_LAUNCH("misaligned_vector_kernel (aligned)");
            fprintf(stderr, "aligned vector load passed\n");
            CT_LAUNCH(misaligned_vector_kernel, 1, 32, 0, 0, x + 1, o);
        }
        if (!strncmp(argv[1], "wrongdev", 8)) {  // CTRAIN_EMU_DEVICES=2 (set by child_case)
            float *mine, *theirs;
            CT_CUDA_CHECK(cudaSetDevice(1));
            CT_CUDA_CHECK(cudaMalloc(&theirs, 64 * sizeof(float)));
            CT_CUDA_CHECK(cudaSetDevice(0));
            CT_CUDA_CHECK(cudaMalloc(&mine, 64 * sizeof(float)));
            CT_CUDA_CHECK(cudaMemset(mine, 0, 64 * sizeof(float)));
            CT_LAUNCH(scale_kernel, 1, 64, 0, 0, mine, 64);  // its own buffer: fine
            CT_CHECK_LAUNCH("scale_kernel (own device)");
            CopyArgs a = {mine, mine, 64};
            CT_LAUNCH(copy_struct_kernel, 1, 64, 0, 0, a);
            CT_CHECK_LAUNCH("copy_struct_kernel (own device)");
            fprintf(stderr, "own-device launches passed\n");
            if (!strcmp(argv[1], "wrongdev")) {
                CT_LAUNCH(scale_kernel, 1, 64, 0, 0, theirs, 64);
            } else {
                a.src = theirs;
                CT_LAUNCH(copy_struct_kernel, 1, 64, 0, 0, a);
            }
        }
        cudaDeviceSynchronize();
        return 0;  // reaching here means the bug went unnoticed
    }

    const int nblocks = 4, reps = 12;
    struct {
        Kern k;
        const char *name;
        bool buggy;
    } cases[] = {
        {reduce_ok, "reduce_ok", false},
        {reduce_warp_sync, "reduce_warp_sync", false},
        {reduce_missing_sync, "reduce_missing_sync", true},
        {reduce_warp_nosync, "reduce_warp_nosync", true},
    };
    for (int jitter : {0, 3}) {
        emu::set_jitter(jitter);
        for (auto &c : cases) {
            double t0 = ct_now();
            int wrong = count_wrong(c.k, c.name, nblocks, reps, 11 + jitter);
            printf("jitter %d  %-22s wrong in %2d of %d launches  (%.2f s)\n", jitter, c.name, wrong,
                   reps, ct_now() - t0);
            if (c.buggy) CHECK(wrong > 0, "%s (jitter %d): the bug went unnoticed in %d launches", c.name, jitter, reps);
            else CHECK(wrong == 0, "%s (jitter %d): correct kernel wrong in %d launches", c.name, jitter, wrong);
        }
    }
    emu::set_jitter(0);

    ChildRun r = child_case("deadlock", "deadlock");
    CHECK(r.aborted && r.err.find("deadlock") != std::string::npos, "deadlock must be reported and abort");
    r = child_case("mask", "mask");
    CHECK(r.aborted && r.err.find("mask") != std::string::npos, "mismatched masks must be reported and abort");
    r = child_case("oob", "out-of-bounds");
    CHECK(r.aborted && r.err.find("missing_bounds_check_kernel") != std::string::npos &&
              r.err.find("past its end") != std::string::npos,
          "an out-of-bounds write must be reported naming the kernel");
    r = child_case("misaligned", "misaligned vector");
    CHECK(r.aborted && r.err.find("aligned vector load passed") != std::string::npos &&
              r.err.find("misaligned") != std::string::npos,
          "a misaligned 16-byte vector access must abort");
    r = child_case("wrongdev", "wrong-device pointer");
    CHECK(r.aborted && r.err.find("own-device launches passed") != std::string::npos &&
              r.err.find("kernel scale_kernel launched on device 0: argument 0") != std::string::npos &&
              r.err.find("device 1's allocation") != std::string::npos,
          "a kernel given another device's buffer must abort naming the kernel, argument and devices");
    r = child_case("wrongdev_struct", "wrong-device pointer in a struct");
    CHECK(r.aborted && r.err.find("own-device launches passed") != std::string::npos &&
              r.err.find("kernel copy_struct_kernel launched on device 0: argument 0") != std::string::npos &&
              r.err.find("device 1's allocation") != std::string::npos,
          "another device's buffer inside a struct argument must be caught too");
    return test_summary("emu_catches_race");
}
