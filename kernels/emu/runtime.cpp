// The CUDA runtime API subset ctrain uses, on the host: device memory is host memory (tracked, so
// frees and copies can be checked), streams are queues of work that runs when a schedule
// (CTRAIN_EMU_SCHEDULE, docs/EMULATION.md) or a declared dependency (a synchronisation, an event
// wait, cudaFree, a blocking copy) makes it run, events mark a point in a stream's queue, and
// graph capture records a dependency graph of closures that a graph launch replays in a drawn order.
#include <sys/sysinfo.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/emu/internal.h"

// A captured graph: nodes and, per node, the earlier nodes it depends on (the previous node of its
// stream, and the node of an event a stream waited on: fork/join).
struct CUgraph_st {
    std::vector<std::function<void()>> nodes;
    std::vector<std::vector<int>> deps;
    bool invalidated = false;
    cudaStream_t origin = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;  // while capturing
    std::thread::id owner;                                      // the thread that began it
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> nodes;
    std::vector<std::vector<int>> deps;
};
// One unit of queued stream work.
struct EmuOp {
    std::function<void()> fn;
    int device;
};
struct CUstream_st {
    int device = 0;  // the device current when it was created: work goes to that device only
    unsigned flags = 0;
    int priority = 0;
    CUgraph_st *capture = nullptr;  // the graph this stream records into, when capturing
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::vector<int> cap_front;     // the nodes its next node in that graph will depend on
    // The queue (guarded by emu::g_qmu): ops issued - done are waiting in q; busy while a host
    // thread runs the front op (one at a time, in order, whichever thread forced it).
    std::deque<EmuOp> q;
    uint64_t issued = 0, done = 0;
    bool busy = false;
    int klass = 0;  // what it has carried: 0 copies only, 1 host functions (NCCL), 2 kernels
    bool legacy = false;
};
struct CUevent_st {
    int device = 0;
    unsigned flags = 0;
    bool recorded = false;
    double t_ms = 0;
    CUgraph_st *capture = nullptr;  // recorded inside a capture: waiting on it joins the capture
    std::vector<int> cap_front;     // the nodes it follows in that capture
    CUstream_st *stream = nullptr;  // the last record's stream and position in its queue
    uint64_t seq = 0;
};

namespace emu {

static __thread cudaError_t t_last_error = cudaSuccess;
// The current device, per host thread as in CUDA.
static __thread int t_device = 0;

static std::recursive_mutex g_mu;  // guards everything below
struct DevAlloc {
    size_t bytes;
    int device;  // emulated devices share the host's memory; this says whose it is
};
static std::map<uintptr_t, DevAlloc> g_dev;  // device allocations by start address
static std::map<uintptr_t, size_t> g_host;  // cudaMallocHost / cudaHostAlloc: start -> bytes
static std::map<uintptr_t, size_t> g_registered;
static std::set<cudaStream_t> g_streams;
static std::set<cudaEvent_t> g_events;
static std::set<CUgraph_st *> g_graphs;
static std::set<CUgraphExec_st *> g_execs;
static std::set<CUgraph_st *> g_active_captures;
// cudaFuncSetAttribute's dynamic shared memory limit per (device, kernel): a function's attributes
// belong to the device's context, as in CUDA.
static std::map<std::pair<int, const void *>, size_t> g_func_smem;
static size_t g_dev_bytes;
static int g_poison_mem = -1;


cudaError_t set_error(cudaError_t err) {
    if (err != cudaSuccess) t_last_error = err;
    return err;
}

static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static bool is_default_stream(cudaStream_t s) {
    return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

constexpr int kMaxDevices = 64;
// The legacy default stream of each device (the per-thread default stream is taken as it too:
// ctrain uses neither on its own paths). Never capturing.
static CUstream_st *g_legacy[kMaxDevices];
static CUstream_st *legacy_stream(int device) {
    CUstream_st **s = g_legacy;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!s[device]) {
        s[device] = new CUstream_st();
        s[device]->device = device;
        s[device]->legacy = true;
    }
    return s[device];
}

// nullptr when s is not a valid stream handle; the handle itself for created streams; the
// current device's legacy stream for the default streams.
static CUstream_st *stream_of(cudaStream_t s) {
    if (is_default_stream(s)) return legacy_stream(t_device);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    return g_streams.count(s) ? s : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Stream queues and schedules. Work issued to a stream is queued; it runs, in issue order, when
// the schedule runs it at issue or when the host or another stream needs it (drain). Any host
// thread may run a stream's work (the one that needs it), with the op's device current.
static std::mutex g_qmu;  // the queues (never held while an op runs: ops take g_mu and block)
static std::condition_variable g_qcv;

enum Schedule { kSync, kLazy, kEagerCopy, kEagerComm, kEagerCompute };
static int g_schedule = -1;
static uint64_t g_seed = 0;

static void drain_device(int device);
static std::atomic<bool> g_exiting;
// At exit the queued work runs, as a CUDA context's teardown completes it (a kernel that traps is
// still reported when nobody synchronised); host functions (the stand-in NCCL's allreduce, which
// would wait for peers that may be gone) are skipped.
static void drain_at_exit() {
    g_exiting = true;
    drain_device(-1);
}

static void read_schedule() {
    if (g_schedule >= 0) return;
    atexit(drain_at_exit);
    const char *v = getenv("CTRAIN_EMU_SCHEDULE");
    std::string name = v && *v ? v : "lazy";  // the strictest, and no slower
    size_t colon = name.find(':');
    if (colon != std::string::npos) {
        g_seed = strtoull(name.c_str() + colon + 1, nullptr, 10);
        name.resize(colon);
    }
    static const char *names[] = {"sync", "lazy", "eager-copy", "eager-comm", "eager-compute"};
    for (int i = 0; i < 5; i++)
        if (name == names[i]) g_schedule = i;
    if (g_schedule < 0) {
        fprintf(stderr, "emu: CTRAIN_EMU_SCHEDULE=%s: unknown schedule; use sync, lazy, eager-copy, eager-comm or "
                        "eager-compute, optionally with :SEED (docs/EMULATION.md)\n", v);
        exit(2);
    }
}

// A counter-based draw in [0, n) for the seeded choices (which stream a device-wide sync runs
// first, the order of a graph's independent nodes).
static std::atomic<uint64_t> g_draws;
static uint64_t seeded(uint64_t n) {
    uint64_t x = g_seed * 0x9E3779B97F4A7C15ull + (++g_draws) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return n ? x % n : 0;
}

// Runs s's queue until `upto` ops have run. Another thread running s's front op is waited for.
static void drain(CUstream_st *s, uint64_t upto) {
    std::unique_lock<std::mutex> lk(g_qmu);
    while (s->done < upto) {
        if (s->busy) {
            g_qcv.wait(lk);
            continue;
        }
        EmuOp op = std::move(s->q.front());
        s->q.pop_front();
        s->busy = true;
        lk.unlock();
        int saved = t_device;
        t_device = op.device;
        op.fn();
        t_device = saved;
        lk.lock();
        s->busy = false;
        s->done++;
        g_qcv.notify_all();
    }
}
static void drain_all(CUstream_st *s) {
    uint64_t upto;
    {
        std::lock_guard<std::mutex> lk(g_qmu);
        upto = s->issued;
    }
    drain(s, upto);
}

// Every stream of `device` (-1: of every device), in a seeded order.
static void drain_device(int device) {
    std::vector<CUstream_st *> v;
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        for (cudaStream_t s : g_streams)
            if (device < 0 || s->device == device) v.push_back(s);
        for (int d = 0; d < kMaxDevices; d++)
            if (g_legacy[d] && (device < 0 || d == device)) v.push_back(g_legacy[d]);
    }
    for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[seeded(i)]);
    for (CUstream_st *s : v) drain_all(s);
}

