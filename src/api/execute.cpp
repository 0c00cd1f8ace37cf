#include "api/execute.hpp"

#include <fmt/format.h>

#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "common/error.hpp"
#include "api/validate.hpp"
#include "codegen/spec_table.hpp"
#include "common/knobs.hpp"
#include "common/log.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/kernel_cache.hpp"
#include "plan/kernel_params.hpp"
#include "plan/launch_plan.hpp"
#include "plan/tensor_maps.hpp"

namespace tsattn {

namespace {

KernelFamily choose_family(const driver::DeviceInfo& device) {
  // Read once per process: the call's hot path builds no strings.
  static const std::optional<KernelFamily> forced = parse_family(knob_string(Knob::kernel_family));
  if (forced) return *forced;
  // The Hopper family is the fast path on sm_90 once it exists in the table; the portable
  // family serves everything else.
  for (const FamilyAxes& axes : kernel_families())
    if (axes.family == KernelFamily::sm90a && device.cc_major == 9) return KernelFamily::sm90a;
  return KernelFamily::sm80;
}

// What runs a problem: its spec and, for the sm90a family, the spec's tile and TMA descriptors
// (for e4m3 inputs v's map is encoded once the V^T workspace exists).
struct KernelChoice {
  KernelSpec spec;
  TileConfig tile{};
  TsattnTensorMaps maps{};
  std::optional<TransposedV> transposed_v{};
};

// Why the table has no sm90a kernel for a spec of that family. Static text: a call that lands here
// does so on every call, and must build no string unless the fallback is logged.
const char* sm90a_table_gap(const KernelSpec& spec) {
  if (spec.arch != Arch::sm_90a) return "sm90a kernels run only on compute capability 9.0 (sm_90a cubins)";
  return "the table of supported kernels has no sm90a kernel for it";
}

// A fallback is a performance surprise, so it is said at warn level the first time per spec and
// reason, and at info level on every later call. Nothing is formatted when warnings are off.
void log_fallback(const KernelSpec& wanted, const KernelSpec& used, std::string_view reason) {
  if (!log_enabled(LogLevel::warn)) return;
  const std::string wanted_name = canonical_name(wanted);
  const std::string message =
      fmt::format("sm90a path not usable for {}: {}; using {}", wanted_name, reason, canonical_name(used));
  if (!warn_once(fmt::format("execute.sm90a_fallback:{}:{}", wanted_name, reason), message))
    log(LogLevel::info, message);
}

// The family's spec for p; an sm90a spec that the table lacks, or whose TMA descriptors p cannot
// have, becomes the sm80 spec of the same problem (which every arch and problem has).
KernelChoice choose_kernel(const Problem& p, const driver::DeviceInfo& device, Arch arch) {
  KernelChoice choice{spec_for_problem(p, choose_family(device), arch)};
  if (choice.spec.family != KernelFamily::sm90a) return choice;
  KernelChoice portable{choice.spec};
  portable.spec.family = KernelFamily::sm80;
  if (!is_supported(choice.spec)) {
    log_fallback(choice.spec, portable.spec, sm90a_table_gap(choice.spec));
    return portable;
  }
  choice.tile = tile_config(choice.spec);
  const MapShape shape{choice.tile.block_m, choice.tile.block_n, output_store_bytes(choice.spec),
                       stores_output_by_tma(choice.spec)};
  TensorMapsOrReason maps = make_tensor_maps(p, shape);
  if (!maps.ok()) {
    log_fallback(choice.spec, portable.spec, maps.reason);
    return portable;
  }
  choice.maps = maps.maps;
  choice.transposed_v = maps.transposed_v;
  return choice;
}

// Device memory for one call, allocated and freed in stream order (so concurrent calls on
// different streams never share it, and a captured call's buffer becomes part of the graph).
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, CUstream stream) : stream_(stream) {
    driver::check(driver::api().cuMemAllocAsync(&pointer_, bytes, stream), "cuMemAllocAsync (tsattn workspace)");
  }
  ~StreamBuffer() { driver::api().cuMemFreeAsync(pointer_, stream_); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  CUdeviceptr get() const { return pointer_; }

 private:
  CUdeviceptr pointer_ = 0;
  CUstream stream_;
};

// e4m3 on sm90a: writes V^T into a new stream-ordered workspace (tsattn_transpose_v of the
// kernel's module) and encodes maps.v for it. The workspace is freed in stream order after the
// attention kernel that reads it.
void transpose_v(const driver::LoadedKernel& kernel, const TsattnPrefillParams& params, const Problem& p, unsigned ctas,
                 const TransposedV& layout, TsattnTensorMaps& maps, std::optional<StreamBuffer>& workspace,
                 CUstream stream) {
  if (kernel.v_transposer == nullptr) raise(ErrorKind::runtime, "kernel {} has no V transpose kernel", kernel.name);
  workspace.emplace(layout.bytes, stream);
  encode_transposed_v_map(layout, reinterpret_cast<void*>(workspace->get()), maps.v);
  CUdeviceptr vt = workspace->get();
  long long vt_keys = layout.keys;
  void* arguments[] = {const_cast<TsattnPrefillParams*>(&params), &vt, &vt_keys};
  driver::check(driver::api().cuLaunchKernel(kernel.v_transposer, ctas, static_cast<unsigned>(p.num_kv_heads), 1, 128,
                                             1, 1, 0, stream, arguments, nullptr),
                fmt::format("launching the V transpose of {}", kernel.name));
}

bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(driver::api().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

KernelFacts kernel_facts(const driver::LoadedKernel& kernel, const KernelChoice& choice) {
  KernelFacts facts;
  facts.block_m = kernel.block_m;
  facts.block_n = choice.tile.block_n;
  facts.dynamic_order = kernel.dynamic_order;
  facts.chunked_order = kernel.chunked_order;
  facts.split_partial_bytes = kernel.split_partial_bytes;
  facts.ctas_per_multiprocessor = kernel.ctas_per_multiprocessor;
  facts.pairs = kernel.pairs_function != nullptr && kernel.max_active_pairs > 0;
  facts.pairs_along_tiles = kernel.pairs_along_tiles;
  facts.max_active_pairs = kernel.max_active_pairs;
  facts.transposed_v_keys = choice.transposed_v ? choice.transposed_v->keys : 0;
  return facts;
}

// The argument rules validation cannot apply, in one step before anything is queued: they need
// the stream's capture state, the kernel's item numbering or the indptr values in GPU memory,
// none of which validate_arguments() has (it runs without a driver, for the CPU oracle too).
void check_launch_arguments(const Problem& p, const LaunchPlan& plan, const driver::LoadedKernel& kernel,
                            CUstream stream) {
  if (plan.tile_list == TileList::host_planned && stream_is_capturing(stream))
    raise(ErrorKind::value,
          "the stream is capturing a CUDA graph but qo_indptr and kv_indptr are on the host, so "
          "the plan would be baked into the graph; pass them on the GPU to capture this call");
  // Such a list needs more than 2^31 x 32 KB of queries; no GPU holds it, but say so if it comes.
  if (kernel.dynamic_order && plan.max_items >= std::numeric_limits<int32_t>::max())
    raise(ErrorKind::value, "q has {} query tiles x {} heads, more work items than kernel {} can number (2^31)",
          plan.max_items / p.num_qo_heads, p.num_qo_heads, kernel.name);
  // GPU indptrs: outside graph capture a host sync is allowed, so their values are read back in
  // stream order and held to the same rules as host indptrs (a wrong answer is worse than a
  // sync). Under capture nothing can be read: the planner and the kernel clamp instead.
  if (plan.tile_list != TileList::device_planned || stream_is_capturing(stream)) return;
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

// The module of choice.spec in this context, loaded (and compiled) on first use.
const driver::LoadedKernel& load_kernel(const driver::ContextScope& scope, const KernelChoice& choice) {
  const KernelSpec& spec = choice.spec;
  const driver::LoadedKernel& kernel = driver::loaded_kernel(scope.context(), spec.id(), [&] {
    std::shared_ptr<const jit::CompiledKernel> compiled = jit::KernelCache::process().get(spec);
    logf(LogLevel::info, "kernel {} comes from: {}", compiled->name, jit::kernel_origin_name(compiled->origin));
    // The kernel cache keeps every CompiledKernel alive, so the span stays valid.
    return jit::module_source(*compiled);
  });
  // The q descriptor's box is BLOCK_M rows as the table says; the module must agree.
  if (spec.family == KernelFamily::sm90a && kernel.block_m != choice.tile.block_m)
    raise(ErrorKind::runtime, "kernel {} has BLOCK_M {} but the table of supported kernels says {}", kernel.name,
          kernel.block_m, choice.tile.block_m);
  return kernel;
}

// Queues what the plan says on the stream: the workspace (allocated once, its host image uploaded
// from pageable memory, which the driver stages before returning, its counters cleared), the
// device planner, the V^T pre-pass and the attention kernel. Buffers are freed in stream order
// after the launches.
void launch(const Problem& p, const LaunchPlan& plan, const driver::LoadedKernel& kernel, KernelChoice& choice,
            CUstream stream) {
  const driver::Api& cu = driver::api();
  const WorkspaceLayout& layout = plan.workspace;
  std::optional<StreamBuffer> workspace;
  if (layout.bytes > 0) workspace.emplace(layout.bytes, stream);
  const CUdeviceptr base = workspace ? workspace->get() : 0;
  if (layout.upload_bytes > 0) {
    const std::vector<uint8_t> image = upload_image(plan, p);
    driver::check(cu.cuMemcpyHtoDAsync(base, image.data(), image.size(), stream), "uploading the tile list");
  }
  if (layout.clear_work_counter)
    driver::check(cu.cuMemsetD32Async(base + layout.work_counter.offset, 0, layout.work_counter.bytes / 4, stream),
                  "zeroing the work counter");
  if (layout.split_counts.present())
    driver::check(cu.cuMemsetD32Async(base + layout.split_counts.offset, 0, layout.split_counts.bytes / 4, stream),
                  "zeroing the split tail's counts");
  TsattnPrefillParams params = make_kernel_params(p);
  fill_launch_params(plan, base, params);

  if (plan.plans_on_device) {
    // The device planner writes the tile list in stream order, without a host sync, so this call
    // can be captured.
    auto* tiles_out = const_cast<TsattnTile*>(params.tiles);
    auto* count_out = const_cast<int*>(params.num_tiles);
    int capacity = static_cast<int>(plan.max_tiles);
    void* plan_arguments[] = {&params, &tiles_out, &count_out, &capacity};
    driver::check(cu.cuLaunchKernel(kernel.planner, 1, 1, 1, 1024, 1, 1, 0, stream, plan_arguments, nullptr),
                  fmt::format("launching the device planner of {}", kernel.name));
  }
  std::optional<StreamBuffer> transposed_v;
  if (plan.transpose_ctas > 0)
    transpose_v(kernel, params, p, plan.transpose_ctas, *choice.transposed_v, choice.maps, transposed_v, stream);
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
    driver::check(cu.cuLaunchKernelEx(&pairs.config, kernel.pairs_function, arguments, nullptr),
                  fmt::format("launching {} in CTA pairs", kernel.name));
    return;
  }
  logf(LogLevel::debug, "launching {}: one CTA per work item, {} tiles per chunk, {} order", kernel.name,
       plan.tiles_per_chunk, order);
  driver::check(cu.cuLaunchKernel(kernel.function, grid, 1, 1, static_cast<unsigned>(kernel.threads_per_cta), 1, 1,
                                  static_cast<unsigned>(kernel.dynamic_smem_bytes), stream, arguments, nullptr),
                fmt::format("launching {}", kernel.name));
}

}  // namespace

const char* execute(const Problem& p) {
  auto stream = static_cast<CUstream>(p.stream);
  driver::ContextScope scope(stream, p.device_id);
  const driver::DeviceInfo& device = scope.device();
  const std::optional<Arch> arch = arch_for_compute_capability(device.cc_major);
  if (!arch)
    raise(ErrorKind::not_implemented, "{} (compute capability {}.{}) is not supported; tsattn needs sm_80 or newer",
          device.name, device.cc_major, device.cc_minor);
  KernelChoice choice = choose_kernel(p, device, *arch);
  const driver::LoadedKernel& kernel = load_kernel(scope, choice);
  const LaunchPlan plan = plan_launch(p, kernel_facts(kernel, choice), device.multiprocessors, knob_string);
  check_launch_arguments(p, plan, kernel, stream);
  if (plan.tile_list == TileList::device_planned && kernel.planner == nullptr)
    raise(ErrorKind::runtime, "kernel {} has no device planner for GPU indptrs", kernel.name);
  if (!plan.launches) return nullptr;  // no query rows: nothing to write
  launch(p, plan, kernel, choice, stream);
  return kernel.name.c_str();  // module table entries live as long as the process
}

}  // namespace tsattn
