// sm90a/test_common.cuh - what the GPU unit-test kernels of templates/sm90a/test_*.cuh share
// (tests/sm90a/test_blocks.cpp runs them).
#ifndef TSATTN_SM90A_TEST_COMMON_CUH
#define TSATTN_SM90A_TEST_COMMON_CUH

#include "sm90a/tma.cuh"
#include "sm90a/wgmma.cuh"

namespace tsattn_dev {

// Every mbarrier wait of a test kernel is bounded: a hang becomes a reported failure.
constexpr u64 kTestTimeoutNs = 2000000000ull;  // 2 s

#if defined(__CUDA_ARCH__)

// Stores the m64 x N fp32 accumulators of a one-warpgroup CTA to c (64 x N, row-major), by the
// accumulator layout documented in wgmma.cuh.
template <int N>
__device__ __forceinline__ void store_accumulators(const float (&d)[N / 2], float* c) {
  const int t = threadIdx.x, w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int j = i / 4, r = i % 4;
    const int row = 16 * w + g + 8 * (r / 2), col = 8 * j + 2 * q + (r % 2);
    c[row * N + col] = d[i];
  }
}

#endif  // __CUDA_ARCH__

}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_TEST_COMMON_CUH