// Whether the schedule runs work on s as soon as it is issued.
static bool eager(const CUstream_st *s) {
    // The cost counters attribute a launch to the op the host is enqueueing (kernels/emu/cost.cpp):
    // with them on, work runs as it is issued.
    if (g_cost_on) return true;
    switch (g_schedule) {
    case kSync: return true;
    case kEagerCopy: return s->klass == 0;
    case kEagerComm: return s->klass == 1;
    case kEagerCompute: return s->klass == 2;
    default: return false;
    }
}

// Queues fn on s (klass: what it is, 0 copy, 1 host function, 2 kernel) and returns its position.
// The legacy stream and the blocking streams of a device wait for each other, as in CUDA.
static uint64_t enqueue(CUstream_st *s, std::function<void()> fn, int klass) {
    read_schedule();
    int dev = s->device;
    std::vector<std::pair<CUstream_st *, uint64_t>> implicit;
    if (!(s->flags & cudaStreamNonBlocking)) {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        std::lock_guard<std::mutex> qk(g_qmu);
        if (s->legacy) {
            for (cudaStream_t o : g_streams)
                if (o->device == dev && !(o->flags & cudaStreamNonBlocking) && o->issued > o->done)
                    implicit.push_back({o, o->issued});
        } else {
            CUstream_st *l = legacy_stream(dev);
            if (l->issued > l->done) implicit.push_back({l, l->issued});
        }
    }
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lk(g_qmu);
        for (auto &w : implicit) {
            CUstream_st *o = w.first;
            uint64_t upto = w.second;
            s->q.push_back(EmuOp{[o, upto] { drain(o, upto); }, dev});
            s->issued++;
        }
        s->q.push_back(EmuOp{std::move(fn), dev});
        seq = ++s->issued;
        if (klass > s->klass) s->klass = klass;
    }
    if (eager(s)) drain(s, seq);
    return seq;
}

// kernels/mutable.h: the statement marked `name` is skipped when CTRAIN_EMU_MUTANT=name.
bool mutant(const char *name) {
    static const char *m = getenv("CTRAIN_EMU_MUTANT");
    return m && !strcmp(m, name);
}

// Is [p, p + bytes) page-locked host memory (cudaHostAlloc, cudaHostRegister)?
static bool is_pinned(const void *p, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    uintptr_t a = (uintptr_t)p;
    for (auto *m : {&g_host, &g_registered}) {
        auto it = m->upper_bound(a);
        if (it == m->begin()) continue;
        --it;
        if (a >= it->first && a + bytes <= it->first + it->second) return true;
    }
    return false;
}

static uint64_t checksum(const void *p, size_t bytes) {
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0x243F6A8885A308D3ull ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001B3ull;
        h ^= h >> 29;
    }
    for (; i < bytes; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

bool any_capture_active() {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    return !g_active_captures.empty();
}

void capture_invalidate() {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    for (CUgraph_st *g : g_active_captures) g->invalidated = true;
}

// Appends a node to s's capture, after the nodes s's work so far depends on.
static void capture_node(CUstream_st *s, const std::function<void()> &work) {
    CUgraph_st *g = s->capture;
    g->nodes.push_back(work);
    g->deps.push_back(s->cap_front);
    s->cap_front.assign(1, (int)g->nodes.size() - 1);
}

bool capture_append(cudaStream_t stream, const std::function<void()> &work, cudaError_t *err) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    *err = cudaSuccess;
    CUstream_st *s = stream_of(stream);
    if (!s) {
        *err = cudaErrorInvalidResourceHandle;
        return true;
    }
    if (!s->capture) return false;
    capture_node(s, work);
    return true;
}

