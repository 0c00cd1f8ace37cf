// cache_test_support.hpp - fixtures for the disk cache tests: private temp directories, captured
// warnings, deterministic entries, and running a check in a forked child.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "common/sha256.hpp"
#include "jit/cache/disk_cache.hpp"
#include "jit/cache/entry_format.hpp"

namespace tsattn::test {

namespace fs = std::filesystem;

// A fresh mkdtemp directory, removed with everything below it (modes restored first, so a
// non-root run can delete what a test made read-only).
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/tsattn-cache-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec))
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Turns warnings on and records them for the test's lifetime.
class LogCapture {
 public:
  LogCapture() : previous_(log_level()) {
    set_log_level(LogLevel::warn);
    set_log_sink([this](LogLevel, std::string_view message) {
      std::lock_guard lock(mutex_);
      messages_.emplace_back(message);
    });
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() {
    set_log_sink({});
    set_log_level(previous_);
  }
  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  bool any_contains(const std::string& text) const {
    for (const std::string& message : messages())
      if (message.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  LogLevel previous_;
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

inline Digest test_key(int n) { return sha256("tsattn test key " + std::to_string(n)); }

// A stand-in cubin whose bytes depend on n, so a mixed-up entry cannot pass for another.
inline std::vector<uint8_t> test_cubin(int n, size_t size = 4096) {
  std::vector<uint8_t> bytes(size);
  uint32_t state = 2166136261u ^ static_cast<uint32_t>(n);
  for (auto& b : bytes) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(state >> 24);
  }
  return bytes;
}

inline nlohmann::json test_metadata(int n, const std::string& arch = "sm_90a") {
  jit::EntryMetadata meta;
  meta.canonical_name = "prefill." + arch + ".test" + std::to_string(n);
  meta.spec = {{"head_dim", 128}, {"n", n}};
  meta.registers = 128;
  meta.arch = arch;
  meta.nvrtc_version = "13.0";
  meta.created_unix = 1767225600;
  return meta.to_json();
}

inline void publish_test_entry(jit::DiskCache& cache, int n, const std::string& arch = "sm_90a", size_t size = 4096) {
  cache.publish(test_key(n), arch, test_metadata(n, arch), test_cubin(n, size));
}

inline jit::DiskCache rw_cache(const std::string& root) { return jit::DiskCache(jit::DiskCacheConfig{{}, root, true}); }

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Backdates a file's mtime (an entry's last use, a temp file's age).
inline void set_mtime(const std::string& path, int64_t seconds_ago) {
  const timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - seconds_ago, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
}

// Every regular file below dir (relative path, size, mtime): compared before and after to prove
// a layer was not written.
inline std::vector<std::string> tree_snapshot(const std::string& dir) {
  std::vector<std::string> lines;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    lines.push_back(fs::relative(it->path(), dir).string() + " " + std::to_string(st.st_size) + " " +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
                    std::to_string(st.st_mode));
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Entry files (*.tsk) and temp files below a writable root.
inline size_t count_files(const std::string& dir, const std::string& suffix) {
  size_t count = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec) && it->path().string().ends_with(suffix)) ++count;
  return count;
}

// Runs body in a forked child and returns its exit status (body's return value), or -signal
// when the child was killed. The child leaves with _exit: no doctest teardown, no atexit.
inline int run_in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 100;
    try {
      code = body();
    } catch (...) {
      code = 101;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace tsattn::test
