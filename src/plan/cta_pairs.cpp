#include "plan/cta_pairs.hpp"

namespace tsattn {

PairAxis choose_pair_axis(const Problem& p, PairsKernel kernel) {
  if (kernel.along_heads && p.group_size() % 2 == 0) return PairAxis::heads;
  if (kernel.along_query_tiles && p.group_size() % 2 == 1) return PairAxis::query_tiles;
  return PairAxis::none;
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
