// The emulation layer's own semantics: barriers, shared memory (static and dynamic), warp
// shuffles and votes with masks, early-exiting threads, atomics, bf16/fp16 conversions, launch
// validation, and the runtime (memory checks, streams, events, graph capture and replay).
#include "kernels/common.cuh"
#include "tests/test.h"

#include <thread>
#include <vector>

// ---------------------------------------------------------------------------------------------
// Block reduction through static shared memory and __syncthreads.
__global__ void block_sum_kernel(const float *x, float *out, int n) {
    __shared__ float buf[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    buf[tid] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = buf[0];
}

// Same with dynamic shared memory, a 2-D block, and threads that return early (they must not
// hang the barrier of the others).
__global__ void dyn_sum_kernel(const int *x, int *out, int active) {
    CT_DYN_SMEM(int, buf);
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    int nt = blockDim.x * blockDim.y;
    if (tid >= active) return;
    buf[tid] = x[blockIdx.x * nt + tid];
    __syncthreads();
    if (tid == 0) {
        int s = 0;
        for (int k = 0; k < active; k++) s += buf[k];
        out[blockIdx.x] = s;
    }
}

__global__ void sync_count_kernel(int *out) {
    int c = __syncthreads_count(threadIdx.x % 3 == 0);
    int a = __syncthreads_and(threadIdx.x < 1000);
    int o = __syncthreads_or(threadIdx.x == 5);
    int z = __syncthreads_or(0);
    if (threadIdx.x == 0) {
        out[0] = c;
        out[1] = a;
        out[2] = o;
        out[3] = z;
    }
}

// Warp primitives: each lane writes what it got.
__global__ void shfl_kernel(int *out) {
    int lane = threadIdx.x % 32;
    int w = threadIdx.x / 32;
    int *o = out + w * 32 * 8 + lane * 8;
    o[0] = __shfl_sync(0xffffffffu, lane * 10, (lane + 3) % 32);
    o[1] = __shfl_up_sync(0xffffffffu, lane * 10, 2);
    o[2] = __shfl_down_sync(0xffffffffu, lane * 10, 5);
    o[3] = __shfl_xor_sync(0xffffffffu, lane * 10, 1);
    o[4] = __shfl_sync(0xffffffffu, lane * 10, 1, 8);  // lane 1 of each 8-lane segment
    o[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[6] = __any_sync(0xffffffffu, lane == 17) * 2 + __all_sync(0xffffffffu, lane < 32);
    float f = (float)lane;
    for (int s = 16; s > 0; s >>= 1) f += __shfl_xor_sync(0xffffffffu, f, s);
    o[7] = (int)f;
}

// Divergent halves using their own masks at the same time.
__global__ void mask_kernel(int *out) {
    int lane = threadIdx.x;
    int v = lane + 1;
    if (lane < 16) {
        for (int s = 8; s > 0; s >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, s);
    } else {
        unsigned b = __ballot_sync(0xffff0000u, lane % 2);
        v = (int)__popc(b);
        __syncwarp(0xffff0000u);
    }
    // Reconverged: a full-warp shuffle after the halves did different numbers of operations.
    int other = __shfl_sync(0xffffffffu, v, lane ^ 16);
    out[lane] = v;
    out[32 + lane] = other;
}

// A partial warp (block of 40 threads) reduces with a full mask: lanes 8..31 of warp 1 do not
// exist and must not be waited for.
__global__ void partial_warp_kernel(int *out) {
    int v = 1;
    unsigned act = __activemask();
    for (int s = 16; s > 0; s >>= 1) {
        int o = __shfl_down_sync(act, v, s);
        if ((threadIdx.x % 32) + s < 32 && ((act >> ((threadIdx.x % 32) + s)) & 1)) v += o;
    }
    if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

__global__ void atomic_kernel(float *fsum, int *isum, int *imax, unsigned *ucas, int *exch) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(fsum, 0.5f);
    atomicAdd(isum, i);
    atomicMax(imax, (i * 7919) % 1000);
    unsigned old = *ucas, assumed;
    do {
        assumed = old;
        old = atomicCAS(ucas, assumed, assumed + 2u);
    } while (old != assumed);
    atomicExch(exch, 42);
}

__global__ void bf16_kernel(const float *in, __nv_bfloat16 *out, float *back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __float2bfloat16(in[i]);
        back[i] = __bfloat162float(out[i]);
    }
}

__global__ void grid3d_kernel(int *out) {
    int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;
}

__global__ void add_kernel(float *x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}
__global__ void scale_kernel(float *x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= v;
}

template <int K>
__global__ void tmpl_kernel(int *out) {
    __shared__ int s[K];
    s[threadIdx.x % K] = K;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % K];
}

