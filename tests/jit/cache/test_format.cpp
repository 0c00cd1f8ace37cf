// Entry format: the committed golden file pins the bytes, and parse_entry rejects every kind of
// damage (each single flipped byte, truncation, trailing bytes, a foreign key, bad metadata).
//
// The golden file tests/jit/cache/golden/entry_v1.tsk was written by hand from the layout table in
// src/jit/cache/entry_format.hpp, not by the serializer it checks. To regenerate it after a
// deliberate format change (bump kEntryFormatVersion, name the file entry_v<N>.tsk, and update
// the inputs in golden_inputs() below if they change), run from tests/jit/cache:
//
//   python3 - <<'PY'
//   import hashlib, json, struct
//   key = bytes(range(32))
//   meta = {"name": "prefill.sm90a.d128.bf16_bf16.causal.win",
//           "spec": {"arch": "sm_90a", "head_dim": 128, "mask": "causal", "qkv_dtype": "bf16",
//                    "out_dtype": "bf16", "window": True},
//           "registers": 168, "spill_bytes": 0, "shared_bytes": 98304, "compile_ms": 1234.5,
//           "arch": "sm_90a", "nvrtc_version": "13.0.48", "created_unix": 1767225600}
//   payload = b"\x7fELF" + bytes((i * 37 + 11) % 256 for i in range(60))
//   m = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
//   head = (b"TSATTNK\0" + struct.pack("<I", 1) + key + struct.pack("<Q", len(payload))
//           + hashlib.sha256(payload).digest() + struct.pack("<I", len(m))
//           + hashlib.sha256(m).digest())
//   open("golden/entry_v1.tsk", "wb").write(head + m + payload)
//   PY
//
// (json.dumps with sorted keys and no spaces is what nlohmann::json::dump() writes for ASCII.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "jit/cache/entry_format.hpp"

namespace {

using namespace tsattn;
using namespace tsattn::jit;

const std::string kGoldenPath = std::filesystem::path(__FILE__).parent_path() / "golden" / "entry_v1.tsk";

struct GoldenInputs {
  Digest key{};
  nlohmann::json metadata;
  std::vector<uint8_t> payload;
};

GoldenInputs golden_inputs() {
  GoldenInputs in;
  for (size_t i = 0; i < in.key.size(); ++i) in.key[i] = static_cast<uint8_t>(i);
  EntryMetadata meta;
  meta.canonical_name = "prefill.sm90a.d128.bf16_bf16.causal.win";
  meta.spec = {{"arch", "sm_90a"},    {"head_dim", 128},     {"mask", "causal"},
               {"qkv_dtype", "bf16"}, {"out_dtype", "bf16"}, {"window", true}};
  meta.registers = 168;
  meta.spill_bytes = 0;
  meta.shared_bytes = 98304;
  meta.compile_ms = 1234.5;
  meta.arch = "sm_90a";
  meta.nvrtc_version = "13.0.48";
  meta.created_unix = 1767225600;
  in.metadata = meta.to_json();
  in.payload = {0x7f, 'E', 'L', 'F'};
  for (int i = 0; i < 60; ++i) in.payload.push_back(static_cast<uint8_t>((i * 37 + 11) % 256));
  return in;
}

std::vector<uint8_t> sample_entry(const Digest& key) {
  return serialize_entry(key, test::test_metadata(1), test::test_cubin(1, 300));
}

// Writes a little-endian u32 at offset, as the format stores integers.
void put_u32(std::vector<uint8_t>& bytes, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

// Replaces the metadata block (and its size and digest fields) of a serialized entry.
std::vector<uint8_t> with_metadata_text(const std::vector<uint8_t>& entry, const std::string& text) {
  const uint32_t old_size = static_cast<uint32_t>(entry[84]) | (uint32_t{entry[85]} << 8) |
                            (uint32_t{entry[86]} << 16) | (uint32_t{entry[87]} << 24);
  const size_t payload_at = kEntryHeaderSize + old_size;
  std::vector<uint8_t> out(kEntryHeaderSize + text.size() + (entry.size() - payload_at));
  std::copy(entry.begin(), entry.begin() + kEntryHeaderSize, out.begin());
  std::copy(text.begin(), text.end(), out.begin() + kEntryHeaderSize);
  std::copy(entry.begin() + payload_at, entry.end(), out.begin() + kEntryHeaderSize + text.size());
  put_u32(out, 84, static_cast<uint32_t>(text.size()));
  const Digest digest = sha256(text);
  std::copy(digest.begin(), digest.end(), out.begin() + 88);
  return out;
}

}  // namespace

TEST_SUITE("jit/cache/format") {
  TEST_CASE("serialize_entry reproduces the golden file byte for byte") {
    const std::vector<uint8_t> golden = test::read_bytes(kGoldenPath);
    REQUIRE_MESSAGE(!golden.empty(), "missing golden file " << kGoldenPath);
    const GoldenInputs in = golden_inputs();
    const std::vector<uint8_t> bytes = serialize_entry(in.key, in.metadata, in.payload);
    REQUIRE(bytes.size() == golden.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      CAPTURE(i);
      REQUIRE(bytes[i] == golden[i]);
    }
  }

  TEST_CASE("the golden file parses back to its inputs") {
    const std::vector<uint8_t> golden = test::read_bytes(kGoldenPath);
    const GoldenInputs in = golden_inputs();
    std::string why;
    const std::optional<ParsedEntry> entry = parse_entry(golden, in.key, &why);
    REQUIRE_MESSAGE(entry, why);
    CHECK(entry->header.format_version == kEntryFormatVersion);
    CHECK(entry->header.key == in.key);
    CHECK(entry->header.payload_size == in.payload.size());
    CHECK(entry->payload == in.payload);
    CHECK(entry->metadata == in.metadata);
    CHECK(entry->metadata["name"] == "prefill.sm90a.d128.bf16_bf16.causal.win");
    CHECK(entry->metadata["spec"]["head_dim"] == 128);
  }

  TEST_CASE("an empty payload round-trips") {
    const Digest key = test::test_key(7);
    const std::vector<uint8_t> bytes = serialize_entry(key, test::test_metadata(7), {});
    CHECK(bytes.size() == kEntryHeaderSize + test::test_metadata(7).dump().size());
    std::string why;
    const std::optional<ParsedEntry> entry = parse_entry(bytes, key, &why);
    REQUIRE_MESSAGE(entry, why);
    CHECK(entry->payload.empty());
  }

  TEST_CASE("every single flipped byte is rejected") {
    const Digest key = test::test_key(1);
    const std::vector<uint8_t> good = sample_entry(key);
    REQUIRE(parse_entry(good, key, nullptr));
    for (size_t i = 0; i < good.size(); ++i) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= 0x01;
      std::string why;
      CAPTURE(i);
      CHECK_FALSE(parse_entry(bad, key, &why));
      CHECK_FALSE(why.empty());
    }
  }

