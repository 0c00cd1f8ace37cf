#include "api/execute.hpp"

#include <limits>
#include <optional>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "api/kernel_choice.hpp"
#include "api/launch.hpp"
#include "api/validate.hpp"
#include "common/error.hpp"
#include "common/knobs.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/driver/workspace_pool.hpp"
#include "plan/kernel_params.hpp"
#include "plan/launch_plan.hpp"

namespace tsattn {

namespace {

// The argument rules validation cannot apply, in one step before anything is queued: they need
// the stream's capture state, the kernel's item numbering or the indptr values in GPU memory,
// none of which validate_arguments() has (it runs without a driver, for the CPU oracle too).
void check_launch_arguments(const Problem& p, const LaunchPlan& plan, const driver::LoadedKernel& kernel,
                            CUstream stream, DeviceIndptrs device_indptrs) {
  if (plan.tile_list == TileList::host_planned && stream_is_capturing(stream)) raise_host_indptrs_under_capture();
  // Such a list needs more than 2^31 x 32 KB of queries; no GPU holds it, but say so if it comes.
  if (kernel.narrow_walk && plan.max_items >= std::numeric_limits<int32_t>::max())
    raise(ErrorKind::value, "q has {} query tiles x {} heads, more work items than kernel {} can number (2^31)",
          plan.max_items / p.num_qo_heads, p.num_qo_heads, kernel.name);
  // GPU indptrs: outside graph capture a host sync is allowed, so their values are read back in
  // stream order and held to the same rules as host indptrs (a wrong answer is worse than a
  // sync). Under capture nothing can be read: the planner and the kernel clamp instead.
  if (plan.tile_list != TileList::device_planned || device_indptrs == DeviceIndptrs::clamped ||
      stream_is_capturing(stream))
    return;
  const driver::Api& cu = driver::api();
  std::vector<int32_t> qo(static_cast<size_t>(p.batch) + 1), kv(qo.size());
  const size_t bytes = qo.size() * sizeof(int32_t);
  driver::check(cu.cuMemcpyDtoHAsync(qo.data(), reinterpret_cast<CUdeviceptr>(p.qo_indptr), bytes, stream),
                "reading qo_indptr");
  driver::check(cu.cuMemcpyDtoHAsync(kv.data(), reinterpret_cast<CUdeviceptr>(p.kv_indptr), bytes, stream),
                "reading kv_indptr");
  driver::check(cu.cuStreamSynchronize(stream), "reading the indptrs");
  check_device_indptr_values(p, std::move(qo), std::move(kv));
}

// The call's stream-ordered buffers (the workspace, its host image uploaded from pageable memory,
// which the driver stages before returning; V^T for e4m3 on sm90a), then the launches. The
// buffers are freed in stream order after them.
void launch(const Problem& p, const LaunchPlan& plan, const driver::LoadedKernel& kernel, KernelChoice& choice,
            CUstream stream) {
  const WorkspaceLayout& layout = plan.workspace;
  std::optional<driver::StreamBuffer> workspace, transposed_v;
  if (layout.bytes > 0) workspace.emplace(layout.bytes, stream, p.device_id);
  LaunchMemory memory;
  memory.workspace = workspace ? workspace->get() : 0;
  if (layout.upload_bytes > 0) {
    const std::vector<uint8_t> image = upload_image(plan, p);
    driver::check(driver::api().cuMemcpyHtoDAsync(memory.workspace, image.data(), image.size(), stream),
                  "uploading the tile list");
  }
  if (plan.transpose_ctas > 0) {
    transposed_v.emplace(choice.transposed_v->bytes, stream, p.device_id);
    memory.transposed_v = transposed_v->get();
  }
  TsattnPrefillParams params = make_kernel_params(p);
  queue_launches(plan, kernel, choice, params, memory, stream);
}

}  // namespace

const char* execute(const Problem& p, DeviceIndptrs device_indptrs) {
  auto stream = static_cast<CUstream>(p.stream);
  driver::ContextScope scope(stream, p.device_id);
  const driver::DeviceInfo& device = scope.device();
  KernelChoice choice = choose_kernel(p, device, device_arch(device));
  const driver::LoadedKernel& kernel = load_kernel(scope.context(), choice);
  const LaunchPlan plan = plan_launch(p, kernel_facts(kernel, choice), device.multiprocessors, knob_string);
  check_launch_arguments(p, plan, kernel, stream, device_indptrs);
  if (plan.tile_list == TileList::device_planned && kernel.planner == nullptr)
    raise(ErrorKind::runtime, "kernel {} has no device planner for GPU indptrs", kernel.name);
  if (!plan.launches) return nullptr;  // no query rows: nothing to write
  launch(p, plan, kernel, choice, stream);
  return kernel.name.c_str();  // module table entries live as long as the process
}

}  // namespace tsattn
