// sm90a/test_mbarrier_ring.cuh - GPU unit-test kernel for the TMA + mbarrier ring of the sm90a
// family (tests/sm90a/test_blocks.cpp), shaped like the attention kernel: warpgroup 0 is the
// producer (one elected lane of warp 0 issues TMA, warps 1-3 idle), warpgroup 1 the consumer.
//
// The tensor is rows x 64 16-bit (bf16) elements; tile t is the 64x64 box at row 64t (the last
// one may run past the end: zero fill, still the whole box in expect_tx). Two stages, each with a
// "full" barrier (1 arrival + tx bytes: the producer) and an "empty" barrier (128 arrivals: every
// consumer thread, after it has read the stage). Consumer thread ct reads row ct / 2, columns
// 32 * (ct % 2) .. +31 of each tile, un-swizzled, and writes sum(value * (column + 1)) to
// partials[t * 128 + ct]. status[0] / status[1]: the producer / a consumer timed out.
#ifndef TSATTN_SM90A_TEST_MBARRIER_RING_CUH
#define TSATTN_SM90A_TEST_MBARRIER_RING_CUH

#include "test_common.cuh"

namespace tsattn_dev {
constexpr int kRingStages = 2;
constexpr u32 kRingTileBytes = 64 * 128;
}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(256, 1)
    tsattn_test_mbarrier_ring(const __grid_constant__ TsattnTmaDescriptor map, int num_tiles, float* partials,
                              int* status) {
  using namespace tsattn_dev;
  __shared__ __align__(1024) u8 raw[1024 + kRingStages * kRingTileBytes];
  __shared__ __align__(8) u64 full_storage[kRingStages];
  __shared__ __align__(8) u64 empty_storage[kRingStages];
  u8* const stages = align_1024(raw);
  const u32 full0 = smem_addr_u32(&full_storage[0]);
  const u32 empty0 = smem_addr_u32(&empty_storage[0]);

  if (threadIdx.x == 0) {
    prefetch_tensormap(map);
    for (int s = 0; s < kRingStages; ++s) {
      mbarrier_init(full0 + 8 * s, 1);
      mbarrier_init(empty0 + 8 * s, 128);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x < 32) {
    // Producer: the k-th use of stage s waits for the consumers' k-th release (parity (k & 1) ^ 1:
    // the first use passes at once on the fresh barrier).
    if (elect_one_sync()) {
      for (int t = 0; t < num_tiles; ++t) {
        const int s = t % kRingStages, k = t / kRingStages;
        if (!mbarrier_wait_parity_bounded(empty0 + 8 * s, (k & 1) ^ 1, kTestTimeoutNs)) {
          atomicOr(&status[0], 1);
          break;
        }
        mbarrier_arrive_expect_tx(full0 + 8 * s, kRingTileBytes);
        tma_load_2d(smem_addr_u32(stages + s * kRingTileBytes), map, full0 + 8 * s, 0, 64 * t);
      }
    }
    __syncwarp();
  } else if (threadIdx.x >= 128) {
    const int ct = threadIdx.x - 128, row = ct / 2, col0 = 32 * (ct % 2);
    for (int t = 0; t < num_tiles; ++t) {
      const int s = t % kRingStages, k = t / kRingStages;
      if (!mbarrier_wait_parity_bounded(full0 + 8 * s, k & 1, kTestTimeoutNs)) {
        atomicOr(&status[1], 1);
        break;
      }
      const u8* const tile = stages + s * kRingTileBytes;
      float sum = 0.0f;
#pragma unroll
      for (int chunk = 0; chunk < 4; ++chunk) {
        const int col = col0 + 8 * chunk;
        const uint4 v = *reinterpret_cast<const uint4*>(tile + sw128_offset(row, col));
        const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const u32 half = (words[e / 2] >> (16 * (e % 2))) & 0xFFFFu;
          sum += __uint_as_float(half << 16) * static_cast<float>(col + e + 1);
        }
      }
      partials[static_cast<size_t>(t) * 128 + ct] = sum;
      mbarrier_arrive(empty0 + 8 * s);  // this thread is done reading stage s
    }
  }
  __syncthreads();
}

#endif  // TSATTN_SM90A_TEST_MBARRIER_RING_CUH
