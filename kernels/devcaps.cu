// Per-device capabilities for the engines' host sides (kernels/devcaps.cuh).
#include "kernels/common.cuh"
#include "kernels/devcaps.cuh"

#define CT_DEVCAPS_MAX 64

// filled[d] is set (release) after caps[d] is written; racing first calls write the same values.
static CtDevCaps g_caps[CT_DEVCAPS_MAX];
static int g_filled[CT_DEVCAPS_MAX];

extern "C" CtDevCaps ct_dev_caps(void) {
    int dev = 0;
    CT_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 0 && dev < CT_DEVCAPS_MAX && __atomic_load_n(&g_filled[dev], __ATOMIC_ACQUIRE)) return g_caps[dev];
    CtDevCaps c = {0, 0, 0, 0};
    int optin = 0;
    CT_CUDA_CHECK(cudaDeviceGetAttribute(&c.major, cudaDevAttrComputeCapabilityMajor, dev));
    CT_CUDA_CHECK(cudaDeviceGetAttribute(&c.minor, cudaDevAttrComputeCapabilityMinor, dev));
    CT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CT_CUDA_CHECK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, dev));
    c.smem_optin = (size_t)optin;
    if (dev >= 0 && dev < CT_DEVCAPS_MAX) {
        g_caps[dev] = c;
        __atomic_store_n(&g_filled[dev], 1, __ATOMIC_RELEASE);
    }
    return c;
}

extern "C" int ct_dev_has_wgmma(void) {
    CtDevCaps c = ct_dev_caps();
    return c.major == 9 && c.minor == 0;
}
