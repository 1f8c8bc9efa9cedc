// Emulation of the Hopper PTX behind kernels/ptx_wgmma.cuh (the layouts, K-major and MN-major
// (the transpose bits), are in its header).
//
// wgmma.mma_async: recorded per thread at issue and computed at the wgmma.wait_group that retires
// its group, as a warp collective: warp w of the warpgroup owns rows 16w..16w+15 of D, so each
// warp can compute its part alone from the shared operands and its 32 lanes' accumulators. So a
// kernel that reads its accumulators before the wait sees the old values, and one that overwrites
// a shared operand before the wait multiplies the new data: both fail their test, as they may on
// the hardware. Checked misuse (abort with a message): a wgmma.mma_async with no wgmma.fence
// since the thread's last wait_group (or the block start); a wait_group while wgmma are issued
// but not committed; lanes of a warp disagreeing on the operands; a block whose size is not whole
// warpgroups; a thread leaving the block with wgmma pending; a descriptor whose operand lies
// outside the dynamic shared memory or uses a base offset.
//
// mbarrier: the state lives here, keyed by the barrier's address, reset at every block start.
// A phase completes when all `count` arrivals of the phase happened and the transaction count is
// 0; the bulk copies that complete_tx on it are deferred until then (a read of their destination
// before waiting on the barrier sees stale shared memory). Checked: use before init, more
// arrivals than the count in a phase, a phase whose arrivals are all in while the copies already
// delivered more bytes than expect_tx declared. A wait that can never complete (fewer bytes or
// arrivals than declared) ends, as on a GPU, after a bound (CTRAIN_EMU_MBAR_WAIT_S, default 20 s):
// the report names the kernel, the thread and what the barrier still waits for.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <time.h>
#include <unordered_map>

#include "kernels/emu/internal.h"

