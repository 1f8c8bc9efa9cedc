// CUDA emulation layer: lets the project's .cu files compile unchanged with g++ and run on a CPU.
// Force-included (g++ -x c++ -include kernels/emu/emu.h -DCTRAIN_EMU) before every kernels/*.cu;
// host tests include it (or kernels/common.cuh) directly. Rules for kernel writers: kernels/common.cuh
// and docs/EMULATION.md.
//
// Execution model (why it looks like this):
// - One launch at a time (a global launch lock), blocks one after another in index order, the
//   threads of a block CONCURRENTLY: each CUDA thread is a fiber (own stack), the fibers spread
//   over a persistent pool of host threads running in parallel (kernels/emu/threads.cpp says
//   why). So a __shared__ variable can be plain `static` storage, and a missing __syncthreads or a
//   wrong shuffle really races and can fail a test.
// - __syncthreads and the warp operations (shuffles, votes, __syncwarp, ldmatrix, mma) are real
//   barriers. Threads that return early leave the barriers, as on a GPU.
// - The runtime API (memory, copies, streams, events, graphs): streams are queues whose work runs
//   when a dependency or the schedule (CTRAIN_EMU_SCHEDULE, docs/EMULATION.md) makes it run.
#pragma once
#ifndef CTRAIN_EMU
#define CTRAIN_EMU 1
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/bf16.h"

#ifdef __cplusplus
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#endif

// Kernels use `#pragma unroll`, which g++ does not know.
#pragma GCC diagnostic ignored "-Wunknown-pragmas"

// ---------------------------------------------------------------------------------------------
// Qualifiers.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
// Blocks run one at a time, so one static instance per declaration is exactly "per block".
#define __shared__ static

// ---------------------------------------------------------------------------------------------
// Runtime types, ABI-compatible where it is cheap (handles are the runtime's struct pointers, error
// numbers are CUDA's), so C code that declares them itself links against this layer too.
#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchTimeout = 702,
    cudaErrorAssert = 710,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureMerge = 902,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;

typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
} cudaStreamCaptureStatus;

typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9
} cudaFuncAttribute;

typedef enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxRegistersPerBlock = 12,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
} cudaDeviceAttr;

// The fields host code reads; the layout is this layer's own (not the toolkit's).
typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int integrated;
    int canMapHostMemory;
    int concurrentKernels;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryClockRate;
    int memoryBusWidth;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    size_t sharedMemPerBlockOptin;
    int maxBlocksPerMultiProcessor;
} cudaDeviceProp;

typedef void (*cudaHostFn_t)(void *userData);

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaHostRegisterReadOnly 0x08
#define cudaGraphInstantiateFlagAutoFreeOnLaunch 1

// Memory.
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream);

// Device.
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);

// Errors.
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t err);
const char *cudaGetErrorName(cudaError_t err);

// Streams and events.
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

// Graphs: work issued to a capturing stream is recorded, not run; a launch replays it as a
// dependency graph, in a drawn order.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                          unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count);

// Functions. `func` is the kernel's address (any pointer type in C++, see the templates below).
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value);

#ifdef __cplusplus
}  // extern "C"
#endif

// ---------------------------------------------------------------------------------------------
// Everything below is C++ (kernels and the runtime's internals).
#ifdef __cplusplus

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(2) char2 { signed char x, y; };
struct alignas(4) char4 { signed char x, y, z, w; };
struct alignas(2) uchar2 { unsigned char x, y; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
struct alignas(4) short2 { short x, y; };
struct alignas(8) short4 { short x, y, z, w; };
struct alignas(4) ushort2 { unsigned short x, y; };
struct alignas(8) ushort4 { unsigned short x, y, z, w; };
struct alignas(16) longlong2 { long long x, y; };
struct alignas(16) ulonglong2 { unsigned long long x, y; };
struct int3 { int x, y, z; };
static inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) {
    return uchar4{x, y, z, w};
}
static inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) {
    return char4{x, y, z, w};
}
static inline ushort2 make_ushort2(unsigned short x, unsigned short y) { return ushort2{x, y}; }
static inline short2 make_short2(short x, short y) { return short2{x, y}; }
static inline int3 make_int3(int x, int y, int z) { return int3{x, y, z}; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
static inline double2 make_double2(double x, double y) { return double2{x, y}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w};
}
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

