#include "plan/host_plan.hpp"

#include <algorithm>

namespace tsattn {

int64_t tile_work(const Problem& p, int64_t q_len, int64_t kv_len, int64_t q_tile, int block_m) {
  const int64_t first_row = q_tile * block_m;
  const int64_t last_row = std::min(q_len, first_row + block_m) - 1;
  if (p.mask != MaskMode::causal) return kv_len;
  const KeyRange first = causal_key_range(first_row, q_len, kv_len, p.window_left);
  const KeyRange last = causal_key_range(last_row, q_len, kv_len, p.window_left);
  return std::max<int64_t>(0, last.last - first.first + 1);
}

std::vector<TsattnTile> plan_tiles_on_host(const Problem& p, int block_m) {
  struct Weighted {
    int64_t work;
    TsattnTile tile;
  };
  std::vector<Weighted> tiles;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q_len = p.q_len(b), kv_len = p.kv_len(b);
    const int64_t count = (q_len + block_m - 1) / block_m;
    for (int64_t t = 0; t < count; ++t)
      tiles.push_back({tile_work(p, q_len, kv_len, t, block_m), {static_cast<int>(b), static_cast<int>(t)}});
  }
  // Heaviest first; ties keep request order.
  std::stable_sort(tiles.begin(), tiles.end(), [](const Weighted& a, const Weighted& b) { return a.work > b.work; });
  std::vector<TsattnTile> ordered;
  ordered.reserve(tiles.size());
  for (const Weighted& w : tiles) ordered.push_back(w.tile);
  return ordered;
}

}  // namespace tsattn
