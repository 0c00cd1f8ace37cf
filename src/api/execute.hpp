// execute.hpp - run one validated Problem on its device: choose and load the kernel, plan the
// launch (plan/launch_plan.hpp), check what only the device can check, allocate, launch.
#pragma once

#include "api/problem.hpp"

namespace tsattn {

// What a call does with packed indptrs in GPU memory outside graph capture.
enum class DeviceIndptrs {
  // Read back in stream order and held to the rules of host indptrs (batch_prefill: a wrong answer
  // is worse than a sync).
  read_back,
  // Never read by the host: the planner and the kernels clamp them (paged calls, whose kv_indptr
  // the page gather wrote and whose tables are not read back).
  clamped,
};

// Queues the attention of p on p.stream. Throws Error(value) for the argument rules that need the
// stream, the kernel or GPU memory (host indptrs under graph capture, more work items than the
// kernel numbers, GPU indptr values), Error(runtime) when the device cannot run it.
// Returns the canonical name of the attention kernel it launched (the string lives as long as the
// process), or nullptr when p had nothing to launch (no query rows).
const char* execute(const Problem& p, DeviceIndptrs device_indptrs = DeviceIndptrs::read_back);

}  // namespace tsattn
