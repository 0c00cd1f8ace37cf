// merge_execute.hpp - one validated merge on the GPU: its module (merge.<arch>.<dtype>, through the
// module table and the kernel cache like a prefill kernel) and one launch on the caller's stream.
#pragma once

#include "api/merge_arguments.hpp"

namespace tsattn {

// Queues the merge on p.stream and returns. A merge that writes nothing touches no driver.
void execute_merge(const MergeProblem& p);

}  // namespace tsattn
