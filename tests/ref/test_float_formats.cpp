// Host float16 / bfloat16 / float8_e4m3fn codecs: exhaustive decode/encode round trips, decoding
// checked against the textbook formula, and encoding checked against a brute-force nearest-value
// search over every representable value (ties to the even bit pattern).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "ref/float_formats.hpp"

namespace {

using namespace tsattn::ref;

uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("TSATTN_TEST_SEED")) return std::stoull(fixed);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

// What the tests know about a format, written from its definition rather than from the codec.
struct Format {
  const char* name;
  int bits;  // 16 or 8
  int exponent_bits, mantissa_bits, bias;
  bool has_infinity;  // IEEE-style all-ones exponent; e4m3fn instead uses S.1111.111 for NaN
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
};

const Format kHalf{"float16",
                   16,
                   5,
                   10,
                   15,
                   true,
                   [](float x) -> uint32_t { return float_to_half(x); },
                   [](uint32_t b) { return half_to_float(static_cast<uint16_t>(b)); }};
const Format kBfloat16{"bfloat16",
                       16,
                       8,
                       7,
                       127,
                       true,
                       [](float x) -> uint32_t { return float_to_bfloat16(x); },
                       [](uint32_t b) { return bfloat16_to_float(static_cast<uint16_t>(b)); }};
const Format kE4m3{"float8_e4m3fn",
                   8,
                   4,
                   3,
                   7,
                   false,
                   [](float x) -> uint32_t { return float_to_e4m3(x); },
                   [](uint32_t b) { return e4m3_to_float(static_cast<uint8_t>(b)); }};

uint32_t sign_bit(const Format& f) { return 1u << (f.bits - 1); }

bool is_nan_pattern(const Format& f, uint32_t bits) {
  const uint32_t magnitude = bits & (sign_bit(f) - 1);
  const uint32_t exponent = magnitude >> f.mantissa_bits;
  const uint32_t mantissa = magnitude & ((1u << f.mantissa_bits) - 1);
  const uint32_t all_ones = (1u << f.exponent_bits) - 1;
  if (f.has_infinity) return exponent == all_ones && mantissa != 0;
  return magnitude == (sign_bit(f) - 1);
}

// The value of a non-NaN pattern, from the definition: (-1)^s * 2^(e - bias) * 1.m, or
// 2^(1 - bias) * 0.m for exponent 0; IEEE all-ones exponent with mantissa 0 is infinity.
double textbook_value(const Format& f, uint32_t bits) {
  const bool negative = (bits & sign_bit(f)) != 0;
  const uint32_t magnitude = bits & (sign_bit(f) - 1);
  const int exponent = static_cast<int>(magnitude >> f.mantissa_bits);
  const double mantissa = magnitude & ((1u << f.mantissa_bits) - 1);
  const double scale = std::ldexp(1.0, -f.mantissa_bits);
  double value;
  if (f.has_infinity && exponent == (1 << f.exponent_bits) - 1)
    value = std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    value = std::ldexp(mantissa * scale, 1 - f.bias);
  else
    value = std::ldexp(1.0 + mantissa * scale, exponent - f.bias);
  return negative ? -value : value;
}

// Every non-negative finite value with its bits, ascending.
struct Candidate {
  double value;
  uint32_t bits;
};

std::vector<Candidate> finite_values(const Format& f) {
  std::vector<Candidate> values;
  for (uint32_t bits = 0; bits < sign_bit(f); ++bits) {
    if (is_nan_pattern(f, bits)) continue;
    const double v = textbook_value(f, bits);
    if (std::isfinite(v)) values.push_back({v, bits});
  }
  std::sort(values.begin(), values.end(), [](const Candidate& a, const Candidate& b) { return a.value < b.value; });
  return values;
}

// The finite values plus, for IEEE formats, the first value of the binade past the largest
// finite one (2^(emax+1), an even pattern standing for infinity): IEEE rounds as if it existed.
std::vector<Candidate> rounding_targets(const Format& f) {
  std::vector<Candidate> targets = finite_values(f);
  if (f.has_infinity)
    targets.push_back(
        {std::ldexp(1.0, (1 << f.exponent_bits) - 1 - f.bias), ((1u << f.exponent_bits) - 1) << f.mantissa_bits});
  return targets;
}

// Round to nearest, ties to the even pattern, by searching the targets. IEEE formats overflow
// to infinity; e4m3fn saturates to its largest finite value.
uint32_t brute_force_encode(const Format& f, const std::vector<Candidate>& targets, float x) {
  const uint32_t sign = std::signbit(x) ? sign_bit(f) : 0;
  if (std::isnan(x)) return sign | (sign_bit(f) - 1);  // any NaN pattern is accepted
  const double a = std::fabs(static_cast<double>(x));
  if (a >= targets.back().value) return sign | targets.back().bits;
  const auto above =
      std::lower_bound(targets.begin(), targets.end(), a, [](const Candidate& c, double v) { return c.value < v; });
  if (above->value == a) return sign | above->bits;
  const auto below = above - 1;
  const double up = above->value - a, down = a - below->value;
  if (up != down) return sign | (up < down ? above->bits : below->bits);
  return sign | (above->bits % 2 == 0 ? above->bits : below->bits);
}

