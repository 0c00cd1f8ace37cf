#include "jit/nvrtc/nvrtc_library.hpp"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include <tsattn/tsattn.hpp>

#include "common/knobs.hpp"

namespace tsattn::nvrtc {

namespace {

constexpr int kNvrtcMajor = CUDA_VERSION / 1000;
const std::string kSoname = fmt::format("libnvrtc.so.{}", kNvrtcMajor);

// Opens one candidate and binds every entry point; on failure returns why, leaving `load` unset.
std::string try_candidate(const NvrtcCandidate& candidate, NvrtcLoad& load) {
  const bool is_file = candidate.path.find('/') != std::string::npos;
  if (is_file && !std::filesystem::exists(candidate.path)) return "not found";
  const bool already_loaded = candidate.origin == NvrtcOrigin::already_loaded;
  // The handle is intentionally never closed: NVRTC is used until the process ends.
  void* handle = dlopen(candidate.path.c_str(), RTLD_NOW | RTLD_LOCAL | (already_loaded ? RTLD_NOLOAD : 0));
  if (handle == nullptr) {
    if (already_loaded) return "not loaded";
    const char* why = dlerror();
    return why ? why : "dlopen failed";
  }
  NvrtcApi api;
#define TSATTN_BIND_NVRTC_FUNCTION(name)                                 \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, #name)); \
  if (api.name == nullptr) return fmt::format("loaded, but it has no {}: not an NVRTC {}", #name, kNvrtcMajor);
  TSATTN_NVRTC_FUNCTIONS(TSATTN_BIND_NVRTC_FUNCTION)
#undef TSATTN_BIND_NVRTC_FUNCTION
  int major = 0, minor = 0;
  if (api.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS || major != kNvrtcMajor) {
    return fmt::format("loaded, but it is NVRTC {}.{}, not {}", major, minor, kNvrtcMajor);
  }
  // libnvrtc opens libnvrtc-builtins.so.<major>.<minor> by name when it compiles; loading it from
  // the same folder first means the loader finds it whatever its search path is.
  if (is_file) {
    const std::filesystem::path folder = std::filesystem::path(candidate.path).parent_path();
    const std::string builtins = (folder / fmt::format("libnvrtc-builtins.so.{}.{}", major, minor)).string();
    if (std::filesystem::exists(builtins) && dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      const char* why = dlerror();
      return fmt::format("loaded, but its {} did not load ({})", builtins, why ? why : "dlopen failed");
    }
  }
  load.api = api;
  load.origin = candidate.origin;
  // The file the loader really opened (a soname or a link resolves to it).
  load.path = is_file ? candidate.path : kSoname;
  if (Dl_info info{}; dladdr(reinterpret_cast<void*>(api.nvrtcVersion), &info) != 0 && info.dli_fname != nullptr) {
    std::error_code error;
    const std::filesystem::path real = std::filesystem::canonical(info.dli_fname, error);
    if (!error) load.path = real.string();
  }
  return {};
}

}  // namespace

const char* origin_text(NvrtcOrigin origin) {
  switch (origin) {
    case NvrtcOrigin::explicit_path: return "TSATTN_NVRTC_LIBRARY";
    case NvrtcOrigin::already_loaded: return "already loaded in this process";
    case NvrtcOrigin::pip_package: return "pip package nvidia-cuda-nvrtc";
    case NvrtcOrigin::cuda_home: return "CUDA toolkit at $CUDA_HOME";
    case NvrtcOrigin::toolkit: return "CUDA toolkit";
    case NvrtcOrigin::system: return "system library path";
  }
  return "unknown";
}

NvrtcSearchInputs process_search_inputs() {
  NvrtcSearchInputs inputs;
  inputs.explicit_path = knob_string(Knob::nvrtc_library);
  if (Dl_info info{}; dladdr(reinterpret_cast<void*>(&process_search_inputs), &info) != 0 && info.dli_fname) {
    inputs.self_path = info.dli_fname;
  }
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr) inputs.cuda_home = home;
  return inputs;
}

std::vector<NvrtcCandidate> nvrtc_candidates(const NvrtcSearchInputs& inputs) {
  if (!inputs.explicit_path.empty()) return {{NvrtcOrigin::explicit_path, inputs.explicit_path}};
  std::vector<NvrtcCandidate> candidates{{NvrtcOrigin::already_loaded, kSoname}};
  if (!inputs.self_path.empty()) {
    // <site-packages>/tsattn/lib/libtsattn.so and <site-packages>/tsattn/bin/tsattn: two folders up.
    const std::filesystem::path package = std::filesystem::path(inputs.self_path).parent_path().parent_path();
    const std::filesystem::path site = package.parent_path();
    const std::filesystem::path lib = site / "nvidia" / fmt::format("cu{}", kNvrtcMajor) / "lib" / kSoname;
    candidates.push_back({NvrtcOrigin::pip_package, lib.lexically_normal().string()});
  }
  for (const auto& [origin, root] : {std::pair{NvrtcOrigin::cuda_home, inputs.cuda_home},
                                     std::pair{NvrtcOrigin::toolkit, std::string("/usr/local/cuda")}}) {
    if (root.empty()) continue;
    for (const char* lib : {"lib64", "lib"}) {
      candidates.push_back({origin, (std::filesystem::path(root) / lib / kSoname).string()});
    }
  }
  candidates.push_back({NvrtcOrigin::system, kSoname});
  return candidates;
}

NvrtcLoad load_nvrtc(const NvrtcSearchInputs& inputs) {
  NvrtcLoad load;
  std::string report;
  for (const NvrtcCandidate& candidate : nvrtc_candidates(inputs)) {
    const std::string why = try_candidate(candidate, load);
    if (why.empty()) return load;
    report += fmt::format("\n  - {}: {} ({})", origin_text(candidate.origin), candidate.path, why);
    if (candidate.origin == NvrtcOrigin::explicit_path) {
      load.failure = fmt::format(
          "TSATTN_NVRTC_LIBRARY={} could not be used ({}); point it at a libnvrtc.so.{} "
          "or unset it to search the usual places",
          candidate.path, why, kNvrtcMajor);
      return load;
    }
  }
  load.failure = fmt::format(
      "NVRTC {} ({}) is needed to compile kernels and was not found. Searched:{}\nInstall it with `pip install "
      "nvidia-cuda-nvrtc` (PyTorch's CUDA {} wheels already bring it), install a CUDA {} toolkit, or set "
      "TSATTN_NVRTC_LIBRARY to its path. A process whose kernels are all precompiled (tsattn precompile, "
      "TSATTN_CACHE_RO_PATH) needs no NVRTC.",
      kNvrtcMajor, kSoname, report, kNvrtcMajor, kNvrtcMajor);
  return load;
}

const NvrtcLoad& nvrtc_load() {
  static const NvrtcLoad load = load_nvrtc(process_search_inputs());
  return load;
}

const NvrtcApi& nvrtc_api() {
  const NvrtcLoad& load = nvrtc_load();
  if (!load.failure.empty()) throw Error(ErrorKind::runtime, load.failure);
  return load.api;
}

bool nvrtc_available() { return nvrtc_load().failure.empty(); }

std::string built_cuda_version() { return fmt::format("{}.{}", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10); }

}  // namespace tsattn::nvrtc
