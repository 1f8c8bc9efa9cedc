// The emulator's execution engine: every CUDA thread of a block is a fiber (its own stack and
// registers) and the fibers are spread over a persistent pool of host threads that run at the same
// time; the block barrier (__syncthreads), warp collectives (shuffles, votes, __syncwarp, ldmatrix,
// mma), the per-thread cp.async queue, and kernel launch.
//
// Why fibers over host threads rather than one host thread per CUDA thread: a barrier of N host
// threads costs N kernel context switches (about 1 ms for 256 threads on a loaded 2-core machine),
// a fiber switch costs tens of nanoseconds. The property that matters for testing is kept: the
// CUDA threads of a block really interleave. Fiber i runs on host thread i % H (H =
// CTRAIN_EMU_HOST_THREADS, default max(2, cores)), so lanes of one warp run truly in parallel on
// different host threads, and on one host thread fibers run in an order unrelated to program order
// (host thread 0 ascending, 1 descending, ...): a thread that reads shared memory another writes
// before the barrier sees stale data. CTRAIN_EMU_HOST_THREADS=1024 gives one host thread per CUDA
// thread. Jitter (CTRAIN_EMU_JITTER=n) adds random fiber order, yields and block order.
//
// Fibers never move between host threads (so the compiler may keep addresses of thread-local
// variables across calls), and switch only inside this file: at barriers, warp operations, block
// start and end. On a switch the host thread's threadIdx/blockIdx become the fiber's.
//
// A block that cannot make progress (e.g. some threads in __syncthreads, others in a shuffle that
// waits for them) is reported after CTRAIN_EMU_DEADLOCK_S seconds (default 60) with what every
// waiting thread waits in, and the process aborts instead of hanging the test suite.
#include <cerrno>
#include <climits>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include "kernels/emu/internal.h"

__thread uint3 threadIdx;
__thread uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

// ---------------------------------------------------------------------------------------------
// Context switch (x86-64 System V): saves the callee-saved registers, the SSE control/status word
// and the x87 control word on the current stack, stores the stack pointer to *save, and resumes
// the context whose stack pointer is `to`.
extern "C" void emu_ctx_switch(void **save, void *to);
extern "C" void emu_ctx_entry();
asm(R"(
    .text
    .globl emu_ctx_switch
    .type emu_ctx_switch,@function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch,.-emu_ctx_switch

    .globl emu_ctx_entry
    .type emu_ctx_entry,@function
emu_ctx_entry:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size emu_ctx_entry,.-emu_ctx_entry
)");

namespace emu {

// ---------------------------------------------------------------------------------------------
// Futex helpers (host threads sleeping when they have no runnable fiber).
static long futex_wait(std::atomic<uint32_t> *w, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, reinterpret_cast<uint32_t *>(w), FUTEX_WAIT_PRIVATE, val, ts,
                   nullptr, 0);
}
static void futex_wake(std::atomic<uint32_t> *w, int n) {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(w), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    return atoi(s);
}

static int g_deadlock_s = 60;
static int g_host_threads = 2;
static std::atomic<int> g_host_override{0};  // set_host_threads
void set_host_threads(int n) { g_host_override.store(n < 0 ? 0 : n); }
static int g_spread_by_warp = 0;
static int g_spin = 50;
static int g_yield = 20;
static std::atomic<int> g_jitter{-1};

void set_jitter(int level) { g_jitter.store(level); }
int get_jitter() {
    int j = g_jitter.load();
    if (j < 0) {
        j = env_int("CTRAIN_EMU_JITTER", 0);
        g_jitter.store(j);
    }
    return j;
}

static std::atomic<unsigned long long> s_launches, s_blocks, s_block_barriers, s_warp_ops;
Stats stats() {
    return Stats{s_launches.load(), s_blocks.load(), s_block_barriers.load(), s_warp_ops.load()};
}

// ---------------------------------------------------------------------------------------------
// Fibers and host threads.
struct PendingCopy {
    void *dst;
    const void *src;
    int bytes, src_bytes;
};

struct HostThread;
enum { F_RUNNING = 0, F_PARKED = 1, F_NOTIFIED = 2 };

struct Fiber {
    void *sp = nullptr;
    unsigned char *stack = nullptr;
    size_t stack_bytes = 0;
    unsigned tid = 0, lane = 0, warp = 0;
    HostThread *host = nullptr;
    uint3 tidx{0, 0, 0}, bidx{0, 0, 0};
    std::atomic<int> state{F_RUNNING};
    bool finished = false, yielded = false;
    const char *wait_what = nullptr;
    uint32_t wait_mask = 0;
    std::vector<PendingCopy> copies;
    std::vector<size_t> groups;  // end index (into copies) of each committed group
    uint64_t rng = 0;
    void *slot = nullptr;  // kernels/emu/wgmma.cpp's per-thread state
};

