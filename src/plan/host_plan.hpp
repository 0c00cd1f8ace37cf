// host_plan.hpp - the scheduler's host path: the tile list built from host-resident lengths.
//
// Tiles are ordered heaviest first (longest processing time first): persistent CTAs take their
// (tile, head) items round-robin, so the long causal tiles start early and short ones fill the
// tail (prefill_params.h says how items map to tiles and heads).
#pragma once

#include <cstdint>
#include <vector>

#include "api/problem.hpp"
#include "prefill_params.h"

namespace tsattn {

// Keys a query tile must visit, in units of keys (not tiles): the width of the union of the
// visible key ranges of its rows. Variable windows live on the device, so they count as the
// whole request. Used only to order tasks.
int64_t tile_work(const Problem& p, int64_t q_len, int64_t kv_len, int64_t q_tile, int block_m);

// Every query tile of every request, heaviest first. Requires p.lengths_on_host().
std::vector<TsattnTile> plan_tiles_on_host(const Problem& p, int block_m);

}  // namespace tsattn
