#include "jit/nvrtc/compiler.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <tsattn/tsattn.hpp>

#include "common/error.hpp"
#include "common/knobs.hpp"
#include "common/log.hpp"
#include "jit/nvrtc/nvrtc_library.hpp"
#include "jit/nvrtc/source_excerpt.hpp"

namespace tsattn::nvrtc {

namespace {

// Owns one NVRTC program. Programs share no state, so concurrent compiles need no lock.
class Program {
 public:
  Program(const CompileRequest& request, const std::string& program_name) {
    // NVRTC wants NUL-terminated header texts; the request holds string_views.
    std::vector<std::string> texts;
    std::vector<const char*> text_pointers, names;
    texts.reserve(request.headers.size());
    for (const NvrtcHeader& header : request.headers) {
      texts.emplace_back(header.text);
      text_pointers.push_back(texts.back().c_str());
      names.push_back(header.name.c_str());
    }
    const nvrtcResult result =
        nvrtc_api().nvrtcCreateProgram(&program_, request.source.c_str(), program_name.c_str(),
                                       static_cast<int>(names.size()), text_pointers.data(), names.data());
    if (result != NVRTC_SUCCESS) {
      raise(ErrorKind::runtime, "NVRTC could not create a program for kernel '{}': {}", request.name,
            nvrtc_api().nvrtcGetErrorString(result));
    }
  }
  ~Program() { nvrtc_api().nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

// Empty when no NVRTC can be loaded: arch strings are then checked for their form only.
const std::vector<int>& supported_archs() {
  static const std::vector<int> archs = [] {
    int count = 0;
    std::vector<int> numbers;
    if (!nvrtc_available()) return numbers;
    if (nvrtc_api().nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      numbers.resize(static_cast<size_t>(count));
      if (nvrtc_api().nvrtcGetSupportedArchs(numbers.data()) != NVRTC_SUCCESS) numbers.clear();
    }
    return numbers;
  }();
  return archs;
}

// sm_<N> with an optional 'a' (arch-specific features: wgmma, setmaxnreg; Hopper and later) or 'f'
// (family-portable, Blackwell and later) suffix. compute_<N> is refused: tsattn ships cubins, and a
// PTX target would defer ptxas (and its spill report) to the driver at load time.
void validate_arch(const std::string& arch) {
  const std::vector<int>& supported = supported_archs();
  std::string_view digits = arch;
  bool ok = digits.starts_with("sm_");
  digits.remove_prefix(ok ? 3 : 0);
  char suffix = 0;
  if (ok && !digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    suffix = digits.back();
    digits.remove_suffix(1);
  }
  int number = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  ok = ok && !digits.empty() && error == std::errc{} && end == digits.data() + digits.size() &&
       (supported.empty() || std::find(supported.begin(), supported.end(), number) != supported.end()) &&
       (suffix != 'a' || number >= 90) && (suffix != 'f' || number >= 100);
  if (!ok) {
    raise(ErrorKind::value,
          "'{}' is not a GPU architecture NVRTC {} can build a cubin for: expected sm_<N>, sm_<N>a (N >= 90) or "
          "sm_<N>f (N >= 100) with N one of {}",
          arch, nvrtc_version(), fmt::join(supported, ", "));
  }
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return std::string(text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1));
}

// base_options, then the caller's extras, trimmed and without exact repeats (-lineinfo from both
// TSATTN_LINEINFO and the caller is one option), so equal requests give equal lists for the key.
std::vector<std::string> normalized_options(const CompileRequest& request) {
  std::vector<std::string> options = base_options(request.arch);
  for (const std::string& extra : request.extra_options) {
    std::string option = trim(extra);
    if (option.empty()) continue;
    if (option.starts_with("--gpu-architecture") || option.starts_with("-arch")) {
      raise(ErrorKind::value, "kernel '{}': extra option '{}' sets the architecture; use CompileRequest::arch",
            request.name, option);
    }
    if (std::find(options.begin(), options.end(), option) == options.end()) options.push_back(std::move(option));
  }
  return options;
}

std::string file_stem(const std::string& name) {
  std::string stem = name.empty() ? "kernel" : name;
  for (char& c : stem) {
    const bool safe =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!safe) c = '_';
  }
  return stem;
}

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtc_api().nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (nvrtc_api().nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  log.resize(size - 1);  // the size counts the terminating NUL
  return log;
}

// Dumps are a debugging aid: a failure to write them is worth a warning, never a failed compile.
void dump(const CompileRequest& request, const std::string& log) {
  const std::string dir = knob_string(Knob::dump_dir);
  if (dir.empty()) return;
  const std::filesystem::path base = std::filesystem::path(dir) / (file_stem(request.name) + "." + request.arch);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  for (const auto& [extension, text] :
       {std::pair{".cu", std::string_view(request.source)}, std::pair{".log", std::string_view(log)}}) {
    const std::filesystem::path path = base.string() + extension;
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(text.data(), static_cast<std::streamsize>(text.size()));
    file.close();
    if (!file) {
      warn_once("TSATTN_DUMP_DIR:" + dir,
                fmt::format("TSATTN_DUMP_DIR: cannot write {}{}; kernel dumps are skipped", path.string(),
                            error ? fmt::format(" ({})", error.message()) : std::string()));
      return;
    }
  }
}

[[noreturn]] void raise_compile_failure(const CompileRequest& request, const std::string& program_name,
                                        nvrtcResult result, const std::string& log,
                                        const std::vector<std::string>& options) {
  std::vector<SourceText> files{{program_name, request.source}};
  for (const NvrtcHeader& header : request.headers) files.push_back({header.name, header.text});
  const std::string excerpts = excerpt_errors(log, files);
  // "Command-line error" is NVRTC rejecting the options (an arch/feature mismatch NVRTC only
  // detects while compiling), which is the caller's value, not a broken kernel.
  const bool bad_options = result == NVRTC_ERROR_INVALID_OPTION || log.find("Command-line error") != std::string::npos;
  raise(bad_options ? ErrorKind::value : ErrorKind::runtime,
        "NVRTC failed to compile kernel '{}' for {}: {}\noptions: {}\n--- NVRTC log ---\n{}{}{}", request.name,
        request.arch, nvrtc_api().nvrtcGetErrorString(result), fmt::join(options, " "), log,
        excerpts.empty() ? "" : "--- source at the errors ---\n", excerpts);
}

}  // namespace

std::string nvrtc_version() {
  if (!nvrtc_available()) return built_cuda_version();
  int major = 0, minor = 0;
  if (nvrtc_api().nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
    raise(ErrorKind::runtime, "nvrtcVersion failed");
  }
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> base_options(const std::string& arch) {
  validate_arch(arch);
  std::vector<std::string> options{"--gpu-architecture=" + arch, "-std=c++17", "--ptxas-options=--verbose",
                                   "-default-device"};
  if (knob_bool(Knob::lineinfo)) options.emplace_back("-lineinfo");
  return options;
}

CompileResult compile_to_cubin(const CompileRequest& request) {
  CompileResult result;
  result.options = normalized_options(request);
  const std::string program_name = file_stem(request.name) + ".cu";
  Program program(request, program_name);

  std::vector<const char*> option_pointers;
  for (const std::string& option : result.options) option_pointers.push_back(option.c_str());
  // NVRTC 12.9+ keeps its own cache of compiled programs where a driver is installed. tsattn's disk
  // cache already keeps every cubin, so NVRTC's would only store it twice; and a hit there returns
  // no ptxas log, which the spill check and the register count below read, and takes milliseconds
  // where a compile takes seconds. Not part of the key: it changes nothing in the cubin.
  option_pointers.push_back("--no-cache");
  const auto start = std::chrono::steady_clock::now();
  const nvrtcResult status =
      nvrtc_api().nvrtcCompileProgram(program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
  result.log = program_log(program.get());
  dump(request, result.log);
  if (status != NVRTC_SUCCESS) raise_compile_failure(request, program_name, status, result.log, result.options);

  size_t size = 0;
  nvrtcResult cubin_status = nvrtc_api().nvrtcGetCUBINSize(program.get(), &size);
  if (cubin_status == NVRTC_SUCCESS) {
    result.cubin.resize(size);
    cubin_status = nvrtc_api().nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(result.cubin.data()));
  }
  if (cubin_status != NVRTC_SUCCESS || result.cubin.empty()) {
    raise(ErrorKind::runtime, "NVRTC compiled kernel '{}' for {} but produced no cubin: {}", request.name, request.arch,
          nvrtc_api().nvrtcGetErrorString(cubin_status));
  }
  result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.ptxas = parse_ptxas_report(result.log);
  logf(LogLevel::debug, "compiled {} for {} in {:.1f} ms: {} registers, {} bytes smem, {}/{} bytes spilled",
       request.name, request.arch, result.compile_ms, result.ptxas.registers, result.ptxas.shared_bytes,
       result.ptxas.spill_store_bytes, result.ptxas.spill_load_bytes);
  return result;
}

}  // namespace tsattn::nvrtc
