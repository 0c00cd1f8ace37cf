// merge_launch.hpp - a validated MergeProblem as the merge kernel's launch: its parameter block
// (templates/merge/merge_params.h) and grid. Pure: no driver, no global state, so
// tests/plan/test_merge_launch.cpp checks it without a GPU.
#pragma once

#include "api/merge_arguments.hpp"
#include "merge/merge_params.h"

namespace tsattn {

struct MergeLaunch {
  TsattnMergeParams params{};
  unsigned ctas = 0;  // of TSATTN_MERGE_THREADS threads each
};

// Folds the item dims that every tensor steps through alike (a compact merge has one), picks the
// widest access (16, 8 or 4 bytes, else one element) that D, every v pointer and every v stride
// keep aligned, lanes per item to cover D in one step where 32 lanes can, and as many CTAs as the
// items need, at most `resident_ctas` (what the GPU holds at once), which then stride over the
// items. For a problem that writes something (!p.writes_nothing()).
MergeLaunch plan_merge_launch(const MergeProblem& p, int64_t resident_ctas);

}  // namespace tsattn
