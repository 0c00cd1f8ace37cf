// entry_format.hpp - the bytes of one on-disk cache entry (one file = one compiled kernel).
//
// Layout, all integers little-endian:
//   offset  size  field
//        0     8  magic "TSATTNK\0"
//        8     4  format version (kEntryFormatVersion)
//       12    32  key digest (compute_cache_key), echoed so a renamed file is caught
//       44     8  payload size in bytes
//       52    32  SHA-256 of the payload
//       84     4  metadata size in bytes
//       88    32  SHA-256 of the metadata bytes
//      120     -  metadata: compact UTF-8 JSON object (EntryMetadata::to_json, keys sorted)
//        -     -  payload: the cubin, exactly payload-size bytes, nothing after it
//
// WARNING: any change to this layout, to the meaning of a field, or to the metadata keys that
// readers rely on ("name", "arch") MUST bump kEntryFormatVersion and regenerate
// tests/jit/cache/golden/entry_v<N>.tsk (see tests/jit/cache/test_format.cpp). The version is
// also a directory level of the cache (<root>/v<N>/...), so old and new libraries sharing a cache
// directory never read each other's files.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/sha256.hpp"

namespace tsattn::jit {

inline constexpr uint32_t kEntryFormatVersion = 1;
inline constexpr size_t kEntryHeaderSize = 120;
// Sanity bounds, far above any real kernel: a foreign file must not make us allocate gigabytes.
inline constexpr uint64_t kMaxPayloadSize = uint64_t{1} << 30;
inline constexpr uint32_t kMaxMetadataSize = uint32_t{1} << 24;

// What the cache records about a kernel beside its cubin; for `tsattn cache info` and logs.
struct EntryMetadata {
  std::string canonical_name;
  nlohmann::json spec;  // the KernelSpec fields, as the code generator describes them
  int registers = 0;
  int spill_bytes = 0;
  int shared_bytes = 0;  // static shared memory per CTA
  double compile_ms = 0;
  std::string arch;
  std::string nvrtc_version;
  int64_t created_unix = 0;  // seconds since the epoch

  nlohmann::json to_json() const;
};

struct EntryHeader {
  uint32_t format_version = 0;
  Digest key{};
  uint64_t payload_size = 0;
  Digest payload_sha256{};
  uint32_t metadata_size = 0;
  Digest metadata_sha256{};
};

struct ParsedEntry {
  EntryHeader header;
  nlohmann::json metadata;
  std::vector<uint8_t> payload;
};

// Throws nlohmann::json::exception when the metadata cannot be dumped (invalid UTF-8).
std::vector<uint8_t> serialize_entry(const Digest& key, const nlohmann::json& metadata, std::span<const uint8_t> cubin);

// The fixed header from the first kEntryHeaderSize bytes: magic, version and size bounds are
// checked; nothing else is. On failure returns nullopt and says why in *why_not (if given).
std::optional<EntryHeader> parse_entry_header(std::span<const uint8_t> bytes, std::string* why_not);

// The metadata block that follows the header: its digest, JSON syntax, an object, and the fields
// readers use ("name" and "arch" as strings).
std::optional<nlohmann::json> parse_entry_metadata(const EntryHeader& header, std::span<const uint8_t> bytes,
                                                   std::string* why_not);

// A whole file. Rejects a bad magic or version, a key other than expected_key, a size that does
// not match (truncated or trailing bytes), a payload or metadata digest mismatch, and bad JSON.
std::optional<ParsedEntry> parse_entry(std::span<const uint8_t> file, const Digest& expected_key, std::string* why_not);

}  // namespace tsattn::jit