struct HostThread {
    pthread_t th;
    unsigned id = 0;
    std::mutex qm;
    std::deque<Fiber *> ready;  // run queue (order: see pick_next)
    std::atomic<uint32_t> word{0};
    std::atomic<int> sleeping{0};
    void *sched_sp = nullptr;
    std::vector<Fiber *> mine;  // fibers of the current launch
    uint64_t rng = 0;
};

// Set per launch (before the host threads see it) when every fiber of the launch runs on one host
// thread: nothing else then touches the run queue, barriers or warps while the launch runs (the
// launching thread waits, the mbarrier watchdog has its own lock), so their locks are skipped. The
// lifecycle tests run that way (CTRAIN_EMU_HOST_THREADS=1), where the uncontended lock and unlock
// pairs were 20% of the CPU time. Order of execution, and so every result, is unchanged.
static bool g_one_host = false;
struct HostLock {
    std::mutex &m;
    const bool on;
    explicit HostLock(std::mutex &mm) : m(mm), on(!g_one_host) {
        if (on) m.lock();
    }
    ~HostLock() {
        if (on) m.unlock();
    }
    HostLock(const HostLock &) = delete;
    HostLock &operator=(const HostLock &) = delete;
};

static std::vector<HostThread *> g_hosts;
static std::vector<Fiber *> g_fibers;
static __thread Fiber *t_cur;
static __thread HostThread *t_host;

static inline uint64_t xorshift(uint64_t &x) {
    // Scheduling noise only, never results.
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545F4914F6CDD1Dull;
}

static Fiber *cur() {
    Fiber *f = t_cur;
    if (!f) {
        fprintf(stderr, "emu: a device-side function (barrier, warp operation) was called outside "
                        "a kernel launch; aborting\n");
        abort();
    }
    return f;
}

static void enqueue(Fiber *f) {
    HostThread *h = f->host;
    {
        HostLock lk(h->qm);
        h->ready.push_back(f);
    }
    h->word.fetch_add(1, std::memory_order_seq_cst);
    if (h->sleeping.load(std::memory_order_seq_cst)) futex_wake(&h->word, 1);
}

// Makes a parked (or about to park) fiber runnable again. A fiber is enqueued only on a
// transition out of PARKED here, or by its host when it parks while NOTIFIED (see
// run_host_fibers), so it is never in a run queue twice. A wake that finds the fiber running
// leaves NOTIFIED: its next park returns at once and the caller's loop re-checks its condition.
static void unpark(Fiber *f) {
    int s = f->state.load(std::memory_order_acquire);
    for (;;) {
        if (s == F_PARKED) {
            if (f->state.compare_exchange_weak(s, F_RUNNING, std::memory_order_acq_rel)) {
                enqueue(f);
                return;
            }
        } else if (s == F_RUNNING) {
            if (f->state.compare_exchange_weak(s, F_NOTIFIED, std::memory_order_acq_rel)) return;
        } else {
            return;
        }
    }
}

// unpark for many fibers: one lock and at most one wake per host thread.
static void unpark_all(const std::vector<Fiber *> &fs, const Fiber *skip) {
    HostThread *batch_host = nullptr;
    static thread_local std::vector<Fiber *> batch;
    batch.clear();
    auto flush = [&] {
        if (batch.empty()) return;
        {
            HostLock lk(batch_host->qm);
            batch_host->ready.insert(batch_host->ready.end(), batch.begin(), batch.end());
        }
        batch_host->word.fetch_add(1, std::memory_order_seq_cst);
        if (batch_host->sleeping.load(std::memory_order_seq_cst)) futex_wake(&batch_host->word, 1);
        batch.clear();
    };
    for (Fiber *f : fs) {
        if (f == skip) continue;
        int s = f->state.load(std::memory_order_acquire);
        bool enq = false;
        for (;;) {
            if (s == F_PARKED) {
                if (f->state.compare_exchange_weak(s, F_RUNNING, std::memory_order_acq_rel)) {
                    enq = true;
                    break;
                }
            } else if (s == F_RUNNING) {
                if (f->state.compare_exchange_weak(s, F_NOTIFIED, std::memory_order_acq_rel)) break;
            } else {
                break;
            }
        }
        if (!enq) continue;
        if (f->host != batch_host) {
            flush();
            batch_host = f->host;
        }
        batch.push_back(f);
    }
    flush();
}

// Suspends the current fiber until unpark. The caller loops on its own condition.
static void park(const char *what) {
    Fiber *f = cur();
    f->wait_what = what;
    emu_ctx_switch(&f->sp, f->host->sched_sp);
    f->wait_what = nullptr;
}

// Back to the scheduler, runnable again at once (jitter, and letting other fibers run).
static void yield_fiber() {
    Fiber *f = cur();
    f->yielded = true;
    emu_ctx_switch(&f->sp, f->host->sched_sp);
}

static void jitter_point() {
    int j = g_jitter.load(std::memory_order_relaxed);
    if (j <= 0) return;
    Fiber *f = cur();
    uint64_t r = xorshift(f->rng);
    if ((r & 3) == 0) return;
    int n = (int)((r >> 8) % (unsigned)(j + 1));
    for (int i = 0; i < n; i++) yield_fiber();
    if (((r >> 20) & 15) == 0) sched_yield();
}

