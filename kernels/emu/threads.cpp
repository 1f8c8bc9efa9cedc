// The emulator's execution engine: a persistent pool of host threads (one per CUDA thread of a
// block), the block barrier (__syncthreads), warp collectives (shuffles, votes, __syncwarp,
// ldmatrix, mma), the per-thread cp.async queue, and kernel launch.
//
// Waiting: a thread spins briefly (only when the block has no more threads than the machine has
// cores, otherwise spinning steals the core the thread it waits for needs), then sleeps on a futex
// word that whoever releases it bumps. A wait longer than CTRAIN_EMU_DEADLOCK_S seconds (default
// 120) is reported as a deadlock (e.g. __syncthreads inside a branch not every thread takes) and
// aborts the process instead of hanging the test suite.
#include <cerrno>
#include <climits>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "kernels/emu/internal.h"

__thread uint3 threadIdx;
__thread uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace emu {

// ---------------------------------------------------------------------------------------------
// Futex waiting.
static long futex_wait(std::atomic<uint32_t> *w, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, reinterpret_cast<uint32_t *>(w), FUTEX_WAIT_PRIVATE, val, ts,
                   nullptr, 0);
}
static void futex_wake(std::atomic<uint32_t> *w, int n) {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(w), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}
static inline void cpu_relax() { __builtin_ia32_pause(); }

int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    return atoi(s);
}

static int g_ncpu = 1;
static int g_deadlock_s = 120;
static int g_spin_iters = 0;  // for the current launch
static std::atomic<int> g_jitter{-1};

// Describes where the current thread waits, for the deadlock report.
static __thread const char *t_wait_what;

static void report_warp_state();

static void report_deadlock() {
    fprintf(stderr,
            "emu: deadlock: block (%u,%u,%u) thread (%u,%u,%u) has waited %d s in %s; are some "
            "threads of the block skipping a __syncthreads or a warp operation (different masks, "
            "or a branch)? aborting\n",
            blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z,
            g_deadlock_s, t_wait_what ? t_wait_what : "a barrier");
    report_warp_state();
    abort();
}