  TEST_CASE("each kind of damage is rejected with its reason") {
    const Digest key = test::test_key(1);
    const std::vector<uint8_t> good = sample_entry(key);
    auto why_rejected = [&](const std::vector<uint8_t>& bytes, const Digest& expected) {
      std::string why;
      CHECK_FALSE(parse_entry(bytes, expected, &why));
      return why;
    };

    std::vector<uint8_t> bytes = good;
    bytes[0] = 'X';
    CHECK(why_rejected(bytes, key).find("magic") != std::string::npos);

    bytes = good;
    put_u32(bytes, 8, kEntryFormatVersion + 1);
    CHECK(why_rejected(bytes, key).find("format version") != std::string::npos);

    // Another key's entry, renamed into this key's place.
    CHECK(why_rejected(good, test::test_key(2)).find("key") != std::string::npos);

    CHECK(why_rejected({good.begin(), good.begin() + 50}, key).find("truncated header") != std::string::npos);
    CHECK(why_rejected({good.begin(), good.end() - 1}, key).find("truncated") != std::string::npos);
    bytes = good;
    bytes.push_back(0);
    CHECK(why_rejected(bytes, key).find("trailing") != std::string::npos);
    CHECK(why_rejected({}, key).find("truncated") != std::string::npos);

    bytes = good;
    bytes.back() ^= 0x80;
    CHECK(why_rejected(bytes, key).find("payload digest") != std::string::npos);

    bytes = good;
    bytes[kEntryHeaderSize + 2] ^= 0x20;
    CHECK(why_rejected(bytes, key).find("metadata digest") != std::string::npos);

    // Metadata whose digest is right but whose content is not what readers need.
    CHECK(why_rejected(with_metadata_text(good, "{\"name\": \"x\""), key).find("JSON") != std::string::npos);
    CHECK(why_rejected(with_metadata_text(good, "[1, 2]"), key).find("name") != std::string::npos);
    CHECK(why_rejected(with_metadata_text(good, "{\"name\": \"x\"}"), key).find("arch") != std::string::npos);
    CHECK(parse_entry(with_metadata_text(good, "{\"name\": \"x\", \"arch\": \"sm_80\"}"), key, nullptr));

    // A size field claiming gigabytes is refused before anything is allocated or compared.
    bytes = good;
    bytes[44 + 7] = 0x7f;
    CHECK(why_rejected(bytes, key).find("implausible") != std::string::npos);
  }

  TEST_CASE("random bytes are not an entry") {
    const Digest key = test::test_key(3);
    for (size_t size : {size_t{0}, size_t{7}, kEntryHeaderSize, size_t{4096}}) {
      CAPTURE(size);
      CHECK_FALSE(parse_entry(test::test_cubin(static_cast<int>(size), size), key, nullptr));
    }
  }
}
