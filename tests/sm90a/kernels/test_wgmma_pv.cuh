// sm90a/test_wgmma_pv.cuh - GPU unit-test kernels for the attention's second GEMM, O = P V, as the
// sm90a kernel runs it (tests/sm90a/test_blocks.cpp): RS wgmma (A = P from registers), B = V
// MN-major from 128B-swizzled shared memory through the transpose bit.
//
// One warpgroup: P is 64 x 64 (rows x keys) and V is 64 x N (keys x head dim, N = 128 or 256),
// both row-major 16-bit in global memory. V goes into shared memory exactly as TMA writes a
// [keys][d] tile: slab s = columns 64s .. 64s+63 of all 64 keys, element (key, n) at
// sw128_offset(key, n % 64) of its slab. P goes into registers in the RS A layout (wgmma.cuh).
// C (64 x N fp32, row-major) is stored by the accumulator layout.
// variant 0 uses smem_desc_sw128_mnmajor as the kernel does; variant 1 swaps its two byte
// offsets (so a failing run tells which reading of the descriptor the hardware has).
#ifndef TSATTN_SM90A_TEST_WGMMA_PV_CUH
#define TSATTN_SM90A_TEST_WGMMA_PV_CUH

#include "test_common.cuh"

namespace tsattn_dev {

template <int N, int dtype>
__device__ __forceinline__ void wgmma_pv_test(const u16* p, const u16* v, float* c, int variant) {
  constexpr u32 kSlabBytes = 64 * 128;  // 64 keys x 128 B
  __shared__ __align__(1024) u8 raw[1024 + (N / 64) * kSlabBytes];
  u8* const sv = align_1024(raw);
  for (int chunk = threadIdx.x; chunk < 64 * (N / 8); chunk += 128) {
    const int key = chunk / (N / 8), n = (chunk % (N / 8)) * 8;
    *reinterpret_cast<uint4*>(sv + (n / 64) * kSlabBytes + sw128_offset(key, n % 64)) =
        *reinterpret_cast<const uint4*>(v + key * N + n);
  }
  fence_proxy_async_shared();  // st.shared above -> read by wgmma (async proxy)
  __syncthreads();

  const int t = threadIdx.x, w = t / 32, g = (t % 32) / 4, q = t % 4;
  const int row0 = 16 * w + g;
  auto pair = [&](int row, int col) {
    return static_cast<u32>(p[row * 64 + col]) | (static_cast<u32>(p[row * 64 + col + 1]) << 16);
  };
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  u64 desc = smem_desc_sw128_mnmajor(smem_addr_u32(sv), kSlabBytes);
  if (variant == 1) {
    desc = (desc & ~((0x3FFFull << 16) | (0x3FFFull << 32))) | (static_cast<u64>(1024u >> 4) << 16) |
           (static_cast<u64>(kSlabBytes >> 4) << 32);
  }
  u32 a[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pair(row0, 16 * kk + 2 * q);
    a[kk][1] = pair(row0 + 8, 16 * kk + 2 * q);
    a[kk][2] = pair(row0, 16 * kk + 2 * q + 8);
    a[kk][3] = pair(row0 + 8, 16 * kk + 2 * q + 8);
  }
  run_four_wgmmas_and_store<N>(
      d, [&](int kk) { wgmma_rs<N, dtype>(d, a[kk], smem_desc_advance(desc, 2048u * kk), 1); }, c);
}

}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_pv_bf16_n128(const tsattn_dev::u16* p, const tsattn_dev::u16* v, float* c, int variant) {
  tsattn_dev::wgmma_pv_test<128, tsattn_dev::kBfloat16>(p, v, c, variant);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_pv_bf16_n256(const tsattn_dev::u16* p, const tsattn_dev::u16* v, float* c, int variant) {
  tsattn_dev::wgmma_pv_test<256, tsattn_dev::kBfloat16>(p, v, c, variant);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_pv_f16_n128(const tsattn_dev::u16* p, const tsattn_dev::u16* v, float* c, int variant) {
  tsattn_dev::wgmma_pv_test<128, tsattn_dev::kFloat16>(p, v, c, variant);
}

#endif  // TSATTN_SM90A_TEST_WGMMA_PV_CUH
