#include "tools/precompile_command.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "codegen/manifest.hpp"
#include "common/knobs.hpp"
#include "common/sha256.hpp"
#include "jit/kernel_cache.hpp"

namespace tsattn::tools {

namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  std::string name;
  std::string status;  // "compiled", "cached", "failed"
  double seconds = 0;
  std::string error;
};

int default_jobs() {
  // Each NVRTC instance holds a few hundred MB while it compiles: bound by memory as well.
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const int64_t by_memory = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size / (int64_t{1} << 30) : 1;
  const int64_t configured = knob_int(Knob::compile_threads);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(configured, by_memory)));
}

}  // namespace

void add_precompile_options(CLI::App& command, PrecompileOptions& options) {
  command.add_option("--manifest", options.manifest, "Manifest JSON listing the kernels (cache/manifests/*.json)")
      ->required();
  command.add_option("--arch", options.archs, "Comma-separated cubin targets: sm_80, sm_90a, sm_100, sm_120")
      ->capture_default_str();
  command.add_option("--out", options.out, "Output cache directory (default: the user cache, TSATTN_CACHE_DIR)");
  command.add_option("-j,--jobs", options.jobs, "Parallel compiles (default: TSATTN_COMPILE_THREADS, bounded by memory)");
  command.add_flag("--list", options.list, "Print the expanded kernel names and exit; compiles nothing");
  command.add_flag("--json", options.json, "Print NDJSON events instead of progress lines");
  command.add_flag("--keep-going", options.keep_going, "Compile the rest after a failure");
}

int run_precompile(const PrecompileOptions& options) {
  std::vector<KernelSpec> specs;
  try {
    specs = load_manifest(options.manifest, parse_arch_list(options.archs));
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn precompile: {}\n", e.what());
    return 2;
  }
  if (options.list) {
    for (const KernelSpec& spec : specs) fmt::print("{}\n", canonical_name(spec));
    return 0;
  }

  jit::DiskCacheConfig config;
  try {
    config.writable_root = options.out.empty() ? knob_string(Knob::cache_dir) : options.out;
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn precompile: {}\n", e.what());
    return 3;
  }
  jit::KernelCache cache(config, /*jit_enabled=*/true);
  if (cache.disk().writable_state() != jit::WritableState::ready) {
    fmt::print(stderr, "tsattn precompile: cannot write to {} ({})\n", *config.writable_root,
               jit::writable_state_name(cache.disk().writable_state()));
    return 3;
  }

  const int jobs = std::max(1, std::min<int>(options.jobs > 0 ? options.jobs : default_jobs(), static_cast<int>(specs.size())));
  const bool tty = isatty(STDOUT_FILENO) == 1;
  std::vector<Outcome> outcomes(specs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex print_mutex;
  size_t finished = 0;
  const auto start = Clock::now();

  auto worker = [&] {
    for (size_t i = next++; i < specs.size() && !stop; i = next++) {
      Outcome& o = outcomes[i];
      o.name = canonical_name(specs[i]);
      const auto begin = Clock::now();
      std::string key;
      try {
        const std::shared_ptr<const jit::CompiledKernel> kernel = cache.get(specs[i]);
        o.status = kernel->origin == jit::KernelOrigin::compiled ? "compiled" : "cached";
        key = to_hex(kernel->key);
      } catch (const Error& e) {
        o.status = "failed";
        o.error = e.what();
        if (!options.keep_going) stop = true;
      }
      o.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
      std::lock_guard lock(print_mutex);
      ++finished;
      if (options.json) {
        nlohmann::json event{{"event", o.status}, {"name", o.name}, {"seconds", o.seconds}};
        if (!key.empty()) event["key"] = key;
        if (!o.error.empty()) event["error"] = o.error;
        fmt::print("{}\n", event.dump());
      } else {
        fmt::print("{}[{:>4}/{}] {:<8} {}  {:.2f}s{}", tty ? "\r\033[K" : "", finished, specs.size(), o.status, o.name,
                   o.seconds, tty && o.status != "failed" ? "" : "\n");
        if (!o.error.empty()) fmt::print("{}\n", o.error);
      }
      std::fflush(stdout);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < jobs; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();

  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const auto count = [&](const char* status) {
    return std::count_if(outcomes.begin(), outcomes.end(), [&](const Outcome& o) { return o.status == status; });
  };
  const auto compiled = count("compiled"), cached = count("cached"), failed = count("failed");
  const auto not_started = static_cast<long>(specs.size()) - compiled - cached - failed;
  std::vector<const Outcome*> slowest;
  for (const Outcome& o : outcomes)
    if (o.status == "compiled") slowest.push_back(&o);
  std::sort(slowest.begin(), slowest.end(), [](const Outcome* a, const Outcome* b) { return a->seconds > b->seconds; });
  slowest.resize(std::min<size_t>(slowest.size(), 3));
  if (options.json) {
    nlohmann::json summary{{"event", "summary"}, {"compiled", compiled}, {"cached", cached}, {"failed", failed},
                           {"not_started", not_started}, {"seconds", wall}, {"out", *config.writable_root}};
    fmt::print("{}\n", summary.dump());
  } else {
    fmt::print("{}precompile: {} kernels for {} into {}: {} compiled, {} already cached, {} failed{} in {:.1f}s with {} "
               "jobs\n",
               tty ? "\r\033[K" : "", specs.size(), options.archs, *config.writable_root, compiled, cached, failed,
               not_started ? fmt::format(", {} not started", not_started) : "", wall, jobs);
    for (const Outcome* o : slowest) fmt::print("  slowest: {} {:.2f}s\n", o->name, o->seconds);
  }
  return failed || not_started ? 1 : 0;
}

}  // namespace tsattn::tools