namespace emu {

static bool g_wg_trace_fail(const char *what) {
    fprintf(stderr, "emu: %s in block (%u,%u,%u) thread (%u,%u,%u); aborting\n", what, blockIdx.x,
            blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    abort();
}

// The sm_90a instructions exist in the nvcc build only for compute 9.0 (kernels/ptx_wgmma.cuh
// traps elsewhere): on an emulated A100, L4 or Blackwell a kernel reaching one is a host-side bug.
static void require_sm90a(const char *what) {
    int dev = launch_device();
    if (device_has_wgmma(dev)) return;
    const DeviceDesc &d = device_desc(dev);
    fprintf(stderr,
            "emu: kernel %s executes %s on device %d (%s, compute %d.%d): that code exists only for sm_90a "
            "(the kernel traps there); the host side must not launch it on this device; aborting\n",
            launch_name(), what, dev, d.name, d.major, d.minor);
    abort();
}

// Shared-window address of p: the dynamic buffer starts dyn_smem_window_offset() bytes into the
// window (not always 1 KiB-aligned, as on a GPU).
uint32_t smem_offset(const void *p) {
    const unsigned char *base = static_cast<const unsigned char *>(dyn_smem());
    const unsigned char *q = static_cast<const unsigned char *>(p);
    if (q < base || q >= base + dyn_smem_bytes())
        g_wg_trace_fail("a shared-memory operand of wgmma/mbarrier/cp.async.bulk is not in the dynamic "
                        "shared memory (the emulator maps only it to shared addresses)");
    return (uint32_t)(q - smem_window());
}

// ---------------------------------------------------------------------------------------------
// Memory proxies. Shared memory written through the generic proxy (st.shared, and cp.async's
// landed bytes) is visible to the async proxy (wgmma's operand reads) only after the writing
// thread's fence.proxy.async. Emulated with a second image of the dynamic shared memory, "what
// the async proxy sees": taken at block start, updated by fences and by the async proxy's own
// writes (cp.async.bulk), and compared with the real bytes at every wgmma operand read: a
// difference is a read of generic writes that no fence published, an error. cp.async landings
// are attributed to their thread (once the launch uses the async proxy: any wgmma, mbarrier or
// fence), so only that thread's fence publishes them; plain stores cannot be attributed, so any
// fence publishes every unattributed difference (at the next async read).
// mbarrier.init is a generic write too: the async proxy (cp.async.bulk's complete_tx) may use a
// barrier only after fence.mbarrier_init (or fence.proxy.async) by the initialising thread.
struct PendingWrite {
    void *fiber;
    uint32_t off, len;  // window offset, bytes
};
alignas(1024) static unsigned char g_view[1024 + kMaxDynSmemOptin];
static std::mutex g_proxy_m;
static std::vector<PendingWrite> g_pending;  // landed cp.async bytes their thread has not fenced
static bool g_unattributed_due;                // a fence since the last full publication
static std::atomic<bool> g_async_used{false};  // this block uses the async proxy

static void proxy_block_reset() {
    std::lock_guard<std::mutex> lk(g_proxy_m);
    size_t off = dyn_smem_window_offset(), n = dyn_smem_bytes();
    memcpy(g_view + off, smem_window() + off, n);
    g_pending.clear();
    g_unattributed_due = false;
    g_async_used.store(false, std::memory_order_relaxed);
}

static void note_async_use() {
    if (!g_async_used.load(std::memory_order_relaxed)) g_async_used.store(true, std::memory_order_relaxed);
}

void proxy_generic_write(const void *dst, size_t bytes) {
    if (!g_async_used.load(std::memory_order_relaxed)) return;
    const unsigned char *q = static_cast<const unsigned char *>(dst), *lo = static_cast<unsigned char *>(dyn_smem());
    if (q < lo || q + bytes > lo + dyn_smem_bytes()) return;
    std::lock_guard<std::mutex> lk(g_proxy_m);
    g_pending.push_back(PendingWrite{fiber_current(), (uint32_t)(q - smem_window()), (uint32_t)bytes});
}

// With g_proxy_m held: publishes every difference not attributed to a thread's unfenced cp.async.
static void publish_unattributed() {
    size_t lo = dyn_smem_window_offset(), hi = lo + dyn_smem_bytes();
    std::vector<std::pair<uint32_t, uint32_t>> keep;  // pending ranges keep their old view
    for (const PendingWrite &w : g_pending) keep.push_back({w.off, w.off + w.len});
    std::sort(keep.begin(), keep.end());
    size_t at = lo;
    for (auto &k : keep) {
        if (k.first > at) memcpy(g_view + at, smem_window() + at, k.first - at);
        if (k.second > at) at = k.second;
    }
    if (hi > at) memcpy(g_view + at, smem_window() + at, hi - at);
    g_unattributed_due = false;
}

void fence_proxy_async() {
    require_sm90a("fence.proxy.async");
    note_async_use();
    void *me = fiber_current();
    {
        std::lock_guard<std::mutex> lk(g_proxy_m);
        for (size_t i = 0; i < g_pending.size();) {
            if (g_pending[i].fiber == me) {
                memcpy(g_view + g_pending[i].off, smem_window() + g_pending[i].off, g_pending[i].len);
                g_pending[i] = g_pending.back();
                g_pending.pop_back();
            } else {
                i++;
            }
        }
        g_unattributed_due = true;
    }
    mbar_fence_inits(me);
}

// Before the async proxy reads: publish what the fences since the last read allow.
static void proxy_async_read_begin() {
    std::lock_guard<std::mutex> lk(g_proxy_m);
    if (g_unattributed_due) publish_unattributed();
}

// The async proxy wrote these bytes (cp.async.bulk landing): both images hold them.
static void proxy_async_write(const void *dst, size_t bytes) {
    const unsigned char *q = static_cast<const unsigned char *>(dst);
    memcpy(g_view + (q - smem_window()), q, bytes);
}

// ---------------------------------------------------------------------------------------------
// wgmma.
struct WgOp {
    uint64_t da, db;
    float *d;
    int n, scale_d, ta, tb;
};
struct WgState {
    std::vector<WgOp> ops;       // issued, not yet retired (in order)
    std::vector<size_t> groups;  // end index (into ops) of each committed group
    bool fenced = false;
};

static WgState &wg_state() {
    void *&s = fiber_slot();
    if (!s) s = new WgState();
    return *static_cast<WgState *>(s);
}

// Byte offset of element (r, k) of the R x 16 operand a descriptor describes (header facts):
// K-major, or MN-major when the instruction's transpose bit for the operand is set.
static uint32_t desc_offset(uint64_t desc, int r, int k, int trans) {
    uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4;
    uint32_t sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
    int swz = (int)(desc >> 62);
    if ((desc >> 49) & 7) g_wg_trace_fail("wgmma descriptor with a nonzero base offset (not emulated)");
    if (trans) {
        if (swz == 0) return start + (uint32_t)((r % 8) * 2 + (k % 8) * 16 + (r / 8) * sbo + (k / 8) * lbo);
        uint32_t w = swz == 1 ? 128 : swz == 2 ? 64 : 32, bits = swz == 1 ? 7 : swz == 2 ? 3 : 1, per = w / 2;
        uint32_t a = start + (uint32_t)((r % per) * 2 + (k % 8) * w + (r / per) * lbo + (k / 8) * sbo);
        return a ^ (((a >> 7) & bits) << 4);
    }
    if (swz == 0) return start + (uint32_t)((r % 8) * 16 + (r / 8) * sbo + (k / 8) * lbo + (k % 8) * 2);
    uint32_t w = swz == 1 ? 128 : swz == 2 ? 64 : 32, bits = swz == 1 ? 7 : swz == 2 ? 3 : 1;
    uint32_t a = start + (uint32_t)((r % 8) * w + (r / 8) * sbo + (k / 8) * 16 + (k % 8) * 2);
    return a ^ (((a >> 7) & bits) << 4);
}

static float smem_bf16(uint32_t off) {
    size_t lo = dyn_smem_window_offset();
    if (off < lo || (size_t)off + 2 > lo + dyn_smem_bytes())
        g_wg_trace_fail("wgmma operand element outside the dynamic shared memory (a descriptor computed "
                        "from a base that was not realigned, or past the tile?)");
    uint16_t v, seen;
    memcpy(&v, smem_window() + off, 2);
    memcpy(&seen, g_view + off, 2);
    if (v != seen) {
        fprintf(stderr,
                "emu: kernel %s: block (%u,%u,%u): wgmma reads shared memory at window offset 0x%x (0x%04x) that the "
                "generic proxy wrote (a store or a landed cp.async) with no fence.proxy.async since by the writing "
                "thread (the async proxy still sees 0x%04x): fence after the writes (after cp.async.wait_group) and "
                "before the barrier that hands them to wgmma; aborting\n",
                launch_name(), blockIdx.x, blockIdx.y, blockIdx.z, off, v, seen);
        abort();
    }
    return ct_bf16_to_f32(v);
}

// Payload: u[0] = &WgState, u[1] = ops to retire, u[2] = warp index within the warpgroup.
static void wg_wait_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *) {
    if (group != 0xffffffffu) g_wg_trace_fail("wgmma.wait_group without all 32 lanes of the warp");
    size_t nret = in[0].u[1];
    int w = (int)in[0].u[2];
    WgState *st[32];
    for (int l = 0; l < 32; l++) {
        st[l] = reinterpret_cast<WgState *>(in[l].u[0]);
        if (in[l].u[1] != nret) g_wg_trace_fail("wgmma.wait_group: lanes of a warp retire different numbers of wgmma");
    }
    static thread_local std::vector<float> A, B;
    if (nret) proxy_async_read_begin();
    for (size_t i = 0; i < nret; i++) {
        const WgOp &op = st[0]->ops[i];
        for (int l = 1; l < 32; l++) {
            const WgOp &o = st[l]->ops[i];
            if (o.da != op.da || o.db != op.db || o.n != op.n || o.scale_d != op.scale_d || o.ta != op.ta || o.tb != op.tb)
                g_wg_trace_fail("wgmma.mma_async: lanes of a warp gave different descriptors, N, scale-d or transposes");
        }
        if (g_cost_on)
            for (int j = 0; j < op.n / 8; j++) cost_mma();  // one m16n8k16's FLOPs per 16x8 of this warp
        A.resize(16 * 16);
        B.resize((size_t)op.n * 16);
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++) A[r * 16 + k] = smem_bf16(desc_offset(op.da, 16 * w + r, k, op.ta));
        for (int n = 0; n < op.n; n++)
            for (int k = 0; k < 16; k++) B[n * 16 + k] = smem_bf16(desc_offset(op.db, n, k, op.tb));
        for (int l = 0; l < 32; l++) {
            int g = l >> 2, t = l & 3;
            float *d = st[l]->ops[i].d;
            for (int j = 0; j < op.n / 8; j++)
                for (int e = 0; e < 4; e++) {
                    int row = g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
                    float acc = op.scale_d ? d[4 * j + e] : 0.f;
                    for (int k = 0; k < 16; k++) acc += A[row * 16 + k] * B[col * 16 + k];
                    d[4 * j + e] = acc;
                }
        }
    }
    (void)out;
}

