// PTX semantics only the emulator can promise (tests/emu_ptx_layouts.c checks the layouts, on
// the emulator and on a GPU): a read of a cp.async destination before the wait_group covering it
// sees stale shared memory, wait_group N retires exactly the older groups. The Hopper path
// (kernels/ptx_wgmma.cuh): wgmma accumulators keep their old values until the wgmma.wait_group
// that retires the group; misuse of the fence/commit/wait discipline and of mbarrier counts
// aborts with a message (checked in child processes).
#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "kernels/ptx_wgmma.cuh"
#include "tests/test.h"

#include <string>
#include <vector>

#include "tests/emu_child.h"
#include "tests/emu_util.h"

// Reading the destination of a cp.async before waiting for its group: the data is not there
// yet under emulation (poisoned dynamic shared memory), after the wait it is.
__global__ void early_read_kernel(const float *src, float *before, float *after) {
    CT_DYN_SMEM(float, s);
    int i = threadIdx.x;
    ct_cp_async_cg16(s + 4 * i, src + 4 * i);
    ct_cp_async_commit();
    ct_cp_async_cg16(s + 4 * (i + 32), src + 4 * (i + 32));
    ct_cp_async_commit();
    before[i] = s[4 * i];
    ct_cp_async_wait<1>();  // the first group is complete, the second may not be
    after[i] = s[4 * i];
    after[32 + i] = s[4 * (i + 32)];
    ct_cp_async_wait<0>();
    after[64 + i] = s[4 * (i + 32)];
}

static void test_cp_async_wait() {
    std::vector<float> src(64 * 4);
    for (size_t i = 0; i < src.size(); i++) src[i] = (float)i;
    float *ds = to_device(src), *db, *da;
    CT_CUDA_CHECK(cudaMalloc(&db, 32 * sizeof(float)));
    CT_CUDA_CHECK(cudaMalloc(&da, 96 * sizeof(float)));
    CT_LAUNCH(early_read_kernel, 1, 32, 64 * 4 * sizeof(float), 0, ds, db, da);
    CT_CHECK_LAUNCH("early_read_kernel");
    std::vector<float> b = to_host(db, 32), a = to_host(da, 96);
    int stale = 0, ok = 0, ok2 = 0, pending = 0;
    for (int i = 0; i < 32; i++) {
        stale += isnan(b[i]);
        ok += a[i] == src[4 * i];
        pending += isnan(a[32 + i]);
        ok2 += a[64 + i] == src[4 * (i + 32)];
    }
    CHECK(stale == 32, "reads before the wait see stale memory (%d of 32)", stale);
    CHECK(ok == 32, "wait_group 1 completes the older group (%d of 32)", ok);
    CHECK(pending == 32, "wait_group 1 leaves the newest group pending (%d of 32)", pending);
    CHECK(ok2 == 32, "wait_group 0 completes everything (%d of 32)", ok2);
    cudaFree(ds);
    cudaFree(db);
    cudaFree(da);
}

// One warpgroup, A = B = all ones (64 x 16 and 16 x 16, 128B swizzle layout, so every product
// element is 16): acc starts at 1, one wgmma with scale-d accumulates. out[0..127] is acc[0]
// before the wait, out[128..255] after. `misuse` selects a broken variant for the child cases.
__global__ void wgmma_async_kernel(float *out, int misuse) {
    CT_DYN_SMEM(unsigned char, sm);
    int tid = threadIdx.x;
    uint16_t one = 0x3f80;  // bf16 1.0
    for (int i = tid; i < 80 * 64; i += 128) *(uint16_t *)(sm + ct_wg_tile_offset(CT_SWZ_128, 80, i / 64, i % 64)) = one;
    ct_fence_proxy_async();
    __syncthreads();
    float acc[8];
    for (int i = 0; i < 8; i++) acc[i] = 1.f;
    uint32_t base = ct_smem_u32(sm);
    uint64_t da = ct_wg_tile_desc(CT_SWZ_128, 80, base, 0);
    // B: rows 64..79 of the same 80-row tile, 8 rows of 128 bytes = 1024 bytes per 8 rows.
    uint64_t db = ct_wgmma_desc_bits(base + 64 * 128, 16, 1024, CT_SWZ_128);
    if (misuse != 1) ct_wgmma_fence();  // 1: no fence before the first wgmma
    ct_wgmma_bf16<16>(acc, da, db, 1);
    if (misuse != 2) ct_wgmma_commit();  // 2: wait on an uncommitted wgmma
    out[tid] = acc[0];
    if (misuse != 3) ct_wgmma_wait<0>();  // 3: leave with the wgmma pending
    out[128 + tid] = acc[0];
}

