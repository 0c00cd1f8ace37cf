// The admin operations behind `tsattn cache info|verify|prune|clear`: listing every layer,
// verify finding and removing damage, prune evicting least recently used entries down to a byte
// cap, clear emptying the writable layer. None of them may touch a read-only layer.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cache_test_support.hpp"

using namespace tsattn;
using namespace tsattn::jit;
using namespace tsattn::test;

namespace {

// A read-only layer holding entry 100, and a writable cache holding entries 0..count-1.
struct TwoLayers {
  TempDir tmp;
  std::string ro = tmp / "ro", rw = tmp / "rw";
  std::vector<std::string> ro_before;

  explicit TwoLayers(int count) {
    {
      DiskCache writer = rw_cache(ro);
      publish_test_entry(writer, 100, "sm_80");
      DiskCache rw_writer = rw_cache(rw);
      for (int i = 0; i < count; ++i) publish_test_entry(rw_writer, i);
    }
    ro_before = tree_snapshot(ro);
  }
  DiskCache cache() const { return DiskCache(DiskCacheConfig{{ro}, rw, true}); }
  std::string path(int n) const { return DiskCache::entry_path(rw, test_key(n), "sm_90a"); }
};

}  // namespace

TEST_SUITE("jit/cache/disk") {
  TEST_CASE("list_entries reports every layer with name, arch, size and problems") {
    TwoLayers layers(2);
    write_bytes(layers.path(1), {1, 2, 3});  // a damaged entry is listed with its problem
    DiskCache cache = layers.cache();
    const std::vector<EntryInfo> entries = cache.list_entries();
    REQUIRE(entries.size() == 3);
    CHECK(entries[0].layer == LayerKind::read_only);
    CHECK(entries[0].arch == "sm_80");
    CHECK(entries[0].name == "prefill.sm_80.test100");
    CHECK(entries[0].problem.empty());
    CHECK(entries[0].size == fs::file_size(entries[0].path));

    const auto rw_entry = [&](int n) {
      return *std::find_if(entries.begin(), entries.end(),
                           [&](const EntryInfo& e) { return e.path == layers.path(n); });
    };
    CHECK(rw_entry(0).layer == LayerKind::writable);
    CHECK(rw_entry(0).name == "prefill.sm_90a.test0");
    CHECK(rw_entry(0).arch == "sm_90a");
    CHECK(rw_entry(1).name.empty());
    CHECK(rw_entry(1).problem.find("header") != std::string::npos);
    CHECK(rw_entry(1).size == 3);
  }

  TEST_CASE("verify reports damaged writable entries and removes them on request") {
    TwoLayers layers(3);
    std::vector<uint8_t> bytes = read_bytes(layers.path(1));
    bytes[bytes.size() / 2] ^= 0x10;
    write_bytes(layers.path(1), bytes);
    // A good entry filed under the wrong name is as useless as a damaged one.
    const fs::path misnamed = fs::path(layers.path(2)).parent_path() / (std::string(64, 'a') + ".tsk");
    fs::rename(layers.path(2), misnamed);
    // Damage in the read-only layer is not verify's business.
    const std::string ro_path = DiskCache::entry_path(layers.ro, test_key(100), "sm_80");
    std::vector<uint8_t> ro_bytes = read_bytes(ro_path);
    ro_bytes.back() ^= 1;
    write_bytes(ro_path, ro_bytes);
    const std::vector<std::string> ro_before = tree_snapshot(layers.ro);

    DiskCache cache = layers.cache();
    VerifyReport report = cache.verify(false);
    CHECK(report.checked == 3);
    REQUIRE(report.bad.size() == 2);
    CHECK(report.removed == 0);
    const auto bad_reason = [&](const std::string& path) {
      for (const auto& bad : report.bad)
        if (bad.path == path) return bad.reason;
      return std::string("<not reported>");
    };
    CHECK(bad_reason(layers.path(1)).find("digest") != std::string::npos);
    CHECK(fs::exists(layers.path(1)));

    report = cache.verify(true);
    CHECK(report.bad.size() == 2);
    CHECK(report.removed == 2);
    CHECK_FALSE(fs::exists(layers.path(1)));
    report = cache.verify(true);
    CHECK(report.checked == 1);
    CHECK(report.bad.empty());
    CHECK(cache.lookup(test_key(0), "sm_90a"));
    CHECK(tree_snapshot(layers.ro) == ro_before);
  }

  TEST_CASE("prune keeps the most recently used entries within the byte cap") {
    TwoLayers layers(5);
    const uint64_t entry_size = fs::file_size(layers.path(0));
    // Entry i was last used (5 - i) hours ago: 0 is the oldest.
    for (int i = 0; i < 5; ++i) set_mtime(layers.path(i), (5 - i) * 3600);
    DiskCache cache = layers.cache();
    // Using entry 0 makes it the most recent; 1 and 2 are now the least recently used.
    REQUIRE(cache.lookup(test_key(0), "sm_90a"));

    PruneReport report = cache.prune(3 * entry_size + entry_size / 2);
    CHECK(report.entries_before == 5);
    CHECK(report.bytes_before == 5 * entry_size);
    CHECK(report.removed == 2);
    CHECK(report.bytes_after == 3 * entry_size);
    CHECK(fs::exists(layers.path(0)));
    CHECK_FALSE(fs::exists(layers.path(1)));
    CHECK_FALSE(fs::exists(layers.path(2)));
    CHECK(fs::exists(layers.path(3)));
    CHECK(fs::exists(layers.path(4)));

    report = cache.prune(10 * entry_size);
    CHECK(report.removed == 0);
    CHECK(report.bytes_after == 3 * entry_size);

    report = cache.prune(0);
    CHECK(report.removed == 3);
    CHECK(report.bytes_after == 0);
    CHECK(tree_snapshot(layers.ro) == layers.ro_before);
    CHECK(cache.lookup(test_key(100), "sm_80"));
  }

  TEST_CASE("prune also sweeps stale temp files") {
    TwoLayers layers(1);
    write_bytes(layers.rw + "/tmp/crashed.tmp", {1});
    set_mtime(layers.rw + "/tmp/crashed.tmp", 3 * 3600);
    DiskCache cache = layers.cache();
    write_bytes(layers.rw + "/tmp/crashed-later.tmp", {1});  // after the sweep at open
    set_mtime(layers.rw + "/tmp/crashed-later.tmp", 3 * 3600);
    cache.prune(1 << 30);
    CHECK(count_files(layers.rw + "/tmp", "") == 0);
    CHECK(fs::exists(layers.path(0)));
  }

  TEST_CASE("clear empties the writable layer only") {
    TwoLayers layers(3);
    DiskCache cache = layers.cache();
    CHECK(cache.clear() == 3);
    CHECK(count_files(layers.rw, ".tsk") == 0);
    const std::vector<EntryInfo> entries = cache.list_entries();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].layer == LayerKind::read_only);
    CHECK(tree_snapshot(layers.ro) == layers.ro_before);
    CHECK(cache.lookup(test_key(100), "sm_80"));
    CHECK_FALSE(cache.lookup(test_key(0), "sm_90a"));
    CHECK(cache.clear() == 0);

    // The cache keeps working after a clear.
    publish_test_entry(cache, 0);
    CHECK(cache.lookup(test_key(0), "sm_90a"));
  }
}