void check_round_trips(const Format& f) {
  int mismatches = 0;
  std::string first_mismatch;
  for (uint32_t bits = 0; bits < (1u << f.bits); ++bits) {
    const float decoded = f.decode(bits);
    const bool nan = is_nan_pattern(f, bits);
    bool ok = std::isnan(decoded) == nan;
    if (ok && !nan)
      ok = static_cast<double>(decoded) == textbook_value(f, bits) &&
           std::signbit(decoded) == ((bits & sign_bit(f)) != 0);
    const uint32_t again = f.encode(decoded);
    ok = ok && again == bits;
    if (!ok && mismatches++ == 0)
      first_mismatch = "bits " + std::to_string(bits) + " decoded " + std::to_string(decoded) + " re-encoded " +
                       std::to_string(again);
  }
  INFO(std::string(f.name), ": ", first_mismatch);
  CHECK(mismatches == 0);
}

// Every midpoint between neighbours encodes to the even one; a hair off it, to the nearer one.
void check_ties(const Format& f) {
  const std::vector<Candidate> table = finite_values(f);
  int checked = 0, mismatches = 0;
  std::string first_mismatch;
  for (size_t i = 0; i + 1 < table.size(); ++i) {
    const double mid = (table[i].value + table[i + 1].value) / 2;
    const float x = static_cast<float>(mid);
    REQUIRE(static_cast<double>(x) == mid);  // midpoints of these formats are floats
    const uint32_t even = table[i].bits % 2 == 0 ? table[i].bits : table[i + 1].bits;
    for (const float s : {1.0f, -1.0f}) {
      const uint32_t sign = s < 0 ? sign_bit(f) : 0;
      const float up = std::nextafter(x, std::numeric_limits<float>::infinity());
      const float down = std::nextafter(x, 0.0f);
      const bool ok = f.encode(s * x) == (sign | even) && f.encode(s * up) == (sign | table[i + 1].bits) &&
                      f.encode(s * down) == (sign | table[i].bits);
      ++checked;
      if (!ok && mismatches++ == 0) first_mismatch = "midpoint " + std::to_string(s * mid);
    }
  }
  INFO(std::string(f.name), ": ", checked, " midpoints, first mismatch ", first_mismatch);
  CHECK(mismatches == 0);
}

void check_against_brute_force(const Format& f, uint64_t seed) {
  const std::vector<Candidate> targets = rounding_targets(f);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> significand(1.0f, 2.0f);
  const int min_exponent = 1 - f.bias - f.mantissa_bits - 3;
  const int max_exponent = (1 << f.exponent_bits) - f.bias + 1;
  std::uniform_int_distribution<int> exponent(min_exponent, max_exponent);
  int mismatches = 0;
  std::string first_mismatch;
  for (int n = 0; n < 100000; ++n) {
    // Half arbitrary floats (mostly far outside the range), half spread over the format's range.
    float x = std::bit_cast<float>(any_bits(rng));
    if (n % 2) x = std::ldexp(significand(rng), exponent(rng)) * (any_bits(rng) % 2 ? 1.0f : -1.0f);
    const uint32_t got = f.encode(x), want = brute_force_encode(f, targets, x);
    if (got != want && !(std::isnan(x) && is_nan_pattern(f, got)) && mismatches++ == 0)
      first_mismatch = std::to_string(x) + " -> " + std::to_string(got) + ", expected " + std::to_string(want);
  }
  INFO(std::string(f.name), " seed ", seed, ": ", first_mismatch);
  CHECK(mismatches == 0);
}

}  // namespace

