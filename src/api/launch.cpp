#include "api/launch.hpp"

#include <fmt/format.h>

#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn {

namespace {

// The message names the kernel, so it is formatted only when the launch failed.
void check_launch(CUresult result, fmt::format_string<const std::string&> what, const std::string& kernel) {
  if (result != CUDA_SUCCESS) driver::check(result, fmt::format(what, kernel));
}

// e4m3 on sm90a: writes V^T into memory.transposed_v (tsattn_transpose_v of the kernel's module)
// and encodes maps.v for it.
void transpose_v(const driver::LoadedKernel& kernel, const TsattnPrefillParams& params, unsigned ctas,
                 const TransposedV& layout, CUdeviceptr vt, TsattnTensorMaps& maps, CUstream stream) {
  if (kernel.v_transposer == nullptr) raise(ErrorKind::runtime, "kernel {} has no V transpose kernel", kernel.name);
  encode_transposed_v_map(layout, reinterpret_cast<void*>(vt), maps.v);
  long long vt_keys = layout.keys;
  void* arguments[] = {const_cast<TsattnPrefillParams*>(&params), &vt, &vt_keys};
  const auto kv_heads = static_cast<unsigned>(params.num_qo_heads / params.group_size);
  check_launch(
      driver::api().cuLaunchKernel(kernel.v_transposer, ctas, kv_heads, 1, 128, 1, 1, 0, stream, arguments, nullptr),
      "launching the V transpose of {}", kernel.name);
}

}  // namespace

bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(driver::api().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void raise_host_indptrs_under_capture() {
  raise(ErrorKind::value,
        "the stream is capturing a CUDA graph but qo_indptr and kv_indptr are on the host, so "
        "the plan would be baked into the graph; pass them on the GPU to capture this call");
}

void queue_launches(const LaunchPlan& plan, const driver::LoadedKernel& kernel, KernelChoice& choice,
                    TsattnPrefillParams& params, const LaunchMemory& memory, CUstream stream) {
  const driver::Api& cu = driver::api();
  const WorkspaceLayout& layout = plan.workspace;
  const CUdeviceptr base = memory.workspace;
  if (layout.clear_work_counter && !memory.work_counter_zero)
    driver::check(cu.cuMemsetD32Async(base + layout.work_counter.offset, 0, layout.work_counter.bytes / 4, stream),
                  "zeroing the work counter");
  if (layout.split_counts.present())
    driver::check(cu.cuMemsetD32Async(base + layout.split_counts.offset, 0, layout.split_counts.bytes / 4, stream),
                  "zeroing the split tail's counts");
  fill_launch_params(plan, base, params);

  if (plan.list_in_kernel && memory.list_state_zero) {
    logf(LogLevel::debug, "{}: the kernel builds its tile list", kernel.name);
  } else if (plan.plans_on_device) {
    // The device planner writes the tile list in stream order, without a host sync, so the call
    // can be captured.
    auto* tiles_out = const_cast<TsattnTile*>(params.tiles);
    auto* count_out = const_cast<int*>(params.num_tiles);
    int capacity = static_cast<int>(plan.max_tiles);
    void* plan_arguments[] = {&params, &tiles_out, &count_out, &capacity};
    check_launch(cu.cuLaunchKernel(kernel.planner, 1, 1, 1, 1024, 1, 1, 0, stream, plan_arguments, nullptr),
                 "launching the device planner of {}", kernel.name);
  }
  if (plan.transpose_ctas > 0)
    transpose_v(kernel, params, plan.transpose_ctas, *choice.transposed_v, memory.transposed_v, choice.maps, stream);
  if (plan.split_slots > 0)
    logf(LogLevel::debug, "{}: the last {} of {} slots go out by key tiles ({} per slot) over {} walkers", kernel.name,
         plan.split_slots, plan.slots(), plan.split_steps, plan.walkers.slots);

  // The sm90a kernel takes its TMA descriptors as a second __grid_constant__ parameter.
  void* params_only[] = {&params};
  void* params_and_maps[] = {&params, &choice.maps};
  void** arguments = choice.spec.family == KernelFamily::sm90a ? params_and_maps : params_only;
  const auto grid = static_cast<unsigned>(plan.walkers.slots);
  const char* order = plan.dynamic_order ? "dynamic" : "static";
  if (plan.paired()) {
    logf(LogLevel::debug, "launching {} in CTA pairs along {}: {} clusters of 2, {} tiles per chunk, {} order",
         kernel.name, pair_axis_name(plan.pair_axis), grid, plan.tiles_per_chunk, order);
    const driver::PairsLaunch pairs(kernel, grid, stream);
    check_launch(cu.cuLaunchKernelEx(&pairs.config, kernel.pairs_function, arguments, nullptr),
                 "launching {} in CTA pairs", kernel.name);
    return;
  }
  logf(LogLevel::debug, "launching {}: one CTA per work item, {} tiles per chunk, {} order", kernel.name,
       plan.tiles_per_chunk, order);
  check_launch(cu.cuLaunchKernel(kernel.function, grid, 1, 1, static_cast<unsigned>(kernel.threads_per_cta), 1, 1,
                                 static_cast<unsigned>(kernel.dynamic_smem_bytes), stream, arguments, nullptr),
               "launching {}", kernel.name);
}

}  // namespace tsattn