// Built-in variables: per host thread (threadIdx, blockIdx), per launch (blockDim, gridDim).
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
static constexpr int warpSize = 32;

template <typename F>
cudaError_t cudaFuncSetAttribute(F *func, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph) {
    return cudaGraphInstantiate(exec, graph, 0ull);
}
static inline cudaError_t cudaStreamCreateWithFlags_(cudaStream_t *s) {
    return cudaStreamCreateWithFlags(s, 0);
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                          cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)0);
}
static inline cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes) {
    return cudaMemsetAsync(ptr, value, bytes, (cudaStream_t)0);
}
static inline cudaError_t cudaEventRecord(cudaEvent_t event) {
    return cudaEventRecord(event, (cudaStream_t)0);
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e) {
    return cudaStreamWaitEvent(s, e, 0);
}
template <typename T>
cudaError_t cudaMalloc(T **ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), bytes);
}
template <typename T>
cudaError_t cudaMallocHost(T **ptr, size_t bytes) {
    return cudaMallocHost(reinterpret_cast<void **>(ptr), bytes);
}
template <typename T>
cudaError_t cudaHostAlloc(T **ptr, size_t bytes, unsigned int flags) {
    return cudaHostAlloc(reinterpret_cast<void **>(ptr), bytes, flags);
}
// __constant__ and __device__ variables are plain globals here.
template <typename T>
cudaError_t cudaMemcpyToSymbol(T &symbol, const void *src, size_t bytes, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (offset + bytes > sizeof(T)) return cudaErrorInvalidValue;
    memcpy(reinterpret_cast<char *>(&symbol) + offset, src, bytes);
    return cudaSuccess;
}
template <typename T>
cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t bytes, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    if (offset + bytes > sizeof(T)) return cudaErrorInvalidValue;
    memcpy(dst, reinterpret_cast<const char *>(&symbol) + offset, bytes);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// The emulator's internals that the inline device functions below call.
