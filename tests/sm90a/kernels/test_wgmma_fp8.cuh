// sm90a/test_wgmma_fp8.cuh - GPU unit-test kernels for the 8-bit (e4m3) wgmmas of sm90a/wgmma.cuh
// (tests/sm90a/test_blocks.cpp). One warpgroup (128 threads), K = 128 (four k32 steps), N = 128
// or 256, fp32 C (64 x N, row-major) stored by the accumulator layout.
//
// tsattn_test_wgmma_e4m3_ss_n*: C = A * B^T, A 64 x 128 and B N x 128 e4m3 bytes, row-major (K
//   contiguous) in global memory, written byte by byte into one 128B-swizzled K-major slab each
//   (sw128_offset_8bit), SS wgmmas on smem_desc_sw128_kmajor advanced 32 bytes per k32 step. The
//   accumulators start as kWgmmaTestGarbage and the first wgmma has scale_d = 0, as in
//   test_wgmma_gemm.cuh.
// tsattn_test_wgmma_e4m3_pv_n*: O = P V as the attention kernel runs it. P is 64 x 128 fp32
//   (row-major); each thread loads what its m64n128 S accumulator fragment would hold and turns it
//   into the e4m3 A operand with e4m3_a_operand (cvt.rn.satfinite). V is 128 x N e4m3 bytes
//   ([key][n], row-major); shared memory holds V^T K-major: row n, column slot = V(key, n) with
//   key = 32 (slot / 32) + e4m3_key_of_slot(slot % 32). RS wgmmas from d = 0.
#ifndef TSATTN_SM90A_TEST_WGMMA_FP8_CUH
#define TSATTN_SM90A_TEST_WGMMA_FP8_CUH

#include "test_common.cuh"

namespace tsattn_dev {

// Writes element (r, k) = at(r, k) of a rows x 128 8-bit K-major tile into a 128B-swizzled slab,
// one byte at a time (so every byte goes through sw128_offset_8bit, not only 16-byte chunks).
template <class At>
__device__ __forceinline__ void wgmma_test_store_swizzled_8bit(u8* slab, int rows, At at) {
  for (int i = threadIdx.x; i < rows * 128; i += 128) {
    const int r = i / 128, k = i % 128;
    slab[sw128_offset_8bit(r, k)] = at(r, k);
  }
}

template <int N>
__device__ __forceinline__ void wgmma_e4m3_ss_test(const u8* a, const u8* b, float* c) {
  __shared__ __align__(1024) u8 raw[1024 + 64 * 128 + N * 128];  // n256: 41 KB, static limit 48 KB
  u8* const sa = align_1024(raw);
  u8* const sb = sa + 64 * 128;
  wgmma_test_store_swizzled_8bit(sa, 64, [&](int r, int k) { return a[r * 128 + k]; });
  wgmma_test_store_swizzled_8bit(sb, N, [&](int r, int k) { return b[r * 128 + k]; });
  fence_proxy_async_shared();  // st.shared above -> read by wgmma (async proxy)
  __syncthreads();

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = kWgmmaTestGarbage;
  const u32 a_base = smem_addr_u32(sa), b_base = smem_addr_u32(sb);
  run_four_wgmmas_and_store<N>(
      d,
      [&](int kk) {
        wgmma_ss<N, kE4m3>(d, smem_desc_sw128_kmajor(a_base + 32u * kk), smem_desc_sw128_kmajor(b_base + 32u * kk),
                           kk > 0 ? 1 : 0);
      },
      c);
}

template <int N>
__device__ __forceinline__ void wgmma_e4m3_pv_test(const float* p, const u8* v, float* c) {
  __shared__ __align__(1024) u8 raw[1024 + N * 128];  // V^T: N rows (head dim) of 128 keys
  u8* const svt = align_1024(raw);
  wgmma_test_store_swizzled_8bit(
      svt, N, [&](int n, int slot) { return v[((slot & ~31) + e4m3_key_of_slot(slot & 31)) * N + n]; });
  fence_proxy_async_shared();  // st.shared above -> read by wgmma (async proxy)
  __syncthreads();

  // P as this thread's m64n128 accumulator fragment (layout in wgmma.cuh), then as e4m3 A operand.
  const int t = threadIdx.x, w = t / 32, g = (t % 32) / 4, q = t % 4;
  float s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int j = i / 4, r = i % 4;
    s[i] = p[(16 * w + g + 8 * (r / 2)) * 128 + 8 * j + 2 * q + (r % 2)];
  }
  u32 a[4][4];
  e4m3_a_operand<4>(s, a);

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  const u32 vt_base = smem_addr_u32(svt);
  run_four_wgmmas_and_store<N>(
      d, [&](int kk) { wgmma_rs<N, kE4m3>(d, a[kk], smem_desc_sw128_kmajor(vt_base + 32u * kk), 1); }, c);
}

}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_e4m3_ss_n128(const tsattn_dev::u8* a, const tsattn_dev::u8* b, float* c) {
  tsattn_dev::wgmma_e4m3_ss_test<128>(a, b, c);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_e4m3_ss_n256(const tsattn_dev::u8* a, const tsattn_dev::u8* b, float* c) {
  tsattn_dev::wgmma_e4m3_ss_test<256>(a, b, c);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_e4m3_pv_n128(const float* p, const tsattn_dev::u8* v, float* c) {
  tsattn_dev::wgmma_e4m3_pv_test<128>(p, v, c);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_e4m3_pv_n256(const float* p, const tsattn_dev::u8* v, float* c) {
  tsattn_dev::wgmma_e4m3_pv_test<256>(p, v, c);
}

#endif  // TSATTN_SM90A_TEST_WGMMA_FP8_CUH
