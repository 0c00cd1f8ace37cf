// DiskCache lookup and publish: the entry layout on disk, hit/miss/damage counters, damaged
// files as misses that heal on the next publish, read-only layers, the use stamp, tmp/ sweeping,
// and the configuration read from the environment.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "support/scoped_env.hpp"

using namespace tsattn;
using namespace tsattn::jit;
using namespace tsattn::test;

namespace {

int64_t mtime_age(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return ::time(nullptr) - st.st_mtim.tv_sec;
}

// Makes every directory below (and including) dir read-only, as an image's baked cache is.
void make_read_only_tree(const std::string& dir) {
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it)
    if (it->is_directory()) fs::permissions(it->path(), fs::perms(0555));
  fs::permissions(dir, fs::perms(0555));
}

}  // namespace

TEST_SUITE("jit/cache/disk") {
  TEST_CASE("a published entry is found where the layout says, by this and a fresh cache") {
    TempDir tmp;
    const std::string root = tmp / "parent/cache";
    DiskCache cache = rw_cache(root);
    CHECK(cache.writable_state() == WritableState::ready);
    // The root and the parents it needed are private.
    for (const std::string& dir : {root, tmp / "parent"}) {
      struct stat st;
      REQUIRE(::stat(dir.c_str(), &st) == 0);
      CHECK((st.st_mode & 0777) == 0700);
    }

    CHECK_FALSE(cache.lookup(test_key(1), "sm_90a"));
    publish_test_entry(cache, 1);
    const std::string hex = to_hex(test_key(1));
    const std::string path = root + "/v1/sm_90a/" + hex.substr(0, 2) + "/" + hex + ".tsk";
    CHECK(DiskCache::entry_path(root, test_key(1), "sm_90a") == path);
    CHECK(fs::is_regular_file(path));

    const std::optional<CachedEntry> hit = cache.lookup(test_key(1), "sm_90a");
    REQUIRE(hit);
    CHECK(hit->payload == test_cubin(1));
    CHECK(hit->metadata == test_metadata(1));
    CHECK(hit->layer == LayerKind::writable);
    CHECK(hit->path == path);

    const CacheCounters c = cache.counters();
    CHECK(c.lookups == 2);
    CHECK(c.misses == 1);
    CHECK(c.writable_hits == 1);
    CHECK(c.read_only_hits == 0);
    CHECK(c.writes == 1);
    CHECK(c.write_failures == 0);
    CHECK(c.damaged == 0);
    CHECK(count_files(root + "/tmp", "") == 0);

    DiskCache fresh = rw_cache(root);
    REQUIRE(fresh.lookup(test_key(1), "sm_90a"));
    CHECK(fresh.counters().writable_hits == 1);
    // Other arch, other key: misses.
    CHECK_FALSE(fresh.lookup(test_key(1), "sm_80"));
    CHECK_FALSE(fresh.lookup(test_key(2), "sm_90a"));
    // An arch that is not a path component is never looked up or written.
    CHECK_FALSE(fresh.lookup(test_key(1), "../sm_90a"));
    CHECK(fresh.counters().misses == 3);
  }

  TEST_CASE("damaged entries are misses, removed, counted, and healed by the next publish") {
    struct Damage {
      const char* what;
      std::function<void(const std::string& path)> apply;
    };
    const std::vector<Damage> damages = {
        {"flipped payload byte",
         [](const std::string& path) {
           std::vector<uint8_t> bytes = read_bytes(path);
           bytes[bytes.size() - 10] ^= 0x04;
           write_bytes(path, bytes);
         }},
        {"truncated", [](const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }},
        {"empty", [](const std::string& path) { fs::resize_file(path, 0); }},
        {"random bytes", [](const std::string& path) { write_bytes(path, test_cubin(99, 5000)); }},
        {"another key's entry renamed",
         [](const std::string& path) {
           write_bytes(path, serialize_entry(test_key(2), test_metadata(2), test_cubin(2)));
         }},
    };
    for (const Damage& damage : damages) {
      CAPTURE(damage.what);
      TempDir tmp;
      LogCapture log;
      const std::string root = tmp / "cache";
      DiskCache cache = rw_cache(root);
      publish_test_entry(cache, 1);
      const std::string path = DiskCache::entry_path(root, test_key(1), "sm_90a");
      damage.apply(path);

      CHECK_FALSE(cache.lookup(test_key(1), "sm_90a"));
      CHECK(cache.counters().damaged == 1);
      CHECK(cache.counters().misses == 1);
      CHECK_FALSE(fs::exists(path));
      CHECK(log.any_contains(path));

      publish_test_entry(cache, 1);
      const std::optional<CachedEntry> hit = cache.lookup(test_key(1), "sm_90a");
      REQUIRE(hit);
      CHECK(hit->payload == test_cubin(1));
      CHECK(cache.counters().damaged == 1);
      CHECK(cache.counters().write_failures == 0);
    }
  }

  TEST_CASE("a damaged entry in a read-only layer is a miss and is left alone") {
    TempDir tmp;
    LogCapture log;
    const std::string ro = tmp / "ro";
    {
      DiskCache writer = rw_cache(ro);
      publish_test_entry(writer, 1);
    }
    const std::string path = DiskCache::entry_path(ro, test_key(1), "sm_90a");
    std::vector<uint8_t> bytes = read_bytes(path);
    bytes[200] ^= 0xff;
    write_bytes(path, bytes);

    DiskCache cache(DiskCacheConfig{{ro}, tmp / "rw", true});
    CHECK_FALSE(cache.lookup(test_key(1), "sm_90a"));
    CHECK(cache.counters().damaged == 1);
    CHECK(fs::exists(path));
    CHECK(read_bytes(path) == bytes);
    CHECK(log.any_contains(path));
  }

  TEST_CASE("read-only layers are served first, in order, and never written") {
    TempDir tmp;
    const std::string ro1 = tmp / "ro1", ro2 = tmp / "ro2", rw = tmp / "rw";
    {
      DiskCache writer1 = rw_cache(ro1);
      publish_test_entry(writer1, 1);
      DiskCache writer2 = rw_cache(ro2);
      publish_test_entry(writer2, 1);
      publish_test_entry(writer2, 2);
    }
    // Old enough that a writable layer's hit would refresh the stamp: it must not happen here.
    set_mtime(DiskCache::entry_path(ro1, test_key(1), "sm_90a"), 2 * 3600);
    set_mtime(DiskCache::entry_path(ro2, test_key(2), "sm_90a"), 2 * 3600);
    make_read_only_tree(ro1);
    make_read_only_tree(ro2);
    const std::vector<std::string> before1 = tree_snapshot(ro1), before2 = tree_snapshot(ro2);

    LogCapture log;
    DiskCache cache(DiskCacheConfig{{tmp / "missing", ro1, ro2}, rw, true});
    std::optional<CachedEntry> hit = cache.lookup(test_key(1), "sm_90a");
    REQUIRE(hit);
    CHECK(hit->layer == LayerKind::read_only);
    CHECK(hit->read_only_index == 1);
    CHECK(hit->payload == test_cubin(1));
    hit = cache.lookup(test_key(2), "sm_90a");
    REQUIRE(hit);
    CHECK(hit->read_only_index == 2);
    CHECK(cache.counters().read_only_hits == 2);

    // What the caller does after a read-only hit it cannot use (or after any compile): publish.
    // It lands in the writable layer only.
    publish_test_entry(cache, 1);
    publish_test_entry(cache, 3);
    CHECK(cache.counters().writes == 2);
    CHECK(fs::is_regular_file(DiskCache::entry_path(rw, test_key(1), "sm_90a")));
    CHECK(fs::is_regular_file(DiskCache::entry_path(rw, test_key(3), "sm_90a")));
    hit = cache.lookup(test_key(3), "sm_90a");
    REQUIRE(hit);
    CHECK(hit->layer == LayerKind::writable);
    // The read-only copy still wins for key 1.
    CHECK(cache.lookup(test_key(1), "sm_90a")->layer == LayerKind::read_only);

    CHECK(tree_snapshot(ro1) == before1);
    CHECK(tree_snapshot(ro2) == before2);
    CHECK(log.messages().empty());  // a missing read-only directory is not worth a warning
  }

  TEST_CASE("without lookups (TSATTN_ALWAYS_COMPILE) every lookup misses, publish still writes") {
    TempDir tmp;
    const std::string root = tmp / "cache";
    {
      DiskCache writer = rw_cache(root);
      publish_test_entry(writer, 1);
    }
    DiskCache cache(DiskCacheConfig{{}, root, false});
    CHECK_FALSE(cache.lookup(test_key(1), "sm_90a"));
    publish_test_entry(cache, 2);
    CHECK(cache.counters().misses == 1);
    CHECK(cache.counters().writes == 1);
    CHECK(rw_cache(root).lookup(test_key(2), "sm_90a"));
  }

  TEST_CASE("a hit refreshes the entry's use stamp at most once an hour") {
    TempDir tmp;
    const std::string root = tmp / "cache";
    DiskCache cache = rw_cache(root);
    publish_test_entry(cache, 1);
    const std::string path = DiskCache::entry_path(root, test_key(1), "sm_90a");

    set_mtime(path, 2 * 3600);
    REQUIRE(cache.lookup(test_key(1), "sm_90a"));
    CHECK(mtime_age(path) < 60);

    set_mtime(path, 600);
    REQUIRE(cache.lookup(test_key(1), "sm_90a"));
    CHECK(mtime_age(path) >= 600);
  }

  TEST_CASE("opening the writable root sweeps temp files older than an hour") {
    TempDir tmp;
    const std::string root = tmp / "cache";
    { DiskCache first = rw_cache(root); }
    write_bytes(root + "/tmp/crashed.tmp", {1, 2, 3});
    write_bytes(root + "/tmp/in-flight.tmp", {4, 5, 6});
    set_mtime(root + "/tmp/crashed.tmp", 2 * 3600);
    DiskCache cache = rw_cache(root);
    CHECK_FALSE(fs::exists(root + "/tmp/crashed.tmp"));
    CHECK(fs::exists(root + "/tmp/in-flight.tmp"));
  }

  TEST_CASE("publish recreates a cache directory removed by hand") {
    TempDir tmp;
    const std::string root = tmp / "cache";
    DiskCache cache = rw_cache(root);
    publish_test_entry(cache, 1);
    fs::remove_all(root);
    publish_test_entry(cache, 2);
    CHECK(cache.counters().write_failures == 0);
    CHECK(cache.lookup(test_key(2), "sm_90a"));
    struct stat st;
    REQUIRE(::stat(root.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }

  TEST_CASE("the configuration from TSATTN_CACHE_* and XDG_CACHE_HOME") {
    testing::ScopedEnv env;
    env.set("TSATTN_CACHE_DIR", nullptr)
        .set("TSATTN_CACHE_RO_PATH", nullptr)
        .set("TSATTN_CACHE_DISABLE", nullptr)
        .set("TSATTN_ALWAYS_COMPILE", nullptr)
        .set("XDG_CACHE_HOME", "/xdg/cache");
    DiskCacheConfig config = DiskCache::config_from_environment();
    CHECK(config.read_only_roots.empty());
    CHECK(config.writable_root == "/xdg/cache/tsattn");
    CHECK(config.lookups_enabled);

    env.set("TSATTN_CACHE_DIR", "/my/cache")
        .set("TSATTN_CACHE_RO_PATH", "/image/a::/image/b")
        .set("TSATTN_ALWAYS_COMPILE", "1");
    config = DiskCache::config_from_environment();
    CHECK(config.writable_root == "/my/cache");
    CHECK(config.read_only_roots == std::vector<std::string>{"/image/a", "/image/b"});
    CHECK_FALSE(config.lookups_enabled);

    env.set("TSATTN_CACHE_DISABLE", "1");
    config = DiskCache::config_from_environment();
    CHECK(config.read_only_roots.empty());
    CHECK_FALSE(config.writable_root);

    TempDir tmp;
    env.set("TSATTN_CACHE_DISABLE", nullptr).set("TSATTN_CACHE_DIR", tmp / "env-cache");
    DiskCache cache = DiskCache::from_environment();
    CHECK(cache.writable_state() == WritableState::ready);
    publish_test_entry(cache, 1);
    CHECK(rw_cache(tmp / "env-cache").lookup(test_key(1), "sm_90a"));
  }
}