// ---------------------------------------------------------------------------------------------
// Launch state.
struct LaunchState {
    const std::function<void()> *body;
    const char *name;
    int device;
    unsigned nthreads;
    std::vector<uint32_t> order;  // block execution order (shuffled under jitter)
    dim3 grid, block;
};
static LaunchState g_launch;
static std::mutex g_launch_mutex;  // one launch at a time, from any host thread
// A launch's sequence number times 2048 plus its number of active host threads (at most 1024): a
// host thread must learn both from one read. Reading the count from g_active_hosts after the word
// let a host thread that woke late for a launch that did not need it (fewer CUDA threads than host
// threads, or emu::set_host_threads) see the next launch's count and run that launch's fibers
// before they were set up (emu_model hung so).
static std::atomic<uint32_t> g_launch_word{0};
constexpr uint32_t kLaunchSeq = 2048;
static std::atomic<uint32_t> g_hosts_remaining{0};
static std::atomic<uint32_t> g_done_word{0};
static unsigned g_active_hosts;
static std::atomic<int> g_running{0};  // fibers executing now (a long computation is progress)

static void report_deadlock_and_abort();

// ---------------------------------------------------------------------------------------------
// Counting barrier over the live fibers of the block (also used, over all fibers, at the end of
// each block). gen counts releases; the __syncthreads_count results alternate by gen parity
// (barrier g+2 cannot release before everyone has read g's result).
struct Barrier {
    std::mutex m;
    int live = 0, arrived = 0, count_acc = 0;
    std::atomic<uint32_t> gen{0};
    int res_count[2] = {0, 0}, res_n[2] = {0, 0};
    std::vector<Fiber *> waiters;
};

static Barrier g_bar;  // __syncthreads
static Barrier g_end;  // end of block (every fiber, including those that returned early)

// With b.m held: completes the current barrier; the caller unparks `out` after unlocking.
static void bar_release_locked(Barrier &b, std::vector<Fiber *> &out) {
    uint32_t g = b.gen.load(std::memory_order_relaxed);
    b.res_count[g & 1] = b.count_acc;
    b.res_n[g & 1] = b.arrived;
    b.count_acc = 0;
    b.arrived = 0;
    out.assign(b.waiters.begin(), b.waiters.end());  // keeps both vectors' capacity
    b.waiters.clear();
    if (&b == &g_bar) s_block_barriers.fetch_add(1, std::memory_order_relaxed);
    b.gen.store(g + 1, std::memory_order_release);
}

static int bar_arrive(Barrier &b, int pred, int *n_out, const char *what,
                      void (*on_release)() = nullptr) {
    Fiber *f = cur();
    static thread_local std::vector<Fiber *> wake;
    wake.clear();
    uint32_t g;
    bool released = false;
    {
        HostLock lk(b.m);
        g = b.gen.load(std::memory_order_relaxed);
        b.count_acc += pred != 0;
        if (++b.arrived == b.live) {
            if (on_release) on_release();
            bar_release_locked(b, wake);
            released = true;
        } else {
            b.waiters.push_back(f);
        }
    }
    if (released) {
        unpark_all(wake, nullptr);
    } else {
        while (b.gen.load(std::memory_order_acquire) == g) park(what);
    }
    if (n_out) *n_out = b.res_n[g & 1];
    return b.res_count[g & 1];
}

static void bar_exit(Barrier &b) {
    static thread_local std::vector<Fiber *> wake;
    wake.clear();
    {
        HostLock lk(b.m);
        b.live--;
        if (b.arrived > 0 && b.arrived == b.live) bar_release_locked(b, wake);
    }
    unpark_all(wake, nullptr);
}

void syncthreads() {
    bar_arrive(g_bar, 0, nullptr, "__syncthreads");
    jitter_point();
}

int syncthreads_reduce(int pred, int op) {
    int n = 0;
    int count = bar_arrive(g_bar, pred != 0, &n, "__syncthreads_count/and/or");
    jitter_point();
    if (op == 0) return count;
    if (op == 1) return count == n;
    return count > 0;
}

// ---------------------------------------------------------------------------------------------
// Warps. A collective completes when every live lane of the caller's mask waits in an operation
// with that same mask; the last to arrive (or the last lane to exit) computes all outputs with fn
// and wakes the group. Each lane has its own input and output slot, so a fast lane starting its
// next collective never overwrites data a slow lane still reads.
struct Warp {
    std::mutex m;
    uint32_t live = 0, arrived = 0;
    uint32_t want[32];
    WarpFn fn[32];
    void *ctx[32];
    const char *what[32];
    std::atomic<uint32_t> lane_gen[32];
    WarpPayload in[32], out[32];
};
static std::vector<Warp *> g_warps;

