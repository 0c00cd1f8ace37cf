#include "plan/kernel_params.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tsattn {

TsattnPrefillParams make_kernel_params(const Problem& p) {
  TsattnPrefillParams k{};
  k.q = p.q.data;
  k.k = p.k.data;
  k.v = p.v.data;
  k.out = p.out.data;
  k.q_batch_stride = p.q.batch_stride;
  k.q_token_stride = p.q.token_stride;
  k.q_head_stride = p.q.head_stride;
  k.k_batch_stride = p.k.batch_stride;
  k.k_token_stride = p.k.token_stride;
  k.k_head_stride = p.k.head_stride;
  k.v_batch_stride = p.v.batch_stride;
  k.v_token_stride = p.v.token_stride;
  k.v_head_stride = p.v.head_stride;
  k.out_batch_stride = p.out.batch_stride;
  k.out_token_stride = p.out.token_stride;
  k.out_head_stride = p.out.head_stride;
  k.qo_indptr = p.qo_indptr;
  k.kv_indptr = p.kv_indptr;
  // validate_arguments() bounds both token counts and the batch by int32.
  k.q_tokens = static_cast<int>(p.q_tokens);
  k.kv_tokens = static_cast<int>(p.kv_tokens);
  k.batch = static_cast<int>(p.batch);
  k.num_qo_heads = p.num_qo_heads;
  k.group_size = p.group_size();
  // A window wider than every request is no window; clamping keeps i + Sk - Sq - W in int32.
  k.window_left =
      p.window_left >= 1 ? static_cast<int>(std::min<int64_t>(p.window_left, std::max<int64_t>(p.kv_tokens, 1))) : -1;
  k.window_starts = p.window_starts.data;
  k.window_ends = p.window_ends.data;
  k.starts_batch_stride = p.window_starts.batch_stride;
  k.starts_row_stride = p.window_starts.row_stride;
  k.ends_batch_stride = p.window_ends.batch_stride;
  k.ends_row_stride = p.window_ends.row_stride;
  k.scale_log2 = static_cast<float>(static_cast<double>(p.sm_scale) * std::numbers::log2e);
  k.output_scale = p.output_scale;
  k.lse = static_cast<float*>(p.lse.data);
  k.lse_batch_stride = p.lse.batch_stride;
  k.lse_token_stride = p.lse.token_stride;
  k.lse_head_stride = p.lse.head_stride;
  return k;
}

}  // namespace tsattn
