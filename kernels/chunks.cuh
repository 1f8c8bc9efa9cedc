// The chunk order kernels.h fixes for squared norms (CT_LARS_CHUNKS contiguous chunks, each summed
// in element order, then the chunks in order), as LARS's and LAMB's kernels use it: a block of
// CT_LARS_CHUNKS threads per tensor, thread j summing chunk j. nn/lars.h has the CPU's twin.
#pragma once
#include "kernels/common.cuh"
#include "kernels/kernels.h"

// This thread's chunk [*lo, *hi) of a tensor of n elements.
__device__ static inline void chunk_range(size_t n, size_t *lo, size_t *hi) {
    size_t len = (n + CT_LARS_CHUNKS - 1) / CT_LARS_CHUNKS;
    *lo = threadIdx.x * len;
    *hi = *lo + len < n ? *lo + len : n;
}

// The chunks' partial sums (in shared memory, after a __syncthreads) added in chunk order,
// unfused as the CPU adds them.
__device__ static inline double chunks_sum(const double *s) {
    double t = 0;
    for (int j = 0; j < CT_LARS_CHUNKS; j++) t = __dadd_rn(t, s[j]);
    return t;
}
