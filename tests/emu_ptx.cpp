// PTX semantics only the emulator can promise (tests/emu_ptx_layouts.c checks the layouts, on
// the emulator and on a GPU): a read of a cp.async destination before the wait_group covering it
// sees stale shared memory, wait_group N retires exactly the older groups.
#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "tests/test.h"

#include <vector>

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

int main() {
    test_cp_async_wait();
    return test_summary("emu_ptx");
}
