#include "tools/cli/warm_command.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <variant>

#include <tsattn/tsattn.hpp>

#include "codegen/manifest.hpp"
#include "common/knobs.hpp"
#include "common/parallel.hpp"
#include "jit/cache/entry_format.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/precompile.hpp"
#include "merge/merge_params.h"
#include "tools/cli/exit_codes.hpp"

namespace tsattn::tools {

namespace {

using Clock = std::chrono::steady_clock;

enum class Source { user_cache, from_dir, read_only_layer, compiled };

const char* source_label(Source source) {
  switch (source) {
    case Source::user_cache: return "user cache";
    case Source::from_dir: return "--from";
    case Source::read_only_layer: return "ro layer";
    case Source::compiled: return "compiled";
  }
  return "?";
}

const char* source_key(Source source) {
  switch (source) {
    case Source::user_cache: return "user_cache";
    case Source::from_dir: return "from_dir";
    case Source::read_only_layer: return "read_only_layer";
    case Source::compiled: return "compiled";
  }
  return "?";
}

// One module of the manifest: a prefill kernel, a merge or a gather module.
struct Outcome {
  std::variant<KernelSpec, MergeSpec, GatherSpec> spec;
  std::shared_ptr<const jit::CompiledModule> kernel;
  Source source = Source::compiled;
  double find_seconds = 0;
  double load_ms = 0;
  bool loaded = false;
  const driver::LoadedKernel* launch_facts = nullptr;  // prefill kernels: what their module says
  std::string error;                                   // empty when the kernel is in the user cache and loaded

  std::string name() const {
    return std::visit([](const auto& s) { return canonical_name(s); }, spec);
  }
  Arch arch() const {
    return std::visit([](const auto& s) { return s.arch; }, spec);
  }
};

// The caches warm works through. `cache` searches --from, then TSATTN_CACHE_RO_PATH, then the
// user cache, and compiles what none has (publishing it into the user cache). Its answer says
// only "a read-only layer", so `user` and `from` tell apart a kernel that is already in the user
// cache from one to copy, and where a copy came from.
struct Layers {
  std::string user_root;
  jit::KernelCache cache;
  jit::DiskCache user;
  std::optional<jit::DiskCache> from;

