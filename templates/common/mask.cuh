// common/mask.cuh - which keys a query row sees (docs/contract.md, "Masks"), as one inclusive range.
//
// Every mask of the contract gives row i a contiguous key range [lo, hi] inside [0, kv_len):
//   dense             [0, kv_len - 1]
//   causal            [0, i + kv_len - q_len]                     (bottom-right aligned)
//   causal + window   [i + kv_len - q_len - W, i + kv_len - q_len] (clamped to [0, kv_len))
//   variable window   [starts[b, i], ends[b, i]]                   (clamped to [0, kv_len))
// An empty range (Sk = 0, Sq > Sk under causal, an empty or out-of-range variable window) is
// the canonical {kEmptyLo, kEmptyHi}: then lo > hi, "lo <= j && j <= hi" is false for every j,
// and as a contribution to min(lo) / max(hi) over a tile it changes nothing.
#ifndef TSATTN_COMMON_MASK_CUH
#define TSATTN_COMMON_MASK_CUH

#include "common/request.cuh"

#ifndef TSATTN_MASK
#error "TSATTN_MASK must be defined (a mask code of kernel_codes.h)"
#endif
#ifndef TSATTN_WINDOW
#error "TSATTN_WINDOW must be defined (1: causal with window_left)"
#endif
static_assert(TSATTN_MASK == TSATTN_MASK_CODE_DENSE || TSATTN_MASK == TSATTN_MASK_CODE_CAUSAL ||
                  TSATTN_MASK == TSATTN_MASK_CODE_VARIABLE_WINDOW,
              "TSATTN_MASK is a mask code of kernel_codes.h");
static_assert(TSATTN_WINDOW == 0 || TSATTN_MASK == TSATTN_MASK_CODE_CAUSAL, "TSATTN_WINDOW needs the causal mask");

namespace tsattn_dev {

constexpr int kEmptyLo = 0x7FFFFFFF;
constexpr int kEmptyHi = -1;

struct KeyRange {
  int lo;  // first visible key (inclusive)
  int hi;  // last visible key (inclusive)
};

__device__ __forceinline__ KeyRange clamp_key_range(i64 lo, i64 hi, int kv_len) {
  if (lo < 0) lo = 0;
  if (hi > static_cast<i64>(kv_len) - 1) hi = static_cast<i64>(kv_len) - 1;
  if (lo > hi) return {kEmptyLo, kEmptyHi};  // also covers kv_len == 0 and hi < 0
  return {static_cast<int>(lo), static_cast<int>(hi)};
}

// Keys visible to row i (0 <= i < r.q_len) of request b.
__device__ __forceinline__ KeyRange row_key_range(const TsattnPrefillParams& p, const RequestExtent& r, int b, int i) {
#if TSATTN_MASK == TSATTN_MASK_CODE_DENSE
  (void)p;
  (void)b;
  (void)i;
  return clamp_key_range(0, static_cast<i64>(r.kv_len) - 1, r.kv_len);
#elif TSATTN_MASK == TSATTN_MASK_CODE_CAUSAL
  (void)b;
  const i64 diagonal = static_cast<i64>(i) + r.kv_len - r.q_len;
#if TSATTN_WINDOW
  // window_left >= 1 by contract; a non-positive value can only shrink the range (never read
  // out of bounds), so it is used as max(W, 0): the diagonal key alone.
  const i64 window = p.window_left > 0 ? p.window_left : 0;
  return clamp_key_range(diagonal - window, diagonal, r.kv_len);
#else
  (void)p;
  return clamp_key_range(0, diagonal, r.kv_len);
#endif
#else
  const i64 row = static_cast<i64>(r.q_begin) + i;
  const int start = p.window_starts[b * p.starts_batch_stride + row * p.starts_row_stride];
  const int end = p.window_ends[b * p.ends_batch_stride + row * p.ends_row_stride];
  return clamp_key_range(start, end, r.kv_len);
#endif
}

__device__ __forceinline__ bool key_visible(const KeyRange& range, int j) { return range.lo <= j && j <= range.hi; }

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_MASK_CUH
