// sm90a/softmax.cuh - the online softmax of one key tile in a consumer thread's registers: the
// element mask, running row maxima and sums, and the rescale of O.
#ifndef TSATTN_SM90A_SOFTMAX_CUH
#define TSATTN_SM90A_SOFTMAX_CUH

#include "common/mask.cuh"
#include "sm90a/config.cuh"

namespace tsattn_dev {
namespace sm90a {

// This thread's two rows within its warpgroup's 64: g and g + 8 of its warp's 16.
struct RowState {
  KeyRange range[2];
  float m[2];  // running max of raw scores
  float l[2];  // this thread's partial sum of p
};

// Sets scores of invisible keys to -inf. d[i] holds row g + 8 * ((i % 4) / 2), key
// n0 + 8 * (i / 4) + 2c + (i % 2).
// Plain causal rows see keys from 0 (an empty range has hi = -1), so only the upper bound needs a
// test there. 16-bit D128 kernels only: D256 ran no faster with it, and e4m3 kernels keep their
// key loop's schedule (docs/decisions.md, apply_mask).
#if TSATTN_MASK == TSATTN_MASK_CODE_CAUSAL && !TSATTN_WINDOW
constexpr bool kRangesStartAtZero = !kE4m3Inputs && kHeadDim == 128;
#else
constexpr bool kRangesStartAtZero = false;
#endif

__device__ __forceinline__ void apply_mask(float (&s)[kSAccum], const RowState& rows, int n0, int c) {
  const float ninf = neg_inf();
#pragma unroll
  for (int i = 0; i < kSAccum; ++i) {
    const int j = n0 + 8 * (i / 4) + 2 * c + (i % 2);
    const KeyRange& range = rows.range[(i % 4) / 2];
    if (kRangesStartAtZero ? j > range.hi : !key_visible(range, j)) s[i] = ninf;
  }
}

// Row maxima and row sums run as kChains independent chains per row, combined at the end: one
// chain of BLOCK_N / 4 dependent FMNMX or FADD instructions is latency-bound (ncu on the fp8 and
// bf16 D128 kernels: "wait", fixed-latency dependencies, was the largest stall reason).
constexpr int kChains = (kBlockN / 8) % 4 == 0 ? 4 : 2;
static_assert((kBlockN / 8) % kChains == 0, "BLOCK_N / 8 column pairs split evenly over the chains");

// The combination of kChains partial results, as a tree.
template <class Op>
__device__ __forceinline__ float combine_chains(const float (&part)[kChains], Op op) {
  if constexpr (kChains == 4)
    return op(op(part[0], part[1]), op(part[2], part[3]));
  else
    return op(part[0], part[1]);
}

// Lazy rescaling (FlashAttention-4's conditional rescaling), in the serial loop only: a row's
// running max m, and with it its O and l, moves only when the row sees a score more than
// 2^kRescaleLog2 above exp2's current offset; otherwise the stale m stays and p <= 2^8, within
// e4m3's and fp16's range (448, 65504) and far from fp32 overflow in O and l, which stay
// consistent because both use the same m. The serial loop rescales O between the softmax and the
// PV GEMM that waits for it, so skipping the D/2 multiplies there shortens every step. The
// overlapped loop rescales under its PV GEMM and keeps the exact max. The price: a row's largest
// p is no longer exactly 1, so its e4m3 rounding shows (within the contract's fp8 bound).
constexpr float kRescaleLog2 = 8.0f;

// Online softmax of one key tile, first half: new running max, p = exp2(s * scale_log2 - m) in
// place, l updated. Returns true when this thread's O must be scaled by alpha (always without
// kLazy; with it, when some of its rows moved m), applied by rescale_output once the PV GEMM that
// is still accumulating into O has retired; a row that kept its m has alpha = 1. Fully masked
// rows so far (m = -inf) use offset 0, so p = exp2(-inf) = 0 and never exp2(-inf + inf) = NaN.
template <bool kLazy>
__device__ __forceinline__ bool softmax_step(float (&s)[kSAccum], RowState& rows, float scale_log2, float (&alpha)[2]) {
  const float ninf = neg_inf();
  float row_max[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Chains start from the tile's own scores (an fmaxf with -inf would not fold away: NaN rules).
    float part[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part[c] = fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
    part[0] = fmaxf(part[0], rows.m[h]);
#pragma unroll
    for (int j = kChains; j < kBlockN / 8; ++j)
      part[j % kChains] = fmaxf(part[j % kChains], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    row_max[h] = combine_chains(part, [](float a, float b) { return fmaxf(a, b); });
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // The four threads of a quad hold the same row.
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xFFFFFFFFu, row_max[h], 1));
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xFFFFFFFFu, row_max[h], 2));
  }
  bool rescale = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // m = -inf and a first visible key: +inf > threshold; still no key: NaN, false.
    const bool grow = !kLazy || (row_max[h] - rows.m[h]) * scale_log2 > kRescaleLog2;
    const float new_max = grow ? row_max[h] : rows.m[h];
    const float offset = new_max == ninf ? 0.0f : new_max * scale_log2;
    alpha[h] = grow ? fast_exp2(rows.m[h] * scale_log2 - offset) : 1.0f;
    rescale |= grow;
    rows.m[h] = new_max;
    float sum[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) sum[c] = 0.0f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = fast_exp2(fmaf(s[4 * j + 2 * h + e], scale_log2, -offset));
        s[4 * j + 2 * h + e] = pe;
        sum[j % kChains] += pe;
      }
    }
    rows.l[h] = rows.l[h] * alpha[h] + combine_chains(sum, [](float a, float b) { return a + b; });
  }
  return rescale;
}

__device__ __forceinline__ void rescale_output(float (&o)[kOAccum], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) o[4 * j + r] *= alpha[r / 2];
  }
}

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_SOFTMAX_CUH
