// What the current device allows, asked once per device (kernels/devcaps.cu): the engines' host
// sides decide eligibility from it instead of assuming the H100 they were tuned on. Internal to
// kernels/ (not in kernels/kernels.h).
#pragma once
#include <stddef.h>

typedef struct {
    int major, minor;   // compute capability
    size_t smem_optin;  // dynamic shared memory a block may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    int sms;            // multiprocessors
} CtDevCaps;

// The current device's capabilities, cached per device (ranks are host threads, each on its own
// device: a cache of the first device's answer would be wrong for the others).
extern "C" CtDevCaps ct_dev_caps(void);
// Whether the current device runs the binary's sm_90a code (wgmma, mbarrier try_wait,
// cp.async.bulk): compute capability 9.0 only (the image is not forward compatible).
extern "C" int ct_dev_has_wgmma(void);
