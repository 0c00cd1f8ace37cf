// split_tail.hpp - whether a static-order launch hands its last slots out by key tiles
// (prefill_params.h, split_slots; the walk itself is templates/common/split_tail.cuh).
//
// Dense items of the fixed layout all cost the same, so the static walk (the fastest for them)
// runs ceil(S / W) rounds of whole slots, and in the last one only S mod W of
// the W walkers work: dense D128 S8K has 1024 slots on 66 CTA pairs, 15.5 rounds of work in 16.
// Splitting the last two rounds' F = W + (S mod W) slots evenly by key tiles lets every walker end
// together, for a fixed cost per walker: the extra pieces' start and end (a piece loads its Q and
// writes its output like an item) and the merge of the cut slots.
#pragma once

#include <cstdint>
#include <string_view>

namespace tsattn {

// The per-piece cost of the model below, in key tiles: a work item's prologue and epilogue, and
// the partial buffers' write, count and merge (docs/decisions.md, host scheduling constants).
constexpr double kPieceOverheadTiles = 2;
constexpr double kMergeOverheadTiles = 1;

// F for a launch of `slots` slots of `steps` key tiles each over `walkers` walkers, or 0 for no
// split. `mode` is TSATTN_SPLIT_TAIL: "off" never splits; "on" splits whenever the walk allows
// (templates/common/split_tail.cuh: split_tail_walkable) and the last round is not full; "auto" also
// needs the cost model to predict a shorter call than whole slots.
int64_t split_tail_slots(int64_t slots, int64_t walkers, int64_t steps, std::string_view mode);

}  // namespace tsattn
