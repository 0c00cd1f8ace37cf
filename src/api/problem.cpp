#include "api/problem.hpp"

#include <algorithm>

namespace tsattn {

int64_t Problem::q_len(int64_t b) const {
  if (layout == Layout::fixed) return q_tokens;
  return int64_t{qo_indptr_host[b + 1]} - qo_indptr_host[b];
}

int64_t Problem::kv_len(int64_t b) const {
  if (layout == Layout::fixed) return kv_tokens;
  return int64_t{kv_indptr_host[b + 1]} - kv_indptr_host[b];
}

int64_t Problem::q_token_offset(int64_t b) const { return layout == Layout::fixed ? 0 : qo_indptr_host[b]; }

int64_t Problem::kv_token_offset(int64_t b) const { return layout == Layout::fixed ? 0 : kv_indptr_host[b]; }

int32_t Problem::window_bound(const RowIndexTensor& bounds, int64_t b, int64_t i) const {
  return bounds.data[b * bounds.batch_stride + (q_token_offset(b) + i) * bounds.row_stride];
}

KeyRange causal_key_range(int64_t i, int64_t q_len, int64_t kv_len, int64_t window_left) {
  // Bottom-right alignment: the last query row sees the last key.
  const int64_t diagonal = i + kv_len - q_len;
  int64_t first = window_left >= 0 ? diagonal - window_left : 0;
  return {std::max<int64_t>(first, 0), std::min(diagonal, kv_len - 1)};
}

KeyRange variable_key_range(int64_t start, int64_t end, int64_t kv_len) {
  return {std::max<int64_t>(start, 0), std::min(end, kv_len - 1)};
}

int64_t Problem::visible_pairs() const {
  int64_t pairs = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t sq = q_len(b), sk = kv_len(b);
    for (int64_t i = 0; i < sq; ++i) {
      switch (mask) {
        case MaskMode::dense: pairs += sk; break;
        case MaskMode::causal: pairs += causal_key_range(i, sq, sk, window_left).size(); break;
        case MaskMode::variable_window:
          pairs += variable_key_range(window_bound(window_starts, b, i), window_bound(window_ends, b, i), sk).size();
          break;
      }
    }
  }
  return pairs;
}

}  // namespace tsattn
