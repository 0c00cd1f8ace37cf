// sm90a/test_common.cuh - what the GPU unit-test kernels of templates/sm90a/test_*.cuh share
// (tests/sm90a/test_blocks.cpp runs them).
#ifndef TSATTN_SM90A_TEST_COMMON_CUH
#define TSATTN_SM90A_TEST_COMMON_CUH

#include "sm90a/tma.cuh"
#include "sm90a/wgmma.cuh"

namespace tsattn_dev {

// Every mbarrier wait of a test kernel is bounded: a hang becomes a reported failure.
constexpr u64 kTestTimeoutNs = 2000000000ull;  // 2 s

// The start value of the SS-wgmma tests' accumulators; their first wgmma has scale_d = 0, so a
// result off by exactly this value means the scale-d predicate was ignored (the host test counts
// those).
constexpr float kWgmmaTestGarbage = 12345.0f;

#if defined(__CUDA_ARCH__)

// The first 1024-byte aligned byte of a shared array declared 1024 bytes larger than it needs (the
// 128B swizzle wants 1024-aligned tiles): in case the compiler placed it less aligned than asked.
__device__ __forceinline__ u8* align_1024(u8* raw) {
  const u32 raw_addr = smem_addr_u32(raw);
  return raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
}

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

// Four wgmmas step(0) .. step(3) into d as one group, waits for them, and stores d to c (64 x N).
template <int N, class Step>
__device__ __forceinline__ void run_four_wgmmas_and_store(float (&d)[N / 2], Step step, float* c) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) step(kk);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(d);
  store_accumulators<N>(d, c);
}

#endif  // __CUDA_ARCH__

}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_TEST_COMMON_CUH
