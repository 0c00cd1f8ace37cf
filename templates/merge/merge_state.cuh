// merge/merge_state.cuh - merging attention states through their log-sum-exp (merge_params.h).
//
// An item (one query row and head) has n states (v_i of D elements, s_i): partial attentions of
// that query over disjoint key sets, s_i the natural log of the sum of exp(score) over set i.
//   m = max_i s_i,  w_i = exp(s_i - m),  v = sum_i w_i v_i / sum_i w_i,  s = m + log(sum_i w_i),
// in fp32 whatever v's dtype. A state with s_i = -inf saw no key: it weighs nothing and its v_i is
// never read, so no -inf arithmetic (and nothing such a v_i holds) can make a NaN. When a single
// state is finite its weight and the sum are exactly 1, so v and s are its own, bit for bit; when
// none is, v = 0 and s = -inf.
//
// Memory bound: lanes_per_item lanes (a power of two <= 32) share an item, each moving
// access_bytes of every state's v per step along D; the groups of a CTA stride over the items.
// The generated source defines TSATTN_MERGE_DTYPE (kernel_codes.h: f16, bf16 or f32) and
// TSATTN_MERGE_KERNEL_NAME.
#ifndef TSATTN_MERGE_MERGE_STATE_CUH
#define TSATTN_MERGE_MERGE_STATE_CUH

#include "common/prelude.cuh"
#include "merge/merge_params.h"

namespace tsattn_dev {
namespace merge {

constexpr int kDtype = TSATTN_MERGE_DTYPE;
constexpr int kElementBytes = dtype_bytes(kDtype);
static_assert(kDtype == kFloat16 || kDtype == kBfloat16 || kDtype == kFloat32, "merge dtypes: f16, bf16, f32");

// One element's bits (in the low bits of a word) <-> fp32. Widening is exact; narrowing rounds to
// nearest even, so a value that came from this dtype goes back unchanged.
__device__ __forceinline__ float to_float(u32 bits) {
  if constexpr (kDtype == kFloat32) {
    return __uint_as_float(bits);
  } else if constexpr (kDtype == kBfloat16) {
    return __uint_as_float(bits << 16);
  } else {
    float x;
    asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(static_cast<u16>(bits)));
    return x;
  }
}

__device__ __forceinline__ u32 from_float(float x) {
  if constexpr (kDtype == kFloat32) {
    return __float_as_uint(x);
  } else {
    u16 bits;
    if constexpr (kDtype == kBfloat16)
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    else
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return bits;
  }
}

// kBytes of v (aligned to kBytes: the host checked) as fp32, in memory order.
template <int kBytes>
__device__ __forceinline__ void load(const char* p, float (&x)[kBytes / kElementBytes]) {
  if constexpr (kBytes == 2) {
    x[0] = to_float(*reinterpret_cast<const u16*>(p));
  } else {
    u32 w[kBytes / 4];
    if constexpr (kBytes == 16) {
      const uint4 t = *reinterpret_cast<const uint4*>(p);
      w[0] = t.x, w[1] = t.y, w[2] = t.z, w[3] = t.w;
    } else if constexpr (kBytes == 8) {
      const uint2 t = *reinterpret_cast<const uint2*>(p);
      w[0] = t.x, w[1] = t.y;
    } else {
      w[0] = *reinterpret_cast<const u32*>(p);
    }
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      if constexpr (kElementBytes == 4) {
        x[i] = to_float(w[i]);
      } else {  // two elements per word, the first in the low half
        x[2 * i] = to_float(w[i] & 0xFFFFu);
        x[2 * i + 1] = to_float(w[i] >> 16);
      }
    }
  }
}

template <int kBytes>
__device__ __forceinline__ void store(char* p, const float (&x)[kBytes / kElementBytes]) {
  if constexpr (kBytes == 2) {
    *reinterpret_cast<u16*>(p) = static_cast<u16>(from_float(x[0]));
  } else {
    u32 w[kBytes / 4];
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      if constexpr (kElementBytes == 4)
        w[i] = from_float(x[i]);
      else
        w[i] = from_float(x[2 * i]) | (from_float(x[2 * i + 1]) << 16);
    }
    if constexpr (kBytes == 16)
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    else if constexpr (kBytes == 8)
      *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    else
      *reinterpret_cast<u32*>(p) = w[0];
  }
}

// Where an item starts in each tensor, in elements.
struct Offsets {
  i64 v_first, s_first, v_rest, s_rest, v_out, s_out;
};