static void host_fn(void *p) { (*(int *)p)++; }

static void test_reduction() {
    const int n = 1000, bs = 256, nb = (n + bs - 1) / bs;
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)((i * 37) % 101) - 50.f;
    float *dx, *dout;
    CT_CUDA_CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CT_CUDA_CHECK(cudaMalloc(&dout, nb * sizeof(float)));
    CT_CUDA_CHECK(cudaMemcpy(dx, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    for (int rep = 0; rep < 20; rep++) {
        CT_LAUNCH(block_sum_kernel, nb, bs, 0, 0, dx, dout, n);
        CT_CHECK_LAUNCH("block_sum_kernel");
        std::vector<float> o(nb);
        CT_CUDA_CHECK(cudaMemcpy(o.data(), dout, nb * sizeof(float), cudaMemcpyDeviceToHost));
        for (int b = 0; b < nb; b++) {
            float ref = 0;
            for (int i = b * bs; i < n && i < (b + 1) * bs; i++) ref += h[i];
            CHECK(fabsf(o[b] - ref) < 1e-3f, "rep %d block %d: %g vs %g", rep, b, o[b], ref);
        }
    }
    cudaFree(dx);
    cudaFree(dout);
}

static void test_dynamic_smem_and_exit() {
    const int nb = 3;
    dim3 block(8, 6);
    int nt = 48;
    std::vector<int> h(nb * nt);
    for (int i = 0; i < nb * nt; i++) h[i] = i * 3 + 1;
    int *dx, *dout;
    CT_CUDA_CHECK(cudaMalloc(&dx, h.size() * sizeof(int)));
    CT_CUDA_CHECK(cudaMalloc(&dout, nb * sizeof(int)));
    CT_CUDA_CHECK(cudaMemcpy(dx, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    for (int active : {48, 33, 1}) {
        CT_LAUNCH(dyn_sum_kernel, nb, block, nt * sizeof(int), 0, dx, dout, active);
        CT_CHECK_LAUNCH("dyn_sum_kernel");
        int o[nb];
        CT_CUDA_CHECK(cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost));
        for (int b = 0; b < nb; b++) {
            int ref = 0;
            for (int k = 0; k < active; k++) ref += h[b * nt + k];
            CHECK(o[b] == ref, "active %d block %d: %d vs %d", active, b, o[b], ref);
        }
    }
    // Dynamic shared memory beyond 48 KiB needs the attribute, as on a GPU.
    CT_LAUNCH(dyn_sum_kernel, 1, 32, 64 * 1024, 0, dx, dout, 32);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB smem without attribute must fail");
    CT_CUDA_CHECK(cudaFuncSetAttribute(dyn_sum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    CT_LAUNCH(dyn_sum_kernel, 1, 32, 64 * 1024, 0, dx, dout, 32);
    CHECK(cudaGetLastError() == cudaSuccess, "64 KiB smem with attribute must launch");
    CHECK(cudaFuncSetAttribute(dyn_sum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
              cudaErrorInvalidValue, "300 KiB is over the sm_90 limit");
    cudaGetLastError();
    CT_CUDA_CHECK(cudaFuncSetAttribute(dyn_sum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024));
    cudaFree(dx);
    cudaFree(dout);
}

static void test_sync_count() {
    int *d;
    CT_CUDA_CHECK(cudaMalloc(&d, 4 * sizeof(int)));
    CT_LAUNCH(sync_count_kernel, 1, 100, 0, 0, d);
    int o[4];
    CT_CUDA_CHECK(cudaMemcpy(o, d, sizeof o, cudaMemcpyDeviceToHost));
    CHECK(o[0] == 34, "__syncthreads_count %d", o[0]);
    CHECK(o[1] == 1, "__syncthreads_and %d", o[1]);
    CHECK(o[2] == 1, "__syncthreads_or %d", o[2]);
    CHECK(o[3] == 0, "__syncthreads_or(0) %d", o[3]);
    cudaFree(d);
}

static void test_warp_ops() {
    const int nw = 2;
    int *d;
    CT_CUDA_CHECK(cudaMalloc(&d, nw * 32 * 8 * sizeof(int)));
    CT_LAUNCH(shfl_kernel, 1, nw * 32, 0, 0, d);
    std::vector<int> o(nw * 32 * 8);
    CT_CUDA_CHECK(cudaMemcpy(o.data(), d, o.size() * sizeof(int), cudaMemcpyDeviceToHost));
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if (l % 3 == 0) ballot |= 1u << l;
    for (int w = 0; w < nw; w++)
        for (int l = 0; l < 32; l++) {
            const int *r = &o[(w * 32 + l) * 8];
            CHECK(r[0] == ((l + 3) % 32) * 10, "shfl lane %d: %d", l, r[0]);
            CHECK(r[1] == (l >= 2 ? l - 2 : l) * 10, "shfl_up lane %d: %d", l, r[1]);
            CHECK(r[2] == (l + 5 < 32 ? l + 5 : l) * 10, "shfl_down lane %d: %d", l, r[2]);
            CHECK(r[3] == (l ^ 1) * 10, "shfl_xor lane %d: %d", l, r[3]);
            CHECK(r[4] == ((l & ~7) + 1) * 10, "shfl width 8 lane %d: %d", l, r[4]);
            CHECK((unsigned)r[5] == ballot, "ballot lane %d: %x", l, r[5]);
            CHECK(r[6] == 3, "any/all lane %d: %d", l, r[6]);
            CHECK(r[7] == 496, "xor reduction lane %d: %d", l, r[7]);
        }
    for (int rep = 0; rep < 20; rep++) {
        CT_LAUNCH(mask_kernel, 1, 32, 0, 0, d);
        CT_CUDA_CHECK(cudaMemcpy(o.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost));
        for (int l = 0; l < 32; l++) {
            int ref = l < 16 ? 136 : 8;  // sum 1..16; 8 odd lanes among 16..31
            CHECK(o[l] == ref, "masked halves lane %d: %d vs %d", l, o[l], ref);
            CHECK(o[32 + l] == (l < 16 ? 8 : 136), "reconverged shuffle lane %d: %d", l, o[32 + l]);
        }
    }
    CT_LAUNCH(partial_warp_kernel, 1, 40, 0, 0, d);
    CT_CUDA_CHECK(cudaMemcpy(o.data(), d, 2 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(o[0] == 32 && o[1] == 8, "partial warp sums %d %d", o[0], o[1]);
    cudaFree(d);
}

static void test_atomics() {
    float *f;
    int *i, *m, *e;
    unsigned *u;
    CT_CUDA_CHECK(cudaMalloc(&f, 4));
    CT_CUDA_CHECK(cudaMalloc(&i, 4));
    CT_CUDA_CHECK(cudaMalloc(&m, 4));
    CT_CUDA_CHECK(cudaMalloc(&e, 4));
    CT_CUDA_CHECK(cudaMalloc(&u, 4));
    CT_CUDA_CHECK(cudaMemset(f, 0, 4));
    CT_CUDA_CHECK(cudaMemset(i, 0, 4));
    CT_CUDA_CHECK(cudaMemset(m, 0, 4));
    CT_CUDA_CHECK(cudaMemset(u, 0, 4));
    CT_CUDA_CHECK(cudaMemset(e, 0, 4));
    const int nb = 4, bs = 64, n = nb * bs;
    CT_LAUNCH(atomic_kernel, nb, bs, 0, 0, f, i, m, u, e);
    float hf;
    int hi, hm, he;
    unsigned hu;
    cudaMemcpy(&hf, f, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hi, i, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hm, m, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hu, u, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&he, e, 4, cudaMemcpyDeviceToHost);
    int refmax = 0;
    for (int k = 0; k < n; k++) refmax = refmax > (k * 7919) % 1000 ? refmax : (k * 7919) % 1000;
    CHECK(hf == 0.5f * n, "atomicAdd float %g", hf);
    CHECK(hi == n * (n - 1) / 2, "atomicAdd int %d", hi);
    CHECK(hm == refmax, "atomicMax %d vs %d", hm, refmax);
    CHECK(hu == 2u * n, "atomicCAS loop %u", hu);
    CHECK(he == 42, "atomicExch %d", he);
    cudaFree(f);
    cudaFree(i);
    cudaFree(m);
    cudaFree(e);
    cudaFree(u);
}

static void test_bf16_half() {
    // Round to nearest even on the bit patterns: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
    struct { float in; uint16_t bits; } cases[] = {
        {1.0f, 0x3f80}, {1.0f + 1.0f / 256, 0x3f80}, {1.0f + 3.0f / 256, 0x3f82},
        {1.0f + 1.0f / 256 + 1.0f / 65536, 0x3f81}, {-2.5f, 0xc020}, {0.0f, 0x0000},
        {-0.0f, 0x8000}, {INFINITY, 0x7f80}, {3.3895314e38f, 0x7f7f /* largest finite */}, {3.4e38f, 0x7f80 /* past the midpoint: inf */},
        {1e-40f, 0x0001 /* subnormal 1e-40 -> 0x0001: 9.18e-41 */},
    };
    for (auto &c : cases) {
        __nv_bfloat16 b = __float2bfloat16(c.in);
        CHECK(__bfloat16_as_ushort(b) == c.bits, "bf16(%g) = 0x%04x, expected 0x%04x", c.in,
              __bfloat16_as_ushort(b), c.bits);
    }
    __nv_bfloat16 nb = __float2bfloat16(NAN);
    CHECK(isnan(__bfloat162float(nb)), "bf16 NaN stays NaN");
    // Exhaustive round trip: every finite bf16 converts to float and back unchanged.
    int bad = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        __nv_bfloat16 h = __ushort_as_bfloat16((uint16_t)u);
        float f = __bfloat162float(h);
        if (isnan(f)) continue;
        if (__bfloat16_as_ushort(__float2bfloat16(f)) != u) bad++;
    }
    CHECK(bad == 0, "%d bf16 values do not round-trip", bad);
    // Half: against the compiler's own _Float16 conversion (IEEE round to nearest even).
    int hbad = 0;
    for (uint32_t k = 0; k < 200000; k++) {
        uint32_t bits = k * 21473u + 0x33000000u;  // a sweep across half's range and beyond
        float f;
        memcpy(&f, &bits, 4);
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        __half h = __float2half(f);
        if (isnan(f) ? !isnan(__half2float(h)) : __half_as_ushort(h) != rb) hbad++;
        if (!isnan(f) && __half2float(h) != (float)ref) hbad++;
    }
    CHECK(hbad == 0, "%d half conversions differ from _Float16", hbad);
    // And the kernel path.
    const int n = 64;
    float hin[n], back[n];
    for (int k = 0; k < n; k++) hin[k] = 1.0f + k / 300.0f;
    float *din, *dback;
    __nv_bfloat16 *dout;
    cudaMalloc(&din, sizeof hin);
    cudaMalloc(&dback, sizeof back);
    cudaMalloc(&dout, n * 2);
    cudaMemcpy(din, hin, sizeof hin, cudaMemcpyHostToDevice);
    CT_LAUNCH(bf16_kernel, 2, 32, 0, 0, din, dout, dback, n);
    cudaMemcpy(back, dback, sizeof back, cudaMemcpyDeviceToHost);
    for (int k = 0; k < n; k++)
        CHECK(fabsf(back[k] - hin[k]) <= hin[k] / 256, "bf16 kernel %d: %g vs %g", k, back[k], hin[k]);
    cudaFree(din);
    cudaFree(dback);
    cudaFree(dout);
}

// Layouts host code and kernels rely on when reinterpreting memory, as in CUDA's headers.
static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat16) == 2, "bf16");
static_assert(sizeof(__nv_bfloat162) == 4 && alignof(__nv_bfloat162) == 4, "bf16x2");
static_assert(sizeof(__half2) == 4 && alignof(__half2) == 4, "half2");
static_assert(sizeof(float4) == 16 && alignof(float4) == 16, "float4");
static_assert(sizeof(uint4) == 16 && alignof(uint4) == 16, "uint4");
static_assert(sizeof(float2) == 8 && alignof(float2) == 8, "float2");
static_assert(sizeof(uchar4) == 4 && alignof(uchar4) == 4, "uchar4");

static void test_launch_config() {
    int *d;
    CT_CUDA_CHECK(cudaMalloc(&d, 3 * 2 * 2 * 4 * 3 * 2 * sizeof(int)));
    CT_LAUNCH(grid3d_kernel, dim3(3, 2, 2), dim3(4, 3, 2), 0, 0, d);
    CHECK(cudaGetLastError() == cudaSuccess, "3-D launch");
    std::vector<int> o(3 * 2 * 2 * 24);
    cudaMemcpy(o.data(), d, o.size() * sizeof(int), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int b = 0; b < 12; b++)
        for (int t = 0; t < 24; t++) bad += o[b * 24 + t] != b * 1000 + t;
    CHECK(bad == 0, "3-D grid/block indices: %d wrong", bad);
    CT_LAUNCH(grid3d_kernel, 1, 1025, 0, 0, d);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration, "1025 threads must fail");
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "get clears");
    CHECK(cudaGetLastError() == cudaSuccess, "cleared");
    CT_LAUNCH(grid3d_kernel, 1, dim3(1, 1, 65), 0, 0, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "block.z 65 must fail");
    CT_LAUNCH(grid3d_kernel, dim3(1, 70000), 1, 0, 0, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 70000 must fail");
    CT_LAUNCH(grid3d_kernel, 0, 32, 0, 0, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "empty grid must fail");
    auto *k = tmpl_kernel<5>;
    CT_LAUNCH(k, 1, 10, 0, 0, d);
    cudaMemcpy(o.data(), d, 10 * sizeof(int), cudaMemcpyDeviceToHost);
    CHECK(o[3] == 5, "template kernel %d", o[3]);
    CT_LAUNCH((tmpl_kernel<7>), 1, 10, 0, 0, d);
    cudaMemcpy(o.data(), d, 10 * sizeof(int), cudaMemcpyDeviceToHost);
    CHECK(o[3] == 7 && cudaGetLastError() == cudaSuccess, "parenthesized template kernel %d", o[3]);
    cudaFree(d);
}

static void test_memory_checks() {
    float *d;
    CT_CUDA_CHECK(cudaMalloc(&d, 100 * sizeof(float)));
    // Fresh device memory is poisoned (NaN), not zero.
    float h[100];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(isnan(h[0]) && isnan(h[99]), "fresh cudaMalloc memory is poisoned");
    CHECK(cudaMemcpy(d, h, 101 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
          "overrunning copy must fail");
    CHECK(cudaMemcpy(h, h + 1, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
          "HostToDevice into host memory must fail");
    CHECK(cudaMemset(d + 50, 0, 51 * sizeof(float)) == cudaErrorInvalidValue, "overrunning memset");
    CHECK(cudaFree(d + 1) == cudaErrorInvalidValue, "free of an interior pointer");
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "errors are recorded");
    CHECK(cudaFree(d) == cudaSuccess, "free");
    CHECK(cudaFree(d) == cudaErrorInvalidValue, "double free");
    cudaGetLastError();
    void *ph;
    CT_CUDA_CHECK(cudaMallocHost(&ph, 1000));
    CT_CUDA_CHECK(cudaFreeHost(ph));
    static char reg[4096];
    CT_CUDA_CHECK(cudaHostRegister(reg, sizeof reg, cudaHostRegisterDefault));
    CT_CUDA_CHECK(cudaHostUnregister(reg));
    int n = 0, dev = -1;
    CT_CUDA_CHECK(cudaGetDeviceCount(&n));
    CT_CUDA_CHECK(cudaSetDevice(0));
    CT_CUDA_CHECK(cudaGetDevice(&dev));
    CHECK(n == 1 && dev == 0, "one device");
    CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice, "device 1 does not exist");
    cudaGetLastError();
    cudaDeviceProp p;
    CT_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    CHECK(p.major == 9 && p.minor == 0 && p.warpSize == 32 && p.maxThreadsPerBlock == 1024 &&
              p.sharedMemPerBlockOptin == 227 * 1024, "sm_90 properties");
    CHECK(strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0, "error string");
}

// Streams, events, graph capture: work captured is not run until the graph launches, replays in
// capture order (add then scale differs from scale then add), and replays each launch.
static void test_streams_graphs() {
    const int n = 300;
    float *d;
    CT_CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    std::vector<float> h(n, 1.0f), o(n);
    cudaStream_t s1, s2;
    CT_CUDA_CHECK(cudaStreamCreate(&s1));
    CT_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t e0, e1, fork, join;
    CT_CUDA_CHECK(cudaEventCreate(&e0));
    CT_CUDA_CHECK(cudaEventCreate(&e1));
    CT_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CT_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CT_CUDA_CHECK(cudaEventRecord(e0, s1));
    CT_CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s1));
    CT_LAUNCH(add_kernel, 3, 128, 0, s1, d, 1.0f, n);  // 2
    CT_CUDA_CHECK(cudaEventRecord(e1, s1));
    CT_CUDA_CHECK(cudaStreamWaitEvent(s2, e1, 0));
    CT_LAUNCH(scale_kernel, 3, 128, 0, s2, d, 3.0f, n);  // 6
    CT_CUDA_CHECK(cudaStreamSynchronize(s2));
    CT_CUDA_CHECK(cudaMemcpy(o.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(o[0] == 6.0f && o[n - 1] == 6.0f, "stream order: %g", o[0]);
    float ms = -1;
    CT_CUDA_CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventQuery(e1) == cudaSuccess, "event query");
    CT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 0 && ms < 10000, "elapsed %g ms", ms);
    CHECK(cudaEventElapsedTime(&ms, e0, fork) == cudaErrorInvalidResourceHandle, "timing disabled");
    cudaGetLastError();

    // Capture (with a fork into s2 and a join back), then replay twice.
    int host_calls = 0;
    CT_CUDA_CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus st;
    CT_CUDA_CHECK(cudaStreamIsCapturing(s1, &st));
    CHECK(st == cudaStreamCaptureStatusActive, "capturing");
    CT_LAUNCH(add_kernel, 3, 128, 0, s1, d, 1.0f, n);
    CT_CUDA_CHECK(cudaEventRecord(fork, s1));
    CT_CUDA_CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CT_LAUNCH(scale_kernel, 3, 128, 0, s2, d, 2.0f, n);
    CT_CUDA_CHECK(cudaLaunchHostFunc(s2, host_fn, &host_calls));
    CT_CUDA_CHECK(cudaEventRecord(join, s2));
    CT_CUDA_CHECK(cudaStreamWaitEvent(s1, join, 0));
    CT_CUDA_CHECK(cudaMemsetAsync(d + n - 1, 0, sizeof(float), s1));
    cudaGraph_t g;
    CT_CUDA_CHECK(cudaStreamEndCapture(s1, &g));
    CT_CUDA_CHECK(cudaMemcpy(o.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(o[0] == 6.0f && host_calls == 0, "capture must not run work: %g, %d", o[0], host_calls);
    size_t nn = 0;
    CT_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nn));
    CHECK(nn == 4, "graph nodes %zu", nn);
    cudaGraphExec_t x;
    CT_CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
    CT_CUDA_CHECK(cudaGraphLaunch(x, s1));
    CT_CUDA_CHECK(cudaGraphLaunch(x, s1));
    CT_CUDA_CHECK(cudaStreamSynchronize(s1));
    CT_CUDA_CHECK(cudaMemcpy(o.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    // ((6 + 1) * 2 + 1) * 2 = 30
    CHECK(o[0] == 30.0f && o[n - 2] == 30.0f && o[n - 1] == 0.0f && host_calls == 2,
          "replay: %g %g %g, host calls %d", o[0], o[n - 2], o[n - 1], host_calls);
    CT_CUDA_CHECK(cudaGraphExecDestroy(x));
    CT_CUDA_CHECK(cudaGraphDestroy(g));

    // A synchronous copy during capture is refused and invalidates the capture; so does a bad
    // launch.
    CT_CUDA_CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpy(o.data(), d, 4, cudaMemcpyDeviceToHost) != cudaSuccess, "sync copy in capture");
    CHECK(cudaStreamEndCapture(s1, &g) == cudaErrorStreamCaptureInvalidated && g == nullptr,
          "invalidated capture");
    CT_CUDA_CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CT_LAUNCH(add_kernel, 1, 2048, 0, s1, d, 1.0f, n);
    CHECK(cudaStreamEndCapture(s1, &g) == cudaErrorStreamCaptureInvalidated, "bad launch in capture");
    CHECK(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal) != cudaSuccess, "legacy stream capture");
    cudaGetLastError();

    CT_CUDA_CHECK(cudaEventDestroy(e0));
    CT_CUDA_CHECK(cudaEventDestroy(e1));
    CT_CUDA_CHECK(cudaEventDestroy(fork));
    CT_CUDA_CHECK(cudaEventDestroy(join));
    CT_CUDA_CHECK(cudaStreamDestroy(s1));
    CT_CUDA_CHECK(cudaStreamDestroy(s2));
    CHECK(cudaStreamDestroy(s2) == cudaErrorInvalidResourceHandle, "double stream destroy");
    cudaGetLastError();
    cudaFree(d);
}

// Capture modes: a synchronous call (cudaMemcpy) from ANOTHER thread leaves a thread-local or
// relaxed capture intact but invalidates a global one; from the capturing thread it invalidates a
// thread-local capture too (what train's per-rank threads rely on).
static void test_capture_modes() {
    float *d, h[4] = {0, 0, 0, 0};
    CT_CUDA_CHECK(cudaMalloc(&d, sizeof h));
    cudaStream_t s;
    CT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct {
        cudaStreamCaptureMode mode;
        bool other_thread, survives;
        const char *what;
    } cases[] = {
        {cudaStreamCaptureModeThreadLocal, true, true, "thread-local, another thread syncs"},
        {cudaStreamCaptureModeRelaxed, true, true, "relaxed, another thread syncs"},
        {cudaStreamCaptureModeGlobal, true, false, "global, another thread syncs"},
        {cudaStreamCaptureModeThreadLocal, false, false, "thread-local, the capturing thread syncs"},
    };
    for (auto &c : cases) {
        CT_CUDA_CHECK(cudaStreamBeginCapture(s, c.mode));
        CT_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof h, s));
        cudaError_t sync_err = cudaSuccess;
        auto sync = [&] { sync_err = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost); };
        if (c.other_thread) std::thread(sync).join();
        else sync();
        cudaGraph_t g = nullptr;
        cudaError_t end = cudaStreamEndCapture(s, &g);
        cudaGetLastError();
        CHECK((end == cudaSuccess) == c.survives, "capture (%s): end %s", c.what, cudaGetErrorString(end));
        CHECK((sync_err == cudaSuccess) == c.survives, "capture (%s): the sync returned %s", c.what,
              cudaGetErrorString(sync_err));
        if (g) CT_CUDA_CHECK(cudaGraphDestroy(g));
    }
    CT_CUDA_CHECK(cudaStreamDestroy(s));
    CT_CUDA_CHECK(cudaFree(d));
}

