#include "jit/kernel_cache.hpp"

#include <fmt/format.h>

#include <chrono>

#include "api/dtype.hpp"
#include "common/error.hpp"
#include "codegen/embedded_files.hpp"
#include "codegen/kernel_source.hpp"
#include "codegen/spec_table.hpp"
#include "common/knobs.hpp"
#include "common/log.hpp"
#include "jit/cache/entry_format.hpp"
#include "jit/cache/key.hpp"
#include "jit/nvrtc/compiler.hpp"
#include "paged/gather_params.h"

namespace tsattn::jit {

namespace {

// Every embedded template travels as an NVRTC in-memory header, and every one enters the key:
// a change to any template recompiles every kernel, which is simple and never stale.
std::vector<nvrtc::NvrtcHeader> template_headers() {
  std::vector<nvrtc::NvrtcHeader> headers;
  for (const EmbeddedFile& file : embedded_templates()) headers.push_back({std::string(file.name), file.text});
  return headers;
}

nlohmann::json spec_json(const KernelSpec& spec) {
  return {{"family", family_name(spec.family)},          {"arch", arch_name(spec.arch)},
          {"mask", mask_variant_name(spec.mask)},        {"head_dim", spec.head_dim},
          {"input_dtype", dtype_name(spec.input_dtype)}, {"output_dtype", dtype_name(spec.output_dtype)},
          {"layout", layout_name(spec.layout)},          {"lse", spec.lse}};
}

}  // namespace

const char* kernel_origin_name(KernelOrigin origin) {
  switch (origin) {
    case KernelOrigin::read_only_layer: return "read-only cache";
    case KernelOrigin::writable_layer: return "cache";
    case KernelOrigin::compiled: return "compiled";
  }
  return "?";
}

nlohmann::json manifest_entry_for(const KernelSpec& spec) {
  return {{"family", family_name(spec.family)},
          {"head_dim", {spec.head_dim}},
          {"input_dtype", {short_dtype_name(spec.input_dtype)}},
          {"output_dtype", {short_dtype_name(spec.output_dtype)}},
          {"mask", {mask_variant_name(spec.mask)}},
          {"layout", {layout_name(spec.layout)}},
          {"lse", {spec.lse}}};
}

KernelCache::KernelCache(DiskCacheConfig disk_config, bool jit_enabled)
    : disk_(std::move(disk_config)), jit_enabled_(jit_enabled) {}

KernelCache& KernelCache::process() {
  static KernelCache cache = [] {
    warn_about_unknown_variables();
    return KernelCache(DiskCache::config_from_environment(), !knob_bool(Knob::disable_jit));
  }();
  return cache;
}

std::shared_ptr<const CompiledKernel> KernelCache::get(const KernelSpec& spec) { return single_flight(kernels_, spec); }

std::shared_ptr<const CompiledMerge> KernelCache::get(const MergeSpec& spec) { return single_flight(merges_, spec); }

std::shared_ptr<const CompiledGather> KernelCache::get(const GatherSpec& spec) { return single_flight(gathers_, spec); }

template <class Compiled, class Spec>
std::shared_ptr<const Compiled> KernelCache::single_flight(Slots<Compiled>& slots, const Spec& spec) {
  std::promise<std::shared_ptr<const Compiled>> promise;
  std::shared_future<std::shared_ptr<const Compiled>> future;
  {
    std::lock_guard lock(mutex_);
    auto it = slots.find(spec.id());
    if (it != slots.end()) {
      ++memory_hits_;
      future = it->second;
    } else {
      ++memory_misses_;
      slots.emplace(spec.id(), promise.get_future().share());
    }
  }
  if (future.valid()) return future.get();  // waits while another thread finds or compiles it

  try {
    std::shared_ptr<const Compiled> module = find_or_compile(spec);
    promise.set_value(module);
    return module;
  } catch (...) {
    // Waiters see this failure; later callers try again (the cause may have been transient).
    promise.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    slots.erase(spec.id());
    throw;
  }
}

std::shared_ptr<const CompiledKernel> KernelCache::find_or_compile(const KernelSpec& spec) {
  auto kernel = std::make_shared<CompiledKernel>();
  kernel->spec = spec;
  find_or_compile(*kernel, generate_source(spec), spec.arch, spec_json(spec),
                  fmt::format("M.json's \"kernels\" list has {}", manifest_entry_for(spec).dump()));
  return kernel;
}

std::shared_ptr<const CompiledMerge> KernelCache::find_or_compile(const MergeSpec& spec) {
  auto merge = std::make_shared<CompiledMerge>();
  merge->spec = spec;
  find_or_compile(*merge, generate_source(spec), spec.arch,
                  {{"kind", "merge"}, {"arch", arch_name(spec.arch)}, {"dtype", dtype_name(spec.dtype)}},
                  fmt::format("M.json has \"merge\": [\"{}\"]", merge_dtype_name(spec.dtype)));
  return merge;
}

std::shared_ptr<const CompiledGather> KernelCache::find_or_compile(const GatherSpec& spec) {
  auto gather = std::make_shared<CompiledGather>();
  gather->spec = spec;
  find_or_compile(*gather, generate_source(spec), spec.arch, {{"kind", "gather_pages"}, {"arch", arch_name(spec.arch)}},
                  "M.json has \"gather_pages\": true");
  return gather;
}

void KernelCache::find_or_compile(CompiledModule& module, const GeneratedSource& source, Arch target,
                                  nlohmann::json spec, const std::string& manifest_hint) {
  const std::string arch = arch_name(target);
  nvrtc::CompileRequest request{source.name, source.text, template_headers(), arch, {}};

  KeyIngredients ingredients;
  ingredients.canonical_name = source.name;
  ingredients.source = source.text;
  for (const nvrtc::NvrtcHeader& header : request.headers) ingredients.headers.emplace_back(header.name, header.text);
  ingredients.arch = arch;
  ingredients.nvrtc_version = nvrtc::nvrtc_version();
  ingredients.options = nvrtc::base_options(arch);
  ingredients.environment = cache_key_environment();

  module.name = source.name;
  module.symbol = source.symbol;
  module.key = compute_cache_key(ingredients);

  if (std::optional<CachedEntry> entry = disk_.lookup(module.key, arch)) {
    module.cubin = std::move(entry->payload);
    module.metadata = std::move(entry->metadata);
    module.origin = entry->layer == LayerKind::read_only ? KernelOrigin::read_only_layer : KernelOrigin::writable_layer;
    logf(LogLevel::info, "kernel {} loaded from {}", module.name, entry->path);
    return;
  }

  if (!jit_enabled_)
    raise(ErrorKind::runtime,
          "kernel {} is not in any cache layer and TSATTN_DISABLE_JIT forbids compiling it; precompile it with "
          "`tsattn precompile --arch {} --manifest M.json` where {}",
          module.name, arch, manifest_hint);

  ++compiles_;
  nvrtc::CompileResult compiled;
  try {
    compiled = nvrtc::compile_to_cubin(request);
  } catch (...) {
    ++compile_failures_;
    throw;
  }
  const nvrtc::PtxasReport& ptxas = compiled.ptxas;
  if (ptxas.spill_store_bytes > 0 || ptxas.spill_load_bytes > 0 || !ptxas.serialization_notes.empty())
    warn_once(module.name,
              fmt::format("kernel {} spills {} bytes or serializes wgmma ({} notes{}{})", module.name,
                          ptxas.spill_store_bytes + ptxas.spill_load_bytes, ptxas.serialization_notes.size(),
                          ptxas.serialization_notes.empty() ? "" : "; first: ",
                          ptxas.serialization_notes.empty() ? "" : ptxas.serialization_notes.front()));
  EntryMetadata metadata;
  metadata.canonical_name = module.name;
  metadata.spec = std::move(spec);
  metadata.registers = ptxas.registers;
  metadata.spill_bytes = ptxas.spill_store_bytes + ptxas.spill_load_bytes;
  metadata.shared_bytes = ptxas.shared_bytes;
  metadata.compile_ms = compiled.compile_ms;
  metadata.arch = arch;
  metadata.nvrtc_version = ingredients.nvrtc_version;
  metadata.created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  module.metadata = metadata.to_json();
  module.cubin = std::move(compiled.cubin);
  module.origin = KernelOrigin::compiled;
  logf(LogLevel::info, "kernel {} compiled in {:.0f} ms ({} registers)", module.name, compiled.compile_ms,
       ptxas.registers);
  disk_.publish(module.key, arch, module.metadata, module.cubin);
}

KernelCacheCounters KernelCache::counters() const {
  KernelCacheCounters c;
  c.memory_hits = memory_hits_.load();
  c.memory_misses = memory_misses_.load();
  c.compiles = compiles_.load();
  c.compile_failures = compile_failures_.load();
  c.disk = disk_.counters();
  return c;
}

driver::ModuleSource module_source(const CompiledKernel& kernel) {
  return driver::ModuleSource{kernel.name,
                              kernel.symbol,
                              kernel.cubin,
                              kernel.spec.layout == Layout::packed,
                              transposes_v(kernel.spec),
                              kernel_traits(kernel.spec)};
}

driver::FunctionSource function_source(const CompiledGather& gather) {
  return driver::FunctionSource{gather.name, gather.symbol, gather.cubin, TSATTN_GATHER_THREADS,
                                scan_symbol(gather.spec)};
}

}  // namespace tsattn::jit
