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
// Runs a validated launch now (blocks until every block has finished) on emulated device
// `device` (what its kernels may use: kernels/emu/device.cpp).
void run_launch(const char *name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()> &body, int device = 0);
// The running launch's kernel name and device (for the checks inside a kernel).
const char *launch_name();
int launch_device();
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
// Memory proxies (kernels/emu/wgmma.cpp): a generic-proxy write the emulator can attribute (a
// cp.async landing in dynamic shared memory), and the initialising thread's fence of its mbarriers.
void proxy_generic_write(const void *dst, size_t bytes);
void mbar_fence_inits(void *fiber);

constexpr size_t kDefaultDynSmem = 48 * 1024;
constexpr size_t kMaxDynSmemOptin = 227 * 1024;  // the largest opt-in of any emulated device (sm_90)

// An emulated device (kernels/emu/device.cpp: the table, CTRAIN_EMU_DEVICE picks from it).
struct DeviceDesc {
    const char *key, *name;  // CTRAIN_EMU_DEVICE's name for it; cudaDeviceProp::name
    int major, minor, sms;
    size_t smem_optin, smem_per_sm;  // dynamic shared memory per block with opt-in; per SM
    int regs_per_block, regs_per_sm, threads_per_sm, blocks_per_sm;
    unsigned l2_bytes;
    int clock_khz, mem_clock_khz, bus_bits;
};
const DeviceDesc &device_desc(int device);
// Whether the nvcc build has wgmma/mbarrier/cp.async.bulk code for the device (sm_90a: 9.0 only).
bool device_has_wgmma(int device);

// Dynamic shared memory sits at a window offset (a multiple of 16 below 1 KiB, drawn per launch
// from a seed) inside a 1 KiB-aligned window, so kernels that realign it for wgmma's swizzles
// run their realignment as on a GPU. Shared-window addresses (descriptors, ct_smem_u32) count
// from the window's start.
unsigned char *smem_window();
size_t dyn_smem_window_offset();
}  // namespace emu
