// sm90a/transpose_v.cuh - V^T for the sm90a kernel's e4m3 inputs (prefill_params.h, "e4m3 inputs
// on the sm90a family"): tsattn_transpose_v writes the workspace [batch][kv head][d][keys] of
// bytes that the attention kernel's V map reads, keys permuted within 32-key groups
// (sm90a/wgmma.cuh, e4m3_key_of_slot) and columns of no key set to 0.
//
// Launch: grid (any x, kv heads), 128 threads. Each warp takes one 32-column group of one V^T row
// block at a time: it reads the group's 32 keys x D bytes of V (16-byte loads, rows in order),
// stages them in shared memory, and writes D rows of 32 bytes. The pass moves 2 x |V| bytes, a few
// microseconds next to attention that reads V once per query tile.
//
// Packed layout: a group's request is found by binary search over the request starts. The
// indptrs may never have been validated (graph capture), so every request extent is sanitized
// (common/request.cuh) and every V read is bounds-checked against it; with malformed indptrs the
// output is meaningless but every access stays inside V and the workspace.
#ifndef TSATTN_SM90A_TRANSPOSE_V_CUH
#define TSATTN_SM90A_TRANSPOSE_V_CUH

#include "common/prelude.cuh"
#include "common/request.cuh"
#include "prefill_params.h"
#include "sm90a/wgmma.cuh"

namespace tsattn_dev {
namespace sm90a_transpose {

constexpr int kHeadDim = TSATTN_HEAD_DIM;
constexpr int kGroup = 32;  // keys per permutation group
constexpr int kWarps = 4;
constexpr int kChunksPerKey = kHeadDim / 16;

// The V^T column of key 0 of request b (its sanitized kv_begin, as request_extent has it), in 64
// bits.
__device__ __forceinline__ i64 packed_start(const TsattnPrefillParams& p, int b) {
  const i64 begin = sanitized_offset(p.kv_indptr, b, max(p.kv_tokens, 0));
  return TSATTN_VT_PACKED_START(begin, static_cast<i64>(b));
}

// The last request whose first column is <= column, or -1.
__device__ __forceinline__ int request_at_column(const TsattnPrefillParams& p, i64 column) {
  int lo = 0, hi = p.batch - 1, found = -1;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    if (packed_start(p, mid) <= column) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

__device__ __forceinline__ void transpose_v(const TsattnPrefillParams& p, u8* vt, i64 vt_keys) {
  __shared__ __align__(16) u8 staged[kWarps][kGroup][kHeadDim + 16];  // +16: fewer bank conflicts
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = blockIdx.y, kv_heads = gridDim.y;
  const i64 groups_per_row = vt_keys / kGroup;
  const i64 groups = TSATTN_PACKED ? groups_per_row : groups_per_row * max(p.batch, 0);
  const u8* const v = static_cast<const u8*>(p.v);
  for (i64 group = static_cast<i64>(blockIdx.x) * kWarps + warp; group < groups;
       group += static_cast<i64>(gridDim.x) * kWarps) {
    // Request (or batch entry) b, its extent, the group's first column and the key there.
    int b;
    i64 column0, key0;
    int batch_index;  // the workspace's batch coordinate
#if TSATTN_PACKED
    column0 = group * kGroup;
    b = request_at_column(p, column0);
    key0 = b >= 0 ? column0 - packed_start(p, b) : -kGroup;  // -32: a gap before request 0 (none today)
    batch_index = 0;
#else
    b = static_cast<int>(group / groups_per_row);
    column0 = (group % groups_per_row) * kGroup;
    key0 = column0;
    batch_index = b;
#endif
    const RequestExtent extent = b >= 0 ? request_extent(p, b) : RequestExtent{0, 0, 0, 0};
    for (int c = lane; c < kGroup * kChunksPerKey; c += 32) {
      const int k = c / kChunksPerKey, part = c % kChunksPerKey;
      const i64 key = key0 + k;
      uint4 value = make_uint4(0u, 0u, 0u, 0u);
      if (key >= 0 && key < extent.kv_len)
        value = *reinterpret_cast<const uint4*>(v +
                                                token_offset(p.v_batch_stride, p.v_token_stride, p.v_head_stride, b,
                                                             extent.kv_begin + static_cast<int>(key), kv_head) +
                                                16 * part);
      *reinterpret_cast<uint4*>(&staged[warp][k][16 * part]) = value;
    }
    __syncwarp();
    // Lane: 4 columns (4q .. 4q + 3) of rows lane / 8, + 4, + 8, ...
    const int q = lane % 8;
    u8* const out = vt + (static_cast<i64>(batch_index) * kv_heads + kv_head) * kHeadDim * vt_keys + column0 + 4 * q;
    for (int row = lane / 8; row < kHeadDim; row += 4) {
      u32 word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) word |= static_cast<u32>(staged[warp][e4m3_key_of_slot(4 * q + e)][row]) << (8 * e);
      *reinterpret_cast<u32*>(out + row * vt_keys) = word;
    }
    __syncwarp();  // the staging buffer is refilled for the next group
  }
}

}  // namespace sm90a_transpose
}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(128)
    tsattn_transpose_v(const __grid_constant__ TsattnPrefillParams params, tsattn_dev::u8* vt, long long vt_keys) {
  tsattn_dev::sm90a_transpose::transpose_v(params, vt, vt_keys);
}

#endif  // TSATTN_SM90A_TRANSPOSE_V_CUH
