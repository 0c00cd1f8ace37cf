// kernel_cache.hpp - KernelSpec (or MergeSpec, GatherSpec) -> cubin: the in-memory table, then the on-disk
// layers, then NVRTC.
//
// Single flight: concurrent callers of one spec wait for one lookup or compile; different specs
// compile in parallel; the table's mutex is held only to find or insert a slot, never while
// compiling. Needs no GPU (the AOT precompile tool uses it on machines without one).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/gather_spec.hpp"
#include "codegen/kernel_source.hpp"
#include "codegen/kernel_spec.hpp"
#include "codegen/merge_spec.hpp"
#include "common/sha256.hpp"
#include "jit/cache/disk_cache.hpp"
#include "jit/driver/module_table.hpp"

namespace tsattn::jit {

// Where a kernel's cubin came from the first time this process needed it.
enum class KernelOrigin { read_only_layer, writable_layer, compiled };
const char* kernel_origin_name(KernelOrigin origin);  // "read-only cache", "cache", "compiled"

// What the cache holds of any module: a prefill kernel's, a merge module's or a gather module's.
struct CompiledModule {
  std::string name;    // canonical name
  std::string symbol;  // kernel function in the cubin
  Digest key{};
  std::vector<uint8_t> cubin;
  nlohmann::json metadata;
  KernelOrigin origin = KernelOrigin::compiled;
};

struct CompiledKernel : CompiledModule {
  KernelSpec spec;
};

struct CompiledMerge : CompiledModule {
  MergeSpec spec;
};

struct CompiledGather : CompiledModule {
  GatherSpec spec;
};

// What the module table loads for a compiled kernel: its function, plus the helper kernels its
// spec's module carries (the device planner of packed layouts, the V transpose of sm90a e4m3).
// The span points into `kernel`, which must outlive the load.
driver::ModuleSource module_source(const CompiledKernel& kernel);

// What the module table loads for a gather module: the copy kernel, with the scan queued before it.
// The span points into `gather`, which must outlive the load.
driver::FunctionSource function_source(const CompiledGather& gather);

struct KernelCacheCounters {
  uint64_t memory_hits = 0;
  uint64_t memory_misses = 0;  // each sent to the disk layers (and then maybe to NVRTC)
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  CacheCounters disk;
};

class KernelCache {
 public:
  // jit_enabled == false (TSATTN_DISABLE_JIT): a kernel missing from every layer is an error
  // naming it and the manifest entry that would build it.
  KernelCache(DiskCacheConfig disk_config, bool jit_enabled);

  // The process-wide cache, configured from the TSATTN_* environment at first use.
  static KernelCache& process();

  // The cubin of a supported spec. Throws Error(not_implemented) for a spec the table lacks,
  // Error(runtime) for a failed compile or a miss with JIT disabled.
  std::shared_ptr<const CompiledKernel> get(const KernelSpec& spec);
  // A merge module, through the same layers and counters (its own slots in memory). Throws as get.
  std::shared_ptr<const CompiledMerge> get(const MergeSpec& spec);
  // A gather module, likewise.
  std::shared_ptr<const CompiledGather> get(const GatherSpec& spec);

  KernelCacheCounters counters() const;
  DiskCache& disk() { return disk_; }

 private:
  template <class Compiled>
  using Slots = std::unordered_map<uint32_t, std::shared_future<std::shared_ptr<const Compiled>>>;

  // The single flight of get(): one lookup or compile per slot id, failures forgotten.
  template <class Compiled, class Spec>
  std::shared_ptr<const Compiled> single_flight(Slots<Compiled>& slots, const Spec& spec);
  std::shared_ptr<const CompiledKernel> find_or_compile(const KernelSpec& spec);
  std::shared_ptr<const CompiledMerge> find_or_compile(const MergeSpec& spec);
  std::shared_ptr<const CompiledGather> find_or_compile(const GatherSpec& spec);
  // Fills `module` from the disk layers, or compiles `source` for `target` and publishes it. `spec` is
  // the metadata's description, `manifest_hint` how a manifest would build it (for the
  // TSATTN_DISABLE_JIT error).
  void find_or_compile(CompiledModule& module, const GeneratedSource& source, Arch target, nlohmann::json spec,
                       const std::string& manifest_hint);

  DiskCache disk_;
  bool jit_enabled_;
  mutable std::mutex mutex_;
  Slots<CompiledKernel> kernels_;
  Slots<CompiledMerge> merges_;
  Slots<CompiledGather> gathers_;
  std::atomic<uint64_t> memory_hits_{0}, memory_misses_{0}, compiles_{0}, compile_failures_{0};
};

// The JSON of one manifest kernel entry that builds exactly this spec (for error messages and
// `tsattn precompile`).
nlohmann::json manifest_entry_for(const KernelSpec& spec);

}  // namespace tsattn::jit
