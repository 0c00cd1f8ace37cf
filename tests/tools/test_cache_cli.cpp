// `tsattn cache info|verify|prune|clear` on caches filled in-process with deterministic entries
// (no NVRTC): what each reports, that verify finds and removes damage, that prune respects the
// byte cap oldest-first, that clear needs --yes, and that read-only layers are never changed.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "tools/cli_support.hpp"

using namespace tsattn;
using namespace tsattn::test;

namespace {

std::string entry(const std::string& root, int n) { return jit::DiskCache::entry_path(root, test_key(n), "sm_90a"); }

void fill(const std::string& root, int count, const std::string& arch = "sm_90a") {
  jit::DiskCache cache = rw_cache(root);
  for (int i = 0; i < count; ++i) publish_test_entry(cache, i, arch);
}

}  // namespace

TEST_SUITE("tools/cache") {
  TEST_CASE("verify finds a corrupted entry and --remove removes it") {
    CliSandbox box;
    fill(box.user_cache, 3);
    std::vector<uint8_t> bytes = read_bytes(entry(box.user_cache, 1));
    bytes[bytes.size() - 7] ^= 0x40;  // one flipped bit in the cubin
    write_bytes(entry(box.user_cache, 1), bytes);

    const CliResult found = box.run({"cache", "verify"});
    CHECK(found.code == 1);
    CHECK(found.out.find("damaged  " + entry(box.user_cache, 1)) != std::string::npos);
    CHECK(found.out.find("3 entries checked, 1 damaged") != std::string::npos);
    CHECK(fs::exists(entry(box.user_cache, 1)));  // reporting only

    const CliResult removed = box.run({"cache", "verify", "--remove"});
    CHECK(removed.code == 1);
    CHECK(removed.out.find("1 removed") != std::string::npos);
    CHECK_FALSE(fs::exists(entry(box.user_cache, 1)));
    CHECK(fs::exists(entry(box.user_cache, 0)));
    CHECK(fs::exists(entry(box.user_cache, 2)));

    const CliResult clean = box.run({"cache", "verify"});
    CHECK(clean.code == 0);
    CHECK(clean.out.find("2 entries checked, 0 damaged") != std::string::npos);
  }

  TEST_CASE("prune --max-bytes keeps the total under the cap, evicting the least recently used") {
    CliSandbox box;
    fill(box.user_cache, 6);
    const uint64_t size = fs::file_size(entry(box.user_cache, 0));
    for (int i = 0; i < 6; ++i) set_mtime(entry(box.user_cache, i), 1000 - 100 * i);  // entry 0 is the oldest

    const uint64_t cap = 3 * size + size / 2;
    const CliResult r = box.run({"cache", "prune", "--max-bytes", std::to_string(cap)});
    CHECK(r.code == 0);
    uint64_t total = 0;
    for (int i = 0; i < 6; ++i) {
      CAPTURE(i);
      CHECK(fs::exists(entry(box.user_cache, i)) == (i >= 3));
      if (fs::exists(entry(box.user_cache, i))) total += fs::file_size(entry(box.user_cache, i));
    }
    CHECK(total <= cap);

    // Suffixes are powers of 1024; every entry is larger than 1 KiB, so 1K leaves none.
    CHECK(box.run({"cache", "prune", "--max-bytes", "1K"}).code == 0);
    CHECK(count_files(box.user_cache, ".tsk") == 0);
  }

  TEST_CASE("prune and verify reject bad arguments with exit 2") {
    CliSandbox box;
    fill(box.user_cache, 1);
    for (const char* bad : {"12Q", "K", "-5", "1.5G"}) {
      CAPTURE(bad);
      CHECK(box.run({"cache", "prune", "--max-bytes", bad}).code == 2);
    }
    CHECK(box.run({"cache", "prune"}).code == 2);  // the cap is required
    CHECK(box.run({"cache"}).code == 2);           // so is a subcommand
    CHECK(box.run({"cache", "verify", "--bogus"}).code == 2);
    CHECK(count_files(box.user_cache, ".tsk") == 1);
  }

  TEST_CASE("clear needs --yes and empties only the writable layer") {
    CliSandbox box;
    const std::string ro = box.tmp / "ro";
    fill(ro, 1, "sm_80");
    fill(box.user_cache, 2);
    box.env["TSATTN_CACHE_RO_PATH"] = ro;
    const std::vector<std::string> ro_before = tree_snapshot(ro);

    CHECK(box.run({"cache", "clear"}).code == 2);
    CHECK(count_files(box.user_cache, ".tsk") == 2);

    const CliResult r = box.run({"cache", "clear", "--yes"});
    CHECK(r.code == 0);
    CHECK(r.out.find("removed 2 entries") != std::string::npos);
    CHECK(count_files(box.user_cache, ".tsk") == 0);
    CHECK(tree_snapshot(ro) == ro_before);
  }

  TEST_CASE("info reports every layer in order with counts, bytes and archs, and --list adds each entry") {
    CliSandbox box;
    const std::string ro = box.tmp / "ro";
    fill(ro, 1, "sm_80");
    fill(box.user_cache, 2);
    box.env["TSATTN_CACHE_RO_PATH"] = ro + ":" + box.tmp / "missing";

    const CliResult r = box.run({"cache", "info", "--json", "--list"});
    REQUIRE(r.code == 0);
    const nlohmann::json info = nlohmann::json::parse(r.out);
    REQUIRE(info["read_only"].size() == 2);
    CHECK(info["read_only"][0]["path"] == ro);
    CHECK(info["read_only"][0]["entries"] == 1);
    CHECK(info["read_only"][0]["archs"] == nlohmann::json{{"sm_80", 1}});
    CHECK(info["read_only"][1]["exists"] == false);
    CHECK(info["writable"]["path"] == box.user_cache);
    CHECK(info["writable"]["state"] == "ready");
    CHECK(info["writable"]["entries"] == 2);
    CHECK(info["writable"]["bytes"] ==
          fs::file_size(entry(box.user_cache, 0)) + fs::file_size(entry(box.user_cache, 1)));
    REQUIRE(info["list"].size() == 3);
    CHECK(info["list"][0]["layer"] == "ro");
    CHECK(info["list"][0]["name"] == "prefill.sm_80.test0");
    CHECK(info["list"][1]["name"] == "prefill.sm_90a.test0");
    CHECK(info["list"][2]["name"] == "prefill.sm_90a.test1");

    const CliResult text = box.run({"cache", "info", "--list"});
    CHECK(text.code == 0);
    CHECK(text.out.find("2 entries") != std::string::npos);
    CHECK(text.out.find("prefill.sm_90a.test1") != std::string::npos);
    CHECK(text.out.find("missing (skipped)") != std::string::npos);
  }

  TEST_CASE("info creates no cache directory, and admin commands on a refused one exit 3") {
    CliSandbox box;
    const CliResult info = box.run({"cache", "info", "--json"});
    CHECK(info.code == 0);
    CHECK(nlohmann::json::parse(info.out)["writable"]["state"] == "not_created");
    CHECK_FALSE(fs::exists(box.user_cache));
    CHECK(box.run({"cache", "verify"}).code == 0);  // nothing there, nothing damaged
    CHECK_FALSE(fs::exists(box.user_cache));

    fill(box.user_cache, 1);
    REQUIRE(::chmod(box.user_cache.c_str(), 0777) == 0);  // the library refuses a shared root
    const CliResult refused = box.run({"cache", "prune", "--max-bytes", "0"});
    CHECK(refused.code == 3);
    CHECK(refused.err.find("group- or world-writable") != std::string::npos);
    CHECK(count_files(box.user_cache, ".tsk") == 1);
  }

  TEST_CASE("--dir acts on the named directory instead of TSATTN_CACHE_DIR") {
    CliSandbox box;
    const std::string other = box.tmp / "aot";
    fill(other, 2);
    fill(box.user_cache, 1);
    CHECK(box.run({"cache", "clear", "--yes", "--dir", other}).code == 0);
    CHECK(count_files(other, ".tsk") == 0);
    CHECK(count_files(box.user_cache, ".tsk") == 1);
  }
}
