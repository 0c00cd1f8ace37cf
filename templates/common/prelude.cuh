// common/prelude.cuh - fixed-width types and number formats for NVRTC device code with no headers.
//
// NVRTC gets no include directories, so <cstdint>, <cuda_fp16.h> and <cuda_fp8.h> are out of
// reach: the conversions below are written with PTX that every target we build for has
// (cvt.rn.{f16x2,bf16x2}.f32 and mul.f16x2 are sm_80 baseline), plus plain integer code.
// The e4m3 helpers that decide bits (software decode, encode) are __host__ __device__ and use no
// intrinsics, so a host unit test can check them exhaustively against the CPU oracle
// (src/ref/float_formats.cpp); the kernel cannot be run where it is built.
#ifndef TSATTN_COMMON_PRELUDE_CUH
#define TSATTN_COMMON_PRELUDE_CUH

#include "kernel_codes.h"

namespace tsattn_dev {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;
static_assert(sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8, "fixed-width types");

// Select<c, A, B>::type is A when c holds, else B (std::conditional; NVRTC has no <type_traits>).
template <bool kCondition, class A, class B>
struct Select {
  typedef A type;
};
template <class A, class B>
struct Select<false, A, B> {
  typedef B type;
};

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ u32 float_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ float bits_float(u32 x) { return __uint_as_float(x); }
#else
__host__ inline u32 float_bits(float x) {
  union {
    float f;
    u32 u;
  } v;
  v.f = x;
  return v.u;
}
__host__ inline float bits_float(u32 x) {
  union {
    u32 u;
    float f;
  } v;
  v.u = x;
  return v.f;
}
#endif

// ---------------------------------------------------------------------------------------------
// e4m3 (torch float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN, largest finite 448.

// fp32 -> e4m3, round to nearest even, saturating to +-448 (infinities included: docs/contract.md "FP8
// outputs round to nearest and saturate to finite"), NaN -> sign|0x7F. Matches the oracle's
// float_to_e4m3 bit for bit (checked over all 2^32 inputs by a host test). Used on sm_80..sm_86;
// sm_89+ has cvt.rn.satfinite.e4m3x2.f32 (see pack_pair), which agrees except for NaN signs.
__host__ __device__ inline u32 e4m3_from_float(float value) {
  const u32 x = float_bits(value);
  const u32 sign = (x >> 24) & 0x80u;
  const u32 a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7Fu;   // NaN
  if (a >= 0x43E00000u) return sign | 0x7Eu;  // >= 448 (464 ties to even 448; above -> 448)
  const u32 biased = a >> 23;
  if (biased >= 121u) {            // >= 2^-6: e4m3 normal range
    const u32 rem = a & 0xFFFFFu;  // the 20 mantissa bits dropped
    u32 bits = ((biased - 120u) << 3) | ((a >> 20) & 7u);
    if (rem > 0x80000u || (rem == 0x80000u && (bits & 1u))) ++bits;  // a carry moves the exponent
    return sign | bits;
  }
  // Below 2^-6: multiples of 2^-9 (subnormals; rounding up from 7.5 * 2^-9 gives 0x08 = 2^-6).
  // value = sig * 2^(biased - 150), so value / 2^-9 = sig >> (141 - biased).
  if (biased == 0u) return sign;    // fp32 subnormal: far below 2^-10
  const u32 shift = 141u - biased;  // >= 21 here
  if (shift >= 25u) return sign;    // value < 2^-10: rounds to zero
  const u32 sig = (a & 0x7FFFFFu) | 0x800000u;
  u32 q = sig >> shift;
  const u32 rem = sig & ((1u << shift) - 1u);
  const u32 half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | q;
}

// Four e4m3 bytes (byte 0 lowest) -> four f16 as two f16x2 words, software version (sm_80..sm_86).
// Every e4m3 value is exact in f16. The bits of e4m3 magnitude m, shifted into an f16 as m << 7,
// read as exactly 2^-8 times the e4m3 value: the 4-bit exponent lands in the f16 exponent field
// (bias 15 instead of 7: a factor 2^-8), the 3-bit mantissa on top of the f16 mantissa, and e4m3
// subnormals (exponent 0) become f16 subnormals with the same factor. The caller multiplies by
// 256 in f16 (exact: mul.f16x2 keeps subnormal inputs, and no result exceeds 448).
// Returns the pre-scale words; `nan` gets 0x7E00 in each half whose byte was NaN (S.1111.111),
// to be OR-ed into the scaled result (exponent all ones with a mantissa bit: a quiet NaN).
__host__ __device__ inline void e4m3x4_to_f16x4_prescaled(u32 w, u32& lo, u32& hi, u32& nan_lo, u32& nan_hi) {
  // A byte's 7 magnitude bits are 0x7F iff adding 1 carries into bit 7 (no carry between bytes).
  const u32 nan_bytes = ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
  const u32 x01 = ((w & 0x000000FFu) << 8) | ((w & 0x0000FF00u) << 16);  // bytes 0,1 -> bits 15..8, 31..24
  const u32 x23 = ((w & 0x00FF0000u) >> 8) | (w & 0xFF000000u);          // bytes 2,3
  lo = ((x01 & 0x7F007F00u) >> 1) | (x01 & 0x80008000u);
  hi = ((x23 & 0x7F007F00u) >> 1) | (x23 & 0x80008000u);
  nan_lo = ((nan_bytes >> 7) & 1u) * 0x00007E00u | ((nan_bytes >> 15) & 1u) * 0x7E000000u;
  nan_hi = ((nan_bytes >> 23) & 1u) * 0x00007E00u | ((nan_bytes >> 31) & 1u) * 0x7E000000u;
}

#if defined(__CUDA_ARCH__)

// ---------------------------------------------------------------------------------------------
// Packing fp32 pairs. cvt.rn.*x2.f32 d, a, b puts a in the UPPER half and b in the lower half.

__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// Two fp32 -> two elements of `dtype` (f16/bf16: a 32-bit pair; e4m3: a 16-bit pair in the low
// half), lo first in memory. f16/bf16 overflow to infinity (IEEE rounding, as the oracle).
template <int dtype>
__device__ __forceinline__ u32 pack_pair(float lo, float hi) {
  if constexpr (dtype == kFloat16) {
    return pack_f16x2(lo, hi);
  } else if constexpr (dtype == kBfloat16) {
    return pack_bf16x2(lo, hi);
  } else {
#if __CUDA_ARCH__ >= 890
    // Ada/Hopper: the same round-to-nearest-even with saturation to +-448 in one instruction
    // (infinities saturate too). Only a NaN's sign may differ from the software encoder.
    u16 d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return e4m3_from_float(lo) | (e4m3_from_float(hi) << 8);
#endif
  }
}

// 16 e4m3 bytes (4 words) -> 16 f16 (8 words).
__device__ __forceinline__ void e4m3x16_to_f16x16(const u32 (&in)[4], u32 (&out)[8]) {
#if __CUDA_ARCH__ >= 890
  // Ada/Hopper have the conversion in hardware; low byte -> low half (as cuda_fp8.hpp uses it).
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const u16 b01 = static_cast<u16>(in[i] & 0xFFFFu);
    const u16 b23 = static_cast<u16>(in[i] >> 16);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out[2 * i]) : "h"(b01));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out[2 * i + 1]) : "h"(b23));
  }
#else
  const u32 k256 = 0x5C005C00u;  // (256.0, 256.0) in f16
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    u32 lo, hi, nan_lo, nan_hi;
    e4m3x4_to_f16x4_prescaled(in[i], lo, hi, nan_lo, nan_hi);
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out[2 * i]) : "r"(lo), "r"(k256));
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out[2 * i + 1]) : "r"(hi), "r"(k256));
    out[2 * i] |= nan_lo;
    out[2 * i + 1] |= nan_hi;
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Math.

// 2^x with the MUFU unit; ftz flushes denormal results to 0 (harmless for softmax weights);
// ex2(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xFF800000u); }

// Minimum / maximum over the 32 lanes of a converged warp (every lane gets the result).
__device__ __forceinline__ int warp_min(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

__device__ __forceinline__ int warp_max(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

#endif  // __CUDA_ARCH__

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_PRELUDE_CUH