// With w.m held. Appends the released lanes' fibers to `wake`.
static void warp_try_release(Warp &w, unsigned warp_index, uint32_t mask, std::vector<Fiber *> &wake) {
    uint32_t group = mask & w.live;
    if (group == 0 || (w.arrived & group) != group) return;
    // After divergence some lanes of the group may still wait in an earlier operation of their
    // own (e.g. a half-warp __syncwarp) that completes first: only equal masks complete together.
    for (uint32_t o = group; o; o &= o - 1)
        if (w.want[__builtin_ctz(o)] != mask) return;
    int first = __builtin_ctz(group);
    w.fn[first](w.in, w.out, group, w.ctx[first]);
    w.arrived &= ~group;
    for (uint32_t o = group; o; o &= o - 1) {
        int l = __builtin_ctz(o);
        w.lane_gen[l].fetch_add(1, std::memory_order_release);
        wake.push_back(g_fibers[warp_index * 32 + l]);
    }
    s_warp_ops.fetch_add(1, std::memory_order_relaxed);
}

void warp_collective(const char *what, uint32_t mask, const WarpPayload &in, WarpPayload &out,
                     WarpFn fn, void *ctx) {
    Fiber *f = cur();
    unsigned lane = f->lane;
    uint32_t bit = 1u << lane;
    if (!(mask & bit)) {
        fprintf(stderr,
                "emu: %s in block (%u,%u,%u) thread (%u,%u,%u): mask 0x%08x does not include the "
                "calling lane %u; aborting\n",
                what, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z,
                mask, lane);
        abort();
    }
    Warp &w = *g_warps[f->warp];
    uint32_t my;
    static thread_local std::vector<Fiber *> wake;
    wake.clear();
    {
        HostLock lk(w.m);
        w.in[lane] = in;
        w.want[lane] = mask;
        w.fn[lane] = fn;
        w.ctx[lane] = ctx;
        w.what[lane] = what;
        my = w.lane_gen[lane].load(std::memory_order_relaxed);
        w.arrived |= bit;
        warp_try_release(w, f->warp, mask, wake);
    }
    unpark_all(wake, f);
    f->wait_mask = mask;
    while (w.lane_gen[lane].load(std::memory_order_acquire) == my) park(what);
    out = w.out[lane];
}

static void warp_exit(Fiber *f) {
    Warp &w = *g_warps[f->warp];
    static thread_local std::vector<Fiber *> wake;
    wake.clear();
    {
        HostLock lk(w.m);
        w.live &= ~(1u << f->lane);
        // Lanes waiting for this one may now be complete.
        uint32_t pending = w.arrived;
        while (pending) {
            uint32_t m = w.want[__builtin_ctz(pending)];
            pending &= ~m;
            warp_try_release(w, f->warp, m, wake);
        }
    }
    unpark_all(wake, nullptr);
}

static void nop_fn(const WarpPayload *, WarpPayload *, uint32_t, void *) {}
void warp_sync(uint32_t mask) {
    WarpPayload in{}, out{};
    warp_collective("__syncwarp", mask, in, out, nop_fn, nullptr);
}

unsigned lane_id() { return cur()->lane; }

void *fiber_current() { return cur(); }
void fiber_park(const char *what) { park(what); }
void fiber_unpark(void *fiber) { unpark(static_cast<Fiber *>(fiber)); }
void *&fiber_slot() { return cur()->slot; }
unsigned fiber_tid() { return cur()->tid; }

static std::atomic<bool> s_warned_shfl{false};
void shfl_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *) {
    for (uint32_t g = group; g; g &= g - 1) {
        int l = __builtin_ctz(g);
        unsigned src = (unsigned)in[l].u[1];
        if (src < 32 && (group >> src & 1)) {
            out[l].u[0] = in[src].u[0];
        } else {
            // Reading a lane outside the participating set is undefined on a GPU: poison it
            // (all ones: NaN as float, -1 as int) so the result cannot look right.
            out[l].u[0] = ~0ull;
            if (!s_warned_shfl.exchange(true))
                fprintf(stderr,
                        "emu: warning: a shuffle in block (%u,%u,%u) reads lane %u, which is not "
                        "among the participating lanes 0x%08x: the value is undefined on a GPU "
                        "(poisoned here)\n",
                        blockIdx.x, blockIdx.y, blockIdx.z, src, group);
        }
    }
}

void vote_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *) {
    uint32_t ballot = 0;
    for (uint32_t g = group; g; g &= g - 1) {
        int l = __builtin_ctz(g);
        if (in[l].u[0]) ballot |= 1u << l;
    }
    for (uint32_t g = group; g; g &= g - 1) {
        int l = __builtin_ctz(g);
        out[l].u[0] = ballot;
        out[l].u[1] = ballot == group;
    }
}

void match_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *) {
    for (uint32_t g = group; g; g &= g - 1) {
        int l = __builtin_ctz(g);
        uint32_t m = 0;
        for (uint32_t h = group; h; h &= h - 1) {
            int k = __builtin_ctz(h);
            if (in[k].u[0] == in[l].u[0]) m |= 1u << k;
        }
        out[l].u[0] = m;
    }
}

unsigned activemask_impl() {
    Fiber *f = cur();
    Warp &w = *g_warps[f->warp];
    HostLock lk(w.m);
    return w.live;
}