TEST_SUITE("ref/float_formats") {
  TEST_CASE("every float16, bfloat16 and e4m3 pattern decodes to its value and re-encodes to it") {
    check_round_trips(kHalf);
    check_round_trips(kBfloat16);
    check_round_trips(kE4m3);
  }

  TEST_CASE("known values") {
    CHECK(half_to_float(0x3C00) == 1.0f);
    CHECK(half_to_float(0x7BFF) == 65504.0f);
    CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(std::isinf(half_to_float(0xFC00)));
    CHECK(bfloat16_to_float(0x3F80) == 1.0f);
    CHECK(bfloat16_to_float(0xC040) == -3.0f);
    CHECK(e4m3_to_float(0x7E) == 448.0f);
    CHECK(e4m3_to_float(0xFE) == -448.0f);
    CHECK(e4m3_to_float(0x38) == 1.0f);
    CHECK(e4m3_to_float(0x08) == std::ldexp(1.0f, -6));
    CHECK(e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
    CHECK(std::isnan(e4m3_to_float(0x7F)));
    CHECK(std::isnan(e4m3_to_float(0xFF)));
    CHECK(e4m3_to_float(0x78) == 256.0f);  // exponent 1111 is finite in e4m3fn
    CHECK(std::signbit(e4m3_to_float(0x80)));
  }

  TEST_CASE("midpoints round to the even neighbour") {
    check_ties(kHalf);
    check_ties(kBfloat16);
    check_ties(kE4m3);
    // Spot checks written out by hand.
    CHECK(float_to_e4m3(1.0625f) == 0x38);  // between 1 and 1.125: even is 1.0 (mantissa 000)
    CHECK(float_to_e4m3(1.1875f) == 0x3A);  // between 1.125 and 1.25: even is 1.25 (010)
    CHECK(float_to_e4m3(432.0f) == 0x7E);   // between 416 (101) and 448 (110)
    CHECK(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
    CHECK(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
    CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
    CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  }

  TEST_CASE("e4m3 saturates to +-448, float16 and bfloat16 overflow to infinity") {
    CHECK(float_to_e4m3(1000.0f) == 0x7E);
    CHECK(float_to_e4m3(-1e9f) == 0xFE);
    CHECK(float_to_e4m3(464.0f) == 0x7E);
    CHECK(float_to_e4m3(449.0f) == 0x7E);
    CHECK(float_to_e4m3(std::numeric_limits<float>::max()) == 0x7E);
    CHECK(float_to_e4m3(std::numeric_limits<float>::infinity()) == 0x7E);
    CHECK(float_to_e4m3(-std::numeric_limits<float>::infinity()) == 0xFE);
    CHECK(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7F);
    CHECK(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()) == 0xFF);

    CHECK(float_to_half(65504.0f) == 0x7BFF);
    CHECK(float_to_half(65519.0f) == 0x7BFF);
    CHECK(float_to_half(65520.0f) == 0x7C00);  // the tie with 2^16 goes to the even side: inf
    CHECK(float_to_half(-1e9f) == 0xFC00);
    CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7F80);
    CHECK(float_to_bfloat16(std::bit_cast<float>(0x7F7F7FFFu)) == 0x7F7F);
    CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(std::bit_cast<float>(0x7F800001u)))));
  }

  TEST_CASE("subnormals and signed zeros") {
    CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie with 0: even
    CHECK(float_to_half(std::ldexp(1.0001f, -25)) == 0x0001);
    CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);     // tie 1 vs 2: even
    CHECK(float_to_half(std::ldexp(1023.0f, -24)) == 0x03FF);  // largest subnormal
    CHECK(float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);  // tie into the normals
    CHECK(float_to_half(-std::ldexp(1.0f, -30)) == 0x8000);    // underflow keeps the sign
    CHECK(float_to_half(-0.0f) == 0x8000);
    CHECK(float_to_e4m3(std::ldexp(1.0f, -9)) == 0x01);
    CHECK(float_to_e4m3(std::ldexp(1.0f, -10)) == 0x00);
    CHECK(float_to_e4m3(std::ldexp(3.0f, -10)) == 0x02);
    CHECK(float_to_e4m3(std::ldexp(15.0f, -10)) == 0x08);  // 7.5 * 2^-9: even is 2^-6
    CHECK(float_to_e4m3(-std::ldexp(1.0f, -12)) == 0x80);
    CHECK(float_to_bfloat16(std::ldexp(1.0f, -133)) == 0x0001);
    CHECK(float_to_bfloat16(std::ldexp(1.0f, -149)) == 0x0000);
    CHECK(float_to_bfloat16(std::ldexp(1.5f, -133)) == 0x0002);
  }

  TEST_CASE("encoding random floats matches a brute-force nearest-even search") {
    const uint64_t seed = fresh_seed();
    INFO("seed ", seed, " (set TSATTN_TEST_SEED to repeat)");
    check_against_brute_force(kHalf, seed);
    check_against_brute_force(kBfloat16, seed + 1);
    check_against_brute_force(kE4m3, seed + 2);
  }

  TEST_CASE("load_element and store_element address elements of each dtype") {
    alignas(16) unsigned char buffer[64] = {};
    store_element(TSATTN_DTYPE_FLOAT16, buffer, 3, 1.5f);
    CHECK(load_element(TSATTN_DTYPE_FLOAT16, buffer, 3) == 1.5f);
    CHECK(buffer[6] == 0x00);
    CHECK(buffer[7] == 0x3E);
    store_element(TSATTN_DTYPE_BFLOAT16, buffer, 5, -2.0f);
    CHECK(load_element(TSATTN_DTYPE_BFLOAT16, buffer, 5) == -2.0f);
    store_element(TSATTN_DTYPE_FLOAT8_E4M3FN, buffer, 40, 1000.0f);
    CHECK(buffer[40] == 0x7E);
    CHECK(load_element(TSATTN_DTYPE_FLOAT8_E4M3FN, buffer, 40) == 448.0f);
    float row[3];
    load_elements(TSATTN_DTYPE_FLOAT16, buffer, 2, 3, row);
    CHECK(row[0] == 0.0f);
    CHECK(row[1] == 1.5f);
    CHECK_THROWS_AS(load_element(TSATTN_DTYPE_FLOAT32, buffer, 0), tsattn::Error);
    CHECK_THROWS_AS(store_element(TSATTN_DTYPE_INT8, buffer, 0, 1.0f), tsattn::Error);
  }

}  // TEST_SUITE
