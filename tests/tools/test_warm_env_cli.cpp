// `tsattn warm` and `tsattn env`. Without a GPU, warm must say so and exit 3 (a deployment script
// must not mistake that for success); with one, it fills the user cache from a precompiled
// directory and loads every kernel. env reports layers, knobs and unknown TSATTN_* variables.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "codegen/kernel_spec.hpp"
#include "common/knobs.hpp"
#include "jit/driver/device_context.hpp"
#include "support/gpu.hpp"
#include "tools/cli_support.hpp"

using namespace tsattn;
using namespace tsattn::test;

TEST_SUITE("tools/warm") {
  TEST_CASE("warm rejects a bad manifest with exit 2 on any machine") {
    CliSandbox box;
    nlohmann::json bad = one_kernel_manifest();
    bad["kernels"][0]["mask"] = {"sliding"};
    const std::string path = box.manifest("m.json", bad);
    const CliResult r = box.run({"warm", "--manifest", path});
    CHECK(r.code == 2);
    CHECK(r.err.find(path + ".kernels[0].mask[0]: \"sliding\" is not supported") != std::string::npos);
    CHECK(box.run({"warm", "--manifest", path, "--from", box.tmp / "nowhere"}).code == 2);
  }

  TEST_CASE("warm without a GPU exits 3 and says so") {
    if (gpu_unavailable_reason().empty()) {
      MESSAGE("this machine has a GPU: the warm test below covers it");
      return;
    }
    CliSandbox box;
    const CliResult r = box.run({"warm", "--manifest", box.manifest("m.json", one_kernel_manifest())});
    CHECK(r.code == 3);
    CHECK(r.err.find("no GPU") != std::string::npos);
    CHECK_FALSE(fs::exists(box.user_cache));  // nothing was compiled or written
  }

  TEST_CASE("warm --from copies precompiled kernels into the user cache and loads them") {
    TSATTN_REQUIRE_GPU();
    const std::optional<Arch> arch = arch_for_compute_capability(driver::device_info(0).cc_major);
    REQUIRE(arch);
    CliSandbox box;
    nlohmann::json manifest = one_kernel_manifest();
    manifest["kernels"][0]["layout"] = {"fixed", "packed"};  // packed modules carry the planner too
    manifest["merge"] = {"bf16"};                            // and a merge module, loaded as a plain function
    const std::string path = box.manifest("m.json", manifest);
    const std::string aot = box.tmp / "aot";
    REQUIRE(box.run({"precompile", "--manifest", path, "--arch", arch_name(*arch), "--out", aot}).code == 0);

    // JIT disabled: everything must come from --from.
    box.env["TSATTN_DISABLE_JIT"] = "1";
    const CliResult first = box.run({"warm", "--manifest", path, "--from", aot, "--json"});
    CHECK(first.code == 0);
    const std::vector<std::string> events = lines_of(first.out);
    REQUIRE(events.size() == 4);
    for (size_t i = 0; i < 3; ++i) {
      const nlohmann::json e = nlohmann::json::parse(events[i]);
      CHECK(e["status"] == "ok");
      CHECK(e["from"] == "from_dir");
      CHECK(e["load_ms"].get<double>() > 0);
    }
    CHECK(nlohmann::json::parse(events[2])["name"] == fmt::format("merge.{}.bf16", arch_name(*arch)));
    const nlohmann::json summary = nlohmann::json::parse(events[3]);
    CHECK(summary["from_dir"] == 3);
    CHECK(summary["compiled"] == 0);
    CHECK(summary["loaded"] == 3);
    CHECK(count_files(box.user_cache, ".tsk") == 3);

    // The user cache now stands alone: no --from, still nothing to compile.
    const CliResult second = box.run({"warm", "--manifest", path, "--json"});
    CHECK(second.code == 0);
    CHECK(last_event(second.out)["user_cache"] == 3);
  }
}

TEST_SUITE("tools/env") {
  TEST_CASE("env --json reports the layers, every knob and unknown TSATTN_ variables") {
    CliSandbox box;
    box.env["TSATTN_CACHE_RO_PATH"] = box.tmp / "ro1" + ":" + box.tmp / "ro2";
    box.env["TSATTN_LINEINFO"] = "yes";
    box.env["TSATTN_CACHE_DIRR"] = "/typo";
    const CliResult r = box.run({"env", "--json"});
    REQUIRE(r.code == 0);
    const nlohmann::json env = nlohmann::json::parse(r.out);
    CHECK(env["tsattn"] == TSATTN_VERSION_STRING);
    CHECK(env["nvrtc"]["available"].get<bool>());  // the test machine has the toolkit
    CHECK_FALSE(env["nvrtc"]["version"].get<std::string>().empty());
    CHECK(std::filesystem::exists(env["nvrtc"]["path"].get<std::string>()));
    CHECK(env["driver"].contains("available"));
    CHECK(env["gpus"].is_array());
    REQUIRE(env["cache"]["read_only"].size() == 2);
    CHECK(env["cache"]["read_only"][1]["path"] == box.tmp / "ro2");
    CHECK(env["cache"]["writable"]["path"] == box.user_cache);
    CHECK(env["cache"]["writable"]["state"] == "not_created");
    CHECK(env["unknown_variables"] == nlohmann::json{"TSATTN_CACHE_DIRR"});

    std::map<std::string, nlohmann::json> knobs;
    for (const nlohmann::json& k : env["knobs"]) knobs[k["name"]] = k;
    REQUIRE(knobs.size() == all_knobs().size());
    CHECK(knobs["TSATTN_LINEINFO"]["set"] == true);
    CHECK(knobs["TSATTN_LINEINFO"]["value"] == "1");
    CHECK(knobs["TSATTN_LINEINFO"]["affects_cache_key"] == true);
    CHECK(knobs["TSATTN_DISABLE_JIT"]["set"] == false);
    CHECK(knobs["TSATTN_DISABLE_JIT"]["value"] == "0");
    CHECK(knobs["TSATTN_CACHE_DIR"]["value"] == box.user_cache);
  }

  TEST_CASE("env flags a malformed variable and exits 3") {
    CliSandbox box;
    box.env["TSATTN_DISABLE_JIT"] = "maybe";
    const CliResult r = box.run({"env"});
    CHECK(r.code == 3);
    CHECK(r.out.find("INVALID: TSATTN_DISABLE_JIT='maybe' is not a boolean") != std::string::npos);
  }
}