void trap(const char *file, int line, const char *expr) {
    fprintf(stderr, "emu: %s:%d: block (%u,%u,%u) thread (%u,%u,%u): assertion `%s' failed\n", file,
            line, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, expr);
    abort();
}

// ---------------------------------------------------------------------------------------------
// cp.async: copies wait in a per-thread queue until a wait_group retires their group, so a kernel
// that reads the destination without waiting sees stale (poisoned) shared memory, as it may on
// the hardware.
static void do_copy(const PendingCopy &c) {
    if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
    if (c.bytes > c.src_bytes) memset((char *)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
    proxy_generic_write(c.dst, (size_t)c.bytes);  // cp.async writes through the generic proxy
}

// The device allocations at the start of the running launch (address order), for cp.async's
// source check: a kernel's legitimate sources were allocated before it was launched.
static std::vector<std::pair<uintptr_t, size_t>> g_launch_allocs;

static bool in_device_alloc(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = std::upper_bound(g_launch_allocs.begin(), g_launch_allocs.end(), std::make_pair(a, SIZE_MAX));
    if (it == g_launch_allocs.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second && (n > 0 || a < it->first + it->second);
}

static void cp_async_fail(const char *why, void *dst, const void *src, int bytes, int src_bytes) {
    fprintf(stderr,
            "emu: kernel %s: cp.async of %d bytes (src-size %d) in block (%u,%u,%u) thread (%u,%u,%u): %p <- %p: %s\n",
            launch_name(), bytes, src_bytes, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
            threadIdx.z, dst, src, why);
    abort();
}

void cp_async(void *dst, const void *src, int bytes, int src_bytes) {
    Fiber *f = cur();
    if (src_bytes < 0 || src_bytes > bytes) src_bytes = bytes;
    // The ISA makes no exception for src-size 0 (zero-fill, nothing read): both addresses aligned
    // to the copy size. The bytes it does read must lie in a device allocation of the launch.
    // (A zero-filled chunk's address outside every allocation is allowed: engine v2 computes
    // them without a select per chunk, kernels/conv_tc2.cu says what that would cost;
    // CTRAIN_EMU_CP_ASYNC_STRICT=1 refuses them too.)
    if ((uintptr_t)dst % (unsigned)bytes || (uintptr_t)src % (unsigned)bytes)
        cp_async_fail(src_bytes ? "addresses must be aligned to the copy size"
                                : "addresses must be aligned to the copy size, also with src-size 0 "
                                  "(pass an aligned address, e.g. the operand's base)",
                      dst, src, bytes, src_bytes);
    static int strict = env_int("CTRAIN_EMU_CP_ASYNC_STRICT", 0);
    if ((src_bytes > 0 || strict) && !in_device_alloc(src, (size_t)src_bytes))
        cp_async_fail(src_bytes ? "the source range is not inside a device allocation (out of bounds)"
                                : "the source (src-size 0: nothing read) is not inside any device allocation "
                                  "(CTRAIN_EMU_CP_ASYNC_STRICT=1)",
                      dst, src, bytes, src_bytes);
    // Counted at issue: src_bytes is what the instruction asks of global memory (the zero-filled
    // rest is not read).
    if (g_cost_on && src_bytes > 0) cost_access(src, (size_t)src_bytes, false);
    f->copies.push_back(PendingCopy{dst, src, bytes, src_bytes});
}
void cp_async_commit() {
    Fiber *f = cur();
    f->groups.push_back(f->copies.size());
}
void cp_async_wait(int keep) {
    Fiber *f = cur();
    if ((int)f->groups.size() <= keep) return;
    size_t ngroups_done = f->groups.size() - (size_t)keep;
    size_t upto = f->groups[ngroups_done - 1];
    for (size_t i = 0; i < upto; i++) do_copy(f->copies[i]);
    f->copies.erase(f->copies.begin(), f->copies.begin() + (long)upto);
    f->groups.erase(f->groups.begin(), f->groups.begin() + (long)ngroups_done);
    for (auto &e : f->groups) e -= upto;
}
static void cp_async_flush(Fiber *f) {
    for (auto &c : f->copies) do_copy(c);
    f->copies.clear();
    f->groups.clear();
}

// ---------------------------------------------------------------------------------------------
// Dynamic shared memory: one buffer (blocks run one at a time), poisoned with 0xff bytes (NaN as
// float or bf16, -1 as int) before each block unless CTRAIN_EMU_POISON=0. It starts g_dyn_off
// bytes into a 1 KiB-aligned window (wgmma's swizzles repeat at 1 KiB of the shared-window
// address): CUDA promises 16-byte alignment only (static shared memory and the reserved 1 KiB of
// sm_90 come first), so the offset is a multiple of 16 drawn per launch from
// CTRAIN_EMU_SMEM_SEED (default 1), or fixed by CTRAIN_EMU_SMEM_OFFSET=N (0: always aligned).
alignas(1024) static unsigned char g_smem_window[1024 + kMaxDynSmemOptin];
static size_t g_dyn_off;
static size_t g_dyn_bytes;
static int g_poison = 1;
static int g_smem_fixed = -1;
static uint64_t g_smem_seed = 1;
void *dyn_smem() { return g_smem_window + g_dyn_off; }
size_t dyn_smem_bytes() { return g_dyn_bytes; }
unsigned char *smem_window() { return g_smem_window; }
size_t dyn_smem_window_offset() { return g_dyn_off; }
unsigned block_threads() { return g_launch.nthreads; }
const char *launch_name() { return g_launch.name ? g_launch.name : "?"; }
int launch_device() { return g_launch.device; }

// ---------------------------------------------------------------------------------------------
// Blocks.
static void reset_block_state() {
    unsigned n = g_launch.nthreads;
    g_bar.live = (int)n;
    g_bar.arrived = 0;
    g_bar.count_acc = 0;
    g_end.live = (int)n;
    unsigned nwarps = (n + 31) / 32;
    for (unsigned i = 0; i < nwarps; i++) {
        Warp &w = *g_warps[i];
        unsigned lanes = std::min(32u, n - i * 32);
        w.live = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
        w.arrived = 0;
    }
    if (g_poison && g_dyn_bytes) memset(g_smem_window + g_dyn_off, 0xff, g_dyn_bytes);
    mbar_block_reset();
}

static void fiber_main(Fiber *f) {
    const LaunchState &L = g_launch;
    for (uint32_t b : L.order) {
        f->bidx.x = b % L.grid.x;
        f->bidx.y = (b / L.grid.x) % L.grid.y;
        f->bidx.z = b / (L.grid.x * L.grid.y);
        blockIdx = f->bidx;
        if (f->tid == 0) s_blocks.fetch_add(1, std::memory_order_relaxed);
        jitter_point();
        (*L.body)();
        cp_async_flush(f);
        wgmma_thread_end();
        warp_exit(f);
        bar_exit(g_bar);
        // Every fiber, exited or not, meets here; the last resets the block state for the next.
        bar_arrive(g_end, 0, nullptr, "the end of the block (emulator)", reset_block_state);
    }
    f->finished = true;
    emu_ctx_switch(&f->sp, f->host->sched_sp);
    abort();  // a finished fiber is never resumed
}

static void fiber_entry(void *arg) { fiber_main(static_cast<Fiber *>(arg)); }

static void fiber_prepare(Fiber *f) {
    if (!f->stack) {
        // Kernels keep their registers' worth of locals on the stack; printf needs a few KiB.
        // A guard page below turns an overflow into a crash instead of silent corruption.
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        f->stack_bytes = 256 * 1024;
        void *p = mmap(nullptr, f->stack_bytes + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "emu: cannot map a fiber stack: %s\n", strerror(errno));
            abort();
        }
        mprotect(p, page, PROT_NONE);
        f->stack = (unsigned char *)p + page;
    }
    // Initial frame, popped by emu_ctx_switch: control words, r15, r14, r13 (entry function),
    // r12 (argument), rbx, rbp, return address (emu_ctx_entry). The stack is 16-byte aligned
    // after the return, as the ABI wants before the call in emu_ctx_entry.
    uintptr_t top = ((uintptr_t)(f->stack + f->stack_bytes)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 64);
    uint32_t ctl[2] = {0x1F80u, 0x037Fu};  // default MXCSR, x87 control word
    memcpy(&sp[0], ctl, 8);
    sp[1] = 0;                                  // r15
    sp[2] = 0;                                  // r14
    sp[3] = (uint64_t)(uintptr_t)&fiber_entry;  // r13
    sp[4] = (uint64_t)(uintptr_t)f;             // r12
    sp[5] = 0;                                  // rbx
    sp[6] = 0;                                  // rbp
    sp[7] = (uint64_t)(uintptr_t)&emu_ctx_entry;
    f->sp = sp;
    f->finished = false;
    f->yielded = false;
    f->state.store(F_RUNNING);
    f->copies.clear();
    f->groups.clear();
}

// ---------------------------------------------------------------------------------------------
// Host threads: run their fibers of the current launch until all have finished.
static Fiber *pick_next(HostThread *h) {
    HostLock lk(h->qm);
    if (h->ready.empty()) return nullptr;
    if (g_jitter.load(std::memory_order_relaxed) > 0) {
        size_t i = xorshift(h->rng) % h->ready.size();
        std::swap(h->ready[0], h->ready[i]);
    }
    Fiber *f = h->ready.front();
    h->ready.pop_front();
    return f;
}

static void run_host_fibers(HostThread *h) {
    // Initial order: host thread 0 runs its fibers ascending, 1 descending, and so on, so that
    // program order between threads is not the execution order.
    {
        HostLock lk(h->qm);
        h->ready.clear();
        if (h->id & 1)
            for (size_t i = h->mine.size(); i-- > 0;) h->ready.push_back(h->mine[i]);
        else
            for (Fiber *f : h->mine) h->ready.push_back(f);
    }
    size_t nfinished = 0;
    int idle_s = 0;
    while (nfinished < h->mine.size()) {
        Fiber *f = pick_next(h);
        if (!f) {
            // Another host thread is likely about to release our fibers: a short spin saves a
            // futex sleep and wake-up.
            uint32_t w0 = h->word.load(std::memory_order_acquire);
            int spin = 0;
            while (spin < g_spin && h->word.load(std::memory_order_acquire) == w0) {
                __builtin_ia32_pause();
                spin++;
            }
            if (spin < g_spin) continue;
            // Then give the core away a few times before sleeping: on a machine with more runnable
            // threads than cores the host thread that will release ours is often waiting for this
            // core, and a futex sleep and wake-up per warp collective cost emu_model a third of
            // its CPU time in system calls (sched_yield returns at once when nothing else waits).
            for (int y = 0; y < g_yield && h->word.load(std::memory_order_acquire) == w0; y++) sched_yield();
            if (h->word.load(std::memory_order_acquire) != w0) continue;
            h->sleeping.store(1, std::memory_order_seq_cst);
            uint32_t v = h->word.load(std::memory_order_seq_cst);
            bool empty;
            {
                HostLock lk(h->qm);
                empty = h->ready.empty();
            }
            if (empty) {
                struct timespec ts = {1, 0};
                long r = futex_wait(&h->word, v, &ts);
                if (r != 0 && errno == ETIMEDOUT) {
                    if (g_running.load() > 0) idle_s = 0;
                    else if (++idle_s >= g_deadlock_s) report_deadlock_and_abort();
                } else {
                    idle_s = 0;
                }
            }
            h->sleeping.store(0, std::memory_order_seq_cst);
            continue;
        }
        idle_s = 0;
        t_cur = f;
        threadIdx = f->tidx;
        blockIdx = f->bidx;
        g_running.fetch_add(1, std::memory_order_relaxed);
        emu_ctx_switch(&h->sched_sp, f->sp);
        g_running.fetch_sub(1, std::memory_order_relaxed);
        t_cur = nullptr;
        if (f->finished) {
            nfinished++;
        } else if (f->yielded) {
            f->yielded = false;
            HostLock lk(h->qm);
            h->ready.push_back(f);
        } else {
            int s = f->state.load(std::memory_order_acquire);
            for (;;) {
                if (s == F_NOTIFIED) {
                    // Woken between registering as a waiter and switching out: runnable at once.
                    if (f->state.compare_exchange_weak(s, F_RUNNING, std::memory_order_acq_rel)) {
                        HostLock lk(h->qm);
                        h->ready.push_back(f);
                        break;
                    }
                } else if (f->state.compare_exchange_weak(s, F_PARKED, std::memory_order_acq_rel)) {
                    break;
                }
            }
        }
    }
}

static void *host_main(void *arg) {
    HostThread *h = static_cast<HostThread *>(arg);
    t_host = h;
    h->rng = 0x9E3779B97F4A7C15ull * (h->id + 1) ^ (uint64_t)time(nullptr);
    uint32_t seen = 0;
    for (;;) {
        uint32_t v;
        while ((v = g_launch_word.load(std::memory_order_acquire)) == seen)
            futex_wait(&g_launch_word, v, nullptr);
        seen = v;
        if (h->id >= v % kLaunchSeq) continue;
        run_host_fibers(h);
        if (g_hosts_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            g_done_word.fetch_add(1, std::memory_order_release);
            futex_wake(&g_done_word, 1);
        }
    }
    return nullptr;
}

static void report_deadlock_and_abort() {
    fprintf(stderr,
            "emu: deadlock: no thread of the block has made progress for %d s (are some threads "
            "skipping a __syncthreads or a warp operation, or using different masks?); waiting "
            "threads:\n",
            g_deadlock_s);
    int shown = 0;
    for (unsigned i = 0; i < g_launch.nthreads && i < g_fibers.size(); i++) {
        Fiber *f = g_fibers[i];
        if (f->finished || !f->wait_what) continue;
        if (shown++ < 64)
            fprintf(stderr, "emu:   block (%u,%u,%u) thread (%u,%u,%u) (warp %u lane %u) in %s%s\n",
                    f->bidx.x, f->bidx.y, f->bidx.z, f->tidx.x, f->tidx.y, f->tidx.z, f->warp,
                    f->lane, f->wait_what, "");
    }
    if (shown > 64) fprintf(stderr, "emu:   ... and %d more\n", shown - 64);
    abort();
}

static void grow(unsigned n, unsigned host_threads) {
    while (g_fibers.size() < n) {
        Fiber *f = new Fiber();
        f->tid = (unsigned)g_fibers.size();
        f->lane = f->tid % 32;
        f->warp = f->tid / 32;
        f->rng = 0xD1B54A32D192ED03ull * (f->tid + 1);
        g_fibers.push_back(f);
    }
    while (g_warps.size() < (n + 31) / 32) g_warps.push_back(new Warp());
    unsigned want_hosts = std::min<unsigned>(host_threads, n);
    while (g_hosts.size() < want_hosts) {
        HostThread *h = new HostThread();
        h->id = (unsigned)g_hosts.size();
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, (size_t)256 << 10);
        if (pthread_create(&h->th, &attr, host_main, h) != 0) {
            fprintf(stderr, "emu: cannot create host thread %zu for the CUDA thread pool\n", g_hosts.size());
            abort();
        }
        pthread_attr_destroy(&attr);
        pthread_detach(h->th);
        g_hosts.push_back(h);
    }
}