static void test_wgmma_async() {
    float *d;
    CT_CUDA_CHECK(cudaMalloc(&d, 256 * sizeof(float)));
    CT_LAUNCH(wgmma_async_kernel, 1, 128, 80 * 128, 0, d, 0);
    CT_CHECK_LAUNCH("wgmma_async_kernel");
    std::vector<float> o = to_host(d, 256);
    int before = 0, after = 0;
    for (int i = 0; i < 128; i++) {
        before += o[i] == 1.f;
        after += o[128 + i] == 17.f;
    }
    CHECK(before == 128, "accumulators before wgmma.wait_group keep their old value (%d of 128)", before);
    CHECK(after == 128, "after wgmma.wait_group 0 they hold 1 + 16 (%d of 128)", after);
    cudaFree(d);
}

// mbarrier misuse: 1: more bytes delivered than expect_tx declared; 2: use before init;
// 3: an arrival on a phase that has all its arrivals and waits for its bytes; 4: fewer bytes
// delivered than expect_tx declared (a wrong byte count): the wait can never complete, and must
// end in an error naming the kernel after the bound, not hang.
__global__ void mbar_misuse_kernel(const uint16_t *src, int misuse) {
    CT_DYN_SMEM(unsigned char, sm);
    uint64_t *bar = (uint64_t *)sm;
    if (threadIdx.x == 0) {
        if (misuse != 2) {
            ct_mbar_init(bar, 1);
            ct_mbar_init_fence();
        }
        ct_mbar_arrive_expect_tx(bar, misuse == 4 ? 64 : 32);
        if (misuse == 3) ct_mbar_arrive(bar);  // the phase waits for its bytes, not arrivals
        ct_cp_async_bulk(sm + 128, src, misuse == 1 ? 48 : 32, bar);
        ct_mbar_wait(bar, 0);
    }
}

static void test_misuse_aborts() {
    struct {
        const char *arg, *want;
    } cases[] = {
        {"wg1", "without a wgmma.fence"},
        {"wg2", "issued but not committed"},
        {"wg3", "wgmma.mma_async pending"},
        {"mb1", "more bytes than expect_tx declared"},
        {"mb2", "used before mbarrier.init"},
        {"mb3", "more arrivals than the count"},
    };
    for (auto &c : cases) {
        ChildRun r = run_child(c.arg, NULL);
        CHECK(r.aborted && r.err.find(c.want) != std::string::npos, "%s aborts saying '%s' (aborted %d): %s",
              c.arg, c.want, r.aborted, r.err.c_str());
    }
    // The bounded wait: 1 s here (the deadlock report would come at 2 s), the report names the
    // kernel and the 32 bytes the phase still waits for.
    ChildRun r = run_child("mb4", "CTRAIN_EMU_MBAR_WAIT_S=1");
    CHECK(r.aborted && r.err.find("kernel mbar_misuse_kernel") != std::string::npos &&
              r.err.find("32 transaction bytes outstanding") != std::string::npos && r.seconds < 10,
          "a wrong expect_tx byte count ends in the bounded wait's error naming the kernel within seconds "
          "(aborted %d, %.1f s): %s", r.aborted, r.seconds, r.err.c_str());
}

int main(int argc, char **argv) {
    if (argc == 2) {  // child cases: expected to abort
        float *d;
        uint16_t *src;
        CT_CUDA_CHECK(cudaMalloc(&d, 256 * sizeof(float)));
        CT_CUDA_CHECK(cudaMalloc(&src, 64 * sizeof(uint16_t)));
        if (!strncmp(argv[1], "wg", 2)) CT_LAUNCH(wgmma_async_kernel, 1, 128, 80 * 128, 0, d, atoi(argv[1] + 2));
        if (!strncmp(argv[1], "mb", 2)) CT_LAUNCH(mbar_misuse_kernel, 1, 32, 1024, 0, src, atoi(argv[1] + 2));
        CT_CHECK_LAUNCH("child case");
        return 0;
    }
    test_cp_async_wait();
    test_wgmma_async();
    test_misuse_aborts();
    return test_summary("emu_ptx");
}
