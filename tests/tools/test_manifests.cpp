// The shipped manifests (cache/manifests/*.json): each has a description and expands against the
// table of truth, and the model-family ones build exactly what those models' prefill needs.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "codegen/embedded_files.hpp"
#include "codegen/manifest.hpp"
#include "codegen/spec_table.hpp"
#include <tsattn/tsattn.hpp>

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
                                                   "prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed.lse",
                                                   "prefill.sm80.sm_90a.d128.bf16_bf16.causal.packed",
                                                   "prefill.sm80.sm_90a.d128.bf16_bf16.causal.packed.lse",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed.lse",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed.lse",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed.paged",
                                                   "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed.paged.lse"});
    CHECK(load_manifest(kManifests + "/llama3.json", {Arch::sm_90a, Arch::sm_80}).size() == 14);
  }

  TEST_CASE("gemma.json: D256 bf16 causal and sliding window, fixed and packed") {
    const auto specs = load_manifest(kManifests + "/gemma.json", {Arch::sm_90a});
    std::vector<std::string> expected;
    for (const char* family : {"sm80", "sm90a"})
      for (const char* mask : {"causal", "causal_win"})
        for (const char* layout : {"fixed", "packed"}) {
          // The sm90a causal kernels have a short-key variant (64-key tiles), the windows do not.
          const bool variant = std::string_view(family) == "sm90a" && std::string_view(mask) == "causal";
          for (const char* width : variant ? std::vector<const char*>{"", ".short_keys"} : std::vector<const char*>{""})
            for (const char* lse : {"", ".lse"})
              expected.push_back(
                  fmt::format("prefill.{}.sm_90a.d256.bf16_bf16.{}.{}{}{}", family, mask, layout, width, lse));
        }
    CHECK(names(specs) == expected);
    CHECK(load_manifest(kManifests + "/gemma.json", {Arch::sm_80}).size() == 8);
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
        // Every sm90a kernel has its sm80 twin for the same arch: what a Hopper call falls back to
        // (the portable family has one key width).
        for (const KernelSpec& spec : specs) {
          if (spec.family != KernelFamily::sm90a) continue;
          KernelSpec twin = spec;
          twin.family = KernelFamily::sm80;
          twin.short_keys = false;
          twin.paged_kv = false;
          CAPTURE(canonical_name(spec));
          CHECK(std::find(specs.begin(), specs.end(), twin) != specs.end());
        }
        // Every kernel with a short-key variant has it (and the other way round): calls take either
        // by their lengths, and a plan loads both.
        for (const KernelSpec& spec : specs) {
          if (!has_short_keys_variant(spec) || spec.paged_kv) continue;  // paged kernels have one width
          KernelSpec other = spec;
          other.short_keys = !spec.short_keys;
          CAPTURE(canonical_name(spec));
          CHECK(std::find(specs.begin(), specs.end(), other) != specs.end());
        }
        // Every packed Hopper kernel with a paged variant has it: paged calls on Hopper run it.
        for (const KernelSpec& spec : specs) {
          KernelSpec paged = spec;
          paged.paged_kv = true;
          paged.short_keys = has_short_keys_variant(spec);
          if (spec.paged_kv || !is_supported(paged)) continue;
          CAPTURE(canonical_name(spec));
          CHECK(std::find(specs.begin(), specs.end(), paged) != specs.end());
        }
        // Every kernel has its lse twin (and the other way round): a call or a plan's run that asks
        // for lse finds its kernel precompiled too, and a plan loads both.
        for (const KernelSpec& spec : specs) {
          KernelSpec twin = spec;
          twin.lse = !spec.lse;
          CAPTURE(canonical_name(spec));
          CHECK(std::find(specs.begin(), specs.end(), twin) != specs.end());
        }
      }
    }
    CHECK(count >= 4);  // default, all, llama3, gemma
  }

  TEST_CASE("the library carries every shipped manifest, loadable by name from any directory") {
    std::vector<std::string> on_disk;
    for (const auto& file : std::filesystem::directory_iterator(kManifests)) {
      if (file.path().extension() == ".json") on_disk.push_back(file.path().stem().string());
    }
    std::sort(on_disk.begin(), on_disk.end());
    CHECK(builtin_manifest_names() == on_disk);
    for (const EmbeddedFile& file : embedded_manifests()) {
      CAPTURE(file.name);
      std::ifstream in(kManifests + "/" + std::string(file.name), std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(file.text == text);  // the build embedded the file as it is now
    }
    for (const std::string& name : on_disk) {
      CAPTURE(name);
      CHECK(names(load_manifest(name, {Arch::sm_90a})) ==
            names(load_manifest(kManifests + "/" + name + ".json", {Arch::sm_90a})));
    }
    try {
      load_manifest("nosuch", {Arch::sm_90a});
      FAIL("an unknown built-in name loaded");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::value);
      CHECK(std::string(e.what()).find("nosuch: no built-in manifest has this name (built in: all, default, gemma, "
                                       "llama3)") != std::string::npos);
    }
    // A path is a path even when a built-in manifest has the same stem.
    CHECK_THROWS_AS(load_manifest("./default", {Arch::sm_90a}), Error);
    CHECK_THROWS_AS(load_manifest("default.json", {Arch::sm_90a}), Error);  // no such file in the test's cwd
  }
}