namespace emu {

// Per-lane payload of a warp collective: the releasing lane sees every participant's input and
// writes every participant's output (so nothing a lane reads can be overwritten under it).
struct WarpPayload {
    uint64_t u[8];
};
typedef void (*WarpFn)(const WarpPayload *in, WarpPayload *out, uint32_t group, void *ctx);
// Barrier over the lanes of `mask` that have not exited; runs fn once (by the last to arrive) over
// all participants' inputs; returns this lane's output. Aborts with a message when this lane is not
// in mask (undefined on a GPU).
void warp_collective(const char *what, uint32_t mask, const WarpPayload &in, WarpPayload &out,
                     WarpFn fn, void *ctx);
void warp_sync(uint32_t mask);
unsigned lane_id();
void syncthreads();
int syncthreads_reduce(int pred, int op);  // op 0 count, 1 and, 2 or
void *dyn_smem();
size_t dyn_smem_bytes();
void trap(const char *file, int line, const char *expr);

// PTX emulation (kernels/ptx.cuh wrappers).
void mma_m16n8k16_bf16(float *d, const uint32_t *a, const uint32_t *b, const float *c);
void ldmatrix(uint32_t *r, int num, bool trans, const void *row);

// Hopper async tensor-core path (kernels/ptx_wgmma.cuh wrappers; kernels/emu/wgmma.cpp).
// Shared addresses in descriptors and mbarrier operands are offsets into the dynamic buffer.
uint32_t smem_offset(const void *p);
void wgmma_bf16(float *d, uint64_t desc_a, uint64_t desc_b, int n, int scale_d, int trans_a, int trans_b);
void wgmma_fence();
void wgmma_commit();
void wgmma_wait(int keep_pending);
void mbar_init(uint64_t *bar, int count);
void mbar_init_fence();
void fence_proxy_async();
void mbar_arrive(uint64_t *bar, uint32_t tx_bytes);
void mbar_wait(uint64_t *bar, int parity);
void cp_async_bulk(void *dst_smem, const void *src_global, uint32_t bytes, uint64_t *bar);

// Pending cp.async copies of this thread (deferred until wait_group, like the hardware may).
void cp_async(void *dst_smem, const void *src_global, int bytes, int src_bytes);
void cp_async_commit();
void cp_async_wait(int keep_pending);

// Launch: validate, then run `body` in every thread of every block (or record it when the stream
// is capturing). Returns nothing: errors go to cudaGetLastError like a real launch.
void launch(const char *name, const void *func, dim3 grid, dim3 block, size_t smem,
            cudaStream_t stream, std::function<void()> body);

// Devices share the host's memory here, so a kernel handed another device's buffer would run
// fine and a real GPU would fault. With more than one device, every pointer a kernel receives
// (pointer arguments, and the pointer-aligned words of struct arguments) is looked up among the
// device allocations; one owned by a device other than the current one aborts, naming the kernel,
// the argument and both devices.
struct KernelArgWord {
    int arg;         // argument position, from 0
    uintptr_t value;
};
bool multi_device();
void check_kernel_args(const char *name, const KernelArgWord *words, size_t n);

template <typename T>
inline void kernel_arg_words(int arg, const T &v, std::vector<KernelArgWord> &out) {
    if constexpr (std::is_pointer_v<T>) {
        out.push_back({arg, (uintptr_t)v});
    } else if constexpr (std::is_class_v<T> && std::is_trivially_copyable_v<T> &&
                         alignof(T) >= alignof(void *)) {
        const unsigned char *bytes = reinterpret_cast<const unsigned char *>(&v);
        for (size_t o = 0; o + sizeof(void *) <= sizeof(T); o += sizeof(void *)) {
            uintptr_t w;
            memcpy(&w, bytes + o, sizeof w);
            out.push_back({arg, w});
        }
    }
}

template <typename... P, typename... A>
void launch_kernel(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, A &&...args) {
    // Convert the arguments as the call would, once; every CUDA thread gets its own copies.
    std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    if (multi_device()) {
        std::vector<KernelArgWord> words;
        std::apply(
            [&words](const auto &...v) {
                int arg = 0;
                (kernel_arg_words(arg++, v, words), ...);
            },
            params);
        check_kernel_args(name, words.data(), words.size());
    }
    launch(name, reinterpret_cast<const void *>(k), grid, block, smem, stream,
           [k, params]() { std::apply(k, params); });
}

// Scheduling noise (tests): 0 off; n > 0: threads yield at random at block start and after
// barriers, and blocks run in a shuffled order. Also set by env CTRAIN_EMU_JITTER=n.
void set_jitter(int level);
int get_jitter();
// Host threads for the launches that follow (tests): n > 0 runs them on min(n, the default) host
// threads, 0 returns to the default (CTRAIN_EMU_HOST_THREADS). Results never depend on it; which
// interleavings of lanes a run sees (and so which races it can catch) does.
void set_host_threads(int n);
// Cost accounting (tools/bench_gpu_cost.c through kernels/cost.cu): while g_cost_on, every launch
// records its mma.sync count and the global-memory bytes that reach the counting hooks (cp.async,
// and ct_ld/ct_st/ct_ldv/ct_stv of kernels/act.cuh). A plain flag read by the hooks, so counting
// off costs one predictable branch here and nothing at all in the nvcc build.
extern bool g_cost_on;
// Whether the CPU has FMA instructions (and the OS their AVX state): __fmaf_rn then uses one inline.
extern bool g_fma_hw;
void cost_access(const void *p, size_t bytes, bool write);
void cost_mma();
// Counters for benchmarks.
struct Stats {
    unsigned long long launches, blocks, block_barriers, warp_ops;
};
Stats stats();

template <typename T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp exchange of a type wider than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T>
inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof(T));
    return v;
}

// Shuffle: payload u[0] = value, u[1] = source lane (absolute), u[2] = 1 when src is valid.
void shfl_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *ctx);
void vote_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *ctx);
void match_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *ctx);

template <typename T>
inline T shfl(const char *what, uint32_t mask, T v, int src_lane) {
    WarpPayload in{}, out{};
    in.u[0] = to_bits(v);
    in.u[1] = (uint64_t)src_lane;
    warp_collective(what, mask, in, out, shfl_fn, nullptr);
    return from_bits<T>(out.u[0]);
}

}  // namespace emu

