// DiskCache when the disk says no: an uncreatable or unwritable root, a full disk, and roots it
// must not trust (group-writable, a symlink, another user's). None of these may throw or fail a
// lookup; each must be warned about and leave the cache serving what it still can.
//
// CI runs as root, and root ignores mode bits, so "unwritable" is produced by means root cannot
// bypass: a root path that runs through a regular file (ENOTDIR), a tmp/ that is a regular file,
// and RLIMIT_FSIZE in a forked child (EFBIG, the same path as ENOSPC). The chmod 0500 case runs
// only for non-root users.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <string>

#include "cache_test_support.hpp"

using namespace tsattn;
using namespace tsattn::jit;
using namespace tsattn::test;

namespace {

// A read-only layer with entry 1 in it, to prove lookups survive a broken writable root.
std::string make_ro_layer(const TempDir& tmp) {
  const std::string ro = tmp / "ro";
  DiskCache writer = rw_cache(ro);
  publish_test_entry(writer, 1);
  return ro;
}

}  // namespace

TEST_SUITE("jit/cache/disk") {
  TEST_CASE("a root that cannot be created: publish fails silently, lookups still work") {
    TempDir tmp;
    LogCapture log;
    const std::string ro = make_ro_layer(tmp);
    write_bytes(tmp / "file", {1});
    const std::string root = tmp / "file/cache";

    DiskCache cache(DiskCacheConfig{{ro}, root, true});
    CHECK(cache.writable_state() == WritableState::write_failed);
    CHECK(cache.counters().write_failures == 1);
    CHECK(log.any_contains(root));

    publish_test_entry(cache, 2);
    CHECK(cache.counters().writes == 0);
    CHECK(cache.lookup(test_key(1), "sm_90a"));
    CHECK_FALSE(cache.lookup(test_key(2), "sm_90a"));
    CHECK(cache.counters().read_only_hits == 1);
    CHECK(cache.counters().misses == 1);
  }

  TEST_CASE("an unwritable root keeps serving its entries and stops trying to write") {
    TempDir tmp;
    LogCapture log;
    const std::string root = tmp / "cache";
    {
      DiskCache writer = rw_cache(root);
      publish_test_entry(writer, 1);
    }
    // tmp/ replaced by a regular file: every publish fails with ENOTDIR, even for root.
    fs::remove_all(root + "/tmp");
    write_bytes(root + "/tmp", {1});

    DiskCache cache = rw_cache(root);
    CHECK(cache.writable_state() == WritableState::ready);
    publish_test_entry(cache, 2);
    CHECK(cache.counters().write_failures == 1);
    CHECK(cache.writable_state() == WritableState::write_failed);
    CHECK(log.any_contains("write failed"));
    CHECK_FALSE(fs::exists(DiskCache::entry_path(root, test_key(2), "sm_90a")));

    // Further publishes are not attempted; lookups of what is there still hit.
    publish_test_entry(cache, 3);
    CHECK(cache.counters().write_failures == 1);
    CHECK(cache.counters().writes == 0);
    const std::optional<CachedEntry> hit = cache.lookup(test_key(1), "sm_90a");
    REQUIRE(hit);
    CHECK(hit->layer == LayerKind::writable);
    CHECK(log.messages().size() == 1);
  }

  TEST_CASE("a 0500 root (non-root users only)") {
    if (::geteuid() == 0) {
      MESSAGE("skipped: running as root, which writes to a 0500 directory anyway");
      return;
    }
    TempDir tmp;
    LogCapture log;
    const std::string root = tmp / "cache";
    {
      DiskCache writer = rw_cache(root);
      publish_test_entry(writer, 1);
    }
    fs::remove_all(root + "/tmp");
    fs::permissions(root, fs::perms(0500));
    DiskCache cache = rw_cache(root);
    publish_test_entry(cache, 2);
    CHECK(cache.counters().write_failures == 1);
    CHECK(cache.lookup(test_key(1), "sm_90a"));
    CHECK_FALSE(cache.lookup(test_key(2), "sm_90a"));
  }

  TEST_CASE("a full disk (RLIMIT_FSIZE) fails the publish silently and leaves no temp file") {
    TempDir tmp;
    const std::string ro = make_ro_layer(tmp);
    const std::string root = tmp / "cache";
    { DiskCache create = rw_cache(root); }
    // In a child, so the limit and the ignored SIGXFSZ do not leak into the test process.
    const int status = run_in_child([&] {
      ::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG instead of killing us
      rlimit limit{};
      ::getrlimit(RLIMIT_FSIZE, &limit);
      limit.rlim_cur = 1024;
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
      LogCapture log;
      DiskCache cache(DiskCacheConfig{{ro}, root, true});
      publish_test_entry(cache, 2, "sm_90a", 64 * 1024);
      if (cache.counters().write_failures != 1) return 3;
      if (cache.writable_state() != WritableState::write_failed) return 4;
      if (!log.any_contains("File too large")) return 5;
      if (!cache.lookup(test_key(1), "sm_90a")) return 6;
      if (cache.lookup(test_key(2), "sm_90a")) return 7;
      return 0;
    });
    CHECK(status == 0);
    CHECK(count_files(root, ".tsk") == 0);
    CHECK(count_files(root + "/tmp", "") == 0);
  }

  TEST_CASE("untrusted roots are refused: neither read nor written, and warned about") {
    struct Case {
      const char* what;
      const char* reason;  // part of the warning
      std::function<std::string(const TempDir&, const std::string& real_root)> make;
    };
    const std::vector<Case> cases = {
        {"group-writable", "group- or world-writable",
         [](const TempDir&, const std::string& real) {
           fs::permissions(real, fs::perms(0770));
           return real;
         }},
        {"world-writable", "group- or world-writable",
         [](const TempDir&, const std::string& real) {
           fs::permissions(real, fs::perms(0703));
           return real;
         }},
        {"a symlink to a good directory", "symbolic link",
         [](const TempDir& tmp, const std::string& real) {
           fs::create_directory_symlink(real, tmp / "link");
           return tmp / "link";
         }},
        {"a regular file", "not a directory",
         [](const TempDir& tmp, const std::string&) {
           write_bytes(tmp / "plain", {1});
           return tmp / "plain";
         }},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      TempDir tmp;
      LogCapture log;
      const std::string real = tmp / "real";
      {
        DiskCache writer = rw_cache(real);
        publish_test_entry(writer, 1);
      }
      const std::string root = c.make(tmp, real);
      const std::vector<std::string> before = tree_snapshot(real);

      DiskCache cache = rw_cache(root);
      CHECK(cache.writable_state() == WritableState::refused);
      CHECK(log.any_contains(c.reason));
      CHECK(log.any_contains(root));
      CHECK_FALSE(cache.lookup(test_key(1), "sm_90a"));
      publish_test_entry(cache, 2);
      CHECK(cache.counters().writes == 0);
      CHECK(cache.counters().write_failures == 0);  // a refusal is not a failed write
      CHECK(cache.list_entries().empty());
      CHECK(cache.clear() == 0);
      CHECK(tree_snapshot(real) == before);
    }
  }

  TEST_CASE("a root owned by another user is refused (needs root to arrange)") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: only root can give a directory to another user");
      return;
    }
    TempDir tmp;
    LogCapture log;
    const std::string root = tmp / "cache";
    {
      DiskCache writer = rw_cache(root);
      publish_test_entry(writer, 1);
    }
    REQUIRE(::chown(root.c_str(), 65534, 65534) == 0);
    DiskCache cache = rw_cache(root);
    CHECK(cache.writable_state() == WritableState::refused);
    CHECK(log.any_contains("owned by uid 65534"));
    CHECK_FALSE(cache.lookup(test_key(1), "sm_90a"));
    publish_test_entry(cache, 2);
    CHECK_FALSE(fs::exists(DiskCache::entry_path(root, test_key(2), "sm_90a")));
  }
}
