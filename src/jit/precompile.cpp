#include "jit/precompile.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "common/error.hpp"
#include "common/knobs.hpp"
#include "common/parallel.hpp"
#include "jit/kernel_cache.hpp"

namespace tsattn::jit {

int default_compile_jobs() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const int64_t by_memory =
      pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size / (int64_t{1} << 30) : 1;
  return static_cast<int>(std::max<int64_t>(1, std::min(knob_int(Knob::compile_threads), by_memory)));
}

int compile_jobs(int requested, size_t work_items) {
  const int wanted = requested > 0 ? requested : default_compile_jobs();
  return std::max(1, static_cast<int>(std::min<size_t>(static_cast<size_t>(wanted), work_items)));
}

PrecompileSummary precompile(const ManifestModules& modules, const std::string& out_dir, int jobs, bool keep_going,
                             const std::function<void(const PrecompileEvent&)>& on_event) {
  using Clock = std::chrono::steady_clock;
  DiskCacheConfig config;
  config.writable_root = out_dir;
  KernelCache cache(config, /*jit_enabled=*/true);
  if (cache.disk().writable_state() != WritableState::ready)
    raise(ErrorKind::runtime, "cannot write kernels to {} ({})", out_dir,
          writable_state_name(cache.disk().writable_state()));

  PrecompileSummary summary;
  summary.out_dir = out_dir;
  const std::vector<KernelSpec>& specs = modules.kernels;
  const std::vector<MergeSpec>& merges = modules.merges;
  const std::vector<GatherSpec>& gathers = modules.gathers;
  const size_t total = modules.size();
  summary.jobs = compile_jobs(jobs, total);
  std::mutex mutex;
  const auto start = Clock::now();
  // Items [0, specs.size()) are the kernels, then the merge modules, then the gather modules.
  const auto find = [&](size_t i) -> std::shared_ptr<const CompiledModule> {
    if (i < specs.size()) return cache.get(specs[i]);
    if (i < specs.size() + merges.size()) return cache.get(merges[i - specs.size()]);
    return cache.get(gathers[i - specs.size() - merges.size()]);
  };
  const auto name = [&](size_t i) {
    if (i < specs.size()) return canonical_name(specs[i]);
    if (i < specs.size() + merges.size()) return canonical_name(merges[i - specs.size()]);
    return canonical_name(gathers[i - specs.size() - merges.size()]);
  };
  for_each_parallel(total, summary.jobs, [&](size_t i) {
    PrecompileEvent event;
    event.name = name(i);
    const auto begin = Clock::now();
    try {
      const std::shared_ptr<const CompiledModule> module = find(i);
      event.status = module->origin == KernelOrigin::compiled ? "compiled" : "cached";
      event.key = to_hex(module->key);
    } catch (const Error& e) {
      event.status = "failed";
      event.error = e.what();
    }
    event.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    const bool keep_on = keep_going || event.status != "failed";
    std::lock_guard lock(mutex);
    if (event.status == "compiled")
      ++summary.compiled;
    else if (event.status == "cached")
      ++summary.cached;
    else
      ++summary.failed;
    if (on_event) on_event(event);
    summary.events.push_back(std::move(event));
    return keep_on;
  });
  summary.not_started = static_cast<int64_t>(total) - summary.compiled - summary.cached - summary.failed;
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return summary;
}

}  // namespace tsattn::jit
