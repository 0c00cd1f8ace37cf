// module_table.hpp - cubins loaded into CUDA contexts, one module per (context, kernel spec).
//
// The hit path is a shared-lock hash lookup: no file I/O, hashing of sources or string
// building. Loading reads the kernel's launch facts from globals every attention module defines
// (tsattn_dynamic_smem_bytes, tsattn_threads_per_cta, tsattn_block_m, tsattn_chunked_order,
// tsattn_dynamic_order, tsattn_split_partial_bytes, tsattn_max_cluster_size,
// tsattn_pairs_along_tiles and tsattn_list_in_kernel_max_batch; sm80 modules define the sm90a-only
// ones as "off"), so the host never re-derives a kernel's shared-memory layout.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "codegen/spec_table.hpp"

namespace tsattn::driver {

// The globals every attention module defines and load reads (a missing one fails the load).
inline constexpr std::array<const char*, 9> kAttentionModuleGlobals = {
    "tsattn_dynamic_smem_bytes", "tsattn_threads_per_cta",   "tsattn_block_m",
    "tsattn_chunked_order",      "tsattn_dynamic_order",     "tsattn_split_partial_bytes",
    "tsattn_max_cluster_size",   "tsattn_pairs_along_tiles", "tsattn_list_in_kernel_max_batch"};

struct LoadedKernel {
  CUfunction function = nullptr;
  CUfunction planner = nullptr;       // tsattn_plan_tiles, in packed-layout modules only
  CUfunction v_transposer = nullptr;  // tsattn_transpose_v, in modules of specs that transposes_v()
  std::string name;                   // canonical kernel name, for errors
  int dynamic_smem_bytes = 0;
  int threads_per_cta = 0;
  // The kernel's settings (KernelTraits, codegen/spec_table.hpp), which its module globals confirmed.
  int block_m = 0;
  bool chunked_order = true;   // the kernel reads params.tiles_per_chunk
  bool dynamic_order = false;  // the kernel reads params.work_counter (sm90a 16-bit)
  bool narrow_walk = false;    // the kernel numbers its work items in 32 bits
  // The bytes of one part's buffer in params.split_partials; 0 where the kernel cannot split its
  // tail (sm90a 16-bit dense D128, fixed layout; prefill_params.h).
  int split_partial_bytes = 0;
  int ctas_per_multiprocessor = 0;  // occupancy at that shared-memory size
  // CTA pairs (sm90a 16-bit modules): <symbol>_pairs, for launches in clusters of 2 (null where
  // the kernel has none), and how many such clusters this GPU holds at once (0: pairs are not
  // possible).
  CUfunction pairs_function = nullptr;
  int max_active_pairs = 0;
  // Whether pairs_function also pairs along query tiles (dense and plain causal modules;
  // plan/cta_pairs.hpp), besides along heads.
  bool pairs_along_tiles = false;
  // Packed sm90a modules in dynamic order build their tile list themselves for batches up to this
  // many requests, when the list's state word is 0 (templates/plan/list_in_kernel.cuh); 0: never.
  int list_in_kernel_max_batch = 0;
};

// A launch of kernel.pairs_function as `clusters` clusters of 2 CTAs on `stream`: the one place
// that builds it, for the launch and for the occupancy query alike. `config` points at `cluster`,
// so the struct is neither copied nor moved.
struct PairsLaunch {
  CUlaunchAttribute cluster{};
  CUlaunchConfig config{};
  PairsLaunch(const LoadedKernel& kernel, unsigned clusters, CUstream stream);
  PairsLaunch(const PairsLaunch&) = delete;
  PairsLaunch& operator=(const PairsLaunch&) = delete;
};

// What the module table needs to load a kernel it has not seen in this context.
struct ModuleSource {
  std::string name;
  std::string symbol;
  std::span<const uint8_t> cubin;
  bool has_planner = false;       // the module also defines tsattn_plan_tiles (packed layouts)
  bool has_v_transposer = false;  // the module also defines tsattn_transpose_v (sm90a, e4m3 inputs)
  KernelTraits traits;            // what the kernel's settings are; its module globals must agree
};

// The kernel `key` in `context` (which must be current), loading it on first use from the
// module source that `obtain` returns. `obtain` may compile for seconds: no lock is held while
// it runs. Throws Error(runtime) naming the kernel when the driver refuses the cubin.
const LoadedKernel& loaded_kernel(CUcontext context, uint32_t key, const std::function<ModuleSource()>& obtain);

// A module with one plain kernel whose launch shape the host fixes (the merge and gather modules):
// its function and how many of its CTAs a multiprocessor holds.
struct LoadedFunction {
  CUfunction function = nullptr;
  CUfunction prologue = nullptr;  // a one-CTA kernel queued before `function` (the gather's scan); or null
  std::string name;               // canonical name, for errors
  int ctas_per_multiprocessor = 0;
};

struct FunctionSource {
  std::string name;
  std::string symbol;
  std::span<const uint8_t> cubin;
  int threads_per_cta = 0;      // no dynamic shared memory
  std::string prologue_symbol;  // the module's prologue kernel, or empty
};

// The kinds of such modules; each numbers its modules on its own (MergeSpec::id, GatherSpec::id).
enum class FunctionModule : uint8_t { merge, gather };

// As loaded_kernel, for such modules: `id` (below 2^24) numbers them within their kind.
const LoadedFunction& loaded_function(CUcontext context, FunctionModule kind, uint32_t id,
                                      const std::function<FunctionSource()>& obtain);

// Number of modules loaded so far in this process (all contexts).
uint64_t modules_loaded();

}  // namespace tsattn::driver
