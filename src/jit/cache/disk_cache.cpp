// disk_cache.cpp - opening the layers, lookup and publish. The admin operations (info, verify,
// prune, clear) are in disk_cache_admin.cpp.
#include "jit/cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <random>
#include <stdexcept>

#include "common/knobs.hpp"
#include "common/log.hpp"
#include "jit/cache/entry_format.hpp"
#include "jit/cache/posix_files.hpp"

namespace tsattn::jit {
namespace {

// A hit refreshes the entry's mtime (its LRU stamp for prune) at most this often, so that hot
// kernels do not cost a metadata write per process start.
constexpr int64_t kUseStampSeconds = 3600;

// The arch becomes a path component: allow only what real arch strings use (sm_90a, sm_120f),
// so no value can climb out of the cache root.
bool valid_arch(const std::string& arch) {
  if (arch.empty() || arch.size() > 32) return false;
  for (const char c : arch) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// The reason a directory may not serve as the writable root, or empty when it may. lstat, so a
// symlink is judged itself and not its target (a planted link could point anywhere).
std::string root_problem(const std::string& root) {
  struct stat st;
  if (::lstat(root.c_str(), &st) != 0) return fmt::format("cannot inspect it: {}", errno_text(errno));
  if (S_ISLNK(st.st_mode)) return "it is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("it is owned by uid {}, not by this process's uid {}", st.st_uid, ::geteuid());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("it is group- or world-writable (mode {:04o})", st.st_mode & 07777);
  return {};
}

// Unlinks a temp file unless it was renamed into place.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void committed() { path_.clear(); }

 private:
  std::string path_;
};

[[noreturn]] void fail(std::string_view what, const std::string& path, int err) {
  throw std::runtime_error(fmt::format("cannot {} {}: {}", what, path, errno_text(err)));
}

}  // namespace

const char* layer_kind_name(LayerKind kind) { return kind == LayerKind::read_only ? "ro" : "rw"; }

const char* writable_state_name(WritableState state) {
  switch (state) {
    case WritableState::absent: return "absent";
    case WritableState::ready: return "ready";
    case WritableState::write_failed: return "write_failed";
    case WritableState::refused: return "refused";
  }
  return "unknown";
}

DiskCache::DiskCache(DiskCacheConfig config) : config_(std::move(config)) {
  if (config_.writable_root) open_writable_root();
}

DiskCacheConfig DiskCache::config_from_environment() {
  DiskCacheConfig config;
  if (knob_bool(Knob::cache_disable)) return config;
  config.read_only_roots = knob_path_list(Knob::cache_ro_path);
  config.writable_root = knob_string(Knob::cache_dir);
  config.lookups_enabled = !knob_bool(Knob::always_compile);
  return config;
}

DiskCache DiskCache::from_environment() { return DiskCache(config_from_environment()); }

std::string DiskCache::entry_path(const std::string& root, const Digest& key, const std::string& arch) {
  const std::string hex = to_hex(key);
  return fmt::format("{}/v{}/{}/{}/{}.tsk", root, kEntryFormatVersion, arch, hex.substr(0, 2), hex);
}

void DiskCache::open_writable_root() {
  const std::string& root = *config_.writable_root;
  // Only a missing root is created (private: its mode is what keeps other users from planting
  // cubins below it). Whatever already exists is judged as it is: mkdir -p would follow a
  // planted symlink or accept a regular file's parent directory.
  struct stat st;
  const int err = ::lstat(root.c_str(), &st) == 0 ? 0 : make_directories(root, 0700);
  if (err != 0) {
    // Not a refusal: nothing is there to distrust, we just cannot write (read-only filesystem,
    // permissions, a path through a regular file). Lookups keep working on the other layers.
    ++counters_.write_failures;
    writable_state_ = WritableState::write_failed;
    warn_once("cache.write_failed:" + root,
              fmt::format("tsattn: cannot create the kernel cache directory {}: {}; compiled "
                          "kernels will stay in memory",
                          root, errno_text(err)));
    return;
  }
  if (const std::string problem = root_problem(root); !problem.empty()) {
    writable_state_ = WritableState::refused;
    warn_once("cache.refused:" + root,
              fmt::format("tsattn: not using the kernel cache directory {}: {}; compiled kernels "
                          "will stay in memory (use a private directory: mkdir -m 0700)",
                          root, problem));
    return;
  }
  writable_state_ = WritableState::ready;
  // Best effort: a root we may read but not write still serves lookups, and publish reports
  // the failure when it actually needs tmp/.
  if (make_directories(root + "/tmp", 0700) == 0) remove_files_older_than(root + "/tmp", kStaleTempSeconds);
}

bool DiskCache::writable_readable() const {
  const WritableState state = writable_state_.load();
  return state == WritableState::ready || state == WritableState::write_failed;
}

std::optional<CachedEntry> DiskCache::lookup(const Digest& key, const std::string& arch) noexcept {
  ++counters_.lookups;
  std::optional<CachedEntry> found;
  try {
    if (config_.lookups_enabled && valid_arch(arch)) {
      for (size_t i = 0; i < config_.read_only_roots.size() && !found; ++i) {
        found = read_layer(config_.read_only_roots[i], LayerKind::read_only, key, arch);
        if (found) found->read_only_index = i;
      }
      if (!found && writable_readable()) found = read_layer(*config_.writable_root, LayerKind::writable, key, arch);
    }
  } catch (...) {
    // Out of memory for an entry's bytes, or while wording a warning: the caller compiles
    // instead, which is what a miss means.
    found.reset();
  }
  if (!found)
    ++counters_.misses;
  else if (found->layer == LayerKind::read_only)
    ++counters_.read_only_hits;
  else
    ++counters_.writable_hits;
  return found;
}

std::optional<CachedEntry> DiskCache::read_layer(const std::string& root, LayerKind layer, const Digest& key,
                                                 const std::string& arch) {
  const std::string path = entry_path(root, key, arch);
  int err = 0;
  UniqueFd fd = open_for_reading(path, &err);
  if (!fd) {
    // Absent is the normal miss. Anything else (no permission, a symlink refused by
    // O_NOFOLLOW) is worth one warning: the operator probably expected a hit.
    if (!is_absent_errno(err))
      warn_once("cache.unreadable:" + path,
                fmt::format("tsattn: cannot read cache entry {}: {}", path, errno_text(err)));
    return std::nullopt;
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    warn_once("cache.unreadable:" + path, fmt::format("tsattn: cache entry {} is not a regular file", path));
    return std::nullopt;
  }
  const FileStamp stamp = FileStamp::of(st);
  std::vector<uint8_t> bytes;
  std::string why;
  std::optional<ParsedEntry> entry;
  const uint64_t max_size = kEntryHeaderSize + kMaxMetadataSize + kMaxPayloadSize;
  if (static_cast<uint64_t>(st.st_size) > max_size)
    why = fmt::format("{} bytes is more than any entry can hold", st.st_size);
  else if (!read_exactly(fd.get(), 0, static_cast<size_t>(st.st_size), bytes, &err))
    why = fmt::format("read failed: {}", errno_text(err));
  else
    entry = parse_entry(bytes, key, &why);
  if (!entry) {
    ++counters_.damaged;
    const bool removed = layer == LayerKind::writable && remove_if_unchanged(path, stamp);
    warn_once("cache.damaged:" + path,
              fmt::format("tsattn: ignoring damaged cache entry {} ({}){}", path, why, removed ? "; removed it" : ""));
    return std::nullopt;
  }
  // futimens is utimensat on the fd we verified: the stamp lands on this file even if the
  // path was replaced meanwhile. Read-only layers are never touched.
  if (layer == LayerKind::writable && realtime_ns() - stamp.mtime_ns > kUseStampSeconds * 1'000'000'000) {
    const timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    ::futimens(fd.get(), times);
  }
  return CachedEntry{std::move(entry->payload), std::move(entry->metadata), layer, 0, path};
}

void DiskCache::publish(const Digest& key, const std::string& arch, const nlohmann::json& metadata,
                        std::span<const uint8_t> cubin) noexcept {
  if (writable_state_.load() != WritableState::ready) return;
  try {
    publish_or_throw(key, arch, metadata, cubin);
    ++counters_.writes;
  } catch (const std::exception& e) {
    fail_writes(e.what());
  } catch (...) {
    fail_writes("unknown error");
  }
}

void DiskCache::publish_or_throw(const Digest& key, const std::string& arch, const nlohmann::json& metadata,
                                 std::span<const uint8_t> cubin) {
  if (!valid_arch(arch)) throw std::runtime_error(fmt::format("invalid arch string '{}'", arch));
  const std::vector<uint8_t> bytes = serialize_entry(key, metadata, cubin);
  const std::string& root = *config_.writable_root;
  // Recreated on every publish, so a cache emptied by hand (rm -rf) heals. Creating tmp/ first
  // also recreates a vanished root with its private mode.
  const std::string tmp_dir = root + "/tmp";
  if (const int err = make_directories(tmp_dir, 0700); err != 0) fail("create", tmp_dir, err);

  // Unique among threads (counter), processes (pid) and hosts or PID namespaces sharing the
  // directory (random); O_EXCL makes a collision a retry, never a shared file.
  const std::string hex = to_hex(key);
  std::random_device entropy;
  UniqueFd fd;
  std::string temp_path;
  for (int attempt = 0; !fd; ++attempt) {
    temp_path =
        fmt::format("{}/{}.{}.{}.{:08x}.tmp", tmp_dir, hex.substr(0, 16), ::getpid(), temp_counter_++, entropy());
    fd = UniqueFd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd && (errno != EEXIST || attempt == 8)) fail("create", temp_path, errno);
  }
  TempFileGuard guard(temp_path);
  if (const int err = write_all(fd.get(), bytes); err != 0) fail("write", temp_path, err);
  if (::fsync(fd.get()) != 0) fail("fsync", temp_path, errno);
  // close() reports deferred write errors on network filesystems.
  if (::close(fd.release()) != 0) fail("close", temp_path, errno);