// Whether capture g forbids the calling thread a potentially unsafe call (a synchronising one,
// cudaMalloc), as CUDA's capture modes say: a global capture forbids it to every thread, a
// thread-local one to the thread capturing, a relaxed one to nobody.
static bool capture_forbids_unsafe(const CUgraph_st *g) {
    return g->mode == cudaStreamCaptureModeGlobal ||
           (g->mode == cudaStreamCaptureModeThreadLocal && g->owner == std::this_thread::get_id());
}

// A synchronous call during a capture that forbids it fails and invalidates that capture.
static cudaError_t check_sync_allowed() {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    bool hit = false;
    for (CUgraph_st *g : g_active_captures)
        if (capture_forbids_unsafe(g)) g->invalidated = hit = true;
    return hit ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

size_t func_max_dyn_smem(const void *func) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    auto it = g_func_smem.find({t_device, func});
    return it == g_func_smem.end() ? kDefaultDynSmem : it->second;
}

constexpr size_t kRedzone = 256;
constexpr unsigned char kRedzoneByte = 0xfd;

// Aborts naming `who` (a kernel, or cudaFree) when the red zones of an allocation were written.
static void check_one_redzone(const char *who, uintptr_t start, size_t bytes) {
    const unsigned char *p = (const unsigned char *)start;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    long bad_off = 0;
    bool bad = false;
    for (size_t i = 0; i < kRedzone; i++)
        if (p[-(long)kRedzone + (long)i] != kRedzoneByte) {
            bad = true;
            bad_off = -(long)kRedzone + (long)i;
            break;
        }
    if (!bad)
        for (size_t i = bytes; i < rounded + kRedzone; i++)
            if (p[i] != kRedzoneByte) {
                bad = true;
                bad_off = (long)i;
                break;
            }
    if (!bad) return;
    fprintf(stderr,
            "emu: %s: memory outside the device allocation at %p (%zu bytes) was written, first at "
            "byte offset %ld (%s); on a GPU this is an illegal address or silent corruption; "
            "aborting\n",
            who, (void *)start, bytes, bad_off, bad_off < 0 ? "before its start" : "past its end");
    abort();
}

}  // namespace emu

void emu::check_redzones(const char *kernel) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    char who[256];
    snprintf(who, sizeof who, "after kernel %s", kernel);
    for (auto &a : g_dev) check_one_redzone(who, a.first, a.second.bytes);
}

namespace emu {

void dev_alloc_ranges(std::vector<std::pair<uintptr_t, size_t>> &out) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    out.clear();
    for (auto &a : g_dev) out.push_back({a.first, a.second.bytes});
}

// The device allocation containing p, or g_dev.end().
static std::map<uintptr_t, DevAlloc>::iterator find_dev(const void *p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_dev.upper_bound(a);
    if (it == g_dev.begin()) return g_dev.end();
    --it;
    if (a >= it->first && a < it->first + (it->second.bytes ? it->second.bytes : 1)) return it;
    return g_dev.end();
}

