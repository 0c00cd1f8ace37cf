#include "plan/work_order.hpp"

#include <algorithm>
#include <limits>

namespace tsattn {

int tiles_per_chunk(const Problem& p, int64_t max_tiles) {
  int64_t wanted = 1;
  if (p.mask == MaskMode::dense) {
    wanted = max_tiles;  // every tile of a request does the same work: one chunk
  } else if (p.mask == MaskMode::causal && p.window_left <= 0) {
    // Neighbouring causal tiles differ by one key tile; 16 of them balance as well as one
    // (docs/PERF.md, sm90a v11).
    wanted = 16;
  }
  // Windows (fixed or per row) keep one tile per chunk: their K/V spans are short, so L2 already
  // holds what neighbouring tiles share, and mixing the lighter first tiles into chunks costs
  // balance (measured 4-7% slower at 16 tiles per chunk).
  const int64_t limit = std::numeric_limits<int32_t>::max() / std::max<int64_t>(1, p.num_qo_heads);
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, limit));
}

}  // namespace tsattn
