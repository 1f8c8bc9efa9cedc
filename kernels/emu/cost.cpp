// Cost counters of the emulated GPU (tools/bench_gpu_cost.c reads them through kernels/cost.cu).
// Per launch that runs: its name and configuration, the warp-level mma.sync m16n8k16 instructions
// issued, the bytes of global memory requested through the counting hooks (cp.async sources and
// kernels/act.cuh's element and vector accessors), and the distinct bytes those requests touched,
// reads and writes apart ("compulsory": what a perfect cache would still move).
//
// A launch runs alone (the launch lock) and no allocation changes while it runs, so the map of
// global memory is a snapshot taken at its start and the hooks look addresses up without a lock.
// The hooks run on several host threads at once: counters are relaxed atomics, the touched-byte
// bitmaps are set with atomic ORs and created under a mutex the first time an allocation is hit.
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "kernels/emu/internal.h"
#include "kernels/kernels.h"  // CtCostLaunch

namespace emu {

bool g_cost_on = false;

struct CostRecord {
    std::string name;  // demangled symbol when the binary exports it, else the launch's spelling
    std::string symbol;  // mangled symbol ("" when unknown): joins nvcc's resource table
    dim3 grid, block;
    size_t dyn_smem;
    int tag_op, tag_part;
    unsigned long long mma, rd_bytes, wr_bytes, rd_unique, wr_unique, accesses;
};

static std::vector<CostRecord> g_records;
static int g_tag_op = -1, g_tag_part = 0;

// The launch being counted.
struct Region {
    uintptr_t start;
    size_t bytes;
    std::atomic<uint64_t> *bits[2];  // [read, write] one bit per byte, NULL until touched
};
static std::vector<Region> g_regions;
static std::mutex g_bits_mu;
static std::atomic<unsigned long long> g_mma, g_rd, g_wr, g_acc;
static CostRecord g_cur;

void cost_mma() { g_mma.fetch_add(1, std::memory_order_relaxed); }

static Region *region_of(uintptr_t a) {
    auto it = std::upper_bound(g_regions.begin(), g_regions.end(), a,
                               [](uintptr_t v, const Region &r) { return v < r.start; });
    if (it == g_regions.begin()) return nullptr;
    --it;
    return a < it->start + it->bytes ? &*it : nullptr;
}

void cost_access(const void *p, size_t bytes, bool write) {
    uintptr_t a = (uintptr_t)p;
    Region *r = region_of(a);
    if (!r) return;  // shared memory, a host buffer, a local: not global memory
    (write ? g_wr : g_rd).fetch_add(bytes, std::memory_order_relaxed);
    g_acc.fetch_add(1, std::memory_order_relaxed);
    std::atomic<uint64_t> *bits = r->bits[write];
    if (!bits) {
        std::lock_guard<std::mutex> lk(g_bits_mu);
        if (!r->bits[write]) {
            size_t words = (r->bytes + 63) / 64;
            auto *b = new std::atomic<uint64_t>[words];
            for (size_t i = 0; i < words; i++) b[i].store(0, std::memory_order_relaxed);
            __atomic_store_n(&r->bits[write], b, __ATOMIC_RELEASE);
        }
        bits = __atomic_load_n(&r->bits[write], __ATOMIC_ACQUIRE);
    }
    size_t off = a - r->start, end = std::min(off + bytes, r->bytes);
    for (size_t i = off; i < end;) {
        size_t w = i / 64, lo = i % 64, n = std::min<size_t>(64 - lo, end - i);
        uint64_t m = n == 64 ? ~0ull : ((1ull << n) - 1) << lo;
        bits[w].fetch_or(m, std::memory_order_relaxed);
        i += n;
    }
}

void cost_launch_begin(const char *name, const void *func, dim3 grid, dim3 block, size_t smem) {
    std::vector<std::pair<uintptr_t, size_t>> ranges;
    dev_alloc_ranges(ranges);
    g_regions.clear();
    g_regions.reserve(ranges.size());
    for (auto &r : ranges) g_regions.push_back(Region{r.first, r.second, {nullptr, nullptr}});
    g_mma = 0, g_rd = 0, g_wr = 0, g_acc = 0;
    g_cur = CostRecord{};
    g_cur.name = name;
    // The launch macro spells whatever expression named the kernel (often a function-pointer
    // variable); the symbol says which instantiation ran, and nvcc mangles it the same way.
    Dl_info info;
    if (func && dladdr(func, &info) && info.dli_sname && info.dli_saddr == func) {
        g_cur.symbol = info.dli_sname;
        int st = 0;
        char *d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &st);
        if (d && st == 0) g_cur.name = d;
        free(d);
    }
    g_cur.grid = grid, g_cur.block = block, g_cur.dyn_smem = smem;
    g_cur.tag_op = g_tag_op, g_cur.tag_part = g_tag_part;
}

void cost_launch_end() {
    g_cur.mma = g_mma.load(), g_cur.rd_bytes = g_rd.load(), g_cur.wr_bytes = g_wr.load();
    g_cur.accesses = g_acc.load();
    for (auto &r : g_regions)
        for (int w = 0; w < 2; w++) {
            if (!r.bits[w]) continue;
            unsigned long long n = 0;
            for (size_t i = 0; i < (r.bytes + 63) / 64; i++) n += (unsigned long long)__builtin_popcountll(r.bits[w][i].load());
            (w ? g_cur.wr_unique : g_cur.rd_unique) += n;
            delete[] r.bits[w];
            r.bits[w] = nullptr;
        }
    g_regions.clear();
    g_records.push_back(g_cur);
}

// A device-to-device copy (src) or a memset (src NULL) that runs now: global traffic without a
// kernel of ours, recorded like a launch (grid and block 0) so the totals hold every byte a step
// moves in device memory. Host<->device copies cross PCIe and are not counted.
void cost_copy(const char *name, const void *src, size_t bytes) {
    if (!bytes) return;
    CostRecord r{};
    r.name = name;
    r.grid = dim3(0, 0, 0), r.block = dim3(0, 0, 0);
    r.tag_op = g_tag_op, r.tag_part = g_tag_part;
    r.wr_bytes = r.wr_unique = bytes;
    if (src) r.rd_bytes = r.rd_unique = bytes;
    r.accesses = 1;
    g_records.push_back(r);
}

}  // namespace emu

// The C face (kernels/kernels.h declares these; kernels/cost.cu forwards to them).
extern "C" {
void ct_emu_cost_enable(int on) {
    if (on) emu::g_records.clear();
    emu::g_cost_on = on != 0;
}
void ct_emu_cost_tag(int op, int part) { emu::g_tag_op = op, emu::g_tag_part = part; }
size_t ct_emu_cost_count(void) { return emu::g_records.size(); }
int ct_emu_cost_get(size_t i, CtCostLaunch *out) {
    if (i >= emu::g_records.size()) return 0;
    const emu::CostRecord &r = emu::g_records[i];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", r.name.c_str());
    snprintf(out->symbol, sizeof out->symbol, "%s", r.symbol.c_str());
    out->grid[0] = r.grid.x, out->grid[1] = r.grid.y, out->grid[2] = r.grid.z;
    out->block[0] = r.block.x, out->block[1] = r.block.y, out->block[2] = r.block.z;
    out->dyn_smem = r.dyn_smem;
    out->tag_op = r.tag_op, out->tag_part = r.tag_part;
    out->mma = r.mma, out->rd_bytes = r.rd_bytes, out->wr_bytes = r.wr_bytes;
    out->rd_unique = r.rd_unique, out->wr_unique = r.wr_unique, out->accesses = r.accesses;
    return 1;
}
}