// Checks a copy's device-side ranges; prints why it is invalid (CUDA would only say "invalid
// argument"). what names the API call.
static cudaError_t check_range(const char *what, const void *p, size_t bytes, bool must_be_device,
                               const char *role) {
    if (bytes == 0) return cudaSuccess;
    if (!p) {
        fprintf(stderr, "emu: %s: %s is NULL\n", what, role);
        return cudaErrorInvalidValue;
    }
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    auto it = find_dev(p);
    if (it == g_dev.end()) {
        if (must_be_device) {
            fprintf(stderr, "emu: %s: %s %p is not device memory (not from cudaMalloc)\n", what,
                    role, p);
            return cudaErrorInvalidValue;
        }
        return cudaSuccess;
    }
    uintptr_t a = (uintptr_t)p;
    if (a + bytes > it->first + it->second.bytes) {
        fprintf(stderr,
                "emu: %s: %s range [%p, +%zu) overruns its device allocation of %zu bytes at %p\n",
                what, role, p, bytes, it->second.bytes, (void *)it->first);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

static cudaError_t check_copy(const char *what, void *dst, const void *src, size_t bytes,
                              cudaMemcpyKind kind) {
    if ((int)kind < 0 || (int)kind > 4) return cudaErrorInvalidMemcpyDirection;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    cudaError_t e = check_range(what, dst, bytes, dst_dev, "destination");
    if (e == cudaSuccess) e = check_range(what, src, bytes, src_dev, "source");
    return e;
}

}  // namespace emu

using namespace emu;

extern "C" {

// ---------------------------------------------------------------------------------------------
// Memory.
cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    if (!ptr) return set_error(cudaErrorInvalidValue);
    *ptr = nullptr;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    bool refused = false;
    for (CUgraph_st *g : g_active_captures)
        if (capture_forbids_unsafe(g)) g->invalidated = refused = true;
    if (refused) return set_error(cudaErrorStreamCaptureUnsupported);
    if (bytes == 0) return cudaSuccess;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    unsigned char *raw = (unsigned char *)aligned_alloc(256, kRedzone + rounded + kRedzone);
    if (!raw) return set_error(cudaErrorMemoryAllocation);
    unsigned char *p = raw + kRedzone;
    if (g_poison_mem < 0) g_poison_mem = env_int("CTRAIN_EMU_POISON", 1);
    // Fresh device memory is garbage on a GPU: all ones here (NaN as float/bf16, -1 as int), so a
    // kernel that reads what nobody wrote cannot pass by luck of zeroed pages.
    if (g_poison_mem) memset(p, 0xff, bytes);
    // Red zones before and right after the allocation: a kernel writing out of bounds is caught
    // after its launch (check_redzones) instead of corrupting a neighbour.
    memset(raw, kRedzoneByte, kRedzone);
    memset(p + bytes, kRedzoneByte, rounded - bytes + kRedzone);
    g_dev[(uintptr_t)p] = DevAlloc{bytes, t_device};
    g_dev_bytes += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    // cudaFree waits for the device: queued work may still use the memory.
    int device = -1;
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        auto it = g_dev.find((uintptr_t)ptr);
        if (it != g_dev.end()) device = it->second.device;
    }
    if (device >= 0) drain_device(device);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    auto it = g_dev.find((uintptr_t)ptr);
    if (it == g_dev.end()) {
        fprintf(stderr, "emu: cudaFree(%p): not a live cudaMalloc pointer\n", ptr);
        return set_error(cudaErrorInvalidValue);
    }
    check_one_redzone("cudaFree", it->first, it->second.bytes);
    g_dev_bytes -= it->second.bytes;
    g_dev.erase(it);
    free((unsigned char *)ptr - kRedzone);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    if (!ptr) return set_error(cudaErrorInvalidValue);
    size_t rounded = ((bytes ? bytes : 1) + 4095) & ~(size_t)4095;
    void *p = aligned_alloc(4096, rounded);
    if (!p) return set_error(cudaErrorMemoryAllocation);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    g_host[(uintptr_t)p] = rounded;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

cudaError_t cudaFreeHost(void *ptr) {
    if (!ptr) return cudaSuccess;
    drain_device(-1);  // it synchronises: a queued copy may still read or fill it
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_host.erase((uintptr_t)ptr)) {
        fprintf(stderr, "emu: cudaFreeHost(%p): not a live cudaMallocHost/cudaHostAlloc pointer\n", ptr);
        return set_error(cudaErrorInvalidValue);
    }
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned int flags) {
    if (!ptr || bytes == 0) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_registered.count((uintptr_t)ptr)) return set_error(cudaErrorHostMemoryAlreadyRegistered);
    g_registered[(uintptr_t)ptr] = bytes;
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *ptr) {
    drain_device(-1);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_registered.erase((uintptr_t)ptr)) return set_error(cudaErrorHostMemoryNotRegistered);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    struct sysinfo si;
    size_t total = 80ull << 30;
    if (sysinfo(&si) == 0) total = (size_t)si.totalram * si.mem_unit;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (total_bytes) *total_bytes = total;
    if (free_bytes) *free_bytes = total > g_dev_bytes ? total - g_dev_bytes : 0;
    return cudaSuccess;
}

// A blocking copy runs on the legacy stream (after the work of the device's blocking streams, not
// its non-blocking ones, as in CUDA) and returns when it is done.
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = check_sync_allowed();
    if (e == cudaSuccess) e = check_copy("cudaMemcpy", dst, src, bytes, kind);
    if (e != cudaSuccess) return set_error(e);
    CUstream_st *l = legacy_stream(t_device);
    uint64_t seq = enqueue(l, [=] {
        if (g_cost_on && kind == cudaMemcpyDeviceToDevice) cost_copy("cudaMemcpy(DeviceToDevice)", src, bytes);
        if (bytes) memmove(dst, src, bytes);
    }, 0);
    drain(l, seq);
    return cudaSuccess;
}

static bool is_device_ptr(const void *p) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    return find_dev(p) != g_dev.end();
}

// Host memory as an asynchronous copy meets it: a pinned source is read when the copy runs (so the
// host must not write it before: checked by a checksum taken at issue and when it runs), a pageable
// one is staged at issue (CUDA copies it to a staging buffer before returning); a pinned
// destination is undefined until the copy ran (poisoned at issue: all ones, NaN as float), a
// pageable one is written before the call returns (CUDA waits for the stream).
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, bytes, kind);
    if (e != cudaSuccess) return set_error(e);
    auto run = [=] {
        if (g_cost_on && kind == cudaMemcpyDeviceToDevice) cost_copy("cudaMemcpyAsync(DeviceToDevice)", src, bytes);
        if (bytes) memmove(dst, src, bytes);
    };
    if (capture_append(stream, run, &e)) return set_error(e);
    CUstream_st *s = stream_of(stream);
    bool src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                    (kind == cudaMemcpyDefault && !is_device_ptr(src));
    bool dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                    (kind == cudaMemcpyDefault && !is_device_ptr(dst));
    if (!bytes) return cudaSuccess;
    if (dst_host && !is_pinned(dst, bytes)) {
        if (src_host && !is_pinned(src, bytes)) {  // host to host, both pageable: synchronous
            drain_all(s);
            memmove(dst, src, bytes);
            return cudaSuccess;
        }
        drain_all(s);
        uint64_t seq = enqueue(s, run, 0);
        drain(s, seq);
        return cudaSuccess;
    }
    if (dst_host) memset(dst, 0xff, bytes);
    if (src_host && !is_pinned(src, bytes)) {
        auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                   (const unsigned char *)src + bytes);
        enqueue(s, [=] { memmove(dst, staged->data(), bytes); }, 0);
        return cudaSuccess;
    }
    if (src_host) {
        uint64_t at_issue = checksum(src, bytes);
        enqueue(s, [=] {
            uint64_t now = checksum(src, bytes);
            if (now != at_issue) {
                fprintf(stderr,
                        "emu: cudaMemcpyAsync host->device of %zu bytes from pinned host memory %p to %p: the "
                        "host wrote the source after the copy was issued and before it ran (checksum %016llx "
                        "at issue, %016llx when it ran); on a GPU the copy may read either: wait for the copy "
                        "(an event recorded after it, or a stream synchronisation) before writing the buffer "
                        "again; aborting\n",
                        bytes, src, dst, (unsigned long long)at_issue, (unsigned long long)now);
                abort();
            }
            memmove(dst, src, bytes);
        }, 0);
        return cudaSuccess;
    }
    enqueue(s, run, 0);
    return cudaSuccess;
}

