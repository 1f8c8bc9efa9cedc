// Shared between the emulator's runtime files (not for kernels).
#pragma once
#include "kernels/emu/emu.h"

// Runtime calls only the stand-in NCCL (dist/emu/nccl_emu.c, through dlsym) uses, to check that a
// communicator, its stream and its buffers are on one device; CUDA's own names and layout.
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };
typedef struct {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
} cudaPointerAttributes;
extern "C" cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device);
extern "C" cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *ptr);

namespace emu {
// Sets the calling host thread's last error (cudaGetLastError) and returns err.
cudaError_t set_error(cudaError_t err);
// When `stream` is capturing, appends `work` to its graph and returns true; the caller then does
// not run it. Returns false when the stream runs work now. Sets *err for an invalid stream.
bool capture_append(cudaStream_t stream, const std::function<void()> &work, cudaError_t *err);
// Invalidates every active capture (a launch failed during capture, or a synchronous call).
void capture_invalidate();
bool any_capture_active();
// Dynamic shared memory limit set with cudaFuncSetAttribute for a kernel (48 KiB by default).
size_t func_max_dyn_smem(const void *func);
// Runs a validated launch now (blocks until every block has finished).
void run_launch(const char *name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()> &body);
int env_int(const char *name, int dflt);
// Aborts naming the kernel when a device allocation's red zones were written (out of bounds).
void check_redzones(const char *kernel);

// The device allocations (start, bytes) in address order: the cost counters' map of global memory.
void dev_alloc_ranges(std::vector<std::pair<uintptr_t, size_t>> &out);
// Cost accounting around one launch that runs now (kernels/emu/cost.cpp).
void cost_launch_begin(const char *name, const void *func, dim3 grid, dim3 block, size_t smem);
void cost_launch_end();
// A device-to-device copy (src) or a device memset (src NULL) of `bytes`, counted as it runs.
void cost_copy(const char *name, const void *src, size_t bytes);

// Fibers, for the Hopper emulation (kernels/emu/wgmma.cpp): the running CUDA thread, parking
// it until fiber_unpark (the caller loops on its own condition, as with any wakeup), and one
// pointer of per-thread state that lives as long as the fiber.
void *fiber_current();
void fiber_park(const char *what);
void fiber_unpark(void *fiber);
void *&fiber_slot();
// Linear thread index within the block and threads per block of the running launch.
unsigned fiber_tid();
unsigned block_threads();
// Block boundaries: per-thread checks when a thread leaves a block (pending wgmma), and the
// per-block reset of mbarrier state (the last thread of a block, before the next starts).
void wgmma_thread_end();
void mbar_block_reset();

constexpr size_t kDefaultDynSmem = 48 * 1024;
constexpr size_t kMaxDynSmemOptin = 227 * 1024;  // sm_90: 232448 bytes per block
}  // namespace emu
