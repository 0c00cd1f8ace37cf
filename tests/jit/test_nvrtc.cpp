// NVRTC to cubin: real compiles for sm_80 and sm_90a (no GPU needed), structured failures with
// source excerpts, ptxas report parsing (from real spilling output and from hand-written logs),
// arch and option validation, and TSATTN_DUMP_DIR. Kernels are tiny: compile time is test time.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <tsattn/tsattn.hpp>

#include "common/log.hpp"
#include "jit/nvrtc/compiler.hpp"
#include "support/scoped_env.hpp"

namespace {

using namespace tsattn::nvrtc;
using tsattn::ErrorKind;
using tsattn::testing::ScopedEnv;

constexpr std::string_view kTwiceHeader = "#pragma once\n__device__ inline float twice(float x) { return 2.0f * x; }\n";

constexpr const char* kScaleSource = R"(#include "test/twice.cuh"
extern "C" __global__ void scale(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(in[i]);
}
)";

CompileRequest scale_request(const std::string& arch) {
  return {"test.scale." + arch, kScaleSource, {{"test/twice.cuh", kTwiceHeader}}, arch, {}};
}

tsattn::Error compile_error(const CompileRequest& request) {
  try {
    compile_to_cubin(request);
  } catch (const tsattn::Error& error) {
    return error;
  }
  FAIL("compile_to_cubin did not throw for " << request.name);
  return tsattn::Error(ErrorKind::runtime, "");
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::string single_quoted(std::string_view text) { return fmt::format("'{}'", text); }

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh directory under the system temp dir, removed on exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tsattn_nvrtc_XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

TEST_SUITE("jit/nvrtc") {
  TEST_CASE("a small kernel with an in-memory header compiles to an ELF cubin for sm_80 and sm_90a") {
    ScopedEnv env;
    env.set("TSATTN_LINEINFO", nullptr).set("TSATTN_DUMP_DIR", nullptr);
    for (const std::string arch : {"sm_80", "sm_90a"}) {
      CAPTURE(arch);
      const CompileResult result = compile_to_cubin(scale_request(arch));
      REQUIRE(result.cubin.size() > 64);
      CHECK(std::memcmp(result.cubin.data(),
                        "\x7f"
                        "ELF",
                        4) == 0);
      // e_machine (bytes 18..19, little-endian) is EM_CUDA = 190: a cubin, not PTX or host code.
      CHECK((result.cubin[18] | (result.cubin[19] << 8)) == 190);
      CHECK(result.ptxas.registers > 0);
      CHECK(result.ptxas.spill_store_bytes == 0);
      CHECK(result.ptxas.spill_load_bytes == 0);
      CHECK(result.ptxas.serialization_notes.empty());
      CHECK(contains(result.log, single_quoted(arch)));  // ptxas ran for this arch
      CHECK(result.compile_ms > 0);
      CHECK(result.options == base_options(arch));
    }
  }

  TEST_CASE("base options and their normalization") {
    ScopedEnv env;
    env.set("TSATTN_LINEINFO", nullptr);
    const std::vector<std::string> plain = base_options("sm_90a");
    CHECK(plain == std::vector<std::string>{"--gpu-architecture=sm_90a", "-std=c++17", "--ptxas-options=--verbose",
                                            "-default-device"});
    env.set("TSATTN_LINEINFO", "on");
    const std::vector<std::string> lined = base_options("sm_90a");
    CHECK(std::count(lined.begin(), lined.end(), "-lineinfo") == 1);

    CompileRequest request = scale_request("sm_80");
    request.extra_options = {" -lineinfo", "", "-DTSATTN_TEST_VALUE=3", "-DTSATTN_TEST_VALUE=3"};
    const CompileResult result = compile_to_cubin(request);
    CHECK(std::count(result.options.begin(), result.options.end(), "-lineinfo") == 1);
    CHECK(std::count(result.options.begin(), result.options.end(), "-DTSATTN_TEST_VALUE=3") == 1);
    CHECK(result.options.size() == base_options("sm_80").size() + 1);

    const std::string version = nvrtc_version();
    CHECK(version.find('.') != std::string::npos);
    CHECK(version.find_first_not_of("0123456789.") == std::string::npos);
  }

  TEST_CASE("a syntax error gives a runtime error with the log and the offending source line") {
    CompileRequest request{"test.broken",
                           "extern \"C\" __global__ void broken(float* out) {\n"
                           "  float x = 1.0f;\n"
                           "  out[0] = x\n"
                           "  int y = undefined_name;\n"
                           "}\n",
                           {},
                           "sm_80",
                           {}};
    const tsattn::Error error = compile_error(request);
    const std::string message = error.what();
    CHECK(error.kind() == ErrorKind::runtime);
    CHECK(contains(message, "test.broken"));
    CHECK(contains(message, "sm_80"));
    CHECK(contains(message, "NVRTC_ERROR_COMPILATION"));
    CHECK(contains(message, "test.broken.cu(4): error"));             // the full log
    CHECK(contains(message, ">     4 |   int y = undefined_name;"));  // the excerpt, marked
    CHECK(contains(message, "      1 | extern \"C\" __global__"));    // with its context
  }

  TEST_CASE("an error inside an in-memory header is excerpted from that header") {
    const std::string_view bad_header = "#pragma once\n__device__ inline float twice(float x) { return 2.0f * x }\n";
    CompileRequest request = scale_request("sm_80");
    request.name = "test.bad_header";
    request.headers = {{"test/twice.cuh", bad_header}};
    const std::string message = compile_error(request).what();
    CHECK(contains(message, "test/twice.cuh:2: error"));
    CHECK(contains(message, ">     2 | __device__ inline float twice(float x) { return 2.0f * x }"));
  }

  TEST_CASE("wgmma inline PTX compiles for sm_90a and fails for sm_80") {
    const std::string source =
        "extern \"C\" __global__ void fence(float* out) {\n"
        "  asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
        "  out[threadIdx.x] = 1.0f;\n"
        "}\n";
    const CompileResult hopper = compile_to_cubin({"test.wgmma_fence", source, {}, "sm_90a", {}});
    CHECK(!hopper.cubin.empty());
    const tsattn::Error error = compile_error({"test.wgmma_fence", source, {}, "sm_80", {}});
    CHECK(error.kind() == ErrorKind::runtime);
    CHECK(contains(error.what(), "wgmma.fence"));
    CHECK(contains(error.what(), "sm_80"));
  }

  TEST_CASE("a register-starved kernel reports its spills") {
    // 32 live values per thread under a 24-register cap: ptxas must spill some to local memory.
    const std::string source = R"(extern "C" __global__ void starved(float* out, const float* in) {
  float v[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) v[i] = in[threadIdx.x * 32 + i];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) s += v[i] * v[31 - i] * in[i];
#pragma unroll
  for (int i = 0; i < 32; ++i) out[i * 256 + threadIdx.x] = v[i] * s;
}
)";
    const CompileResult result = compile_to_cubin({"test.starved", source, {}, "sm_80", {"-maxrregcount=24"}});
    CHECK(result.ptxas.registers <= 24);
    CHECK(result.ptxas.spill_store_bytes > 0);
    CHECK(result.ptxas.spill_load_bytes > 0);
    CHECK(result.ptxas.stack_frame_bytes > 0);
  }

  TEST_CASE("invalid architectures and arch-setting options are value errors") {
    for (const char* arch :
         {"", "sm80", "sm_", "sm_8o", "sm_80x", "compute_90", "sm_999", "sm_80a", "sm_90f", "SM_90A", "sm_90aa"}) {
      CAPTURE(arch);
      CompileRequest request = scale_request(arch);
      const tsattn::Error error = compile_error(request);
      CHECK(error.kind() == ErrorKind::value);
      CHECK(contains(error.what(), single_quoted(arch)));
      CHECK_THROWS_AS(base_options(arch), tsattn::Error);
    }
    CompileRequest request = scale_request("sm_80");
    request.extra_options = {"-arch=sm_90"};
    CHECK(compile_error(request).kind() == ErrorKind::value);
    request.extra_options = {"--no-such-nvrtc-option"};
    CHECK(compile_error(request).kind() == ErrorKind::value);
  }

  TEST_CASE("TSATTN_DUMP_DIR receives the source and log, and an unwritable one only warns") {
    TempDir dir;
    ScopedEnv env;
    env.set("TSATTN_DUMP_DIR", (dir.path / "nested").string());
    compile_to_cubin(scale_request("sm_80"));
    CHECK(read_file(dir.path / "nested" / "test.scale.sm_80.sm_80.cu") == kScaleSource);
    CHECK(contains(read_file(dir.path / "nested" / "test.scale.sm_80.sm_80.log"), "registers"));

    // Failing compiles are dumped too: that is when the source is most wanted.
    CompileRequest broken{"test/needs:sanitizing", "this is not CUDA\n", {}, "sm_80", {}};
    CHECK_THROWS_AS(compile_to_cubin(broken), tsattn::Error);
    CHECK(read_file(dir.path / "nested" / "test_needs_sanitizing.sm_80.cu") == "this is not CUDA\n");
    CHECK(contains(read_file(dir.path / "nested" / "test_needs_sanitizing.sm_80.log"), "error"));

    // A regular file where the directory should be: the compile still succeeds, with one warning.
    std::ofstream(dir.path / "occupied") << "x";
    env.set("TSATTN_DUMP_DIR", (dir.path / "occupied").string());
    std::mutex mutex;
    std::vector<std::string> warnings;
    const tsattn::LogLevel previous = tsattn::log_level();
    tsattn::set_log_level(tsattn::LogLevel::warn);
    tsattn::set_log_sink([&](tsattn::LogLevel, std::string_view message) {
      std::lock_guard lock(mutex);
      warnings.emplace_back(message);
    });
    CHECK(!compile_to_cubin(scale_request("sm_80")).cubin.empty());
    CHECK(!compile_to_cubin(scale_request("sm_80")).cubin.empty());
    tsattn::set_log_sink({});
    tsattn::set_log_level(previous);
    REQUIRE(warnings.size() == 1);
    CHECK(contains(warnings[0], "TSATTN_DUMP_DIR"));
    CHECK(contains(warnings[0], "occupied"));
  }

  TEST_CASE("independent compiles run concurrently") {
    std::vector<CompileResult> results(2);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t) {
      threads.emplace_back([&, t] { results[t] = compile_to_cubin(scale_request(t == 0 ? "sm_80" : "sm_90a")); });
    }
    for (auto& thread : threads) thread.join();
    CHECK(!results[0].cubin.empty());
    CHECK(!results[1].cubin.empty());
    CHECK(results[0].cubin != results[1].cubin);
  }

  TEST_CASE("parse_ptxas_report on hand-written logs") {
    const std::string log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'attn' for 'sm_90a'\n"
        "ptxas info    : Function properties for attn\n"
        "ptxas         .     48 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads\n"
        "ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
        "the presence of Extern calls in the function 'attn'\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 48 bytes cumulative stack size, 66048 bytes smem, "
        "528 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function 'helper' for 'sm_90a'\n"
        "ptxas info    : Function properties for helper\n"
        "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem\n"
        "ptxas info    : (C7515) another serialization note\r\n"
        "some.cu(3): warning: C7599 mentioned outside ptxas is ignored\n"
        "ptxas info    : C75100 is not a four-digit code\n";
    const PtxasReport report = parse_ptxas_report(log);
    CHECK(report.registers == 168);       // the largest
    CHECK(report.shared_bytes == 66048);  // the largest
    CHECK(report.stack_frame_bytes == 48);
    CHECK(report.spill_store_bytes == 20);  // summed over functions
    CHECK(report.spill_load_bytes == 28);
    REQUIRE(report.serialization_notes.size() == 2);
    CHECK(report.serialization_notes[0].starts_with("ptxas warning : (C7510) Potential Performance Loss"));
    CHECK(report.serialization_notes[1] == "ptxas info    : (C7515) another serialization note");

    const PtxasReport empty = parse_ptxas_report("");
    CHECK(empty.registers == -1);
    CHECK(empty.spill_store_bytes == 0);
    CHECK(empty.serialization_notes.empty());
  }
}
