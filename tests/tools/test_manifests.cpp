// The shipped manifests (cache/manifests/*.json): each has a description and expands against the
// table of truth, and the model-family ones build exactly what those models' prefill needs.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codegen/manifest.hpp"
#include "codegen/spec_table.hpp"

using namespace tsattn;

namespace {

const std::string kManifests = TSATTN_SOURCE_DIR "/cache/manifests";

std::vector<std::string> names(const std::vector<KernelSpec>& specs) {
  std::vector<std::string> out;
  for (const KernelSpec& spec : specs) out.push_back(canonical_name(spec));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_SUITE("tools/manifests") {
  // On sm_90a both families: Hopper runs the sm90a kernels, and the sm80 ones where it falls back.
  TEST_CASE("llama3.json: D128 bf16 causal, fixed and packed") {
    const auto specs = load_manifest(kManifests + "/llama3.json", {Arch::sm_90a});
    CHECK(names(specs) == std::vector<std::string>{"prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed",
                                                   "prefill.sm80.sm_90a.d128.bf16_bf16.causal.packed",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed"});
    CHECK(load_manifest(kManifests + "/llama3.json", {Arch::sm_90a, Arch::sm_80}).size() == 6);
  }

  TEST_CASE("gemma.json: D256 bf16 causal and sliding window, fixed and packed") {
    const auto specs = load_manifest(kManifests + "/gemma.json", {Arch::sm_90a});
    CHECK(names(specs) == std::vector<std::string>{"prefill.sm80.sm_90a.d256.bf16_bf16.causal.fixed",
                                                   "prefill.sm80.sm_90a.d256.bf16_bf16.causal.packed",
                                                   "prefill.sm80.sm_90a.d256.bf16_bf16.causal_win.fixed",
                                                   "prefill.sm80.sm_90a.d256.bf16_bf16.causal_win.packed",
                                                   "prefill.sm90a.sm_90a.d256.bf16_bf16.causal.fixed",
                                                   "prefill.sm90a.sm_90a.d256.bf16_bf16.causal.packed",
                                                   "prefill.sm90a.sm_90a.d256.bf16_bf16.causal_win.fixed",
                                                   "prefill.sm90a.sm_90a.d256.bf16_bf16.causal_win.packed"});
    CHECK(load_manifest(kManifests + "/gemma.json", {Arch::sm_80}).size() == 4);
  }

  TEST_CASE("every shipped manifest has a description and expands to supported specs for every arch") {
    size_t count = 0;
    for (const auto& file : std::filesystem::directory_iterator(kManifests)) {
      if (file.path().extension() != ".json") continue;
      ++count;
      CAPTURE(file.path().string());
      std::ifstream in(file.path());
      const nlohmann::json manifest = nlohmann::json::parse(in);
      REQUIRE(manifest.contains("description"));
      CHECK(manifest["description"].get<std::string>().size() > 20);
      for (Arch arch : {Arch::sm_80, Arch::sm_90a, Arch::sm_100, Arch::sm_120}) {
        const auto specs = load_manifest(file.path().string(), {arch});
        CHECK_FALSE(specs.empty());
        for (const KernelSpec& spec : specs) CHECK(is_supported(spec));
        // Every sm90a kernel has its sm80 twin for the same arch: what a Hopper call falls back to.
        for (const KernelSpec& spec : specs) {
          if (spec.family != KernelFamily::sm90a) continue;
          KernelSpec twin = spec;
          twin.family = KernelFamily::sm80;
          CAPTURE(canonical_name(spec));
          CHECK(std::find(specs.begin(), specs.end(), twin) != specs.end());
        }
      }
    }
    CHECK(count >= 4);  // default, all, llama3, gemma
  }
}
