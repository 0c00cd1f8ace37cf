// Eight processes publish and look up the same four keys at once, with no locks: every lookup
// after a publish must hit with the right bytes, nothing may be counted damaged or failed, and
// the tree must end with exactly one file per key and no temp files.
#include <doctest/doctest.h>

#include <unistd.h>

#include <string>
#include <vector>

#include "cache_test_support.hpp"

using namespace tsattn;
using namespace tsattn::jit;
using namespace tsattn::test;

TEST_SUITE("jit/cache/disk") {
  TEST_CASE("8 processes racing on 4 keys: all succeed, one file per key, no temp files") {
    constexpr int kProcesses = 8, kKeys = 4, kRounds = 6;
    constexpr size_t kCubinBytes = 256 * 1024;  // large enough that writes overlap renames
    TempDir tmp;
    const std::string root = tmp / "cache";

    // The children block on this pipe until all are forked, so they start together.
    int gate[2];
    REQUIRE(::pipe(gate) == 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        ::close(gate[1]);
        char byte;
        while (::read(gate[0], &byte, 1) < 0) {
        }
        int code = 0;
        try {
          DiskCache cache = rw_cache(root);
          for (int round = 0; round < kRounds && code == 0; ++round) {
            for (int i = 0; i < kKeys && code == 0; ++i) {
              const int key = (i + p) % kKeys;  // each process starts on a different key
              const std::optional<CachedEntry> before = cache.lookup(test_key(key), "sm_90a");
              if (before && before->payload != test_cubin(key, kCubinBytes)) code = 2;
              // Publish even on a hit: replacing a file other processes are reading is the race.
              publish_test_entry(cache, key, "sm_90a", kCubinBytes);
              const std::optional<CachedEntry> after = cache.lookup(test_key(key), "sm_90a");
              if (!after)
                code = 3;
              else if (after->payload != test_cubin(key, kCubinBytes))
                code = 4;
            }
          }
          const CacheCounters c = cache.counters();
          if (code == 0 && (c.damaged != 0 || c.write_failures != 0)) code = 5;
          if (code == 0 && c.writes != kRounds * kKeys) code = 6;
        } catch (...) {
          code = 7;
        }
        ::_exit(code);
      }
      children.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);  // releases every child at once
    for (const pid_t pid : children) {
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }

    CHECK(count_files(root, ".tsk") == kKeys);
    CHECK(count_files(root + "/tmp", "") == 0);
    DiskCache cache = rw_cache(root);
    for (int key = 0; key < kKeys; ++key) {
      const std::optional<CachedEntry> hit = cache.lookup(test_key(key), "sm_90a");
      REQUIRE(hit);
      CHECK(hit->payload == test_cubin(key, kCubinBytes));
    }
    CHECK(cache.verify(false).bad.empty());
  }
}