void wgmma_bf16(float *d, uint64_t da, uint64_t db, int n, int scale_d, int ta, int tb) {
    require_sm90a("wgmma.mma_async");
    note_async_use();
    WgState &s = wg_state();
    if (block_threads() % 128)
        g_wg_trace_fail("wgmma.mma_async in a block that is not a whole number of warpgroups (128 threads)");
    if (!s.fenced) g_wg_trace_fail("wgmma.mma_async without a wgmma.fence since the last wgmma.wait_group");
    s.ops.push_back(WgOp{da, db, d, n, scale_d != 0, ta, tb});
}

void wgmma_fence() {
    require_sm90a("wgmma.fence");
    note_async_use();
    wg_state().fenced = true;
}

void wgmma_commit() {
    WgState &s = wg_state();
    s.groups.push_back(s.ops.size());
}

void wgmma_wait(int keep) {
    WgState &s = wg_state();
    size_t committed = s.groups.empty() ? 0 : s.groups.back();
    if (s.ops.size() != committed)
        g_wg_trace_fail("wgmma.wait_group while wgmma.mma_async were issued but not committed "
                        "(their accumulators would never be ready)");
    s.fenced = false;
    size_t ngroups = s.groups.size();
    size_t done = ngroups > (size_t)keep ? ngroups - (size_t)keep : 0;
    size_t nret = done ? s.groups[done - 1] : 0;
    // A collective even with nothing to retire: wait_group is .sync.aligned.
    WarpPayload in{}, out{};
    in.u[0] = (uint64_t)(uintptr_t)&s;
    in.u[1] = nret;
    in.u[2] = (fiber_tid() / 32) % 4;
    warp_collective("wgmma.wait_group", 0xffffffffu, in, out, wg_wait_fn, nullptr);
    s.ops.erase(s.ops.begin(), s.ops.begin() + (long)nret);
    s.groups.erase(s.groups.begin(), s.groups.begin() + (long)done);
    for (auto &e : s.groups) e -= nret;
}

