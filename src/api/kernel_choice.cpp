#include "api/kernel_choice.hpp"

#include <fmt/format.h>

#include <string_view>

#include <tsattn/tsattn.hpp>

#include "common/error.hpp"
#include "common/knobs.hpp"
#include "common/log.hpp"
#include "jit/kernel_cache.hpp"
#include "plan/short_keys.hpp"

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

KernelSpec portable(KernelSpec spec) {
  spec.family = KernelFamily::sm80;
  spec.short_keys = false;  // the portable family has one width
  spec.paged_kv = false;    // and reads packed K and V only
  return spec;
}

}  // namespace

Arch device_arch(const driver::DeviceInfo& device) {
  const std::optional<Arch> arch = arch_for_compute_capability(device.cc_major);
  if (!arch)
    raise(ErrorKind::not_implemented, "{} (compute capability {}.{}) is not supported; tsattn needs sm_80 or newer",
          device.name, device.cc_major, device.cc_minor);
  return *arch;
}

// Pages of 16 keys take eight boxes per key tile and slab: there the gather, then the packed kernel,
// is the faster of the two (docs/decisions.md, paged_kv).
constexpr int64_t kSmallestPagesReadInKernel = 32;

bool reads_pages_directly(const driver::DeviceInfo& device, Arch arch, tsattn_dtype input_dtype, int head_dim,
                          int64_t page_size) {
  KernelSpec spec;  // the causal kernel: every mask of a paged call has a paged variant or none
  spec.family = choose_family(device);
  spec.arch = arch;
  spec.mask = MaskVariant::causal;
  spec.head_dim = head_dim;
  spec.input_dtype = spec.output_dtype = input_dtype;
  spec.layout = Layout::packed;
  const std::string mode = knob_string(Knob::paged_kv);
  return has_paged_kv_variant(spec) &&
         (mode == "kernel" || (mode == "auto" && page_size >= kSmallestPagesReadInKernel));
}

KernelChoice choose_spec(const Problem& p, const driver::DeviceInfo& device, Arch arch, bool lse, bool short_keys) {
  KernelChoice choice{spec_for_problem(p, choose_family(device), arch, lse)};
  if (p.paged) {
    choice.spec.short_keys = has_short_keys_variant(choice.spec);
    if (!has_paged_kv_variant(choice.spec))
      raise(ErrorKind::runtime, "internal error: kernel {} has no paged variant, but the call's keys are in pages",
            canonical_name(choice.spec));
    choice.spec.paged_kv = true;
    choice.tile = tile_config(choice.spec);
    return choice;
  }
  if (choice.spec.family != KernelFamily::sm90a) return choice;
  if (!is_supported(choice.spec)) {
    const KernelChoice fallback{portable(choice.spec)};
    log_fallback(choice.spec, fallback.spec, sm90a_table_gap(choice.spec));
    return fallback;
  }
  choice.spec.short_keys = short_keys && has_short_keys_variant(choice.spec);
  choice.tile = tile_config(choice.spec);
  return choice;
}

MapShape map_shape(const KernelChoice& choice) {
  return {choice.tile.block_m, choice.tile.block_n, output_store_bytes(choice.spec), stores_output_by_tma(choice.spec)};
}

KernelChoice choose_kernel(const Problem& p, const driver::DeviceInfo& device, Arch arch) {
  const bool lse = p.lse.data != nullptr;
  KernelChoice choice = choose_spec(p, device, arch, lse);
  if (choice.spec.family != KernelFamily::sm90a) return choice;
  // TSATTN_SHORT_KEYS is read only where the spec has the variant (calls read knobs each time).
  if (!p.paged && has_short_keys_variant(choice.spec) &&
      wants_short_keys(p, p.kv_indptr_host, knob_string(Knob::short_keys)))
    choice = choose_spec(p, device, arch, lse, true);
  TensorMapsOrReason maps = make_tensor_maps(p, map_shape(choice));
  if (!maps.ok() && p.paged)
    raise(ErrorKind::value, "kernel {} cannot read this paged call through TMA: {}", canonical_name(choice.spec),
          maps.reason);
  if (!maps.ok()) {
    const KernelChoice fallback{portable(choice.spec)};
    log_fallback(choice.spec, fallback.spec, maps.reason);
    return fallback;
  }
  choice.maps = maps.maps;
  choice.transposed_v = maps.transposed_v;
  return choice;
}

const driver::LoadedKernel& load_kernel(CUcontext context, const KernelChoice& choice) {
  const KernelSpec& spec = choice.spec;
  const driver::LoadedKernel& kernel = driver::loaded_kernel(context, spec.id(), [&] {
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
  facts.list_in_kernel_max_batch = kernel.list_in_kernel_max_batch;
  facts.transposed_v_keys = choice.transposed_v ? choice.transposed_v->keys : 0;
  return facts;
}

}  // namespace tsattn