// Item indices and extents fit 31 bits (merge_params.h), so the decomposition divides in 32 bits;
// the offsets are 64-bit.
__device__ __forceinline__ Offsets item_offsets(const TsattnMergeParams& p, u32 item) {
  Offsets o = {0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < TSATTN_MERGE_MAX_DIMS; ++k) {
    if (k == p.ndim) break;
    i64 c = item;  // the outermost dim takes what is left: no division
    if (k + 1 < p.ndim) {
      const u32 extent = static_cast<u32>(p.shape[k]);
      c = item % extent;
      item /= extent;
    }
    o.v_first += c * p.v_first.strides[k];
    o.s_first += c * p.s_first.strides[k];
    o.v_rest += c * p.v_rest.strides[k];
    o.s_rest += c * p.s_rest.strides[k];
    o.v_out += c * p.v_out.strides[k];
    o.s_out += c * p.s_out.strides[k];
  }
  return o;
}

__device__ __forceinline__ float state_lse(const TsattnMergeParams& p, const Offsets& o, int i) {
  if (i == 0) return static_cast<const float*>(p.s_first.data)[o.s_first];
  return static_cast<const float*>(p.s_rest.data)[o.s_rest + (i - 1) * p.s_state_stride];
}

__device__ __forceinline__ const char* state_v(const TsattnMergeParams& p, const Offsets& o, int i) {
  const i64 element = i == 0 ? o.v_first : o.v_rest + (i - 1) * p.v_state_stride;
  return static_cast<const char*>(i == 0 ? p.v_first.data : p.v_rest.data) + element * kElementBytes;
}

template <int kBytes>
__device__ __forceinline__ void merge_item(const TsattnMergeParams& p, u32 item, int lane, int lanes) {
  constexpr int kElements = kBytes / kElementBytes;
  const Offsets o = item_offsets(p, item);
  // The largest lse m and the weight sum l = sum_i exp(s_i - m), online over the states (l = 0:
  // no finite state yet). Every lane of the group reads the same s values.
  float m = neg_inf(), l = 0.0f;
  for (int i = 0; i < p.num_states; ++i) {
    const float s = state_lse(p, o, i);
    if (s == neg_inf()) continue;
    if (l == 0.0f) {
      m = s;
      l = 1.0f;
    } else if (s > m) {
      l = l * expf(m - s) + 1.0f;
      m = s;
    } else {
      l += expf(s - m);
    }
  }
  if (lane == 0 && p.s_out.data != nullptr) {
    // l == 1: one state alone (or the others' weights underflowed), whose lse m is kept as is.
    const float s = l == 0.0f ? neg_inf() : (l == 1.0f ? m : m + logf(l));
    static_cast<float*>(p.s_out.data)[o.s_out] = s;
  }
  const float inv_l = l == 0.0f ? 0.0f : 1.0f / l;
  char* out = static_cast<char*>(p.v_out.data) + o.v_out * kElementBytes;
  const int accesses = p.head_dim / kElements;
  for (int a = lane; a < accesses; a += lanes) {
    float acc[kElements];
#pragma unroll
    for (int e = 0; e < kElements; ++e) acc[e] = 0.0f;
    bool first = true;
    for (int i = 0; i < p.num_states; ++i) {
      const float s = state_lse(p, o, i);
      if (s == neg_inf()) continue;
      const float w = expf(s - m);  // exactly 1 for the state that holds the max
      float x[kElements];
      load<kBytes>(state_v(p, o, i) + a * kBytes, x);
#pragma unroll
      for (int e = 0; e < kElements; ++e) acc[e] = first ? w * x[e] : fmaf(w, x[e], acc[e]);
      first = false;
    }
#pragma unroll
    for (int e = 0; e < kElements; ++e) acc[e] *= inv_l;
    store<kBytes>(out + a * kBytes, acc);
  }
}

template <int kBytes>
__device__ void merge_items(const TsattnMergeParams& p) {
  const int lanes = p.lanes_per_item;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const i64 groups = TSATTN_MERGE_THREADS / lanes;
  const i64 step = static_cast<i64>(gridDim.x) * groups;
  for (i64 item = static_cast<i64>(blockIdx.x) * groups + threadIdx.x / lanes; item < p.items; item += step)
    merge_item<kBytes>(p, static_cast<u32>(item), lane, lanes);
}

}  // namespace merge
}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(TSATTN_MERGE_THREADS)
    TSATTN_MERGE_KERNEL_NAME(const __grid_constant__ TsattnMergeParams p) {
  using namespace tsattn_dev::merge;
  switch (p.access_bytes) {
    case 16: merge_items<16>(p); return;
    case 8: merge_items<8>(p); return;
    case 4: merge_items<4>(p); return;
    default: merge_items<kElementBytes>(p); return;  // 16-bit elements one at a time
  }
}

#endif  // TSATTN_MERGE_MERGE_STATE_CUH
