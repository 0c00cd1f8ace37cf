// key.cpp - the labelled, length-prefixed encoding behind compute_cache_key.
#include "jit/cache/key.hpp"

#include <array>
#include <cstdint>

namespace tsattn::jit {
namespace {

// Little-endian, fixed width: the key must not depend on the host it was computed on.
void hash_u64(Sha256& hash, uint64_t value) {
  std::array<uint8_t, 8> bytes{};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
  hash.update(bytes.data(), bytes.size());
}

void hash_text(Sha256& hash, std::string_view text) {
  hash_u64(hash, text.size());
  hash.update(text);
}

// label, then the value: a field can never be read as the tail of its neighbour.
void hash_field(Sha256& hash, std::string_view label, std::string_view value) {
  hash_text(hash, label);
  hash_text(hash, value);
}

}  // namespace

Digest compute_cache_key(const KeyIngredients& in) {
  Sha256 hash;
  hash_field(hash, "tsattn.cache_key.schema", std::to_string(kCacheKeySchemaVersion));
  hash_field(hash, "library_version", TSATTN_VERSION_STRING);
  hash_field(hash, "canonical_name", in.canonical_name);
  hash_field(hash, "source", in.source);
  hash_text(hash, "headers");
  hash_u64(hash, in.headers.size());
  for (const auto& [name, text] : in.headers) {
    hash_field(hash, "header.name", name);
    hash_field(hash, "header.text", text);
  }
  hash_field(hash, "arch", in.arch);
  hash_field(hash, "nvrtc_version", in.nvrtc_version);
  hash_text(hash, "options");
  hash_u64(hash, in.options.size());
  for (const std::string& option : in.options) hash_field(hash, "option", option);
  hash_field(hash, "environment", in.environment);
  return hash.finish();
}

}  // namespace tsattn::jit
