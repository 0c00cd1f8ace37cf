// disk_cache.hpp - the layered on-disk cubin cache (docs/architecture.md, "The on-disk cache").
//
// Layers, searched in order: zero or more read-only roots (TSATTN_CACHE_RO_PATH, e.g. a cache
// baked into a deployment image), then one writable root (TSATTN_CACHE_DIR). Each entry is one
// file, content-addressed by its key:
//   <root>/v<kEntryFormatVersion>/<arch>/<first 2 hex of key>/<64 hex of key>.tsk
// (the arch level keeps `tsattn cache info` readable and lets an image drop an arch wholesale).
//
// Guarantees:
// - Correct without locks: entries are deterministic and published by rename from <root>/tmp/, so
//   readers see a whole old file, a whole new file, or nothing.
// - Damage is a miss: a file that fails parse_entry (magic, version, key, sizes, digests, JSON) is
//   never returned; it is warned about once, and removed if it is in the writable layer.
// - The payload digest is verified before bytes are returned, so the driver never sees a torn or
//   planted cubin.
// - The disk never fails a call: lookup and publish do not throw. A publish failure (read-only
//   filesystem, disk full, permissions) warns once and turns off writes for this DiskCache.
// - The writable root must be a real directory owned by the effective user and not group- or
//   world-writable; otherwise it is refused (warned once) and neither read nor written. Read-only
//   roots are never written, cleaned or pruned; a missing one is skipped silently.
// Thread-safe: lookups and publishes may run concurrently from any threads and processes.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/sha256.hpp"

namespace tsattn::jit {

enum class LayerKind { read_only, writable };
const char* layer_kind_name(LayerKind kind);  // "ro", "rw"

enum class WritableState {
  absent,        // no writable root configured (TSATTN_CACHE_DISABLE, or a read-only setup)
  ready,         // open; publishes are attempted
  write_failed,  // a write failed (or the root could not be created): reads only, no more writes
  refused,       // symlink, foreign owner, group/world-writable, not a directory: never touched
};
const char* writable_state_name(WritableState state);

struct DiskCacheConfig {
  std::vector<std::string> read_only_roots;
  std::optional<std::string> writable_root;
  // false (TSATTN_ALWAYS_COMPILE): every lookup is a miss, publishes still write.
  bool lookups_enabled = true;
};

struct CachedEntry {
  std::vector<uint8_t> payload;  // the cubin, digest verified
  nlohmann::json metadata;
  LayerKind layer = LayerKind::writable;
  size_t read_only_index = 0;  // which read-only root, when layer == read_only
  std::string path;
};

struct CacheCounters {
  uint64_t lookups = 0;
  uint64_t read_only_hits = 0;
  uint64_t writable_hits = 0;
  uint64_t misses = 0;
  uint64_t damaged = 0;         // files rejected by parse_entry (each one found, every time)
  uint64_t writes = 0;          // entries published
  uint64_t write_failures = 0;  // publishes (or the root's creation) that failed
};

struct EntryInfo {
  LayerKind layer = LayerKind::writable;
  size_t read_only_index = 0;
  std::string path;
  uint64_t size = 0;
  std::string name;                             // canonical name from the metadata; empty when unreadable
  std::string arch;                             // the arch directory it is filed under
  std::chrono::system_clock::time_point mtime;  // last use (see prune)
  std::string problem;                          // why the header or metadata could not be read; empty when fine
};

struct VerifyReport {
  struct Bad {
    std::string path;
    std::string reason;
  };
  size_t checked = 0;
  std::vector<Bad> bad;
  size_t removed = 0;
};

struct PruneReport {
  size_t entries_before = 0;
  uint64_t bytes_before = 0;
  size_t removed = 0;
  uint64_t bytes_after = 0;
};

// Temp files this old are leftovers of a crashed publish (a live one exists for milliseconds);
// opening the writable root and prune remove them.
inline constexpr int64_t kStaleTempSeconds = 3600;

class DiskCache {
 public:
  // Opens the writable root: creates it 0700 (with parents) when missing, checks it, and sweeps
  // temp files older than an hour from its tmp/. Never throws for file-system reasons.
  explicit DiskCache(DiskCacheConfig config);

  // From TSATTN_CACHE_RO_PATH, TSATTN_CACHE_DIR (default: $XDG_CACHE_HOME/tsattn, else
  // ~/.cache/tsattn), TSATTN_CACHE_DISABLE (no layers at all) and TSATTN_ALWAYS_COMPILE.
  // Throws tsattn::Error only for a malformed variable or an unplaceable default directory.
  static DiskCache from_environment();
  static DiskCacheConfig config_from_environment();

  // Neither copyable nor movable (its counters are atomics shared by threads): keep it where it
  // is built, e.g. a member initialized from from_environment() (guaranteed copy elision).
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // The read-only layers in order, then the writable one. A damaged file is a miss.
  std::optional<CachedEntry> lookup(const Digest& key, const std::string& arch) noexcept;

  // Writes the entry to the writable root (temp file, fsync, rename). Never throws; a failure
  // warns once and disables further writes. Without a usable writable root it does nothing.
  void publish(const Digest& key, const std::string& arch, const nlohmann::json& metadata,
               std::span<const uint8_t> cubin) noexcept;

  CacheCounters counters() const;
  const DiskCacheConfig& config() const { return config_; }
  WritableState writable_state() const { return writable_state_.load(); }

  // Admin (`tsattn cache info|verify|prune|clear`). verify, prune and clear act on the writable
  // layer only, and only on entries of this library's format version (older versions' v<N>
  // trees belong to the libraries that wrote them).
  std::vector<EntryInfo> list_entries() const;
  // Re-parses and re-hashes every writable entry; remove_bad deletes the bad ones (stat-guarded).
  VerifyReport verify(bool remove_bad);
  // Evicts least recently used writable entries until their total size is <= max_bytes. "Used"
  // is the file's mtime, which lookup bumps at most once an hour. Also sweeps stale temp files.
  PruneReport prune(uint64_t max_bytes);
  // Removes every writable entry; returns how many were removed.
  uint64_t clear();

  // Path an entry of this key and arch has under root.
  static std::string entry_path(const std::string& root, const Digest& key, const std::string& arch);

 private:
  void open_writable_root();
  std::optional<CachedEntry> read_layer(const std::string& root, LayerKind layer, const Digest& key,
                                        const std::string& arch);
  void publish_or_throw(const Digest& key, const std::string& arch, const nlohmann::json& metadata,
                        std::span<const uint8_t> cubin);
  void fail_writes(const std::string& why) noexcept;
  bool writable_readable() const;

  DiskCacheConfig config_;
  std::atomic<WritableState> writable_state_{WritableState::absent};
  std::atomic<uint64_t> temp_counter_{0};
  struct AtomicCounters {
    std::atomic<uint64_t> lookups{0}, read_only_hits{0}, writable_hits{0}, misses{0}, damaged{0}, writes{0},
        write_failures{0};
  } counters_;
};

}  // namespace tsattn::jit
