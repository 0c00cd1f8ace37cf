// precompile.hpp - build many kernels ahead of time into one cache directory (no GPU needed).
// Shared by `tsattn precompile`, the C API's tsattn_precompile and Python's tsattn.precompile.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/manifest.hpp"

namespace tsattn::jit {

struct PrecompileEvent {
  std::string name;    // canonical kernel name
  std::string status;  // "compiled", "cached" (already in the directory) or "failed"
  double seconds = 0;
  std::string key;    // hex cache key; empty on failure
  std::string error;  // on failure
};

struct PrecompileSummary {
  std::string out_dir;
  int jobs = 0;
  std::vector<PrecompileEvent> events;  // in completion order
  int64_t compiled = 0, cached = 0, failed = 0, not_started = 0;
  double seconds = 0;
};

// Default parallelism: TSATTN_COMPILE_THREADS (default: hardware threads), at most one compile
// per GiB of memory (an NVRTC instance holds a few hundred MB while it compiles).
int default_compile_jobs();

// The parallelism for `work_items` compiles: `requested` if > 0, else default_compile_jobs(),
// never more than there is work and never below 1.
int compile_jobs(int requested, size_t work_items);

// Compiles (or finds already present) every module of `modules` (kernels, merge and gather modules)
// into out_dir's cache tree, `jobs` at a time. Without keep_going, the first failure stops new compiles. on_event runs
// once per module, from worker threads, one at a time. Throws Error(runtime) when out_dir cannot be written.
PrecompileSummary precompile(const ManifestModules& modules, const std::string& out_dir, int jobs, bool keep_going,
                             const std::function<void(const PrecompileEvent&)>& on_event = {});

}  // namespace tsattn::jit