#define __syncthreads() ::emu::syncthreads()
static inline int __syncthreads_count(int p) { return emu::syncthreads_reduce(p, 0); }
static inline int __syncthreads_and(int p) { return emu::syncthreads_reduce(p, 1); }
static inline int __syncthreads_or(int p) { return emu::syncthreads_reduce(p, 2); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_sync(mask); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __trap() { emu::trap("?", 0, "__trap()"); }
// All lanes that have not exited are "active": the emulator has no divergence inside a warp.
unsigned __activemask();

// Width segments as in the CUDA programming guide: lanes are grouped in `width` (a power of two);
// the source lane is computed inside the caller's segment; out-of-segment up/down reads return the
// caller's own value.
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = (int)emu::lane_id();
    int base = lane & ~(width - 1);
    return emu::shfl("__shfl_sync", mask, v, base + (src & (width - 1)));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int lane = (int)emu::lane_id();
    int in_seg = lane & (width - 1);
    int src = in_seg >= (int)delta ? lane - (int)delta : lane;
    return emu::shfl("__shfl_up_sync", mask, v, src);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int lane = (int)emu::lane_id();
    int in_seg = lane & (width - 1);
    int src = in_seg + (int)delta < width ? lane + (int)delta : lane;
    return emu::shfl("__shfl_down_sync", mask, v, src);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = (int)emu::lane_id();
    int src = lane ^ lane_mask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;  // outside the segment
    return emu::shfl("__shfl_xor_sync", mask, v, src);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    emu::WarpPayload in{}, out{};
    in.u[0] = pred != 0;
    emu::warp_collective("__ballot_sync", mask, in, out, emu::vote_fn, nullptr);
    return (unsigned)out.u[0];
}
static inline int __any_sync(unsigned mask, int pred) {
    emu::WarpPayload in{}, out{};
    in.u[0] = pred != 0;
    emu::warp_collective("__any_sync", mask, in, out, emu::vote_fn, nullptr);
    return out.u[0] != 0;
}
static inline int __all_sync(unsigned mask, int pred) {
    emu::WarpPayload in{}, out{};
    in.u[0] = pred != 0;
    emu::warp_collective("__all_sync", mask, in, out, emu::vote_fn, nullptr);
    return out.u[1] != 0;  // vote_fn: u[1] = every participant voted true
}
template <typename T>
inline unsigned __match_any_sync(unsigned mask, T v) {
    emu::WarpPayload in{}, out{};
    in.u[0] = emu::to_bits(v);
    emu::warp_collective("__match_any_sync", mask, in, out, emu::match_fn, nullptr);
    return (unsigned)out.u[0];
}
template <typename T>
inline int __reduce_add_sync(unsigned mask, T v) {
    int s = (int)v;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(mask, s, o);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Atomics: GCC builtins on ordinary memory (global and shared are both host memory here).
#define EMU_ATOMIC_INT(T)                                                                         \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }   \
    static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicCAS(T *p, T cmp, T v) {                                                 \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
        return cmp;                                                                               \
    }                                                                                             \
    static inline T atomicMax(T *p, T v) {                                                        \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                             \
        while (old < v &&                                                                         \
               !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
            ;                                                                                     \
        return old;                                                                               \
    }                                                                                             \
    static inline T atomicMin(T *p, T v) {                                                        \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                             \
        while (old > v &&                                                                         \
               !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
            ;                                                                                     \
        return old;                                                                               \
    }
EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned int)
EMU_ATOMIC_INT(unsigned long long)
EMU_ATOMIC_INT(long long)
#undef EMU_ATOMIC_INT
// Float atomics: a compare-and-swap loop on the bit pattern, as the hardware's result would be.
#define EMU_ATOMIC_FLT(T, U, OPNAME, EXPR)                                                        \
    static inline T OPNAME(T *p, T v) {                                                           \
        U *q = reinterpret_cast<U *>(p);                                                          \
        U old = __atomic_load_n(q, __ATOMIC_SEQ_CST);                                             \
        for (;;) {                                                                                \
            T o;                                                                                  \
            memcpy(&o, &old, sizeof o);                                                           \
            T n = (EXPR);                                                                         \
            U nb;                                                                                 \
            memcpy(&nb, &n, sizeof nb);                                                           \
            if (__atomic_compare_exchange_n(q, &old, nb, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
                return o;                                                                         \
        }                                                                                         \
    }
EMU_ATOMIC_FLT(float, uint32_t, atomicAdd, o + v)
EMU_ATOMIC_FLT(double, uint64_t, atomicAdd, o + v)
EMU_ATOMIC_FLT(float, uint32_t, atomicMax, fmaxf(o, v))
EMU_ATOMIC_FLT(float, uint32_t, atomicMin, fminf(o, v))
#undef EMU_ATOMIC_FLT
static inline float atomicExch(float *p, float v) {
    uint32_t nb, ob;
    memcpy(&nb, &v, 4);
    ob = __atomic_exchange_n(reinterpret_cast<uint32_t *>(p), nb, __ATOMIC_SEQ_CST);
    float o;
    memcpy(&o, &ob, 4);
    return o;
}
static inline unsigned atomicInc(unsigned *p, unsigned limit) {
    unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0 : old + 1, true,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return old;
}
#define atomicAdd_block atomicAdd
#define atomicMax_block atomicMax

// ---------------------------------------------------------------------------------------------
// Math intrinsics. The fast versions are the precise ones here (the GPU's are within a few ulp).
// glibc declares (but does not export) __expf and friends as extern "C": these definitions are
// inline ones of those declarations, hence not static.
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __tanhf(float x) { return tanhf(x); }
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x == x ? x : 0.f)); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
// g++ builds the emulated kernels without -mfma (no -march: the binaries run on any x86-64), so
// fmaf is a call into libm per product, a third of an fp32 emulated step's CPU time
// (kernels/conv_generic.cu). On a CPU with FMA, libm's fmaf is this one instruction (glibc's
// __fmaf_fma3): a*b+c rounded once, the same bits. Only which payload comes out when two NaN
// operands meet can differ, as it could with any rebuild before (g++ swaps fmaf's first two
// arguments as it likes); checked on 30 million random operand triples (random bit patterns,
// infinities, zeros, denormals): 0 differences in non-NaN results.
static inline float __fmaf_rn(float a, float b, float c) {
    if (__builtin_expect(emu::g_fma_hw, 1)) {
        __asm__("vfmadd213ss %2, %1, %0" : "+x"(a) : "x"(b), "x"(c));
        return a;
    }
    return fmaf(a, b, c);
}
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double f; memcpy(&f, &i, 8); return f; }
static inline long long __double_as_longlong(double f) { long long i; memcpy(&i, &f, 8); return i; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}
static inline int __mul24(int a, int b) { return a * b; }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
template <typename T>
static inline T __ldg(const T *p) { return *p; }
template <typename T>
static inline T __ldcs(const T *p) { return *p; }
template <typename T>
static inline T __ldcg(const T *p) { return *p; }
template <typename T>
static inline T __ldlu(const T *p) { return *p; }
template <typename T>
static inline void __stcs(T *p, T v) { *p = v; }
template <typename T>
static inline void __stcg(T *p, T v) { *p = v; }
static inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

// CUDA's device-side min/max are overloaded for every arithmetic type; mixed signed/unsigned
// integer arguments pick the unsigned version, float with anything picks the float version.
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
static inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
static inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
static inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline float min(float a, int b) { return fminf(a, (float)b); }
static inline float max(float a, int b) { return fmaxf(a, (float)b); }
static inline float min(int a, float b) { return fminf((float)a, b); }
static inline float max(int a, float b) { return fmaxf((float)a, b); }

// Device assert: print and abort the process (a GPU kernel would trap and poison the context).
#ifndef NDEBUG
#undef assert
#define assert(e) ((e) ? (void)0 : ::emu::trap(__FILE__, __LINE__, #e))
#endif

// ---------------------------------------------------------------------------------------------
// bf16 and fp16: storage types with CUDA's conversions (round to nearest even, NaN kept a NaN).
// bf16 converts through util/bf16.h, the same functions as the CPU reference and the kernels.
namespace emu {
inline uint16_t f32_to_f16_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        // value = ax as float; half subnormal unit is 2^-24.
        float a;
        memcpy(&a, &ax, 4);
        float scaled = a * 16777216.0f;  // exact: multiply by 2^24
        uint32_t m = (uint32_t)nearbyintf(scaled);  // round to nearest even (default mode)
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((ax >> 23) - 127 + 15);
    uint32_t mant = ax & 0x7fffffu;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = ldexpf((float)mant, -24);
        if (sign) f = -f;
        return f;
    }
    uint32_t u;
    if (exp == 31) u = sign | 0x7f800000u | (mant << 13);
    else u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    memcpy(&f, &u, 4);
    return f;
}
}  // namespace emu

struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(ct_f32_to_bf16(f)) {}
    __nv_bfloat16(double f) : __x(ct_f32_to_bf16((float)f)) {}
    __nv_bfloat16(int i) : __x(ct_f32_to_bf16((float)i)) {}
    __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
    operator float() const { return ct_bf16_to_f32(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

struct __half_raw {
    unsigned short x;
};
struct __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(emu::f32_to_f16_rn(f)) {}
    __half(double f) : __x(emu::f32_to_f16_rn((float)f)) {}
    __half(int i) : __x(emu::f32_to_f16_rn((float)i)) {}
    __half(const __half_raw &r) : __x(r.x) {}
    operator float() const { return emu::f16_to_f32(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
};
struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
};
typedef __half half;
typedef __half2 half2;

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f) {
    uint32_t u = ct_f2u(f);
    __nv_bfloat16 r;
    r.__x = (uint16_t)(u >> 16);
    if ((u & 0x7fffffffu) > 0x7f800000u) r.__x |= 0x0040u;
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 h) { return ct_bf16_to_f32(h.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b));
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v) {
    return __floats2bfloat162_rn(v.x, v.y);
}
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __nv_bfloat162(a, b);
}
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
static inline float2 __bfloat1622float2(__nv_bfloat162 v) {
    return float2{__bfloat162float(v.x), __bfloat162float(v.y)};
}
static inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
static inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 v) { return v.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 v) { return v.y; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 h;
    h.__x = u;
    return h;
}
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline __nv_bfloat16 __short_as_bfloat16(short u) { return __ushort_as_bfloat16((unsigned short)u); }
static inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a + (float)b); }
static inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a - (float)b); }
static inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a * (float)b); }
static inline __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a / (float)b); }
static inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { a.__x ^= 0x8000u; return a; }
static inline __nv_bfloat16 __habs(__nv_bfloat16 a) { a.__x &= 0x7fffu; return a; }
// fma rounds once, from the exact product-sum: float fma then one rounding to bf16 matches that
// except for double-rounding cases, which the hardware avoids and this does not (documented).
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __nv_bfloat16((float)fma((double)(float)a, (double)(float)b, (double)(float)c));
}
static inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return (float)a >= (float)b || b != b ? a : b; }
static inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return (float)a <= (float)b || b != b ? a : b; }
static inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hadd(a.x, b.x), __hadd(a.y, b.y)); }
static inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmul(a.x, b.x), __hmul(a.y, b.y)); }
static inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
static inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }
static inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __hsub(a, b); }
static inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmul(a, b); }
static inline __nv_bfloat16 operator/(__nv_bfloat16 a, __nv_bfloat16 b) { return __hdiv(a, b); }
static inline __nv_bfloat16 operator-(__nv_bfloat16 a) { return __hneg(a); }
static inline __nv_bfloat16 &operator+=(__nv_bfloat16 &a, __nv_bfloat16 b) { return a = a + b; }
static inline __nv_bfloat16 &operator*=(__nv_bfloat16 &a, __nv_bfloat16 b) { return a = a * b; }

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return emu::f16_to_f32(h.__x); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }
static inline float2 __half22float2(__half2 v) { return float2{__half2float(v.x), __half2float(v.y)}; }
static inline float __low2float(__half2 v) { return __half2float(v.x); }
static inline float __high2float(__half2 v) { return __half2float(v.y); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short u) {
    __half h;
    h.__x = u;
    return h;
}
static inline __half __hadd(__half a, __half b) { return __half((float)a + (float)b); }
static inline __half __hsub(__half a, __half b) { return __half((float)a - (float)b); }
static inline __half __hmul(__half a, __half b) { return __half((float)a * (float)b); }
static inline __half __hdiv(__half a, __half b) { return __half((float)a / (float)b); }
static inline __half __hfma(__half a, __half b, __half c) {
    return __half((float)fma((double)(float)a, (double)(float)b, (double)(float)c));
}
static inline __half operator+(__half a, __half b) { return __hadd(a, b); }
static inline __half operator-(__half a, __half b) { return __hsub(a, b); }
static inline __half operator*(__half a, __half b) { return __hmul(a, b); }
static inline __half operator/(__half a, __half b) { return __hdiv(a, b); }

// ---------------------------------------------------------------------------------------------
// Launch. Kernels are launched only through CT_LAUNCH (kernels/common.cuh), which becomes
// kernel<<<grid, block, smem, stream>>>(args...) under nvcc and this under emulation.
#define EMU_LAUNCH(kernel, grid, block, smem, stream, ...) \
    ::emu::launch_kernel(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), (cudaStream_t)(stream), ##__VA_ARGS__)

#endif  // __cplusplus
