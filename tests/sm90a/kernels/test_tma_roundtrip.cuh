// sm90a/test_tma_roundtrip.cuh - GPU unit-test kernel for sm90a/tma.cuh (tests/sm90a/test_blocks.cpp).
//
// One CTA (128 threads) per tile: an elected lane of warp 0 loads the 64x64 16-bit box at
// coordinates coords[2b] (column) and coords[2b + 1] (row) of in_map (128B swizzle) into shared
// memory through TMA, completing an mbarrier. All threads then un-swizzle it with sw128_offset and
// write it to tiles[b] (64x64 row-major) with plain stores, so the host sees both the zero fill of
// out-of-bounds elements and whether sw128_offset matches the layout TMA writes. Finally one
// thread stores the same smem box to out_map at the same coordinates with a TMA store (which
// must clip what lies outside the tensor). status[b]: 0 ok, 1 the mbarrier wait timed out.
// flags: kTmaTestPrefetch runs prefetch.tensormap first, kTmaTestStore does the TMA store (the
// host runs the pieces separately, so one faulting instruction cannot hide the others).
#ifndef TSATTN_SM90A_TEST_TMA_ROUNDTRIP_CUH
#define TSATTN_SM90A_TEST_TMA_ROUNDTRIP_CUH

#include "test_common.cuh"

namespace tsattn_dev {
constexpr int kTmaTestPrefetch = 1;
constexpr int kTmaTestStore = 2;
}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_tma_roundtrip(const __grid_constant__ TsattnTmaDescriptor in_map,
                              const __grid_constant__ TsattnTmaDescriptor out_map, const int* coords, int flags,
                              tsattn_dev::u16* tiles, int* status) {
  using namespace tsattn_dev;
  __shared__ __align__(1024) u8 raw[1024 + 64 * 128];
  __shared__ __align__(8) u64 bar_storage;
  u8* const tile = align_1024(raw);
  const u32 bar = smem_addr_u32(&bar_storage);
  const int c0 = coords[2 * blockIdx.x], c1 = coords[2 * blockIdx.x + 1];

  if (threadIdx.x == 0) {
    if (flags & kTmaTestPrefetch) {
      prefetch_tensormap(in_map);
      prefetch_tensormap(out_map);
    }
    mbarrier_init(bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    if (elect_one_sync()) {
      mbarrier_arrive_expect_tx(bar, 64 * 128);  // the whole box, out-of-bounds part included
      tma_load_2d(smem_addr_u32(tile), in_map, bar, c0, c1);
    }
    __syncwarp();
  }
  const bool ok = mbarrier_wait_parity_bounded(bar, 0, kTestTimeoutNs);
  if (ok) {
    u16* const out = tiles + static_cast<size_t>(blockIdx.x) * 64 * 64;
    for (int chunk = threadIdx.x; chunk < 64 * 8; chunk += 128) {
      const int row = chunk / 8, k = (chunk % 8) * 8;
      *reinterpret_cast<uint4*>(out + row * 64 + k) = *reinterpret_cast<const uint4*>(tile + sw128_offset(row, k));
    }
  }
  const int all_ok = __syncthreads_and(ok ? 1 : 0);
  if (threadIdx.x == 0) {
    if (all_ok && (flags & kTmaTestStore)) {
      tma_store_2d(out_map, smem_addr_u32(tile), c0, c1);
      tma_store_commit();
      tma_store_wait<0, false>();
    }
    status[blockIdx.x] = all_ok ? 0 : 1;
  }
}

#endif  // TSATTN_SM90A_TEST_TMA_ROUNDTRIP_CUH