static void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                   size_t height) {
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}
static cudaError_t check_2d(const char *what, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t width, size_t height, cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
    if (height == 0 || width == 0) return cudaSuccess;
    return check_copy(what, dst, src, 0, kind) == cudaSuccess
               ? (check_range(what, dst, dpitch * (height - 1) + width,
                              kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice,
                              "destination") == cudaSuccess
                      ? check_range(what, src, spitch * (height - 1) + width,
                                    kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice,
                                    "source")
                      : cudaErrorInvalidValue)
               : cudaErrorInvalidValue;
}
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
    cudaError_t e = check_sync_allowed();
    if (e == cudaSuccess) e = check_2d("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind);
    if (e != cudaSuccess) return set_error(e);
    CUstream_st *l = legacy_stream(t_device);
    drain(l, enqueue(l, [=] { copy2d(dst, dpitch, src, spitch, width, height); }, 0));
    return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
    cudaError_t e = check_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind);
    if (e != cudaSuccess) return set_error(e);
    if (capture_append(stream, [=] { copy2d(dst, dpitch, src, spitch, width, height); }, &e))
        return set_error(e);
    // Synchronous with respect to its stream (a schedule the GPU may take).
    CUstream_st *s = stream_of(stream);
    uint64_t seq = enqueue(s, [=] { copy2d(dst, dpitch, src, spitch, width, height); }, 0);
    drain(s, seq);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    cudaError_t e = check_sync_allowed();
    if (e == cudaSuccess) e = check_range("cudaMemset", ptr, bytes, true, "destination");
    if (e != cudaSuccess) return set_error(e);
    // Asynchronous with respect to the host, on the legacy stream (CUDA's rule for device memory).
    enqueue(legacy_stream(t_device), [=] {
        if (g_cost_on) cost_copy("cudaMemset", nullptr, bytes);
        if (bytes) memset(ptr, value, bytes);
    }, 0);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
    cudaError_t e = check_range("cudaMemsetAsync", ptr, bytes, true, "destination");
    if (e != cudaSuccess) return set_error(e);
    auto run = [=] {
        if (g_cost_on) cost_copy("cudaMemsetAsync", nullptr, bytes);
        if (bytes) memset(ptr, value, bytes);
    };
    if (capture_append(stream, run, &e)) return set_error(e);
    enqueue(stream_of(stream), run, 0);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Devices: 1 unless CTRAIN_EMU_DEVICES says more (data-parallel tests: one rank per device), each
// described by kernels/emu/device.cpp (an H100 unless CTRAIN_EMU_DEVICE names others). They share the host's memory, so allocations, streams and events record
// their device and launches check them (check_kernel_args, launch); the current device is per host
// thread, as in CUDA.
static int device_count() {
    const char *v = getenv("CTRAIN_EMU_DEVICES");
    int n = v && *v ? atoi(v) : 1;
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return set_error(cudaErrorInvalidValue);
    *count = device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    if (!device) return set_error(cudaErrorInvalidValue);
    *device = t_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
    if (!p) return set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
    const DeviceDesc &d = device_desc(device);  // kernels/emu/device.cpp
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", d.name);
    size_t free_b, total_b;
    cudaMemGetInfo(&free_b, &total_b);
    p->totalGlobalMem = total_b;
    p->sharedMemPerBlock = kDefaultDynSmem;
    p->regsPerBlock = d.regs_per_block;
    p->warpSize = 32;
    p->memPitch = (size_t)1 << 31;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->clockRate = d.clock_khz;
    p->totalConstMem = 65536;
    p->major = d.major;
    p->minor = d.minor;
    p->multiProcessorCount = d.sms;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->asyncEngineCount = 2;
    p->unifiedAddressing = 1;
    p->memoryClockRate = d.mem_clock_khz;
    p->memoryBusWidth = d.bus_bits;
    p->l2CacheSize = (int)d.l2_bytes;
    p->maxThreadsPerMultiProcessor = d.threads_per_sm;
    p->sharedMemPerMultiprocessor = d.smem_per_sm;
    p->regsPerMultiprocessor = d.regs_per_sm;
    p->sharedMemPerBlockOptin = d.smem_optin;
    p->maxBlocksPerMultiProcessor = d.blocks_per_sm;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    if (!value) return set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, device);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    default: return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t e = check_sync_allowed();
    if (e != cudaSuccess) return set_error(cudaErrorStreamCaptureUnsupported);
    drain_device(t_device);
    return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return set_error(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return set_error(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Errors.
cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char *cudaGetErrorName(cudaError_t err) {
    switch (err) {
#define N(x) \
    case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation)
        N(cudaErrorInitializationError) N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidPitchValue) N(cudaErrorInvalidSymbol) N(cudaErrorInvalidDevicePointer)
        N(cudaErrorInvalidMemcpyDirection) N(cudaErrorInvalidResourceHandle) N(cudaErrorInvalidDeviceFunction) N(cudaErrorIllegalState) N(cudaErrorNoDevice)
        N(cudaErrorInvalidDevice) N(cudaErrorHostMemoryAlreadyRegistered)
        N(cudaErrorHostMemoryNotRegistered) N(cudaErrorNotReady) N(cudaErrorIllegalAddress)
        N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchTimeout) N(cudaErrorAssert)
        N(cudaErrorLaunchFailure) N(cudaErrorNotSupported) N(cudaErrorStreamCaptureUnsupported)
        N(cudaErrorStreamCaptureInvalidated) N(cudaErrorStreamCaptureMerge)
        N(cudaErrorStreamCaptureUnmatched) N(cudaErrorStreamCaptureUnjoined)
        N(cudaErrorStreamCaptureIsolation) N(cudaErrorStreamCaptureImplicit)
        N(cudaErrorCapturedEvent) N(cudaErrorStreamCaptureWrongThread) N(cudaErrorUnknown)
#undef N
    }
    return "cudaErrorUnrecognized";
}

