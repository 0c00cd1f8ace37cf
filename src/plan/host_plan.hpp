// host_plan.hpp - the scheduler's host path: a task list built from host-resident lengths.
//
// A task is (request, query tile, query head). Tasks are ordered heaviest first (longest
// processing time first): persistent CTAs take them round-robin, so the long causal tiles start
// early and short ones fill the tail. Tasks of the query heads that share a kv head stay adjacent,
// so they run at the same time on neighbouring CTAs and read their K/V tiles from L2.
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

// Every (request, tile, head) with at least one query row, heaviest first.
// Requires p.lengths_on_host().
std::vector<TsattnTask> plan_tasks_on_host(const Problem& p, int block_m);

}  // namespace tsattn
