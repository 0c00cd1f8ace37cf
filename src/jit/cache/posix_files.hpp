// posix_files.hpp - the few POSIX file operations the disk cache is built from, with the
// guarantees it needs spelled out: no symlink following, EINTR and short I/O handled, and
// deletes that only remove the exact file version that was inspected.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tsattn::jit {

// An owned file descriptor (closed on destruction, movable).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// One version of one file. A concurrent publish replaces an entry by rename (new inode), a
// lookup's use bump changes the mtime: either makes a stamp stale, so a stamp-guarded delete
// never removes a file someone else has just written or used.
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;

  static FileStamp of(const struct stat& st);
  bool operator==(const FileStamp&) const = default;
};

// "No such file or directory (errno 2)"
std::string errno_text(int err);

// A path that does not exist, or runs through a regular file (ENOTDIR): nothing there to read.
inline bool is_absent_errno(int err) { return err == ENOENT || err == ENOTDIR; }

// open(2) of an existing file for reading, never through a symlink in its last component.
// Returns an invalid fd and sets *err on failure.
UniqueFd open_for_reading(const std::string& path, int* err);

// Reads exactly `size` bytes at `offset` of fd into out; false (and *err) on error or early EOF.
bool read_exactly(int fd, uint64_t offset, size_t size, std::vector<uint8_t>& out, int* err);

// Writes all of data, retrying short writes and EINTR; returns 0 or the errno.
int write_all(int fd, std::span<const uint8_t> data);

// mkdir -p, creating each missing component with `mode`; existing components are left as they
// are (their owner and mode are the caller's to judge). Returns 0 or the errno of the failure.
int make_directories(const std::string& path, mode_t mode);

// Unlinks path only if lstat still reports `expected` (the window between the check and the
// unlink is a few instructions; no lock-free scheme can close it, and the worst case is one
// recompile). Returns true when the file was removed.
bool remove_if_unchanged(const std::string& path, const FileStamp& expected);

// fsync of a directory, so a rename into it survives a crash; best effort, errors ignored
// (some filesystems refuse fsync on directories).
void sync_directory(const std::string& path);

// CLOCK_REALTIME in nanoseconds: the clock file mtimes are stamped with.
int64_t realtime_ns();

// Removes the regular files directly in dir whose mtime is more than age_seconds in the past
// (stamp-guarded). Errors are ignored: this is housekeeping.
void remove_files_older_than(const std::string& dir, int64_t age_seconds);

// Regular files (not symlinks) directly in dir, by name, with their stat. A missing or
// unreadable dir gives an empty list.
struct DirEntry {
  std::string name;
  struct stat st;
};
std::vector<DirEntry> list_regular_files(const std::string& dir);
std::vector<std::string> list_subdirectories(const std::string& dir);

}  // namespace tsattn::jit
