#include "plan/cta_pairs.hpp"

#include <algorithm>

namespace tsattn {

PairAxis choose_pair_axis(const Problem& p, PairsKernel kernel, std::string_view forced) {
  if (forced == "off") return PairAxis::none;
  const bool all = forced == "on";
  if (kernel.along_heads && p.group_size() % 2 == 0 && (all || !head_pairs_waste(p))) return PairAxis::heads;
  if (kernel.along_query_tiles && p.group_size() % 2 == 1 && (all || !query_tile_pairs_waste(p)))
    return PairAxis::query_tiles;
  return PairAxis::none;
}

int64_t mean_query_rows(const Problem& p) {
  return p.layout == Layout::fixed ? p.q_tokens : p.q_tokens / std::max<int64_t>(1, p.batch);
}

int64_t mean_keys(const Problem& p) {
  return p.layout == Layout::fixed ? p.kv_tokens : p.kv_tokens / std::max<int64_t>(1, p.batch);
}

bool head_pairs_waste(const Problem& p) {
  const bool packed_dense = p.layout == Layout::packed && p.mask == MaskMode::dense;
  return std::max(mean_query_rows(p), mean_keys(p)) <= (packed_dense ? kShortPackedRows : kShortHeadPairRows);
}

bool query_tile_pairs_waste(const Problem& p) {
  const int64_t rows = mean_query_rows(p);
  if (p.layout == Layout::fixed) return p.mask == MaskMode::causal && rows <= kShortCausalRows;
  return rows <= (p.mask == MaskMode::causal ? kShortPackedCausalRows : kShortPackedRows);
}

int64_t list_tile_rows(PairAxis axis, int64_t block_m) { return axis == PairAxis::query_tiles ? 2 * block_m : block_m; }

const char* pair_axis_name(PairAxis axis) {
  switch (axis) {
    case PairAxis::heads: return "heads";
    case PairAxis::query_tiles: return "query tiles";
    case PairAxis::none: break;
  }
  return "none";
}

}  // namespace tsattn
