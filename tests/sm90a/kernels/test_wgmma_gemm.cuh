// sm90a/test_wgmma_gemm.cuh - GPU unit-test kernels for sm90a/wgmma.cuh (tests/sm90a/test_blocks.cpp).
//
// One warpgroup (128 threads) computes C = A * B^T with M = 64, K = 64 (four k16 steps) and
// N = 64, 128 or 256: A is 64x64 and B is Nx64, both row-major 16-bit in global memory. The kernel
// writes them itself into shared memory in the 128B-swizzled K-major layout (sw128_offset), then
// runs the SS wgmmas on descriptors from smem_desc_sw128_kmajor, and stores the fp32 accumulator
// fragments to C (64xN fp32, row-major) by the layout documented in wgmma.cuh.
// The accumulators start as kWgmmaTestGarbage and the first wgmma has scale_d = 0: a result off
// by exactly that value means the scale-d predicate was ignored.
#ifndef TSATTN_SM90A_TEST_WGMMA_GEMM_CUH
#define TSATTN_SM90A_TEST_WGMMA_GEMM_CUH

#include "test_common.cuh"

namespace tsattn_dev {

// Copies a rows x 64 row-major 16-bit matrix into a 128B-swizzled slab, 16 bytes at a time.
__device__ __forceinline__ void wgmma_test_store_swizzled(u8* slab, const u16* src, int rows) {
  for (int chunk = threadIdx.x; chunk < rows * 8; chunk += 128) {
    const int row = chunk / 8, k = (chunk % 8) * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(src + row * 64 + k);
    *reinterpret_cast<uint4*>(slab + sw128_offset(row, k)) = v;
  }
}

template <int N, int dtype>
__device__ __forceinline__ void wgmma_gemm_test(const u16* a, const u16* b, float* c) {
  __shared__ __align__(1024) u8 raw[1024 + 64 * 128 + N * 128];
  u8* const sa = align_1024(raw);
  u8* const sb = sa + 64 * 128;
  wgmma_test_store_swizzled(sa, a, 64);
  wgmma_test_store_swizzled(sb, b, N);
  fence_proxy_async_shared();  // st.shared above -> read by wgmma (async proxy)
  __syncthreads();

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = kWgmmaTestGarbage;
  const u64 desc_a = smem_desc_sw128_kmajor(smem_addr_u32(sa));
  const u64 desc_b = smem_desc_sw128_kmajor(smem_addr_u32(sb));
  run_four_wgmmas_and_store<N>(
      d,
      [&](int s) {
        wgmma_ss<N, dtype>(d, smem_desc_advance(desc_a, 32u * s), smem_desc_advance(desc_b, 32u * s), s > 0 ? 1 : 0);
      },
      c);
}

}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_bf16_n64(const tsattn_dev::u16* a, const tsattn_dev::u16* b, float* c) {
  tsattn_dev::wgmma_gemm_test<64, tsattn_dev::kBfloat16>(a, b, c);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_bf16_n128(const tsattn_dev::u16* a, const tsattn_dev::u16* b, float* c) {
  tsattn_dev::wgmma_gemm_test<128, tsattn_dev::kBfloat16>(a, b, c);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_bf16_n256(const tsattn_dev::u16* a, const tsattn_dev::u16* b, float* c) {
  tsattn_dev::wgmma_gemm_test<256, tsattn_dev::kBfloat16>(a, b, c);
}

extern "C" __global__ void __launch_bounds__(128, 1)
    tsattn_test_wgmma_f16_n64(const tsattn_dev::u16* a, const tsattn_dev::u16* b, float* c) {
  tsattn_dev::wgmma_gemm_test<64, tsattn_dev::kFloat16>(a, b, c);
}

#endif  // TSATTN_SM90A_TEST_WGMMA_GEMM_CUH