  Layers(const jit::DiskCacheConfig& config, bool jit_enabled, const std::string& from_dir)
      : user_root(*config.writable_root),
        cache(config, jit_enabled),
        user(jit::DiskCacheConfig{{}, *config.writable_root, true}) {
    if (!from_dir.empty()) from.emplace(jit::DiskCacheConfig{{from_dir}, std::nullopt, true});
  }
};

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void find_or_compile(Outcome& outcome, Layers& layers) {
  const auto start = Clock::now();
  try {
    outcome.kernel =
        std::visit([&](const auto& spec) { return std::shared_ptr<const jit::CompiledModule>(layers.cache.get(spec)); },
                   outcome.spec);
    const jit::CompiledModule& k = *outcome.kernel;
    const std::string arch = arch_name(outcome.arch());
    switch (k.origin) {
      case jit::KernelOrigin::compiled: outcome.source = Source::compiled; break;  // get() published it
      case jit::KernelOrigin::writable_layer: outcome.source = Source::user_cache; break;
      case jit::KernelOrigin::read_only_layer:
        if (layers.user.lookup(k.key, arch)) {
          outcome.source = Source::user_cache;
          break;
        }
        outcome.source = layers.from && layers.from->lookup(k.key, arch) ? Source::from_dir : Source::read_only_layer;
        layers.cache.disk().publish(k.key, arch, k.metadata, k.cubin);
        break;
    }
    // The serving process reads the user cache: a kernel is warm only once its file is there.
    if (!file_exists(jit::DiskCache::entry_path(layers.user_root, k.key, arch)))
      outcome.error = fmt::format("not in the user cache {} after {} (cache state: {})", layers.user_root,
                                  outcome.source == Source::compiled ? "compiling it" : "copying it",
                                  jit::writable_state_name(layers.cache.disk().writable_state()));
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  outcome.find_seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

void load(Outcome& outcome, CUcontext context) {
  const auto start = Clock::now();
  try {
    if (const KernelSpec* spec = std::get_if<KernelSpec>(&outcome.spec)) {
      const auto& k = static_cast<const jit::CompiledKernel&>(*outcome.kernel);
      outcome.launch_facts = &driver::loaded_kernel(context, spec->id(), [&] { return jit::module_source(k); });
    } else if (const MergeSpec* merge = std::get_if<MergeSpec>(&outcome.spec)) {
      const jit::CompiledModule& k = *outcome.kernel;
      driver::loaded_function(context, driver::FunctionModule::merge, merge->id(), [&] {
        return driver::FunctionSource{k.name, k.symbol, k.cubin, TSATTN_MERGE_THREADS, {}};
      });
    } else {
      const auto& k = static_cast<const jit::CompiledGather&>(*outcome.kernel);
      driver::loaded_function(context, driver::FunctionModule::gather, std::get<GatherSpec>(outcome.spec).id(),
                              [&] { return jit::function_source(k); });
    }
    outcome.loaded = true;
  } catch (const std::exception& e) {
    outcome.error = fmt::format("loading on the GPU failed: {}", e.what());
  }
  outcome.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Empty when device 0 is usable, else why not.
std::string why_no_gpu() {
  const std::string& reason = driver::unavailable_reason();
  if (!reason.empty()) return reason;
  int count = 0;
  driver::check(driver::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
  return count == 0 ? "the CUDA driver reports no device" : "";
}

void report(const Outcome& o, bool json) {
  if (json) {
    nlohmann::json event{{"event", "kernel"},
                         {"name", o.name()},
                         {"status", o.error.empty() ? "ok" : "failed"},
                         {"seconds", o.find_seconds}};
    if (o.kernel) {
      event["from"] = source_key(o.source);
      event["key"] = to_hex(o.kernel->key);
    }
    if (o.loaded) event["load_ms"] = o.load_ms;
    if (o.launch_facts) {
      event["threads_per_cta"] = o.launch_facts->threads_per_cta;
      event["dynamic_smem_bytes"] = o.launch_facts->dynamic_smem_bytes;
      event["ctas_per_sm"] = o.launch_facts->ctas_per_multiprocessor;
    }
    if (!o.error.empty()) event["error"] = o.error;
    fmt::print("{}\n", event.dump());
  } else if (o.error.empty() && o.launch_facts) {
    fmt::print("{:<10} {:<56} {:6.2f}s  loaded in {:.1f} ms ({} threads, {} KiB shared memory, {} CTA/SM)\n",
               source_label(o.source), o.name(), o.find_seconds, o.load_ms, o.launch_facts->threads_per_cta,
               o.launch_facts->dynamic_smem_bytes / 1024, o.launch_facts->ctas_per_multiprocessor);
  } else if (o.error.empty()) {
    fmt::print("{:<10} {:<56} {:6.2f}s  loaded in {:.1f} ms\n", source_label(o.source), o.name(), o.find_seconds,
               o.load_ms);
  } else {
    fmt::print("{:<10} {:<56} {}\n", "FAILED", o.name(), o.error);
  }
}

}  // namespace

void add_warm_options(CLI::App& command, WarmOptions& options) {
  command
      .add_option("--manifest", options.manifest,
                  "Manifest: a built-in name (default, all, llama3, gemma) or a JSON file's path")
      ->required();
  command.add_option("--from", options.from, "A directory written by `tsattn precompile --out` to copy kernels from")
      ->check(CLI::ExistingDirectory);
  command.add_option("-j,--jobs", options.jobs, "Parallel compiles for missing kernels (default: as precompile)");
  command.add_flag("--json", options.json, "Print NDJSON events instead of lines");
}

int run_warm(const WarmOptions& options) {
  const auto start = Clock::now();
  // The manifest is checked for every arch first, so a bad one is a usage error on any machine.
  try {
    load_manifest_modules(options.manifest, {Arch::sm_80, Arch::sm_90a, Arch::sm_100, Arch::sm_120});
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn warm: {}\n", e.what());
    return kExitUsage;
  }

  ManifestModules modules;
  Arch arch = Arch::sm_90a;
  std::optional<Layers> layers;
  std::string gpu;
  try {
    if (const std::string why = why_no_gpu(); !why.empty()) {
      fmt::print(stderr,
                 "tsattn warm: no GPU: {}.\nwarm runs on the serving machine; without a GPU, build the kernels with "
                 "`tsattn precompile --arch sm_90a --out DIR` and run `tsattn warm --from DIR` where the GPU is\n",
                 why);
      return kExitEnvironment;
    }
    const driver::DeviceInfo& device = driver::device_info(0);
    gpu = fmt::format("{} (cuda:0, sm_{}{})", device.name, device.cc_major, device.cc_minor);
    const std::optional<Arch> device_arch = arch_for_compute_capability(device.cc_major);
    if (!device_arch) {
      fmt::print(stderr, "tsattn warm: {} has no tsattn target (tsattn needs sm_80 or newer)\n", gpu);
      return kExitEnvironment;
    }
    arch = *device_arch;
    modules = load_manifest_modules(options.manifest, {arch});
    if (modules.size() == 0) {
      fmt::print(stderr, "tsattn warm: {} lists no kernel for {}\n", options.manifest, arch_name(arch));
      return kExitUsage;
    }

    jit::DiskCacheConfig config = jit::DiskCache::config_from_environment();
    if (!config.writable_root) {
      fmt::print(stderr, "tsattn warm: TSATTN_CACHE_DISABLE is set: there is no user cache to warm\n");
      return kExitEnvironment;
    }
    if (!options.from.empty()) {
      config.read_only_roots.insert(config.read_only_roots.begin(), options.from);
      if (::access(fmt::format("{}/v{}", options.from, jit::kEntryFormatVersion).c_str(), F_OK) != 0)
        fmt::print(stderr,
                   "tsattn warm: warning: {} holds no cache entries of format v{} (was it written by "
                   "`tsattn precompile --out` of this version?)\n",
                   options.from, jit::kEntryFormatVersion);
    }
    layers.emplace(config, !knob_bool(Knob::disable_jit), options.from);
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn warm: {}\n", e.what());
    return kExitEnvironment;
  }
  if (layers->cache.disk().writable_state() != jit::WritableState::ready) {
    fmt::print(stderr,
               "tsattn warm: cannot write to the user cache {} ({}; set TSATTN_CACHE_DIR to a private "
               "directory)\n",
               layers->user_root, jit::writable_state_name(layers->cache.disk().writable_state()));
    return kExitEnvironment;
  }

  // Find, copy or compile, in parallel (compiles dominate; copies are file reads and writes).
  std::vector<Outcome> outcomes(modules.size());
  for (size_t i = 0; i < modules.kernels.size(); ++i) outcomes[i].spec = modules.kernels[i];
  for (size_t i = 0; i < modules.merges.size(); ++i) outcomes[modules.kernels.size() + i].spec = modules.merges[i];
  for (size_t i = 0; i < modules.gathers.size(); ++i)
    outcomes[modules.kernels.size() + modules.merges.size() + i].spec = modules.gathers[i];
  const int jobs = jit::compile_jobs(options.jobs, outcomes.size());
  const bool progress = !options.json && isatty(STDOUT_FILENO) == 1;
  if (!options.json)
    fmt::print("warming {} kernels for {} into {} ({} jobs)\n", outcomes.size(), gpu, layers->user_root, jobs);
  std::fflush(stdout);
  std::mutex print_mutex;
  size_t done = 0;
  for_each_parallel(outcomes.size(), jobs, [&](size_t i) {
    find_or_compile(outcomes[i], *layers);
    std::lock_guard lock(print_mutex);
    ++done;
    if (progress) {
      fmt::print("\r\033[K[{:>4}/{}] {}", done, outcomes.size(), outcomes[i].name());
      std::fflush(stdout);
    }
    return true;
  });
  if (progress) fmt::print("\r\033[K");

  // Load every module in device 0's primary context, the one a null-stream call uses.
  const auto load_start = Clock::now();
  try {
    driver::ContextScope scope(nullptr, 0);
    for (Outcome& o : outcomes)
      if (o.error.empty()) load(o, scope.context());
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn warm: {}\n", e.what());
    return kExitEnvironment;
  }
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - load_start).count();

  size_t counts[4] = {}, failed = 0, loaded = 0;
  for (const Outcome& o : outcomes) {
    report(o, options.json);
    if (!o.error.empty())
      ++failed;
    else
      ++counts[static_cast<int>(o.source)];
    if (o.loaded) ++loaded;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  auto count = [&](Source s) { return counts[static_cast<int>(s)]; };
  if (options.json) {
    fmt::print("{}\n", nlohmann::json{{"event", "summary"},
                                      {"gpu", gpu},
                                      {"arch", arch_name(arch)},
                                      {"cache", layers->user_root},
                                      {"kernels", outcomes.size()},
                                      {"user_cache", count(Source::user_cache)},
                                      {"from_dir", count(Source::from_dir)},
                                      {"read_only_layer", count(Source::read_only_layer)},
                                      {"compiled", count(Source::compiled)},
                                      {"failed", failed},
                                      {"loaded", loaded},
                                      {"load_ms", load_ms},
                                      {"seconds", seconds}}
                           .dump());
  } else {
    fmt::print(
        "warm: {} kernels for {}: {} already in the user cache, {} copied from --from, {} copied from "
        "TSATTN_CACHE_RO_PATH, {} compiled, {} failed; {} modules loaded in {:.1f} ms; {:.1f} s in all\n",
        outcomes.size(), arch_name(arch), count(Source::user_cache), count(Source::from_dir),
        count(Source::read_only_layer), count(Source::compiled), failed, loaded, load_ms, seconds);
  }
  return failed ? kExitFailed : kExitOk;
}

}  // namespace tsattn::tools