void wgmma_thread_end() {
    void *&p = fiber_slot();
    if (!p) return;
    WgState &s = *static_cast<WgState *>(p);
    if (!s.ops.empty()) g_wg_trace_fail("a thread left the block with wgmma.mma_async pending (no wgmma.wait_group 0)");
    s.groups.clear();
    s.fenced = false;
}

// ---------------------------------------------------------------------------------------------
// mbarrier and cp.async.bulk.
struct BulkCopy {
    void *dst;
    const void *src;
    uint32_t bytes;
};
// A thread parked in mbarrier.try_wait: since when (its first try), where, for which parity.
struct MbarWaiter {
    void *fiber;
    double since;
    uint3 block, thread;
    int parity;
};
struct Mbar {
    int count = 0, pending = 0, phase = 0;
    long long tx = 0;
    void *init_fiber = nullptr;  // the thread whose mbarrier.init made it
    bool init_fenced = false;    // ...and fenced it for the async proxy since
    std::vector<BulkCopy> copies;
    std::vector<MbarWaiter> waiters;
};
static std::mutex g_mb_m;
static std::unordered_map<uintptr_t, Mbar> g_mb;

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Bounded waits: on a GPU ct_mbar_wait traps after CT_MBAR_WAIT_BOUND_NS (kernels/ptx_wgmma.cuh),
// so a wrong expect_tx byte count or arrival count is an error, not a hang. Here a watchdog does
// the same after CTRAIN_EMU_MBAR_WAIT_S seconds (default 20; the emulated producer is slow), and
// says what the barrier still waits for.
static double g_mb_bound_s = 20;
static void mbar_watchdog() {
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, nullptr);
        std::lock_guard<std::mutex> lk(g_mb_m);
        double t = now_s();
        for (auto &kv : g_mb)
            for (const MbarWaiter &w : kv.second.waiters) {
                if (t - w.since < g_mb_bound_s) continue;
                const Mbar &b = kv.second;
                fprintf(stderr,
                        "emu: kernel %s: block (%u,%u,%u) thread (%u,%u,%u) waited %.1f s on the mbarrier at "
                        "shared 0x%x for its phase of parity %d: %d of %d arrivals still pending, %lld "
                        "transaction bytes outstanding (a wrong expect_tx byte count or arrival count?); "
                        "on a GPU ct_mbar_wait traps after its bound (kernels/ptx_wgmma.cuh); aborting\n",
                        launch_name(), w.block.x, w.block.y, w.block.z, w.thread.x, w.thread.y, w.thread.z,
                        t - w.since, (unsigned)(kv.first - (uintptr_t)smem_window()), w.parity, b.pending, b.count,
                        b.tx);
                abort();
            }
    }
}
static void mbar_watchdog_start() {
    const char *v = getenv("CTRAIN_EMU_MBAR_WAIT_S");
    if (v && *v) g_mb_bound_s = atof(v);
    std::thread(mbar_watchdog).detach();
}