const char *cudaGetErrorString(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown: return "unknown error";
    }
    return "unrecognized error code";
}

// ---------------------------------------------------------------------------------------------
// Streams and events.
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority) {
    if (!stream) return set_error(cudaErrorInvalidValue);
    CUstream_st *s = new CUstream_st();
    s->device = t_device;
    s->flags = flags;
    s->priority = priority;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    g_streams.insert(s);
    *stream = s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    return cudaStreamCreateWithPriority(stream, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithPriority(stream, 0, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        if (is_default_stream(stream) || !g_streams.count(stream)) return set_error(cudaErrorInvalidResourceHandle);
    }
    drain_all(stream);  // CUDA lets its work finish
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    g_streams.erase(stream);
    delete stream;
    return cudaSuccess;
}
// Runs s's queue to its end (the default stream: after the blocking streams' work, as CUDA's
// legacy stream does).
static void sync_stream(CUstream_st *s) {
    if (s->legacy) drain(s, enqueue(s, [] {}, 0));
    else drain_all(s);
}
// Synchronize and query share the checks before the wait: a capturing stream cannot be waited on
// (the capture is invalidated, as CUDA does); synchronize alone also refuses the legacy stream while
// any capture is active, where CUDA reports an implicit synchronisation with the capturing streams.
static cudaError_t wait_stream(cudaStream_t stream, bool refuse_implicit) {
    CUstream_st *s;
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        s = stream_of(stream);
        if (!s) return set_error(cudaErrorInvalidResourceHandle);
        if (s->capture) {
            capture_invalidate();
            return set_error(cudaErrorStreamCaptureUnsupported);
        }
        if (refuse_implicit && is_default_stream(stream) && !g_active_captures.empty()) {
            capture_invalidate();
            return set_error(cudaErrorStreamCaptureImplicit);
        }
    }
    sync_stream(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return wait_stream(stream, true); }
// The emulator answers a query by finishing the work (a schedule a GPU may take), so a host loop
// polling it cannot spin forever.
cudaError_t cudaStreamQuery(cudaStream_t stream) { return wait_stream(stream, false); }
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data) {
    if (!fn) return set_error(cudaErrorInvalidValue);
    cudaError_t e;
    if (capture_append(stream, [=] { fn(user_data); }, &e)) return set_error(e);
    enqueue(stream_of(stream), [=] {
        if (!g_exiting) fn(user_data);
    }, 1);
    return cudaSuccess;
}
cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device) {
    if (!device) return set_error(cudaErrorInvalidValue);
    CUstream_st *s = stream_of(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    *device = s->device;
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *ptr) {
    if (!attr) return set_error(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    auto it = find_dev(ptr);
    if (it != g_dev.end()) {
        attr->type = cudaMemoryTypeDevice;
        attr->device = it->second.device;
        attr->devicePointer = (void *)ptr;
    } else if (is_pinned(ptr, 1)) {
        attr->type = cudaMemoryTypeHost;
        attr->device = -1;
        attr->hostPointer = (void *)ptr;
    } else {
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = -1;
        attr->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    if (!event) return set_error(cudaErrorInvalidValue);
    CUevent_st *e = new CUevent_st();
    e->device = t_device;
    e->flags = flags;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    g_events.insert(e);
    *event = e;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        if (!g_events.count(event)) return set_error(cudaErrorInvalidResourceHandle);
    }
    if (event->stream) drain(event->stream, event->seq);  // its marker writes the event
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_events.erase(event)) return set_error(cudaErrorInvalidResourceHandle);
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    std::unique_lock<std::recursive_mutex> lk(g_mu);
    CUstream_st *s = stream_of(stream);
    if (!g_events.count(event) || !s) return set_error(cudaErrorInvalidResourceHandle);
    int stream_device = is_default_stream(stream) ? t_device : s->device;
    if (event->device != stream_device) {
        fprintf(stderr, "emu: cudaEventRecord: the event belongs to device %d, the stream to device %d\n",
                event->device, stream_device);
        return set_error(cudaErrorInvalidResourceHandle);
    }
    if (s->capture) {
        event->capture = s->capture;  // a node in the graph: others may wait on it (fork/join)
        event->cap_front = s->cap_front;
        return cudaSuccess;
    }
    event->capture = nullptr;
    event->recorded = true;
    lk.unlock();  // an eager schedule runs work in enqueue: never under g_mu
    // The time is taken when the stream reaches the mark.
    uint64_t seq = enqueue(s, [event] {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        if (g_events.count(event)) event->t_ms = now_ms();
    }, 0);
    lk.lock();
    event->seq = seq;
    event->stream = s;
    return cudaSuccess;
}
static cudaError_t event_wait_host(cudaEvent_t event) {
    CUstream_st *s;
    uint64_t seq;
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        if (!g_events.count(event)) return set_error(cudaErrorInvalidResourceHandle);
        if (event->capture) return set_error(cudaErrorCapturedEvent);
        s = event->stream;
        seq = event->seq;
    }
    if (s) drain(s, seq);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return event_wait_host(event); }
