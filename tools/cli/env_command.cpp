#include "tools/cli/env_command.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <optional>

#include <tsattn/tsattn.hpp>

#include "codegen/kernel_spec.hpp"
#include "common/knobs.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/nvrtc/compiler.hpp"
#include "jit/nvrtc/nvrtc_library.hpp"
#include "tools/cli/cache_layers.hpp"
#include "tools/cli/exit_codes.hpp"

namespace tsattn::tools {

namespace {

struct Gpu {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0, multiprocessors = 0;
  std::optional<Arch> arch;  // the cubin target tsattn compiles for on it
};

struct Driver {
  std::string unavailable;  // empty when the driver loaded
  int version = 0;
  std::vector<Gpu> gpus;
};

Driver probe_driver() {
  Driver d;
  d.unavailable = driver::unavailable_reason();
  if (!d.unavailable.empty()) return d;
  const driver::Api& cu = driver::api();
  int count = 0;
  driver::check(cu.cuDriverGetVersion(&d.version), "cuDriverGetVersion");
  driver::check(cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    driver::check(cu.cuDeviceGet(&device, i), "cuDeviceGet");
    Gpu gpu;
    gpu.ordinal = i;
    char name[256] = {};
    driver::check(cu.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName");
    gpu.name = name;
    auto attribute = [&](CUdevice_attribute which) {
      int value = 0;
      driver::check(cu.cuDeviceGetAttribute(&value, which, device), "cuDeviceGetAttribute");
      return value;
    };
    gpu.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    gpu.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    gpu.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    gpu.arch = arch_for_compute_capability(gpu.cc_major);
    d.gpus.push_back(std::move(gpu));
  }
  return d;
}

struct KnobValue {
  const KnobInfo* info;
  bool set;           // present and non-empty in the environment
  std::string value;  // resolved, canonical (knob_text)
  std::string error;  // the value is malformed: why
};

std::vector<KnobValue> knob_values() {
  std::vector<KnobValue> values;
  for (const KnobInfo& info : all_knobs()) {
    const char* raw = std::getenv(std::string(info.name).c_str());
    KnobValue v{&info, raw != nullptr && *raw != '\0', {}, {}};
    try {
      v.value = knob_text(info.knob);
    } catch (const Error& e) {
      v.error = e.what();
    }
    values.push_back(std::move(v));
  }
  return values;
}

std::string driver_version_text(int version) { return fmt::format("{}.{}", version / 1000, version % 1000 / 10); }

}  // namespace

void add_env_options(CLI::App& command, EnvOptions& options) {
  command.add_flag("--json", options.json, "Print one JSON object");
}

int run_env(const EnvOptions& options) {
  const nvrtc::NvrtcLoad& nvrtc_found = nvrtc::nvrtc_load();
  const bool has_nvrtc = nvrtc_found.failure.empty();
  const Driver drv = probe_driver();
  const std::vector<KnobValue> knobs = knob_values();
  const std::vector<std::string> unknown = unknown_tsattn_variables();
  std::optional<CacheLayers> layers;
  std::string layers_error;
  try {
    layers = resolve_cache_layers();
  } catch (const Error& e) {
    layers_error = e.what();
  }
  bool malformed = !layers_error.empty();
  for (const KnobValue& k : knobs) malformed = malformed || !k.error.empty();

  if (options.json) {
    nlohmann::json gpus = nlohmann::json::array();
    for (const Gpu& g : drv.gpus)
      gpus.push_back({{"ordinal", g.ordinal},
                      {"name", g.name},
                      {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                      {"multiprocessors", g.multiprocessors},
                      {"arch", g.arch ? nlohmann::json(arch_name(*g.arch)) : nlohmann::json()}});
    nlohmann::json knob_list = nlohmann::json::array();
    for (const KnobValue& k : knobs) {
      nlohmann::json j{{"name", k.info->name}, {"type", knob_type_name(k.info->type)},
                       {"set", k.set},         {"default", k.info->default_text},
                       {"doc", k.info->doc},   {"affects_cache_key", k.info->affects_cache_key}};
      if (k.error.empty())
        j["value"] = k.value;
      else
        j["error"] = k.error;
      knob_list.push_back(std::move(j));
    }
    const nlohmann::json driver_json =
        drv.unavailable.empty() ? nlohmann::json{{"available", true}, {"version", driver_version_text(drv.version)}}
                                : nlohmann::json{{"available", false}, {"reason", drv.unavailable}};
    nlohmann::json out{{"tsattn", version()},
                       {"abi", tsattn_abi_version()},
                       {"nvrtc", has_nvrtc ? nlohmann::json{{"available", true},
                                                            {"version", nvrtc::nvrtc_version()},
                                                            {"path", nvrtc_found.path},
                                                            {"found_through", nvrtc::origin_text(nvrtc_found.origin)}}
                                           : nlohmann::json{{"available", false}, {"reason", nvrtc_found.failure}}},
                       {"driver", driver_json},
                       {"gpus", gpus},
                       {"knobs", knob_list},
                       {"unknown_variables", unknown}};
    out["cache"] = layers ? layers_json(*layers) : nlohmann::json{{"error", layers_error}};
    fmt::print("{}\n", out.dump(2));
    return malformed ? kExitEnvironment : kExitOk;
  }

  fmt::print("tsattn        {} (C ABI {})\n", version(), tsattn_abi_version());
  if (has_nvrtc) {
    fmt::print("nvrtc         {} at {} ({})\n", nvrtc::nvrtc_version(), nvrtc_found.path,
               nvrtc::origin_text(nvrtc_found.origin));
  } else {
    fmt::print("nvrtc         not found: only precompiled kernels can run\n{}\n", nvrtc_found.failure);
  }
  if (!drv.unavailable.empty())
    fmt::print("cuda driver   unavailable: {}\n", drv.unavailable);
  else
    fmt::print("cuda driver   {}\n", driver_version_text(drv.version));
  if (drv.unavailable.empty() && drv.gpus.empty()) fmt::print("gpus          none\n");
  for (const Gpu& g : drv.gpus)
    fmt::print("cuda:{:<8} {} (sm_{}{}, {} SMs): {}\n", g.ordinal, g.name, g.cc_major, g.cc_minor, g.multiprocessors,
               g.arch ? fmt::format("kernels for {}", arch_name(*g.arch))
                      : std::string("not supported (tsattn needs sm_80 or newer)"));

  fmt::print("cache layers, in search order:\n");
  if (!layers) {
    fmt::print("  cannot resolve: {}\n", layers_error);
  } else {
    for (const ReadOnlyLayer& layer : layers->read_only)
      fmt::print("  read-only   {}{}\n", layer.path, layer.exists ? "" : " (missing: skipped)");
    if (layers->disabled)
      fmt::print("  writable    none: {}\n", layers->writable.detail);
    else
      fmt::print("  writable    {} [{}]{}\n", layers->writable.path, layers->writable.state,
                 layers->writable.detail.empty() ? "" : ": " + layers->writable.detail);
  }

  fmt::print("variables (* = set in the environment; [key] = part of the cache key):\n");
  for (const KnobValue& k : knobs)
    fmt::print("  {} {:<24} {:<40} {}{}\n", k.set ? '*' : ' ', k.info->name,
               k.error.empty() ? (k.value.empty() ? "(empty)" : k.value) : "INVALID: " + k.error, k.info->doc,
               k.info->affects_cache_key ? " [key]" : "");
  for (const std::string& name : unknown)
    fmt::print("  ! {:<24} is set but is not a tsattn variable (a typo?); it has no effect\n", name);
  return malformed ? kExitEnvironment : kExitOk;
}

}  // namespace tsattn::tools
