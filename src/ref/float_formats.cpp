#include "ref/float_formats.hpp"

#include <tsattn/tsattn.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "api/dtype.hpp"

namespace tsattn::ref {

namespace {

// A binary format narrower than float, described by what rounding needs.
struct NarrowFormat {
  int mantissa_bits;
  int exponent_bias;
  uint32_t max_finite;  // magnitude bits of the largest finite value
  uint32_t overflow;    // magnitude bits for anything rounding past it: infinity or max_finite
};

constexpr NarrowFormat kHalf{10, 15, 0x7BFF, 0x7C00};
constexpr NarrowFormat kBfloat16{7, 127, 0x7F7F, 0x7F80};
constexpr NarrowFormat kE4m3{3, 7, 0x7E, 0x7E};

// Magnitude bits of |value| (finite) rounded to nearest even. Works in double, where scaling
// by powers of two and splitting off the fraction are exact for every float input.
uint32_t round_magnitude(float value, const NarrowFormat& format) {
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude == 0.0) return 0;
  int binary_exponent = 0;
  std::frexp(magnitude, &binary_exponent);  // magnitude = m * 2^binary_exponent, m in [0.5, 1)
  const int min_exponent = 1 - format.exponent_bias;
  // Below the normal range the quantum stays that of the smallest normal: subnormals.
  const int exponent = std::max(binary_exponent - 1, min_exponent);
  const double scaled = std::ldexp(magnitude, format.mantissa_bits - exponent);  // < 2^(m+1)
  int64_t significand = static_cast<int64_t>(scaled);                            // truncation: scaled >= 0
  const double fraction = scaled - static_cast<double>(significand);
  if (fraction > 0.5 || (fraction == 0.5 && significand % 2 != 0)) ++significand;
  // (exponent - min_exponent) << m plus the significand covers normals, subnormals (exponent
  // field 0, no hidden bit) and a carry out of the significand into the next binade alike.
  const int64_t bits = (int64_t{exponent - min_exponent} << format.mantissa_bits) + significand;
  return bits > int64_t{format.max_finite} ? format.overflow : static_cast<uint32_t>(bits);
}

uint32_t float_bits(float value) { return std::bit_cast<uint32_t>(value); }

[[noreturn]] void unsupported(tsattn_dtype dtype) {
  throw Error(ErrorKind::not_implemented,
              "the CPU oracle reads and writes float16, bfloat16 and float8_e4m3fn, not " + dtype_name(dtype));
}

uint16_t read_u16(const void* base, int64_t index) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const unsigned char*>(base) + index * 2, sizeof bits);
  return bits;
}

void write_u16(void* base, int64_t index, uint16_t bits) {
  std::memcpy(static_cast<unsigned char*>(base) + index * 2, &bits, sizeof bits);
}

}  // namespace

float half_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    const float subnormal = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -subnormal : subnormal;
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

uint16_t float_to_half(float value) {
  const uint32_t bits = float_bits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  if (std::isnan(value)) {
    const uint32_t payload = (bits >> 13) & 0x3FFu;
    return static_cast<uint16_t>(sign | 0x7C00u | (payload ? payload : 0x200u));
  }
  if (std::isinf(value)) return static_cast<uint16_t>(sign | 0x7C00u);
  return static_cast<uint16_t>(sign | round_magnitude(value, kHalf));
}

float bfloat16_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

uint16_t float_to_bfloat16(float value) {
  const uint32_t bits = float_bits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  if (std::isnan(value)) {
    const uint32_t upper = bits >> 16;
    // A payload only in the dropped low half would read back as infinity: set the quiet bit.
    return static_cast<uint16_t>((upper & 0x7Fu) ? upper : (upper | 0x40u));
  }
  if (std::isinf(value)) return static_cast<uint16_t>(sign | 0x7F80u);
  return static_cast<uint16_t>(sign | round_magnitude(value, kBfloat16));
}

float e4m3_to_float(uint8_t bits) {
  const uint32_t sign = uint32_t{bits & 0x80u} << 24;
  const uint32_t exponent = (bits >> 3) & 0xFu;
  const uint32_t mantissa = bits & 0x7u;
  if ((bits & 0x7Fu) == 0x7Fu) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exponent == 0) {
    const float subnormal = std::ldexp(static_cast<float>(mantissa), -9);
    return sign ? -subnormal : subnormal;
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 7) << 23) | (mantissa << 20));
}

uint8_t float_to_e4m3(float value) {
  const uint32_t sign = (float_bits(value) >> 24) & 0x80u;
  if (std::isnan(value)) return static_cast<uint8_t>(sign | 0x7Fu);
  if (std::isinf(value)) return static_cast<uint8_t>(sign | kE4m3.max_finite);
  return static_cast<uint8_t>(sign | round_magnitude(value, kE4m3));
}

float load_element(tsattn_dtype dtype, const void* base, int64_t index) {
  switch (dtype) {
    case TSATTN_DTYPE_FLOAT16: return half_to_float(read_u16(base, index));
    case TSATTN_DTYPE_BFLOAT16: return bfloat16_to_float(read_u16(base, index));
    case TSATTN_DTYPE_FLOAT8_E4M3FN: return e4m3_to_float(static_cast<const uint8_t*>(base)[index]);
    default: unsupported(dtype);
  }
}

void store_element(tsattn_dtype dtype, void* base, int64_t index, float value) {
  switch (dtype) {
    case TSATTN_DTYPE_FLOAT16: write_u16(base, index, float_to_half(value)); return;
    case TSATTN_DTYPE_BFLOAT16: write_u16(base, index, float_to_bfloat16(value)); return;
    case TSATTN_DTYPE_FLOAT8_E4M3FN: static_cast<uint8_t*>(base)[index] = float_to_e4m3(value); return;
    default: unsupported(dtype);
  }
}

void load_elements(tsattn_dtype dtype, const void* base, int64_t index, int64_t count, float* dst) {
  // One switch per run of elements, not per element: the oracle decodes whole rows.
  switch (dtype) {
    case TSATTN_DTYPE_FLOAT16:
      for (int64_t i = 0; i < count; ++i) dst[i] = half_to_float(read_u16(base, index + i));
      return;
    case TSATTN_DTYPE_BFLOAT16:
      for (int64_t i = 0; i < count; ++i) dst[i] = bfloat16_to_float(read_u16(base, index + i));
      return;
    case TSATTN_DTYPE_FLOAT8_E4M3FN: {
      const uint8_t* bytes = static_cast<const uint8_t*>(base) + index;
      for (int64_t i = 0; i < count; ++i) dst[i] = e4m3_to_float(bytes[i]);
      return;
    }
    default: unsupported(dtype);
  }
}

}  // namespace tsattn::ref
