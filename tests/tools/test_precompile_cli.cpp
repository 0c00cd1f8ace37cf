// `tsattn precompile` as a script sees it: exit codes, path-qualified manifest errors, --list
// without any cache or NVRTC work, a second run that compiles nothing, and two processes filling
// one directory at once.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tools/cli_support.hpp"

using namespace tsattn;
using namespace tsattn::test;

TEST_SUITE("tools/precompile") {
  TEST_CASE("exit 2 for a bad manifest, with the JSON path of the bad value") {
    CliSandbox box;
    nlohmann::json bad = one_kernel_manifest();
    bad["kernels"][0]["head_dim"] = {128, 96};
    const std::string path = box.manifest("m.json", bad);
    const CliResult r = box.run({"precompile", "--manifest", path, "--arch", "sm_90a", "--out", box.tmp / "out"});
    CHECK(r.code == 2);
    CHECK(r.err.find(path + ".kernels[0].head_dim[1]: 96 is not supported") != std::string::npos);
    CHECK_FALSE(fs::exists(box.tmp / "out"));  // rejected before anything was created

    CHECK(box.run({"precompile", "--manifest", box.tmp / "missing.json", "--arch", "sm_90a"}).code == 2);
    const CliResult arch =
        box.run({"precompile", "--manifest", box.manifest("ok.json", one_kernel_manifest()), "--arch", "sm_75"});
    CHECK(arch.code == 2);
    CHECK(arch.err.find("sm_75 is not a supported target") != std::string::npos);
    CHECK(box.run({"precompile", "--arch", "sm_90a"}).code == 2);  // --manifest is required
  }

  TEST_CASE("exit 3 when --out cannot be written") {
    CliSandbox box;
    write_bytes(box.tmp / "file", {1});
    const CliResult r = box.run({"precompile", "--manifest", box.manifest("m.json", one_kernel_manifest()), "--arch",
                                 "sm_90a", "--out", box.tmp / "file/cache"});
    CHECK(r.code == 3);
    CHECK(r.err.find("cannot write kernels to " + box.tmp / "file/cache") != std::string::npos);
  }

  TEST_CASE("--list prints the expanded names and touches neither the cache nor NVRTC") {
    CliSandbox box;
    write_bytes(box.tmp / "file", {1});
    // Every cache path runs through a regular file: any attempt to open a cache would fail
    // (exit 3), and with JIT disabled any compile would too.
    box.env["TSATTN_CACHE_DIR"] = box.tmp / "file/user";
    box.env["TSATTN_DISABLE_JIT"] = "1";
    const std::string manifest = box.manifest("m.json", one_kernel_manifest());
    const std::vector<std::string> before = tree_snapshot(box.tmp.path());
    const CliResult r = box.run(
        {"precompile", "--manifest", manifest, "--arch", "sm_90a,sm_80", "--out", box.tmp / "file/out", "--list"});
    CHECK(r.code == 0);
    CHECK(lines_of(r.out) == std::vector<std::string>{"prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed",
                                                      "prefill.sm80.sm_80.d128.bf16_bf16.causal.fixed"});
    std::vector<std::string> after = tree_snapshot(box.tmp.path());
    // Only the captured output files are new.
    std::erase_if(after, [](const std::string& line) { return line.starts_with("cli0."); });
    CHECK(after == before);
  }

  TEST_CASE("a manifest's merge list is listed and built like its kernels") {
    CliSandbox box;
    nlohmann::json manifest = one_kernel_manifest();
    manifest["merge"] = {"f32"};
    const CliResult list =
        box.run({"precompile", "--manifest", box.manifest("m.json", manifest), "--arch", "sm_90a,sm_80", "--list"});
    CHECK(list.code == 0);
    CHECK(lines_of(list.out) == std::vector<std::string>{"prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed",
                                                         "prefill.sm80.sm_80.d128.bf16_bf16.causal.fixed",
                                                         "merge.sm_90a.f32", "merge.sm_80.f32"});
    manifest["kernels"] = nlohmann::json::array();
    const CliResult built = box.run({"precompile", "--manifest", box.manifest("merge.json", manifest), "--arch",
                                     "sm_80", "--out", box.tmp / "aot", "--json"});
    REQUIRE(built.code == 0);
    const nlohmann::json summary = last_event(built.out);
    CHECK(summary["compiled"] == 1);
    CHECK(summary["failed"] == 0);
    CHECK(count_files(box.tmp / "aot", ".tsk") == 1);
    manifest["merge"] = {"e4m3"};
    const CliResult bad = box.run({"precompile", "--manifest", box.manifest("bad.json", manifest), "--arch", "sm_80"});
    CHECK(bad.code == 2);
    CHECK(bad.err.find(".merge[0]: \"e4m3\" is not supported (supported: f16, bf16, f32)") != std::string::npos);
  }

  TEST_CASE("a second precompile into the same directory compiles nothing") {
    CliSandbox box;
    const std::string manifest = box.manifest("m.json", one_kernel_manifest());
    const std::vector<std::string> args{"precompile", "--manifest", manifest,        "--arch",
                                        "sm_90a",     "--out",      box.tmp / "aot", "--json"};
    const CliResult first = box.run(args);
    REQUIRE(first.code == 0);
    const nlohmann::json one = last_event(first.out);
    CHECK(one["event"] == "summary");
    CHECK(one["compiled"] == 1);
    CHECK(one["cached"] == 0);

    const CliResult second = box.run(args);
    REQUIRE(second.code == 0);
    const nlohmann::json two = last_event(second.out);
    CHECK(two["compiled"] == 0);
    CHECK(two["cached"] == 1);
    CHECK(two["failed"] == 0);
    CHECK(count_files(box.tmp / "aot", ".tsk") == 1);
    CHECK_FALSE(fs::exists(box.user_cache));  // --out, not the user cache
  }

  TEST_CASE("two precompile processes into one directory both succeed") {
    CliSandbox box;
    nlohmann::json manifest = one_kernel_manifest();
    manifest["kernels"][0]["layout"] = {"fixed", "packed"};
    const std::vector<std::string> args{"precompile",
                                        "--manifest",
                                        box.manifest("m.json", manifest),
                                        "--arch",
                                        "sm_80",
                                        "--out",
                                        box.tmp / "aot",
                                        "--json",
                                        "-j",
                                        "2"};
    CliProcess a = box.start(args);
    CliProcess b = box.start(args);
    const CliResult ra = a.wait(), rb = b.wait();
    CHECK(ra.code == 0);
    CHECK(rb.code == 0);
    for (const CliResult* r : {&ra, &rb}) {
      const nlohmann::json summary = last_event(r->out);
      CHECK(summary["compiled"].get<int>() + summary["cached"].get<int>() == 2);
      CHECK(summary["failed"] == 0);
    }
    // One entry per kernel, each whole, and no temp file left behind.
    CHECK(count_files(box.tmp / "aot", ".tsk") == 2);
    CHECK(count_files(box.tmp / "aot", ".tmp") == 0);
    jit::DiskCache written = rw_cache(box.tmp / "aot");
    const jit::VerifyReport report = written.verify(false);
    CHECK(report.checked == 2);
    CHECK(report.bad.empty());
  }
}