  // Below the private root, directories and files are readable by others, so a tree built by
  // `tsattn precompile` can serve as a read-only layer for other users once its root is opened.
  const std::string final_path = entry_path(root, key, arch);
  const std::string dir = final_path.substr(0, final_path.rfind('/'));
  // Two tries: a concurrent `cache clear` may remove the fan-out directory between our mkdir and
  // rename. rename replaces an existing entry, which is what heals a damaged one (entries are
  // deterministic, so replacing a good one changes nothing).
  for (int attempt = 0;; ++attempt) {
    if (const int err = make_directories(dir, 0755); err != 0) fail("create", dir, err);
    if (::rename(temp_path.c_str(), final_path.c_str()) == 0) break;
    if (errno != ENOENT || attempt == 1) fail("rename into", final_path, errno);
  }
  guard.committed();
  sync_directory(dir);
}

void DiskCache::fail_writes(const std::string& why) noexcept {
  ++counters_.write_failures;
  WritableState expected = WritableState::ready;
  writable_state_.compare_exchange_strong(expected, WritableState::write_failed);
  try {
    warn_once("cache.write_failed:" + *config_.writable_root,
              fmt::format("tsattn: kernel cache write failed ({}); compiled kernels will stay in "
                          "memory and no more cache writes will be attempted",
                          why));
  } catch (...) {
    // Out of memory while reporting: the counter above still records the failure.
  }
}

CacheCounters DiskCache::counters() const {
  return {counters_.lookups.load(),       counters_.read_only_hits.load(), counters_.writable_hits.load(),
          counters_.misses.load(),        counters_.damaged.load(),        counters_.writes.load(),
          counters_.write_failures.load()};
}

}  // namespace tsattn::jit