// Wait until done() holds; `word` changes (with a futex wake) whenever done() may have become true.
template <typename Done>
static inline void wait_until(std::atomic<uint32_t> &word, Done done, bool deadlock_check) {
    for (int i = 0; i < g_spin_iters; i++) {
        if (done()) return;
        cpu_relax();
    }
    int timeouts = 0;
    for (;;) {
        uint32_t v = word.load(std::memory_order_acquire);
        if (done()) return;
        struct timespec ts = {1, 0};
        long r = futex_wait(&word, v, deadlock_check ? &ts : nullptr);
        if (r != 0 && errno == ETIMEDOUT && deadlock_check && ++timeouts >= g_deadlock_s) {
            if (done()) return;
            report_deadlock();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Per-thread state of the CUDA thread a pool thread currently plays.
static __thread unsigned t_tid, t_lane, t_warp;
static __thread uint64_t t_rng;

static inline uint64_t rng_next() {
    // xorshift64*: jitter only, never results.
    uint64_t x = t_rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t_rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void jitter_point() {
    int j = g_jitter.load(std::memory_order_relaxed);
    if (j <= 0) return;
    uint64_t r = rng_next();
    if ((r & 3) == 0) return;
    int n = (int)((r >> 8) % (unsigned)(2 * j + 1));
    for (int i = 0; i < n; i++) sched_yield();
    if (((r >> 20) & 7) == 0) {
        struct timespec ts = {0, (long)((r >> 24) % 20000)};
        nanosleep(&ts, nullptr);
    }
}

void set_jitter(int level) { g_jitter.store(level); }
int get_jitter() {
    int j = g_jitter.load();
    if (j < 0) {
        j = env_int("CTRAIN_EMU_JITTER", 0);
        g_jitter.store(j);
    }
    return j;
}

// ---------------------------------------------------------------------------------------------
// Statistics.
static std::atomic<unsigned long long> s_launches, s_blocks, s_block_barriers, s_warp_ops;
Stats stats() {
    return Stats{s_launches.load(), s_blocks.load(), s_block_barriers.load(), s_warp_ops.load()};
}

// ---------------------------------------------------------------------------------------------
// Block barrier. state packs (live << 32 | arrived) so that arriving and exiting threads agree on
// exactly one releaser with a single compare-and-swap. gen counts completed barriers; the
// __syncthreads_count accumulators alternate by gen parity (barrier g+1 cannot start before g is
// released, and g+2 not before everyone has read g's result).
struct BlockBarrier {
    std::atomic<uint64_t> state{0};
    std::atomic<uint32_t> gen{0};
    std::atomic<int> acc[2];
    int res_count[2];
    int res_n[2];
};
static BlockBarrier g_bar;

static void bar_release(uint32_t g, int arrived) {
    int p = g & 1;
    g_bar.res_count[p] = g_bar.acc[p].load(std::memory_order_relaxed);
    g_bar.res_n[p] = arrived;
    g_bar.acc[p ^ 1].store(0, std::memory_order_relaxed);
    s_block_barriers.fetch_add(1, std::memory_order_relaxed);
    g_bar.gen.store(g + 1, std::memory_order_release);
    futex_wake(&g_bar.gen, INT_MAX);
}

static int bar_arrive(int pred, int *n_out) {
    uint32_t g = g_bar.gen.load(std::memory_order_acquire);
    int p = g & 1;
    if (pred) g_bar.acc[p].fetch_add(1, std::memory_order_relaxed);
    uint64_t s = g_bar.state.load(std::memory_order_acquire);
    bool releaser;
    uint32_t arrived;
    for (;;) {
        uint32_t live = (uint32_t)(s >> 32);
        arrived = (uint32_t)s + 1;
        releaser = arrived == live;
        uint64_t ns = ((uint64_t)live << 32) | (releaser ? 0u : arrived);
        if (g_bar.state.compare_exchange_weak(s, ns, std::memory_order_acq_rel)) break;
    }
    if (releaser) {
        bar_release(g, (int)arrived);
    } else {
        t_wait_what = "__syncthreads";
        wait_until(g_bar.gen, [&] { return g_bar.gen.load(std::memory_order_acquire) != g; }, true);
    }
    jitter_point();
    if (n_out) *n_out = g_bar.res_n[p];
    return g_bar.res_count[p];
}

static void bar_exit() {
    uint64_t s = g_bar.state.load(std::memory_order_acquire);
    for (;;) {
        uint32_t live = (uint32_t)(s >> 32) - 1;
        uint32_t arrived = (uint32_t)s;
        bool releaser = arrived > 0 && arrived == live;
        uint64_t ns = ((uint64_t)live << 32) | (releaser ? 0u : arrived);
        if (g_bar.state.compare_exchange_weak(s, ns, std::memory_order_acq_rel)) {
            // Nobody can pass the barrier before we release it, so gen is stable here.
            if (releaser) bar_release(g_bar.gen.load(std::memory_order_acquire), (int)arrived);
            return;
        }
    }
}

void syncthreads() { bar_arrive(0, nullptr); }

int syncthreads_reduce(int pred, int op) {
    int n = 0;
    int count = bar_arrive(pred != 0, &n);
    if (op == 0) return count;
    if (op == 1) return count == n;
    return count > 0;
}

// ---------------------------------------------------------------------------------------------
// Warps. A collective completes when every live lane of the caller's mask has arrived; the last
// to arrive (or the last lane to exit) computes all outputs with fn, then bumps the lanes'
// generations. Each lane has its own input and output slot, so a fast lane starting its next
// collective never overwrites data a slow lane still reads.
struct Warp {
    std::mutex m;
    uint32_t live = 0, arrived = 0;
    uint32_t want[32];
    WarpFn fn[32];
    void *ctx[32];
    const char *what[32];
    std::atomic<uint32_t> lane_gen[32];
    std::atomic<uint32_t> seq{0};
    WarpPayload in[32], out[32];
};
static std::vector<Warp *> g_warps;

static void report_warp_state() {
    unsigned wi = t_warp;
    if (wi >= g_warps.size()) return;
    Warp &w = *g_warps[wi];
    // Unlocked read: the block is stuck, this is diagnostics only.
    fprintf(stderr, "emu: warp %u: live lanes 0x%08x, waiting lanes 0x%08x\n", wi, w.live, w.arrived);
    for (uint32_t a = w.arrived; a; a &= a - 1) {
        int l = __builtin_ctz(a);
        fprintf(stderr, "emu:   lane %2d waits in %s with mask 0x%08x\n", l, w.what[l], w.want[l]);
    }
}

static void warp_try_release(Warp &w, uint32_t mask) {
    uint32_t group = mask & w.live;
    if (group == 0 || (w.arrived & group) != group) return;
    // Complete only when every lane of the group waits in an operation with this same mask:
    // after divergence, some of them may still be waiting in an earlier operation of their own
    // (e.g. a half-warp __syncwarp) that completes first. Lanes that never agree deadlock, which
    // the wait's timeout reports with this warp's state.
    for (uint32_t o = group; o; o &= o - 1) {
        int l = __builtin_ctz(o);
        if (w.want[l] != mask) return;
    }
    int first = __builtin_ctz(group);
    w.fn[first](w.in, w.out, group, w.ctx[first]);
    w.arrived &= ~group;
    for (uint32_t g = group; g; g &= g - 1) w.lane_gen[__builtin_ctz(g)].fetch_add(1, std::memory_order_release);
    s_warp_ops.fetch_add(1, std::memory_order_relaxed);
    w.seq.fetch_add(1, std::memory_order_release);
    futex_wake(&w.seq, INT_MAX);
}

void warp_collective(const char *what, uint32_t mask, const WarpPayload &in, WarpPayload &out,
                     WarpFn fn, void *ctx) {
    unsigned lane = t_lane;
    uint32_t bit = 1u << lane;
    if (!(mask & bit)) {
        fprintf(stderr,
                "emu: %s in block (%u,%u,%u) thread (%u,%u,%u): mask 0x%08x does not include the "
                "calling lane %u; aborting\n",
                what, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z,
                mask, lane);
        abort();
    }
    Warp &w = *g_warps[t_warp];
    uint32_t my;
    {
        std::lock_guard<std::mutex> lk(w.m);
        w.in[lane] = in;
        w.want[lane] = mask;
        w.fn[lane] = fn;
        w.ctx[lane] = ctx;
        w.what[lane] = what;
        my = w.lane_gen[lane].load(std::memory_order_relaxed);
        w.arrived |= bit;
        warp_try_release(w, mask);
    }
    t_wait_what = what;
    wait_until(w.seq, [&] { return w.lane_gen[lane].load(std::memory_order_acquire) != my; }, true);
    out = w.out[lane];
}

static void warp_exit() {
    Warp &w = *g_warps[t_warp];
    std::lock_guard<std::mutex> lk(w.m);
    w.live &= ~(1u << t_lane);
    // Lanes waiting for this one may now be complete.
    uint32_t pending = w.arrived;
    while (pending) {
        uint32_t m = w.want[__builtin_ctz(pending)];
        uint32_t grp = m & pending;
        pending &= ~grp;
        if (!grp) break;
        warp_try_release(w, m);
    }
}

static void nop_fn(const WarpPayload *, WarpPayload *, uint32_t, void *) {}
void warp_sync(uint32_t mask) {
    WarpPayload in{}, out{};
    warp_collective("__syncwarp", mask, in, out, nop_fn, nullptr);
}

unsigned lane_id() { return t_lane; }

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

unsigned __activemask_impl() {
    Warp &w = *g_warps[t_warp];
    std::lock_guard<std::mutex> lk(w.m);
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
struct PendingCopy {
    void *dst;
    const void *src;
    int bytes, src_bytes;
};
static __thread std::vector<PendingCopy> *t_copies;
static __thread std::vector<size_t> *t_groups;  // end index (into t_copies) of each committed group

static void do_copy(const PendingCopy &c) {
    if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
    if (c.bytes > c.src_bytes) memset((char *)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
}

void cp_async(void *dst, const void *src, int bytes, int src_bytes) {
    if (!t_copies) {
        t_copies = new std::vector<PendingCopy>();
        t_groups = new std::vector<size_t>();
    }
    if (src_bytes < 0 || src_bytes > bytes) src_bytes = bytes;
    if ((uintptr_t)dst % (unsigned)bytes || (src_bytes > 0 && (uintptr_t)src % (unsigned)bytes)) {
        fprintf(stderr,
                "emu: cp.async of %d bytes in block (%u,%u,%u) thread (%u,%u,%u): addresses %p <- %p "
                "must be %d-byte aligned\n",
                bytes, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, dst,
                src, bytes);
        abort();
    }
    t_copies->push_back(PendingCopy{dst, src, bytes, src_bytes});
}
void cp_async_commit() {
    if (!t_copies) {
        t_copies = new std::vector<PendingCopy>();
        t_groups = new std::vector<size_t>();
    }
    t_groups->push_back(t_copies->size());
}
void cp_async_wait(int keep) {
    if (!t_groups || (int)t_groups->size() <= keep) return;
    size_t ngroups_done = t_groups->size() - (size_t)keep;
    size_t upto = (*t_groups)[ngroups_done - 1];
    for (size_t i = 0; i < upto; i++) do_copy((*t_copies)[i]);
    t_copies->erase(t_copies->begin(), t_copies->begin() + (long)upto);
    t_groups->erase(t_groups->begin(), t_groups->begin() + (long)ngroups_done);
    for (auto &e : *t_groups) e -= upto;
}
static void cp_async_flush() {
    if (!t_copies) return;
    for (auto &c : *t_copies) do_copy(c);
    t_copies->clear();
    t_groups->clear();
}

// ---------------------------------------------------------------------------------------------
// Dynamic shared memory: one buffer (blocks run one at a time), poisoned with 0xff bytes (NaN as
// float or bf16, -1 as int) before each block unless CTRAIN_EMU_POISON=0.
alignas(128) static unsigned char g_dyn_smem[kMaxDynSmemOptin];
static size_t g_dyn_bytes;
static int g_poison = 1;
void *dyn_smem() { return g_dyn_smem; }
size_t dyn_smem_bytes() { return g_dyn_bytes; }

// ---------------------------------------------------------------------------------------------
// The pool and launches.
struct Worker {
    pthread_t th;
    unsigned tid;
    std::atomic<uint32_t> go{0};
};
static std::vector<Worker *> g_pool;
static std::mutex g_launch_mutex;  // one launch at a time, from any host thread

struct LaunchState {
    const std::function<void()> *body;
    unsigned nthreads;
    std::vector<uint32_t> order;  // block execution order (shuffled under jitter)
    dim3 grid, block;
};
static LaunchState g_launch;
static std::atomic<uint32_t> g_remaining;
static std::atomic<uint32_t> g_done_word{0};
// The barrier at the end of each block (all threads, exited or not), whose last arriver resets
// the per-block state for the next block.
static std::atomic<uint32_t> g_end_count{0};
static std::atomic<uint32_t> g_end_gen{0};

static void reset_block_state() {
    unsigned n = g_launch.nthreads;
    g_bar.state.store((uint64_t)n << 32, std::memory_order_relaxed);
    unsigned nwarps = (n + 31) / 32;
    for (unsigned i = 0; i < nwarps; i++) {
        Warp &w = *g_warps[i];
        unsigned lanes = std::min(32u, n - i * 32);
        w.live = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
        w.arrived = 0;
    }
    if (g_poison && g_dyn_bytes) memset(g_dyn_smem, 0xff, g_dyn_bytes);
}

static void end_of_block() {
    uint32_t g = g_end_gen.load(std::memory_order_acquire);
    if (g_end_count.fetch_add(1, std::memory_order_acq_rel) + 1 == g_launch.nthreads) {
        g_end_count.store(0, std::memory_order_relaxed);
        reset_block_state();
        g_end_gen.store(g + 1, std::memory_order_release);
        futex_wake(&g_end_gen, INT_MAX);
    } else {
        t_wait_what = "the end of the block (emulator)";
        wait_until(g_end_gen, [&] { return g_end_gen.load(std::memory_order_acquire) != g; }, true);
    }
}

static void play_thread(unsigned tid) {
    const LaunchState &L = g_launch;
    t_tid = tid;
    t_lane = tid % 32;
    t_warp = tid / 32;
    threadIdx.x = tid % L.block.x;
    threadIdx.y = (tid / L.block.x) % L.block.y;
    threadIdx.z = tid / (L.block.x * L.block.y);
    for (uint32_t b : L.order) {
        blockIdx.x = b % L.grid.x;
        blockIdx.y = (b / L.grid.x) % L.grid.y;
        blockIdx.z = b / (L.grid.x * L.grid.y);
        if (tid == 0) s_blocks.fetch_add(1, std::memory_order_relaxed);
        jitter_point();
        (*L.body)();
        cp_async_flush();
        warp_exit();
        bar_exit();
        end_of_block();
    }
}

static void *worker_main(void *arg) {
    Worker *w = static_cast<Worker *>(arg);
    t_rng = 0x9E3779B97F4A7C15ull * (w->tid + 1) ^ (uint64_t)time(nullptr);
    uint32_t seen = 0;
    for (;;) {
        wait_until(w->go, [&] { return w->go.load(std::memory_order_acquire) != seen; }, false);
        seen = w->go.load(std::memory_order_acquire);
        play_thread(w->tid);
        if (g_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            g_done_word.fetch_add(1, std::memory_order_release);
            futex_wake(&g_done_word, 1);
        }
    }
    return nullptr;
}

static void grow_pool(unsigned n) {
    while (g_pool.size() < n) {
        Worker *w = new Worker();
        w->tid = (unsigned)g_pool.size();
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        // Kernels keep their registers' worth of locals on the stack: 1 MiB is plenty, and 1024
        // threads of it stay well within the address space.
        pthread_attr_setstacksize(&attr, (size_t)1 << 20);
        if (pthread_create(&w->th, &attr, worker_main, w) != 0) {
            fprintf(stderr, "emu: cannot create host thread %zu for the CUDA thread pool\n",
                    g_pool.size());
            abort();
        }
        pthread_attr_destroy(&attr);
        pthread_detach(w->th);
        g_pool.push_back(w);
    }
    while (g_warps.size() < (n + 31) / 32) g_warps.push_back(new Warp());
}

void run_launch(const char *name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()> &body) {
    std::lock_guard<std::mutex> lk(g_launch_mutex);
    static bool inited = false;
    if (!inited) {
        g_ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (g_ncpu < 1) g_ncpu = 1;
        g_deadlock_s = env_int("CTRAIN_EMU_DEADLOCK_S", 120);
        g_poison = env_int("CTRAIN_EMU_POISON", 1);
        get_jitter();
        inited = true;
    }
    unsigned n = block.x * block.y * block.z;
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    grow_pool(n);
    blockDim = block;
    gridDim = grid;
    g_launch.body = &body;
    g_launch.nthreads = n;
    g_launch.grid = grid;
    g_launch.block = block;
    g_launch.order.resize(nblocks);
    for (uint64_t i = 0; i < nblocks; i++) g_launch.order[i] = (uint32_t)i;
    int jitter = get_jitter();
    if (jitter > 0) {
        uint64_t r = 0x243F6A8885A308D3ull ^ (uint64_t)time(nullptr) ^ s_launches.load();
        for (uint64_t i = nblocks; i > 1; i--) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            std::swap(g_launch.order[i - 1], g_launch.order[(r >> 33) % i]);
        }
    }
    g_dyn_bytes = smem;
    // Spinning only pays when every CUDA thread of the block can have a core.
    g_spin_iters = (int)n <= g_ncpu ? 4000 : 0;
    s_launches.fetch_add(1, std::memory_order_relaxed);
    if (nblocks == 0) return;
    reset_block_state();
    g_end_count.store(0);
    g_remaining.store(n, std::memory_order_release);
    uint32_t done = g_done_word.load(std::memory_order_acquire);
    for (unsigned i = 0; i < n; i++) {
        g_pool[i]->go.fetch_add(1, std::memory_order_release);
        futex_wake(&g_pool[i]->go, 1);
    }
    wait_until(g_done_word, [&] { return g_done_word.load(std::memory_order_acquire) != done; },
               false);
    (void)name;
}

}  // namespace emu

unsigned __activemask() { return emu::__activemask_impl(); }
