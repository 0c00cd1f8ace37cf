// launch.hpp - queueing what a LaunchPlan says on a stream: the workspace's counters cleared, the
// device planner, the V^T pre-pass and the attention kernel (CTAs or CTA pairs). The memory comes
// from the caller: the one-shot call allocates it in stream order per call (api/execute.cpp), a
// plan owns it for all its runs (api/prefill_plan.cpp). Builds no string unless a launch fails.
#pragma once

#include <cuda.h>

#include "api/kernel_choice.hpp"
#include "jit/driver/module_table.hpp"
#include "plan/launch_plan.hpp"
#include "prefill_params.h"

namespace tsattn {

struct LaunchMemory {
  CUdeviceptr workspace = 0;       // plan.workspace.bytes in its layout; any upload already queued
  CUdeviceptr transposed_v = 0;    // choice.transposed_v->bytes when plan.transpose_ctas > 0
  bool work_counter_zero = false;  // the workspace's counter is known to be zero (a plan's)
  // ... and so is the list's state word: a plan's workspace, zeroed once, which every dynamic-order
  // launch leaves at 0 (templates/plan/list_in_kernel.cuh).
  bool list_state_zero = false;
};

bool stream_is_capturing(CUstream stream);

// Host indptrs while the stream captures a graph: the ValueError of the one-shot call and of runs.
[[noreturn]] void raise_host_indptrs_under_capture();

// params: make_kernel_params() of the problem; the plan's fields and pointers are filled in here.
// For e4m3 on sm90a, choice.maps.v is encoded for memory.transposed_v.
void queue_launches(const LaunchPlan& plan, const driver::LoadedKernel& kernel, KernelChoice& choice,
                    TsattnPrefillParams& params, const LaunchMemory& memory, CUstream stream);

}  // namespace tsattn
