// SHA-256: the FIPS 180-4 example vectors, padding boundaries, and incremental updates that must
// agree with the one-shot digest wherever the message is split.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/sha256.hpp"

namespace {

using tsattn::Digest;
using tsattn::Sha256;
using tsattn::sha256;
using tsattn::to_hex;

uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("TSATTN_TEST_SEED")) return std::stoull(fixed);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

std::vector<uint8_t> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

}  // namespace

TEST_SUITE("common/sha256") {
  TEST_CASE("FIPS 180-4 example vectors") {
    CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // The 896-bit message of the SHA-512 examples, which needs two blocks for SHA-256 too.
    CHECK(to_hex(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
                        "lmnopqrsmnopqrstnopqrstu")) ==
          "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  }

  TEST_CASE("one million 'a' fed in uneven pieces") {
    const std::string million(1000000, 'a');
    CHECK(to_hex(sha256(million)) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    Sha256 hasher;
    for (size_t done = 0, piece = 1; done < million.size(); done += piece, piece = piece % 97 + 1) {
      hasher.update(million.data() + done, std::min(piece, million.size() - done));
    }
    CHECK(to_hex(hasher.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }

  // Lengths around the 56-byte padding limit and the 64-byte block, where the length field either
  // fits in the last block or spills into an extra one (digests from Python's hashlib).
  TEST_CASE("padding boundaries") {
    CHECK(to_hex(sha256(std::string(55, 'a'))) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    CHECK(to_hex(sha256(std::string(56, 'a'))) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    CHECK(to_hex(sha256(std::string(63, 'a'))) == "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
    CHECK(to_hex(sha256(std::string(64, 'a'))) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    CHECK(to_hex(sha256(std::string(65, 'a'))) == "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0");
  }

  TEST_CASE("chunked updates at every split point equal the one-shot digest") {
    const uint64_t seed = fresh_seed();
    CAPTURE(seed);
    const std::vector<uint8_t> message = random_bytes(200, seed);
    const Digest whole = sha256(message.data(), message.size());
    for (size_t split = 0; split <= message.size(); ++split) {
      CAPTURE(split);
      Sha256 hasher;
      hasher.update(message.data(), split);
      hasher.update(message.data() + split, message.size() - split);
      CHECK(hasher.finish() == whole);
    }
    // Three pieces, so a buffered partial block is topped up and then left partial again.
    for (size_t first = 0; first <= message.size(); first += 7) {
      for (size_t second = first; second <= message.size(); second += 13) {
        Sha256 hasher;
        hasher.update(message.data(), first);
        hasher.update(message.data() + first, second - first);
        hasher.update(message.data() + second, message.size() - second);
        CHECK(hasher.finish() == whole);
      }
    }
    // Changing any single byte must change the digest.
    std::vector<uint8_t> altered = message;
    altered[seed % altered.size()] ^= 0x01;
    CHECK(sha256(altered.data(), altered.size()) != whole);
  }

  TEST_CASE("to_hex writes 64 lowercase digits, high nibble first") {
    Digest digest{};
    digest[0] = 0xab;
    digest[1] = 0x01;
    digest[31] = 0xf0;
    const std::string hex = to_hex(digest);
    CHECK(hex.size() == 64);
    CHECK(hex.substr(0, 4) == "ab01");
    CHECK(hex.substr(60) == "00f0");
    CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
  }
}