void mbar_block_reset() {
    {
        std::lock_guard<std::mutex> lk(g_mb_m);
        g_mb.clear();
    }
    proxy_block_reset();
}

void mbar_fence_inits(void *fiber) {
    std::lock_guard<std::mutex> lk(g_mb_m);
    for (auto &kv : g_mb)
        if (kv.second.init_fiber == fiber) kv.second.init_fenced = true;
}

void mbar_init_fence() {
    require_sm90a("fence.mbarrier_init");
    note_async_use();
    mbar_fence_inits(fiber_current());
}

static Mbar &mbar_get(uint64_t *bar) {
    smem_offset(bar);
    if ((uintptr_t)bar % 8) g_wg_trace_fail("mbarrier not 8-byte aligned");
    auto it = g_mb.find((uintptr_t)bar);
    if (it == g_mb.end()) g_wg_trace_fail("mbarrier used before mbarrier.init");
    return it->second;
}

// With g_mb_m held: completes the phase if it can; fills `wake`.
static void mbar_try_complete(Mbar &b, std::vector<void *> &wake) {
    if (b.pending != 0) return;
    if (b.tx < 0) g_wg_trace_fail("mbarrier phase: the copies completed more bytes than expect_tx declared");
    if (b.tx > 0) return;
    for (const BulkCopy &c : b.copies) {
        memcpy(c.dst, c.src, c.bytes);
        proxy_async_write(c.dst, c.bytes);
    }
    b.copies.clear();
    b.phase ^= 1;
    b.pending = b.count;
    for (const MbarWaiter &w : b.waiters) wake.push_back(w.fiber);
    b.waiters.clear();
}

void mbar_init(uint64_t *bar, int count) {
    require_sm90a("mbarrier.init");
    note_async_use();
    if (count < 1 || count > (1 << 20) - 1) g_wg_trace_fail("mbarrier.init with a count outside 1..2^20-1");
    smem_offset(bar);
    std::lock_guard<std::mutex> lk(g_mb_m);
    Mbar &b = g_mb[(uintptr_t)bar];
    b = Mbar();
    b.count = b.pending = count;
    b.init_fiber = fiber_current();
}

void mbar_arrive(uint64_t *bar, uint32_t tx_bytes) {
    std::vector<void *> wake;
    {
        std::lock_guard<std::mutex> lk(g_mb_m);
        Mbar &b = mbar_get(bar);
        if (b.pending <= 0) g_wg_trace_fail("mbarrier.arrive: more arrivals than the count in one phase");
        b.tx += tx_bytes;
        b.pending--;
        mbar_try_complete(b, wake);
    }
    for (void *f : wake) fiber_unpark(f);
}

void mbar_wait(uint64_t *bar, int parity) {
    static std::once_flag watchdog;
    std::call_once(watchdog, mbar_watchdog_start);
    double t0 = -1;
    for (;;) {
        {
            std::lock_guard<std::mutex> lk(g_mb_m);
            Mbar &b = mbar_get(bar);
            if (b.phase != (parity & 1)) return;  // the phase of this parity has completed
            if (t0 < 0) t0 = now_s();
            b.waiters.push_back(MbarWaiter{fiber_current(), t0, blockIdx, threadIdx, parity & 1});
        }
        fiber_park("mbarrier.try_wait.parity");
    }
}

void cp_async_bulk(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    require_sm90a("cp.async.bulk");
    note_async_use();
    if (bytes == 0 || bytes % 16 || (uintptr_t)dst % 16 || (uintptr_t)src % 16)
        g_wg_trace_fail("cp.async.bulk: size and both addresses must be multiples of 16 bytes");
    smem_offset(dst);
    smem_offset((const unsigned char *)dst + bytes - 1);
    if (g_cost_on) cost_access(src, bytes, false);
    std::vector<void *> wake;
    {
        std::lock_guard<std::mutex> lk(g_mb_m);
        Mbar &b = mbar_get(bar);
        if (!b.init_fenced)
            g_wg_trace_fail("cp.async.bulk completes its bytes (the async proxy) on an mbarrier whose mbarrier.init "
                            "was not made visible to the async proxy: fence.mbarrier_init (or fence.proxy.async) by "
                            "the initialising thread, before the barrier that publishes the init");
        b.copies.push_back(BulkCopy{dst, src, bytes});
        b.tx -= bytes;
        mbar_try_complete(b, wake);
    }
    for (void *f : wake) fiber_unpark(f);
}

}  // namespace emu
