// Host <-> device copies for the C++ emulator/GPU tests (std::vector in, device pointer out).
#pragma once
#include <vector>

#include "kernels/common.cuh"

template <typename T>
static T *to_device(const std::vector<T> &h) {
    T *d;
    CT_CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CT_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CT_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
