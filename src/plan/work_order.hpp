// work_order.hpp - how many tiles of the list form one chunk of work items (prefill_params.h,
// "The scheduler's work").
//
// Inside a chunk the items go kv head by kv head, so the CTAs that run at the same time share K/V
// and read it through L2: the larger the chunk, the fewer K/V streams come from memory at once.
// Across chunks the list stays heaviest first, which is what balances causal work between the
// persistent CTAs (they take items round-robin); a chunk mixes tiles of different weight, so
// dense lists take one chunk, causal lists chunks of 16 tiles and windows one tile per chunk (the
// order before chunks existed).
#pragma once

#include <cstdint>

#include "api/problem.hpp"

namespace tsattn {

// Tiles per chunk for a list of at most max_tiles tiles: >= 1, and times num_qo_heads below 2^31.
int tiles_per_chunk(const Problem& p, int64_t max_tiles);

}  // namespace tsattn