void run_launch(const char *name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()> &body, int device) {
    std::lock_guard<std::mutex> lk(g_launch_mutex);
    static bool inited = false;
    if (!inited) {
        int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
        g_host_threads = env_int("CTRAIN_EMU_HOST_THREADS", std::max(2, ncpu));
        if (g_host_threads < 1) g_host_threads = 1;
        if (g_host_threads > 1024) g_host_threads = 1024;
        g_deadlock_s = env_int("CTRAIN_EMU_DEADLOCK_S", 60);
        g_spread_by_warp = env_int("CTRAIN_EMU_SPREAD_BY_WARP", 0);
        g_spin = env_int("CTRAIN_EMU_SPIN", 50);
        g_yield = env_int("CTRAIN_EMU_YIELD", 20);
        g_poison = env_int("CTRAIN_EMU_POISON", 1);
        g_smem_fixed = env_int("CTRAIN_EMU_SMEM_OFFSET", -1);
        if (g_smem_fixed >= 0 && (g_smem_fixed % 16 || g_smem_fixed >= 1024)) {
            fprintf(stderr, "emu: CTRAIN_EMU_SMEM_OFFSET=%d: a multiple of 16 below 1024 expected\n", g_smem_fixed);
            exit(2);
        }
        g_smem_seed = (uint64_t)env_int("CTRAIN_EMU_SMEM_SEED", 1);
        get_jitter();
        inited = true;
    }
    unsigned n = block.x * block.y * block.z;
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    s_launches.fetch_add(1, std::memory_order_relaxed);
    if (nblocks == 0 || n == 0) return;
    int ov = g_host_override.load();
    unsigned host_threads = (unsigned)(ov > 0 && ov < g_host_threads ? ov : g_host_threads);
    grow(n, host_threads);
    blockDim = block;
    gridDim = grid;
    g_launch.body = &body;
    g_launch.nthreads = n;
    g_launch.grid = grid;
    g_launch.block = block;
    g_launch.order.resize(nblocks);
    for (uint64_t i = 0; i < nblocks; i++) g_launch.order[i] = (uint32_t)i;
    if (get_jitter() > 0) {
        uint64_t r = 0x243F6A8885A308D3ull ^ (uint64_t)time(nullptr) ^ s_launches.load();
        for (uint64_t i = nblocks; i > 1; i--) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            std::swap(g_launch.order[i - 1], g_launch.order[(r >> 33) % i]);
        }
    }
    g_dyn_bytes = smem;
    if (g_smem_fixed >= 0) {
        g_dyn_off = (size_t)g_smem_fixed;
    } else {  // splitmix64 of (seed, launch number): one in 64 launches is 1 KiB-aligned
        uint64_t z = g_smem_seed * 0x9E3779B97F4A7C15ull + s_launches.load(std::memory_order_relaxed);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        g_dyn_off = 16 * ((z ^ (z >> 31)) % 64);
    }
    g_launch.name = name;
    g_launch.device = device;
    dev_alloc_ranges(g_launch_allocs);
    unsigned unit = g_spread_by_warp ? 32 : 1;
    g_active_hosts = std::min<unsigned>(std::min<unsigned>((unsigned)g_hosts.size(), host_threads), (n + unit - 1) / unit);
    g_one_host = g_active_hosts == 1;
    for (unsigned i = 0; i < g_active_hosts; i++) g_hosts[i]->mine.clear();
    for (unsigned t = 0; t < n; t++) {
        Fiber *f = g_fibers[t];
        f->host = g_hosts[(t / unit) % g_active_hosts];
        f->tidx.x = t % block.x;
        f->tidx.y = (t / block.x) % block.y;
        f->tidx.z = t / (block.x * block.y);
        f->bidx = uint3{0, 0, 0};
        fiber_prepare(f);
        f->host->mine.push_back(f);
    }
    reset_block_state();
    g_hosts_remaining.store(g_active_hosts, std::memory_order_release);
    uint32_t done = g_done_word.load(std::memory_order_acquire);
    uint32_t w = g_launch_word.load(std::memory_order_relaxed);
    g_launch_word.store((w / kLaunchSeq + 1) * kLaunchSeq + g_active_hosts, std::memory_order_release);
    futex_wake(&g_launch_word, INT_MAX);
    uint32_t v;
    while ((v = g_done_word.load(std::memory_order_acquire)) == done) futex_wait(&g_done_word, v, nullptr);
    check_redzones(name);
}

}  // namespace emu

unsigned __activemask() { return emu::activemask_impl(); }