cudaError_t cudaEventQuery(cudaEvent_t event) { return event_wait_host(event); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_events.count(start) || !g_events.count(end)) return set_error(cudaErrorInvalidResourceHandle);
    if ((start->flags | end->flags) & cudaEventDisableTiming) return set_error(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->t_ms - start->t_ms);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    std::unique_lock<std::recursive_mutex> lk(g_mu);
    CUstream_st *s = stream_of(stream);
    if (!s || !g_events.count(event)) return set_error(cudaErrorInvalidResourceHandle);
    if (event->capture && g_active_captures.count(event->capture)) {
        if (is_default_stream(stream)) {
            capture_invalidate();
            return set_error(cudaErrorStreamCaptureImplicit);
        }
        if (s->capture && s->capture != event->capture) {
            capture_invalidate();
            return set_error(cudaErrorStreamCaptureMerge);
        }
        if (!s->capture) {  // fork: this stream now records into the same graph
            s->capture = event->capture;
            s->mode = cudaStreamCaptureModeGlobal;
            s->cap_front.clear();
        }
        // The wait makes no node (as in CUDA): the stream's next node also follows the event's.
        for (int n : event->cap_front)
            if (std::find(s->cap_front.begin(), s->cap_front.end(), n) == s->cap_front.end()) s->cap_front.push_back(n);
        return cudaSuccess;
    }
    if (s->capture) {
        // A graph cannot depend on work outside it: replayed, the wait would mean nothing.
        fprintf(stderr, "emu: cudaStreamWaitEvent: a capturing stream waits on an event recorded outside the "
                        "capture; record the event inside the capture, or wait before beginning it\n");
        capture_invalidate();
        return set_error(cudaErrorStreamCaptureIsolation);
    }
    if (!event->stream || event->stream == s) return cudaSuccess;  // nothing recorded, or in order already
    CUstream_st *es = event->stream;
    uint64_t seq = event->seq;
    lk.unlock();
    enqueue(s, [es, seq] { drain(es, seq); }, 0);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Graphs.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (is_default_stream(stream)) return set_error(cudaErrorStreamCaptureUnsupported);
    CUstream_st *s = stream_of(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (s->capture) return set_error(cudaErrorStreamCaptureUnsupported);
    CUgraph_st *g = new CUgraph_st();
    g->origin = s;
    g->mode = mode;
    g->owner = std::this_thread::get_id();
    g_graphs.insert(g);
    g_active_captures.insert(g);
    s->capture = g;
    s->mode = mode;
    s->cap_front.clear();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    if (!graph) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    CUstream_st *s = stream_of(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (!s->capture) return set_error(cudaErrorIllegalState);
    CUgraph_st *g = s->capture;
    if (g->origin != s) {
        capture_invalidate();
        return set_error(cudaErrorStreamCaptureUnmatched);
    }
    // Every stream forked into the capture must have been joined back: its last node must come
    // before the origin's last (CUDA: cudaErrorStreamCaptureUnjoined).
    std::vector<char> before(g->nodes.size(), 0);
    std::vector<int> stack;
    stack = s->cap_front;
    while (!stack.empty()) {
        int n = stack.back();
        stack.pop_back();
        if (before[n]) continue;
        before[n] = 1;
        for (int d : g->deps[n]) stack.push_back(d);
    }
    bool unjoined = false;
    for (cudaStream_t o : g_streams)
        if (o->capture == g) {
            for (int n : o->cap_front)
                if (o != s && !before[n]) unjoined = true;
            o->capture = nullptr;
        }
    if (unjoined) {
        fprintf(stderr, "emu: cudaStreamEndCapture: a stream forked into the capture (by waiting on an event of "
                        "it) was not joined back (the capturing stream never waited on an event recorded after "
                        "its last work)\n");
        g->invalidated = true;
    }
    for (cudaEvent_t e : g_events)
        if (e->capture == g) e->capture = nullptr;
    s->capture = nullptr;
    g_active_captures.erase(g);
    if (g->invalidated) {
        g_graphs.erase(g);
        delete g;
        *graph = nullptr;
        return set_error(unjoined ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status) {
    if (!status) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    CUstream_st *s = stream_of(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (!s->capture) *status = cudaStreamCaptureStatusNone;
    else if (s->capture->invalidated) *status = cudaStreamCaptureStatusInvalidated;
    else *status = cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    if (!exec) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_graphs.count(graph)) return set_error(cudaErrorInvalidResourceHandle);
    CUgraphExec_st *x = new CUgraphExec_st();
    x->nodes = graph->nodes;
    x->deps = graph->deps;
    g_execs.insert(x);
    *exec = x;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                          unsigned long long flags) {
    return cudaGraphInstantiate(exec, graph, flags);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    std::vector<std::function<void()>> nodes;
    std::vector<std::vector<int>> deps;
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        if (!g_execs.count(exec)) return set_error(cudaErrorInvalidResourceHandle);
        nodes = exec->nodes;
        deps = exec->deps;
    }
    cudaError_t e;
    // A graph is a dependency graph, not a list: each replay runs its nodes in a seeded order
    // that respects only the captured dependencies (among the ready nodes, a drawn one next).
    auto all = [nodes, deps] {
        size_t n = nodes.size();
        std::vector<int> waiting(n);
        std::vector<std::vector<int>> after(n);
        for (size_t i = 0; i < n; i++) {
            waiting[i] = (int)deps[i].size();
            for (int d : deps[i]) after[d].push_back((int)i);
        }
        std::vector<int> ready;
        for (size_t i = 0; i < n; i++)
            if (!waiting[i]) ready.push_back((int)i);
        while (!ready.empty()) {
            size_t k;
            {
                std::lock_guard<std::recursive_mutex> lk(g_mu);
                k = seeded(ready.size());
            }
            int i = ready[k];
            ready.erase(ready.begin() + k);
            nodes[i]();
            for (int j : after[i])
                if (--waiting[j] == 0) ready.push_back(j);
        }
    };
    if (capture_append(stream, all, &e)) return set_error(e);
    enqueue(stream_of(stream), all, 2);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_execs.erase(exec)) return set_error(cudaErrorInvalidResourceHandle);
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_active_captures.count(graph) || !g_graphs.erase(graph)) return set_error(cudaErrorInvalidResourceHandle);
    delete graph;
    return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count) {
    if (!count) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_graphs.count(graph)) return set_error(cudaErrorInvalidResourceHandle);
    if (!nodes) {
        *count = graph->nodes.size();
        return cudaSuccess;
    }
    size_t n = std::min(*count, graph->nodes.size());
    for (size_t i = 0; i < n; i++) nodes[i] = (cudaGraphNode_t)(uintptr_t)(i + 1);
    *count = n;
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Functions and launches.
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    if (!func) return set_error(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        // Beyond the device's opt-in limit CUDA answers cudaErrorInvalidValue: an sm_90 kernel
        // configuration asked of an A100 (163 KiB) or an L4 (99 KiB) fails here as on silicon.
        const DeviceDesc &d = device_desc(t_device);
        if (value < 0 || (size_t)value > d.smem_optin) {
            if (value > 0 && getenv("CTRAIN_EMU_VERBOSE"))
                fprintf(stderr, "emu: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d) on device %d (%s): above its "
                        "opt-in limit of %zu bytes\n", value, t_device, d.key, d.smem_optin);
            return set_error(cudaErrorInvalidValue);
        }
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        g_func_smem[{t_device, func}] = (size_t)value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
        if (value < -1 || value > 100) return set_error(cudaErrorInvalidValue);
        return cudaSuccess;
    }
    return set_error(cudaErrorInvalidValue);
}

}  // extern "C"

