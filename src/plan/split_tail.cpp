#include "plan/split_tail.hpp"

#include <cmath>

#include "plan/device_code.hpp"

namespace tsattn {

int64_t split_tail_slots(int64_t slots, int64_t walkers, int64_t steps, std::string_view mode) {
  if (mode == "off" || walkers < 1 || slots < 1 || steps < 1) return 0;
  const int64_t last_round = slots % walkers;
  const int64_t tail = walkers + last_round;
  if (last_round == 0 || slots < tail || slots >= (int64_t{1} << 31) ||
      !tsattn_dev::split_tail_walkable(static_cast<uint32_t>(slots), static_cast<uint32_t>(tail),
                                       static_cast<uint32_t>(walkers), static_cast<uint32_t>(steps)))
    return 0;
  if (mode == "on") return tail;
  // The two walks' busiest walker, in key tiles: whole slots take ceil(S / W) rounds of n + h; the
  // split walk takes its whole-slot rounds, then F n / W tiles in up to F / W + 1 pieces of h each
  // and a merge.
  const double n = static_cast<double>(steps), w = static_cast<double>(walkers), f = static_cast<double>(tail);
  const double whole = std::ceil(static_cast<double>(slots) / w) * (n + kPieceOverheadTiles);
  const double split = static_cast<double>(slots - tail) / w * (n + kPieceOverheadTiles) + std::ceil(f * n / w) +
                       (std::ceil(f / w) + 1) * kPieceOverheadTiles + kMergeOverheadTiles;
  return split < whole ? tail : 0;
}

}  // namespace tsattn
