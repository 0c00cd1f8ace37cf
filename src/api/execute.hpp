// execute.hpp - run one validated Problem on its device: pick the kernel, plan, launch.
#pragma once

#include "api/problem.hpp"

namespace tsattn {

// Queues the attention of p on p.stream. Throws Error(runtime) when the device cannot run it.
// Returns the canonical name of the attention kernel it launched (the string lives as long as the
// process), or nullptr when p had nothing to launch (no query rows).
const char* execute(const Problem& p);

}  // namespace tsattn
