// execute.hpp - run one validated Problem on its device: pick the kernel, plan, launch.
#pragma once

#include "api/problem.hpp"

namespace tsattn {

// Queues the attention of p on p.stream. Throws Error(runtime) when the device cannot run it.
void execute(const Problem& p);

}  // namespace tsattn
