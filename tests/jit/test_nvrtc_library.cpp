// Where NVRTC comes from: the search order, a user's explicit choice that never falls back, the
// report a failed search gives, and the NVRTC version cache keys record.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "jit/nvrtc/compiler.hpp"
#include "jit/nvrtc/nvrtc_library.hpp"

namespace {

using namespace tsattn::nvrtc;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<NvrtcOrigin> origins(const std::vector<NvrtcCandidate>& candidates) {
  std::vector<NvrtcOrigin> out;
  for (const NvrtcCandidate& c : candidates) out.push_back(c.origin);
  return out;
}

// The toolkit's NVRTC on this machine (the build needs the toolkit; CUDA_HOME or /usr/local/cuda).
std::string toolkit_nvrtc() {
  for (const NvrtcCandidate& c : nvrtc_candidates({"", "", std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : ""})) {
    if ((c.origin == NvrtcOrigin::cuda_home || c.origin == NvrtcOrigin::toolkit) && std::filesystem::exists(c.path)) {
      return c.path;
    }
  }
  return {};
}

}  // namespace

TEST_SUITE("jit/nvrtc_library") {
  TEST_CASE("search order: loaded, the pip package beside the installed package, the toolkit, the system") {
    const std::string library = "/venv/lib/python3.12/site-packages/tsattn/lib/libtsattn.so";
    const auto candidates = nvrtc_candidates({"", library, "/opt/cuda"});
    CHECK(origins(candidates) == std::vector<NvrtcOrigin>{NvrtcOrigin::already_loaded, NvrtcOrigin::pip_package,
                                                          NvrtcOrigin::cuda_home, NvrtcOrigin::cuda_home,
                                                          NvrtcOrigin::toolkit, NvrtcOrigin::toolkit,
                                                          NvrtcOrigin::system});
    CHECK(candidates[1].path == "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13");
    CHECK(candidates[2].path == "/opt/cuda/lib64/libnvrtc.so.13");
    CHECK(candidates[4].path == "/usr/local/cuda/lib64/libnvrtc.so.13");
    CHECK(candidates[6].path == "libnvrtc.so.13");
    // The CLI sits in tsattn/bin/, as deep as the library: the same pip folder.
    CHECK(nvrtc_candidates({"", "/site/tsattn/bin/tsattn", ""})[1].path == "/site/nvidia/cu13/lib/libnvrtc.so.13");
    // Without CUDA_HOME or a known location of this code, those candidates are left out.
    CHECK(origins(nvrtc_candidates({})) == std::vector<NvrtcOrigin>{NvrtcOrigin::already_loaded, NvrtcOrigin::toolkit,
                                                                    NvrtcOrigin::toolkit, NvrtcOrigin::system});
  }

  TEST_CASE("TSATTN_NVRTC_LIBRARY is the only candidate, and its failure is the error") {
    const auto only = nvrtc_candidates({"/somewhere/libnvrtc.so.13", "/site/tsattn/lib/libtsattn.so", "/opt/cuda"});
    REQUIRE(only.size() == 1);
    CHECK(only[0].origin == NvrtcOrigin::explicit_path);

    const NvrtcLoad missing = load_nvrtc({"/nonexistent/libnvrtc.so.13", "", ""});
    CHECK(missing.path.empty());
    CHECK(contains(missing.failure, "TSATTN_NVRTC_LIBRARY=/nonexistent/libnvrtc.so.13 could not be used (not found)"));

    // A library that loads but is no NVRTC (a bare soname goes through the loader's own search).
    const NvrtcLoad foreign = load_nvrtc({"libm.so.6", "", ""});
    CHECK(foreign.path.empty());
    CHECK(contains(foreign.failure, "has no nvrtcVersion: not an NVRTC 13"));
  }

  TEST_CASE("an explicit path to a real NVRTC loads it, with the version and the file it came from") {
    const std::string path = toolkit_nvrtc();
    REQUIRE_MESSAGE(!path.empty(), "the CUDA toolkit's libnvrtc.so.13 is needed to build tsattn");
    const NvrtcLoad load = load_nvrtc({path, "", ""});
    CHECK(load.failure.empty());
    CHECK(load.origin == NvrtcOrigin::explicit_path);
    CHECK(load.path == std::filesystem::canonical(path).string());
    int major = 0, minor = 0;
    REQUIRE(load.api.nvrtcVersion(&major, &minor) == NVRTC_SUCCESS);
    CHECK(major == 13);
    // The process's own search found an NVRTC too, and cache keys record its version.
    CHECK(nvrtc_available());
    CHECK(nvrtc_version() == std::to_string(major) + "." + std::to_string(minor));
  }

  TEST_CASE("the built-with version is what keys assume without an NVRTC") {
    CHECK(built_cuda_version() == "13.0");
    CHECK(std::string(origin_text(NvrtcOrigin::pip_package)) == "pip package nvidia-cuda-nvrtc");
  }
}
