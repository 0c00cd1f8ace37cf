// execute.hpp - run one validated Problem on its device: choose and load the kernel, plan the
// launch (plan/launch_plan.hpp), check what only the device can check, allocate, launch.
#pragma once

#include "api/problem.hpp"

namespace tsattn {

// Queues the attention of p on p.stream. Throws Error(value) for the argument rules that need the
// stream, the kernel or GPU memory (host indptrs under graph capture, more work items than the
// kernel numbers, GPU indptr values), Error(runtime) when the device cannot run it.
// Returns the canonical name of the attention kernel it launched (the string lives as long as the
// process), or nullptr when p had nothing to launch (no query rows).
const char* execute(const Problem& p);

}  // namespace tsattn