namespace emu {

bool multi_device() { return device_count() > 1; }

void check_kernel_args(const char *name, const KernelArgWord *words, size_t n) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    for (size_t i = 0; i < n; i++) {
        auto it = find_dev((const void *)words[i].value);
        if (it == g_dev.end() || it->second.device == t_device) continue;
        fprintf(stderr,
                "emu: kernel %s launched on device %d: argument %d holds %p, inside device %d's "
                "allocation of %zu bytes at %p; on a GPU that is an illegal address (no peer "
                "access is enabled); aborting\n",
                name, t_device, words[i].arg, (void *)words[i].value, it->second.device,
                it->second.bytes, (void *)it->first);
        abort();
    }
}

void launch(const char *name, const void *func, dim3 grid, dim3 block, size_t smem,
            cudaStream_t stream, std::function<void()> body) {
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    cudaError_t err = cudaSuccess;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535) {
        err = cudaErrorInvalidConfiguration;
    } else if (smem > func_max_dyn_smem(func)) {
        err = cudaErrorInvalidValue;
    }
    if (err != cudaSuccess) {
        if (getenv("CTRAIN_EMU_VERBOSE"))
            fprintf(stderr, "emu: launch of %s grid (%u,%u,%u) block (%u,%u,%u) smem %zu: %s\n",
                    name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem,
                    cudaGetErrorString(err));
        if (any_capture_active()) {
            std::lock_guard<std::recursive_mutex> lk(g_mu);
            CUstream_st *s = stream_of(stream);
            if (s && s->capture) s->capture->invalidated = true;
        }
        set_error(err);
        return;
    }
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        CUstream_st *s = stream_of(stream);
        if (s && !is_default_stream(stream) && s->device != t_device) {
            // CUDA refuses a launch into another device's stream.
            fprintf(stderr, "emu: launch of %s on device %d into a stream of device %d\n", name,
                    t_device, s->device);
            if (s->capture) s->capture->invalidated = true;
            set_error(cudaErrorInvalidResourceHandle);
            return;
        }
    }
    int dev = t_device;  // the device it was issued on, whichever thread runs it
    auto run = [=] {
        // Under the launch that runs, not the one captured: a graph replay counts again.
        if (g_cost_on) cost_launch_begin(name, func, grid, block, smem);
        run_launch(name, grid, block, smem, body, dev);
        if (g_cost_on) cost_launch_end();
    };
    if (capture_append(stream, run, &err)) {
        set_error(err);
        return;
    }
    enqueue(stream_of(stream), run, 2);
}

}  // namespace emu
