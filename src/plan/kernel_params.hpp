// kernel_params.hpp - a validated Problem as the kernels' POD parameter block.
#pragma once

#include "api/problem.hpp"
#include "prefill_params.h"

namespace tsattn {

// Every field but the device pointers the launch fills in: tiles, num_tiles, and the indptrs
// when they were uploaded from the host.
TsattnPrefillParams make_kernel_params(const Problem& p);

}  // namespace tsattn
