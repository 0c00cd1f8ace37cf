// entry_format.cpp - writing and checking the entry layout documented in entry_format.hpp.
#include "jit/cache/entry_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

namespace tsattn::jit {
namespace {

constexpr std::array<uint8_t, 8> kMagic = {'T', 'S', 'A', 'T', 'T', 'N', 'K', '\0'};

// Field offsets of the fixed header; see the table in entry_format.hpp.
constexpr size_t kVersionAt = 8, kKeyAt = 12, kPayloadSizeAt = 44, kPayloadDigestAt = 52, kMetadataSizeAt = 84,
                 kMetadataDigestAt = 88;
static_assert(kMetadataDigestAt + 32 == kEntryHeaderSize);

template <class T>
void put_le(uint8_t* at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}

template <class T>
T get_le(const uint8_t* at) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(at[i]) << (8 * i));
  return value;
}

Digest get_digest(const uint8_t* at) {
  Digest digest;
  std::memcpy(digest.data(), at, digest.size());
  return digest;
}

template <class... Args>
std::nullopt_t reject(std::string* why_not, fmt::format_string<Args...> format, Args&&... args) {
  if (why_not) *why_not = fmt::format(format, std::forward<Args>(args)...);
  return std::nullopt;
}

}  // namespace

nlohmann::json EntryMetadata::to_json() const {
  return {{"name", canonical_name},
          {"spec", spec},
          {"registers", registers},
          {"spill_bytes", spill_bytes},
          {"shared_bytes", shared_bytes},
          {"compile_ms", compile_ms},
          {"arch", arch},
          {"nvrtc_version", nvrtc_version},
          {"created_unix", created_unix}};
}

std::vector<uint8_t> serialize_entry(const Digest& key, const nlohmann::json& metadata,
                                     std::span<const uint8_t> cubin) {
  // nlohmann::json keeps object keys sorted, so dump() is deterministic for equal metadata.
  const std::string text = metadata.dump();
  std::vector<uint8_t> out(kEntryHeaderSize + text.size() + cubin.size());
  uint8_t* head = out.data();
  std::copy(kMagic.begin(), kMagic.end(), head);
  put_le<uint32_t>(head + kVersionAt, kEntryFormatVersion);
  std::copy(key.begin(), key.end(), head + kKeyAt);
  put_le<uint64_t>(head + kPayloadSizeAt, cubin.size());
  const Digest payload_digest = sha256(cubin.data(), cubin.size());
  std::copy(payload_digest.begin(), payload_digest.end(), head + kPayloadDigestAt);
  put_le<uint32_t>(head + kMetadataSizeAt, static_cast<uint32_t>(text.size()));
  const Digest metadata_digest = sha256(text);
  std::copy(metadata_digest.begin(), metadata_digest.end(), head + kMetadataDigestAt);
  std::copy(text.begin(), text.end(), head + kEntryHeaderSize);
  std::copy(cubin.begin(), cubin.end(), head + kEntryHeaderSize + text.size());
  return out;
}

std::optional<EntryHeader> parse_entry_header(std::span<const uint8_t> bytes, std::string* why_not) {
  if (bytes.size() < kEntryHeaderSize)
    return reject(why_not, "truncated header ({} of {} bytes)", bytes.size(), kEntryHeaderSize);
  const uint8_t* head = bytes.data();
  if (!std::equal(kMagic.begin(), kMagic.end(), head)) return reject(why_not, "bad magic (not a tsattn cache entry)");
  EntryHeader header;
  header.format_version = get_le<uint32_t>(head + kVersionAt);
  if (header.format_version != kEntryFormatVersion)
    return reject(why_not, "format version {} (this library reads {})", header.format_version, kEntryFormatVersion);
  header.key = get_digest(head + kKeyAt);
  header.payload_size = get_le<uint64_t>(head + kPayloadSizeAt);
  header.payload_sha256 = get_digest(head + kPayloadDigestAt);
  header.metadata_size = get_le<uint32_t>(head + kMetadataSizeAt);
  header.metadata_sha256 = get_digest(head + kMetadataDigestAt);
  if (header.payload_size > kMaxPayloadSize)
    return reject(why_not, "payload size {} is implausible", header.payload_size);
  if (header.metadata_size > kMaxMetadataSize)
    return reject(why_not, "metadata size {} is implausible", header.metadata_size);
  return header;
}

std::optional<nlohmann::json> parse_entry_metadata(const EntryHeader& header, std::span<const uint8_t> bytes,
                                                   std::string* why_not) {
  if (bytes.size() != header.metadata_size)
    return reject(why_not, "metadata is {} bytes, header says {}", bytes.size(), header.metadata_size);
  if (sha256(bytes.data(), bytes.size()) != header.metadata_sha256) return reject(why_not, "metadata digest mismatch");
  nlohmann::json metadata = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr,
                                                  /*allow_exceptions=*/false);
  if (metadata.is_discarded()) return reject(why_not, "metadata is not valid JSON");
  if (!metadata.is_object() || !metadata.contains("name") || !metadata["name"].is_string() ||
      !metadata.contains("arch") || !metadata["arch"].is_string())
    return reject(why_not, "metadata lacks a string \"name\" and \"arch\"");
  return metadata;
}

std::optional<ParsedEntry> parse_entry(std::span<const uint8_t> file, const Digest& expected_key,
                                       std::string* why_not) {
  std::optional<EntryHeader> header = parse_entry_header(file, why_not);
  if (!header) return std::nullopt;
  if (header->key != expected_key)
    return reject(why_not, "entry holds key {}, not the key it is filed under", to_hex(header->key));
  const uint64_t expected_size = kEntryHeaderSize + header->metadata_size + header->payload_size;
  if (file.size() != expected_size)
    return reject(why_not, "{} bytes, header says {} ({})", file.size(), expected_size,
                  file.size() < expected_size ? "truncated" : "trailing bytes");
  std::optional<nlohmann::json> metadata =
      parse_entry_metadata(*header, file.subspan(kEntryHeaderSize, header->metadata_size), why_not);
  if (!metadata) return std::nullopt;
  const std::span<const uint8_t> payload = file.subspan(kEntryHeaderSize + header->metadata_size);
  if (sha256(payload.data(), payload.size()) != header->payload_sha256)
    return reject(why_not, "payload digest mismatch");
  return ParsedEntry{*header, std::move(*metadata), {payload.begin(), payload.end()}};
}

}  // namespace tsattn::jit
