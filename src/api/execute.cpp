#include "api/execute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
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
#include "plan/cta_pairs.hpp"
#include "plan/host_plan.hpp"
#include "plan/kernel_params.hpp"
#include "plan/split_tail.hpp"
#include "plan/tensor_maps.hpp"
#include "plan/work_order.hpp"

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
void transpose_v(const driver::LoadedKernel& kernel, const TsattnPrefillParams& params, const Problem& p,
                 const driver::DeviceInfo& device, const TransposedV& layout, TsattnTensorMaps& maps,
                 std::optional<StreamBuffer>& workspace, CUstream stream) {
  if (kernel.v_transposer == nullptr) raise(ErrorKind::runtime, "kernel {} has no V transpose kernel", kernel.name);
  workspace.emplace(layout.bytes, stream);
  encode_transposed_v_map(layout, reinterpret_cast<void*>(workspace->get()), maps.v);
  // One warp per 32-column group of a V^T row block; 4 warps per CTA, a few waves at most.
  const int64_t groups = layout.keys / 32 * (p.layout == Layout::fixed ? p.batch : 1);
  const int64_t ctas = std::min<int64_t>((groups + 3) / 4, int64_t{device.multiprocessors} * 16);
  CUdeviceptr vt = workspace->get();
  long long vt_keys = layout.keys;
  void* arguments[] = {const_cast<TsattnPrefillParams*>(&params), &vt, &vt_keys};
  driver::check(driver::api().cuLaunchKernel(kernel.v_transposer, static_cast<unsigned>(std::max<int64_t>(ctas, 1)),
                                             static_cast<unsigned>(p.num_kv_heads), 1, 128, 1, 1, 0, stream, arguments,
                                             nullptr),
                fmt::format("launching the V transpose of {}", kernel.name));
}

bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(driver::api().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Lays host data out back to back at 16-byte boundaries, for one upload.
class UploadImage {
 public:
  template <class T>
  size_t append(const T* data, size_t count) {
    const size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + sizeof(T) * count);
    std::memcpy(bytes_.data() + offset, data, sizeof(T) * count);
    return offset;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// A split tail for a dense fixed-layout launch in static order (plan/split_tail.hpp): sets
// params.split_* and puts the zeroed counts and the partial buffers in `workspace`, or does nothing.
void plan_split_tail(const Problem& p, const driver::LoadedKernel& kernel, int block_n, int64_t slots,
                     int64_t walkers, int ctas_per_walker, TsattnPrefillParams& params,
                     std::optional<StreamBuffer>& workspace, CUstream stream) {
  const int64_t steps = (p.kv_tokens + block_n - 1) / block_n;
  const int64_t tail = split_tail_slots(slots, walkers, steps, knob_string(Knob::split_tail));
  if (tail == 0) return;
  // Per boundary between walkers (< walkers) and CTA: a count per consumer warp (8), and a buffer
  // for each of the two parts of the slot cut there.
  const int64_t counts = walkers * ctas_per_walker * 8;
  const size_t counts_bytes = (static_cast<size_t>(counts) * sizeof(int) + 255) / 256 * 256;
  const size_t partial_bytes = static_cast<size_t>(walkers * ctas_per_walker * 2) * kernel.split_partial_bytes;
  workspace.emplace(counts_bytes + partial_bytes, stream);
  driver::check(driver::api().cuMemsetD32Async(workspace->get(), 0, static_cast<size_t>(counts), stream),
                "zeroing the split tail's counts");
  params.split_slots = static_cast<int>(tail);
  params.split_flags = reinterpret_cast<int*>(workspace->get());
  params.split_partials = reinterpret_cast<float*>(workspace->get() + counts_bytes);
  logf(LogLevel::debug, "{}: the last {} of {} slots go out by key tiles ({} per slot) over {} walkers", kernel.name,
       tail, slots, steps, walkers);
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

  TsattnPrefillParams params = make_kernel_params(p);
  const driver::Api& cu = driver::api();
  // CTA pairs (plan/cta_pairs.hpp) decide the list's tile size: a pair along query tiles plans
  // tiles of 2 x BLOCK_M rows, one half per CTA.
  const bool pairs_fit = kernel.pairs_function != nullptr && kernel.max_active_pairs > 0;
  const PairAxis pair_axis = choose_pair_axis(p, PairsKernel{pairs_fit, pairs_fit && kernel.pairs_along_tiles});
  params.pair_tiles = pair_axis == PairAxis::query_tiles ? 1 : 0;
  const int tile_rows = static_cast<int>(list_tile_rows(pair_axis, kernel.block_m));
  std::optional<StreamBuffer> workspace;
  int64_t max_tiles = 0;  // an upper bound on the tiles the kernel will see
  std::vector<TsattnTile> host_tiles;  // the host-planned list (packed layout, host indptrs); else empty
  if (p.layout == Layout::packed && p.indptr_on_host) {
    if (stream_is_capturing(stream))
      raise(ErrorKind::value, "the stream is capturing a CUDA graph but qo_indptr and kv_indptr are on the host, so "
            "the plan would be baked into the graph; pass them on the GPU to capture this call");
    host_tiles = plan_tiles_on_host(p, tile_rows);
  }
  const int64_t resident = int64_t{device.multiprocessors} * kernel.ctas_per_multiprocessor;

  // Dynamic order: a zeroed counter in this call's workspace (plan/work_order.hpp).
  const int64_t max_items = ((p.q_tokens + tile_rows - 1) / tile_rows + p.batch) * p.num_qo_heads;
  // Such a list needs more than 2^31 x 32 KB of queries; no GPU holds it, but say so if it comes.
  if (kernel.dynamic_order && max_items >= std::numeric_limits<int32_t>::max())
    raise(ErrorKind::value, "q has {} query tiles x {} heads, more work items than kernel {} can number (2^31)",
          max_items / p.num_qo_heads, p.num_qo_heads, kernel.name);
  const bool dynamic_order =
      kernel.dynamic_order && claims_dynamically(p, knob_string(Knob::work_order), tile_rows,
                                                 p.indptr_on_host ? &host_tiles : nullptr, resident);
  const unsigned long long zero_counter = 0;

  if (p.layout == Layout::fixed) {
    // The kernel enumerates the regular tile grid itself: nothing to upload, capturable.
    max_tiles = p.batch * ((p.q_tokens + tile_rows - 1) / tile_rows);
    if (dynamic_order && max_tiles > 0) {
      workspace.emplace(sizeof zero_counter, stream);
      driver::check(cu.cuMemsetD32Async(workspace->get(), 0, sizeof zero_counter / 4, stream),
                    "zeroing the work counter");
      params.work_counter = reinterpret_cast<unsigned long long*>(workspace->get());
    }
  } else if (p.indptr_on_host) {
    max_tiles = static_cast<int64_t>(host_tiles.size());
    if (max_tiles == 0) return nullptr;  // no query rows
    const int num_tiles = static_cast<int>(host_tiles.size());
    UploadImage image;
    const size_t count_offset = image.append(&num_tiles, 1);
    const size_t tiles_offset = image.append(host_tiles.data(), host_tiles.size());
    const size_t qo_offset = image.append(p.qo_indptr_host.data(), p.qo_indptr_host.size());
    const size_t kv_offset = image.append(p.kv_indptr_host.data(), p.kv_indptr_host.size());
    const size_t counter_offset = image.append(&zero_counter, 1);
    workspace.emplace(image.bytes().size(), stream);
    // From pageable memory: the driver stages the bytes before returning, so `image` may go.
    driver::check(cu.cuMemcpyHtoDAsync(workspace->get(), image.bytes().data(), image.bytes().size(), stream),
                  "uploading the tile list");
    params.num_tiles = reinterpret_cast<const int*>(workspace->get() + count_offset);
    params.tiles = reinterpret_cast<const TsattnTile*>(workspace->get() + tiles_offset);
    params.qo_indptr = reinterpret_cast<const int*>(workspace->get() + qo_offset);
    params.kv_indptr = reinterpret_cast<const int*>(workspace->get() + kv_offset);
    if (dynamic_order) params.work_counter = reinterpret_cast<unsigned long long*>(workspace->get() + counter_offset);
  } else {
    // Indptrs on the GPU. Outside graph capture a host sync is allowed, so their values are read
    // back in stream order and held to the same rules as host indptrs (a wrong answer is worse
    // than a sync). Under capture nothing can be read: the planner and the kernel clamp instead.
    if (!stream_is_capturing(stream)) {
      std::vector<int32_t> qo(static_cast<size_t>(p.batch) + 1), kv(qo.size());
      const size_t bytes = qo.size() * sizeof(int32_t);
      driver::check(cu.cuMemcpyDtoHAsync(qo.data(), reinterpret_cast<CUdeviceptr>(p.qo_indptr), bytes, stream),
                    "reading qo_indptr");
      driver::check(cu.cuMemcpyDtoHAsync(kv.data(), reinterpret_cast<CUdeviceptr>(p.kv_indptr), bytes, stream),
                    "reading kv_indptr");
      driver::check(cu.cuStreamSynchronize(stream), "reading the indptrs");
      check_device_indptr_values(p, std::move(qo), std::move(kv));
    }
    // The device planner writes the tile list in stream order, without a host sync, so this call
    // can be captured. Sanitized requests never exceed this bound.
    max_tiles = std::min<int64_t>((p.q_tokens + tile_rows - 1) / tile_rows + p.batch, std::numeric_limits<int>::max());
    if (kernel.planner == nullptr) raise(ErrorKind::runtime, "kernel {} has no device planner for GPU indptrs", kernel.name);
    if (max_tiles == 0) return nullptr;  // no query rows
    // {num_tiles, pad, work counter (zeroed by the planner)} in 16 bytes, then the tiles.
    workspace.emplace(16 + sizeof(TsattnTile) * static_cast<size_t>(max_tiles), stream);
    params.num_tiles = reinterpret_cast<const int*>(workspace->get());
    params.tiles = reinterpret_cast<const TsattnTile*>(workspace->get() + 16);
    if (dynamic_order) params.work_counter = reinterpret_cast<unsigned long long*>(workspace->get() + 8);
    auto* tiles_out = const_cast<TsattnTile*>(params.tiles);
    auto* count_out = const_cast<int*>(params.num_tiles);
    int capacity = static_cast<int>(max_tiles);
    void* plan_arguments[] = {&params, &tiles_out, &count_out, &capacity};
    driver::check(cu.cuLaunchKernel(kernel.planner, 1, 1, 1, 1024, 1, 1, 0, stream, plan_arguments, nullptr),
                  fmt::format("launching the device planner of {}", kernel.name));
  }

  const int64_t items = max_tiles * p.num_qo_heads;
  if (items == 0) return nullptr;  // no query rows: nothing to write
  std::optional<StreamBuffer> transposed_v;  // freed (in stream order) after the launch below
  if (choice.transposed_v) transpose_v(kernel, params, p, device, *choice.transposed_v, choice.maps, transposed_v, stream);
  // The sm90a kernel takes its TMA descriptors as a second __grid_constant__ parameter.
  void* params_only[] = {&params};
  void* params_and_maps[] = {&params, &choice.maps};
  void** arguments = spec.family == KernelFamily::sm90a ? params_and_maps : params_only;
  const bool paired = pair_axis != PairAxis::none;
  const int64_t pairs = std::min<int64_t>(pair_axis == PairAxis::heads ? items / 2 : items, kernel.max_active_pairs);
  const ListWalkers walkers = pair_axis == PairAxis::heads ? ListWalkers{pairs, 2}
                              : paired                     ? ListWalkers{pairs, 1}
                                                           : ListWalkers{std::min(items, resident), 1};
  std::optional<StreamBuffer> split_workspace;
  if (p.layout == Layout::fixed && p.mask == MaskMode::dense && kernel.split_partial_bytes > 0 && !dynamic_order)
    plan_split_tail(p, kernel, choice.tile.block_n, items / walkers.items_per_slot, walkers.slots, paired ? 2 : 1,
                    params, split_workspace, stream);
  // Kernels that walk one tile per chunk (sm90a e4m3: kChunkedOrder) say so in tsattn_chunked_order.
  const std::vector<TsattnTile>* planned_tiles = host_tiles.empty() ? nullptr : &host_tiles;
  params.tiles_per_chunk =
      kernel.chunked_order ? tiles_per_chunk(p, tile_rows, planned_tiles, max_tiles, walkers) : 1;
  if (paired) {
    logf(LogLevel::debug, "launching {} in CTA pairs along {}: {} clusters of 2, {} tiles per chunk, {} order",
         kernel.name, pair_axis_name(pair_axis), pairs, params.tiles_per_chunk, dynamic_order ? "dynamic" : "static");
    const driver::PairsLaunch launch(kernel, static_cast<unsigned>(pairs), stream);
    driver::check(cu.cuLaunchKernelEx(&launch.config, kernel.pairs_function, arguments, nullptr),
                  fmt::format("launching {} in CTA pairs", kernel.name));
    return kernel.name.c_str();
  }
  logf(LogLevel::debug, "launching {}: one CTA per work item, {} tiles per chunk, {} order", kernel.name,
       params.tiles_per_chunk, dynamic_order ? "dynamic" : "static");
  const auto grid = static_cast<unsigned>(std::min(items, resident));
  driver::check(cu.cuLaunchKernel(kernel.function, grid, 1, 1, static_cast<unsigned>(kernel.threads_per_cta), 1, 1,
                                  static_cast<unsigned>(kernel.dynamic_smem_bytes), stream, arguments, nullptr),
                fmt::format("launching {}", kernel.name));
  return kernel.name.c_str();  // module table entries live as long as the process
}

}  // namespace tsattn