// Streams and events belong to the device that was current when they were created; CUDA refuses
// a launch into, or an event recorded on, another device's stream (the emulated devices share
// one memory, so only this bookkeeping can show such a mix-up).
__global__ void add_one_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
static void test_device_ownership() {
    setenv("CTRAIN_EMU_DEVICES", "2", 1);
    int count = 0;
    CT_CUDA_CHECK(cudaGetDeviceCount(&count));
    CHECK(count == 2, "CTRAIN_EMU_DEVICES=2 gives %d devices", count);
    CT_CUDA_CHECK(cudaSetDevice(1));
    cudaStream_t s1;
    cudaEvent_t e1;
    float *x1;
    CT_CUDA_CHECK(cudaStreamCreate(&s1));
    CT_CUDA_CHECK(cudaEventCreate(&e1));
    CT_CUDA_CHECK(cudaMalloc(&x1, 32 * sizeof(float)));
    CT_CUDA_CHECK(cudaMemset(x1, 0, 32 * sizeof(float)));
    CT_LAUNCH(add_one_kernel, 1, 32, 0, s1, x1, 32);
    CHECK(cudaGetLastError() == cudaSuccess, "launch on device 1's own stream");
    CT_CUDA_CHECK(cudaEventRecord(e1, s1));
    CT_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t s0;
    cudaEvent_t e0;
    CT_CUDA_CHECK(cudaStreamCreate(&s0));
    CT_CUDA_CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventRecord(e0, s1) == cudaErrorInvalidResourceHandle, "event of device 0 recorded on device 1's stream");
    CHECK(cudaEventRecord(e1, s0) == cudaErrorInvalidResourceHandle, "event of device 1 recorded on device 0's stream");
    cudaGetLastError();
    // Waiting on another device's event is legal (cross-device ordering).
    CHECK(cudaStreamWaitEvent(s0, e1, 0) == cudaSuccess, "device 0 stream waits on device 1 event");
    float *x0;
    CT_CUDA_CHECK(cudaMalloc(&x0, 32 * sizeof(float)));
    CT_LAUNCH(add_one_kernel, 1, 32, 0, s1, x0, 32);  // device 0 current, device 1's stream
    CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle, "launch into another device's stream refused");
    // Copies between devices go through unified addressing, as on a GPU.
    CHECK(cudaMemcpy(x0, x1, 32 * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess, "peer copy");
    float h[32];
    CT_CUDA_CHECK(cudaMemcpy(h, x0, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(h[0] == 1.0f && h[31] == 1.0f, "device 1's kernel result copied to device 0: %g", h[0]);
    CT_CUDA_CHECK(cudaFree(x0));
    CT_CUDA_CHECK(cudaFree(x1));
    CT_CUDA_CHECK(cudaStreamDestroy(s0));
    CT_CUDA_CHECK(cudaStreamDestroy(s1));
    CT_CUDA_CHECK(cudaEventDestroy(e0));
    CT_CUDA_CHECK(cudaEventDestroy(e1));
    unsetenv("CTRAIN_EMU_DEVICES");
}

int main() {
    test_reduction();
    test_dynamic_smem_and_exit();
    test_sync_count();
    test_warp_ops();
    test_atomics();
    test_bf16_half();
    test_launch_config();
    test_memory_checks();
    test_streams_graphs();
    // The same under scheduling noise (random yields, shuffled block order).
    emu::set_jitter(3);
    test_reduction();
    test_dynamic_smem_and_exit();
    test_warp_ops();
    test_atomics();
    emu::set_jitter(0);
    test_capture_modes();
    test_device_ownership();
    return test_summary("emu_selftest");
}
