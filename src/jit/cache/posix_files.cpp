// posix_files.cpp - POSIX helpers of the disk cache (see posix_files.hpp for the contracts).
#include "jit/cache/posix_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

namespace tsattn::jit {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

FileStamp FileStamp::of(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::string errno_text(int err) { return fmt::format("{} (errno {})", std::strerror(err), err); }

UniqueFd open_for_reading(const std::string& path, int* err) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != EINTR) {
      *err = errno;
      return UniqueFd();
    }
  }
}

bool read_exactly(int fd, uint64_t offset, size_t size, std::vector<uint8_t>& out, int* err) {
  out.resize(size);
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      *err = got < 0 ? errno : EIO;  // EOF before `size`: the file shrank under us
      return false;
    }
    done += static_cast<size_t>(got);
  }
  return true;
}

int write_all(int fd, std::span<const uint8_t> data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = ::write(fd, data.data() + done, data.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return errno;
    if (wrote == 0) return EIO;
    done += static_cast<size_t>(wrote);
  }
  return 0;
}

int make_directories(const std::string& path, mode_t mode) {
  // Walk the components left to right so each missing one is created with `mode` (the shell's
  // mkdir -p would give parents the umask's default instead).
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return errno;
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

bool remove_if_unchanged(const std::string& path, const FileStamp& expected) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (FileStamp::of(st) != expected) return false;
  return ::unlink(path.c_str()) == 0;
}

void sync_directory(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd) ::fsync(fd.get());
}

namespace {

struct DirCloser {
  void operator()(DIR* dir) const { ::closedir(dir); }
};

// Calls visit(name, stat) for every entry of dir except . and .., not following symlinks.
template <class Visit>
void for_each_entry(const std::string& dir, Visit visit) {
  std::unique_ptr<DIR, DirCloser> handle(::opendir(dir.c_str()));
  if (!handle) return;
  while (const dirent* entry = ::readdir(handle.get())) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(::dirfd(handle.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    visit(name, st);
  }
}

}  // namespace

int64_t realtime_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

void remove_files_older_than(const std::string& dir, int64_t age_seconds) {
  const int64_t cutoff = realtime_ns() - age_seconds * 1'000'000'000;
  for (const DirEntry& file : list_regular_files(dir)) {
    const FileStamp stamp = FileStamp::of(file.st);
    if (stamp.mtime_ns < cutoff) remove_if_unchanged(dir + "/" + file.name, stamp);
  }
}

std::vector<DirEntry> list_regular_files(const std::string& dir) {
  std::vector<DirEntry> files;
  for_each_entry(dir, [&](const std::string& name, const struct stat& st) {
    if (S_ISREG(st.st_mode)) files.push_back({name, st});
  });
  return files;
}

std::vector<std::string> list_subdirectories(const std::string& dir) {
  std::vector<std::string> dirs;
  for_each_entry(dir, [&](const std::string& name, const struct stat& st) {
    if (S_ISDIR(st.st_mode)) dirs.push_back(name);
  });
  return dirs;
}

}  // namespace tsattn::jit
