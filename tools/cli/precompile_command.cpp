#include "tools/cli/precompile_command.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>

#include <tsattn/tsattn.hpp>

#include "codegen/manifest.hpp"
#include "common/knobs.hpp"
#include "jit/precompile.hpp"
#include "tools/cli/exit_codes.hpp"

namespace tsattn::tools {

void add_precompile_options(CLI::App& command, PrecompileOptions& options) {
  command
      .add_option("--manifest", options.manifest,
                  "Manifest: a built-in name (default, all, llama3, gemma) or a JSON file's path")
      ->required();
  command.add_option("--arch", options.archs, "Comma-separated cubin targets: sm_80, sm_90a, sm_100, sm_120")
      ->capture_default_str();
  command.add_option("--out", options.out, "Output cache directory (default: the user cache, TSATTN_CACHE_DIR)");
  command.add_option("-j,--jobs", options.jobs,
                     "Parallel compiles (default: TSATTN_COMPILE_THREADS, bounded by memory)");
  command.add_flag("--list", options.list, "Print the expanded kernel names and exit; compiles nothing");
  command.add_flag("--json", options.json, "Print NDJSON events instead of progress lines");
  command.add_flag("--keep-going", options.keep_going, "Compile the rest after a failure");
}

int run_precompile(const PrecompileOptions& options) {
  ManifestModules modules;
  try {
    modules = load_manifest_modules(options.manifest, parse_arch_list(options.archs));
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn precompile: {}\n", e.what());
    return kExitUsage;
  }
  if (options.list) {
    for (const KernelSpec& spec : modules.kernels) fmt::print("{}\n", canonical_name(spec));
    for (const MergeSpec& spec : modules.merges) fmt::print("{}\n", canonical_name(spec));
    for (const GatherSpec& spec : modules.gathers) fmt::print("{}\n", canonical_name(spec));
    return kExitOk;
  }

  const bool tty = isatty(STDOUT_FILENO) == 1;
  size_t finished = 0;
  auto print_event = [&](const jit::PrecompileEvent& e) {
    ++finished;
    if (options.json) {
      nlohmann::json event{{"event", e.status}, {"name", e.name}, {"seconds", e.seconds}};
      if (!e.key.empty()) event["key"] = e.key;
      if (!e.error.empty()) event["error"] = e.error;
      fmt::print("{}\n", event.dump());
    } else {
      // On a terminal progress lines overwrite each other; failures and pipes keep every line.
      const bool keep_line = !tty || e.status == "failed";
      fmt::print("{}[{:>4}/{}] {:<8} {}  {:.2f}s{}", tty ? "\r\033[K" : "", finished, modules.size(), e.status, e.name,
                 e.seconds, keep_line ? "\n" : "");
      if (!e.error.empty()) fmt::print("{}\n", e.error);
    }
    std::fflush(stdout);
  };

  jit::PrecompileSummary summary;
  try {
    const std::string out = options.out.empty() ? knob_string(Knob::cache_dir) : options.out;
    summary = jit::precompile(modules, out, options.jobs, options.keep_going, print_event);
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn precompile: {}\n", e.what());
    return kExitEnvironment;
  }

  std::vector<const jit::PrecompileEvent*> slowest;
  for (const jit::PrecompileEvent& e : summary.events)
    if (e.status == "compiled") slowest.push_back(&e);
  std::sort(slowest.begin(), slowest.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  slowest.resize(std::min<size_t>(slowest.size(), 3));
  if (options.json) {
    fmt::print("{}\n", nlohmann::json{{"event", "summary"},
                                      {"compiled", summary.compiled},
                                      {"cached", summary.cached},
                                      {"failed", summary.failed},
                                      {"not_started", summary.not_started},
                                      {"seconds", summary.seconds},
                                      {"out", summary.out_dir}}
                           .dump());
  } else {
    fmt::print(
        "{}precompile: {} kernels for {} into {}: {} compiled, {} already cached, {} failed{} in {:.1f}s with {} "
        "jobs\n",
        tty ? "\r\033[K" : "", modules.size(), options.archs, summary.out_dir, summary.compiled, summary.cached,
        summary.failed, summary.not_started ? fmt::format(", {} not started", summary.not_started) : "",
        summary.seconds, summary.jobs);
    for (const jit::PrecompileEvent* e : slowest) fmt::print("  slowest: {} {:.2f}s\n", e->name, e->seconds);
  }
  return summary.failed || summary.not_started ? kExitFailed : kExitOk;
}

}  // namespace tsattn::tools
