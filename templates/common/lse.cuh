// common/lse.cuh - the log-sum-exp output of both families (prefill_params.h, lse), included only
// by kernels generated with TSATTN_LSE 1.
//
// The online softmax keeps, per row, the running max m of the raw scores and the sum l of
// p = exp2(s * scale_log2 - m * scale_log2) (a thread holds part of l; the four threads of a quad
// hold one row). So the natural-log sum of exp(sm_scale * s) over the visible keys is
// ln(2) * (m * scale_log2 + log2(l)), whatever m the lazy rescale kept; a row with l = 0 saw no
// key and gets -inf.
#ifndef TSATTN_COMMON_LSE_CUH
#define TSATTN_COMMON_LSE_CUH

#include "common/prelude.cuh"
#include "common/request.cuh"
#include "prefill_params.h"

namespace tsattn_dev {

__device__ __forceinline__ float approx_log2(float x) {
  float y;
  asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Stores the lse of a row whose running max is m and whose whole sum (all four quad threads') is l,
// for request b, absolute token `token` and query head `head`.
__device__ __forceinline__ void store_row_lse(const TsattnPrefillParams& p, float m, float l, int b, int token,
                                              int head) {
  const float lse = l > 0.0f ? (m * p.scale_log2 + approx_log2(l)) * 0.6931471805599453f : neg_inf();
  p.lse[token_offset(p.lse_batch_stride, p.lse_token_stride, p.lse_head_stride, b, token, head)] = lse;
}

// The same from this thread's part of l: every lane of the warp must call it (the quad's sum is
// shuffled); lane c == 0 of the quad writes, and only rows below q_len.
__device__ __forceinline__ void write_row_lse(const TsattnPrefillParams& p, float m, float l_part, int b, int row,
                                              int q_len, int token, int head, int c) {
  float l = l_part;
  l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
  l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
  if (c == 0 && row < q_len) store_row_lse(p, m, l, b, token, head);
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_LSE_CUH
