// float_formats.hpp - host encode/decode of the attention dtypes, for the CPU oracle and tests.
//
// float16 is IEEE binary16, bfloat16 the top half of a binary32, float8_e4m3fn torch's e4m3fn
// (bias 7, no infinities, S.1111.111 is NaN, largest finite 448). Encoding rounds to nearest
// even with exact subnormals. float16/bfloat16 overflow to infinity as IEEE does; e4m3 saturates
// to +-448 (docs/contract.md, "Dtypes": "FP8 outputs round to nearest and saturate to finite"), infinities included.
// NaN stays NaN; float16/bfloat16 NaN payloads survive a decode/encode round trip.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>

namespace tsattn::ref {

float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);

float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);

float e4m3_to_float(uint8_t bits);
uint8_t float_to_e4m3(float value);

// Element `index` (in elements of dtype) of the array at base. dtype must be an attention
// dtype (float16, bfloat16, float8_e4m3fn); others throw tsattn::Error (not_implemented).
float load_element(tsattn_dtype dtype, const void* base, int64_t index);
void store_element(tsattn_dtype dtype, void* base, int64_t index, float value);

// count consecutive elements starting at element `index`, decoded into dst.
void load_elements(tsattn_dtype dtype, const void* base, int64_t index, int64_t count, float* dst);

}  // namespace tsattn::ref
