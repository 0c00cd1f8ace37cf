// sha256.hpp - SHA-256 (FIPS 180-4), for cache keys and payload digests. No dependencies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tsattn {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Digest finish();  // the object must not be updated afterwards

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest sha256(const void* data, size_t size);
inline Digest sha256(std::string_view text) { return sha256(text.data(), text.size()); }

std::string to_hex(const Digest& digest);  // 64 lowercase hex digits

}  // namespace tsattn
