// cache_layers.hpp - the cache layers the library would use in this environment and the state of
// each, found without creating anything (shared by `tsattn env`, `tsattn cache` and `tsattn warm`).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "jit/cache/disk_cache.hpp"

namespace tsattn::tools {

struct ReadOnlyLayer {
  std::string path;
  bool exists = false;  // a missing read-only root is skipped silently by the library
};

struct WritableLayer {
  std::string path;  // empty when the disk cache is disabled
  // The library's state for the root (ready, refused, write_failed; absent when disabled), or
  // "not_created" for a root that does not exist yet (the library creates it on first use).
  std::string state;
  std::string detail;  // why, in words; empty when the root is ready and writable
};

struct CacheLayers {
  bool disabled = false;  // TSATTN_CACHE_DISABLE
  std::vector<ReadOnlyLayer> read_only;
  WritableLayer writable;
};

// The layers of TSATTN_CACHE_RO_PATH, TSATTN_CACHE_DIR and TSATTN_CACHE_DISABLE; a non-empty
// writable_override (`--dir`) replaces TSATTN_CACHE_DIR and wins over TSATTN_CACHE_DISABLE.
// An existing writable root is opened the way the library opens it (so its verdict is the
// library's); a missing one is not created. Throws tsattn::Error for malformed variables.
CacheLayers resolve_cache_layers(const std::string& writable_override = "");

nlohmann::json layers_json(const CacheLayers& layers);

// A DiskCache over the resolved layers for reading and administration: the writable root is
// included only when it exists and was not refused, so nothing is created by looking.
std::unique_ptr<jit::DiskCache> open_layers(const CacheLayers& layers);

}  // namespace tsattn::tools
