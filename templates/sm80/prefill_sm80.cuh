// sm80/prefill_sm80.cuh - the portable prefill kernel (FlashAttention-2 style): mma.sync
// m16n8k16 with fp32 accumulation, cp.async double-buffered K/V, online softmax in registers.
// Runs on every GPU from Ampere on (compiled per arch: sm_80 cubins serve Ampere and Ada).
//
// One CTA = BLOCK_M query rows of one request and one query head at a time; warp w owns rows
// [w * kRowsPerWarp, (w + 1) * kRowsPerWarp) and sweeps the key tiles that can hold a visible
// key for any row of the tile. Persistent: CTAs take work items blockIdx.x, blockIdx.x +
// gridDim.x, ... of the scheduler's list (a query tile and one head each). Math (docs/contract.md): s = q.k in fp32, p
// = exp2(s * scale_log2 - m), running max m and sum l per row in fp32, O in fp32, out = O * output_scale / l; a row
// that sees no key writes exactly 0. Kernels generated with TSATTN_LSE 1 also write each row's
// log-sum-exp (common/lse.cuh); the others have no lse code.
//
// Barriers (all CTA-uniform; every buffer is rewritten only after a barrier that follows its
// last read):
//   item start   reduce_tile_range's first barrier: the previous work item is done with everything.
//   key tile t   cp.async.wait_group 0 + barrier: tile t (and Q) landed for all threads, and
//                every warp finished tile t - 1, whose stage the prefetch of t + 1 overwrites.
//                e4m3 inputs: one more barrier after widening tile t into the f16 K/V buffers.
//   epilogue     warp-local (__syncwarp): a warp stages O over its own Q rows only.
//
// Entry point of the generated translation unit (see sm80/config.cuh for the #defines).
#ifndef TSATTN_SM80_PREFILL_SM80_CUH
#define TSATTN_SM80_PREFILL_SM80_CUH

#include "common/mask.cuh"
#include "common/mma_sm80.cuh"
#include "common/prelude.cuh"
#include "common/request.cuh"
#include "common/work_items.cuh"
#include "prefill_params.h"
#include "sm80/config.cuh"
#include "sm80/tile_io.cuh"
#if TSATTN_LSE
#include "common/lse.cuh"
#endif

#ifndef TSATTN_KERNEL_NAME
#error "the generated source must define TSATTN_KERNEL_NAME"
#endif

static_assert(TSATTN_PARAMS_VERSION == 8, "sm80 kernel written against TsattnPrefillParams v8");

// Launch shape, read by the host with cuModuleGetGlobal after loading the module.
extern "C" __device__ const int tsattn_dynamic_smem_bytes = tsattn_dev::sm80::kSmemBytes;
extern "C" __device__ const int tsattn_threads_per_cta = tsattn_dev::sm80::kThreads;
extern "C" __device__ const int tsattn_block_m = TSATTN_BLOCK_M;
// 1: the kernel decodes the work list in chunks of params.tiles_per_chunk tiles (work_item's default).
extern "C" __device__ const int tsattn_chunked_order = 1;
// The sm90a settings this family does not have: every module defines every global the host reads.
extern "C" __device__ const int tsattn_dynamic_order = 0;
extern "C" __device__ const int tsattn_split_partial_bytes = 0;
extern "C" __device__ const int tsattn_max_cluster_size = 1;
extern "C" __device__ const int tsattn_pairs_along_tiles = 0;
extern "C" __device__ const int tsattn_list_in_kernel_max_batch = 0;

namespace tsattn_dev {
namespace sm80 {

constexpr int kNTiles = kBlockN / 8;   // n8 score tiles per row tile
constexpr int kDTiles = kHeadDim / 8;  // n8 output tiles per row tile

// The CTA-wide key range of one work item (a query tile and head): keys outside
// [first_key, last_key] are invisible to every row, so those tiles are skipped; a key tile
// inside [full_from, full_to] is visible to every row, so it needs no element mask.
struct TileRange {
  int first_key;  // min over rows of lo (kEmptyLo when no row sees a key)
  int last_key;   // max over rows of hi
  int full_from;  // max over rows of lo (kEmptyLo if a row sees nothing)
  int full_to;    // min over rows of hi (kEmptyHi if a row sees nothing)
};

// Reduces each thread's rows' key ranges over the CTA, and publishes every row's range in
// shared memory (row_ranges, read back by apply_mask: keeping them in registers for the whole
// key loop costs 4 per row tile that D = 256 cannot spare). Rows at or past q_len take no part
// in the reduction (they are never written; their zero Q rows give finite scores either way)
// and read back as empty. Starts with a barrier: the scratch words, row_ranges and every tile
// buffer may still be in use by the previous work item.
__device__ __forceinline__ TileRange reduce_tile_range(const KeyRange (&rows)[kMTiles][2],
                                                       const bool (&row_valid)[kMTiles][2], KeyRange* row_ranges,
                                                       int* scratch, int warp, int lane) {
  int first = kEmptyLo, last = kEmptyHi, full_from = -0x7FFFFFFF - 1, full_to = 0x7FFFFFFF;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row_valid[mt][h]) {
        first = min(first, rows[mt][h].lo);
        last = max(last, rows[mt][h].hi);
        full_from = max(full_from, rows[mt][h].lo);
        full_to = min(full_to, rows[mt][h].hi);
      }
    }
  }
  first = warp_min(first);
  last = warp_max(last);
  full_from = warp_max(full_from);
  full_to = warp_min(full_to);
  __syncthreads();
  if (lane % 4 == 0) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) row_ranges[warp * kRowsPerWarp + mt * 16 + lane / 4 + 8 * h] = rows[mt][h];
  }
  if (lane == 0) {
    scratch[4 * warp + 0] = first;
    scratch[4 * warp + 1] = last;
    scratch[4 * warp + 2] = full_from;
    scratch[4 * warp + 3] = full_to;
  }
  __syncthreads();
  TileRange t{kEmptyLo, kEmptyHi, -0x7FFFFFFF - 1, 0x7FFFFFFF};
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    t.first_key = min(t.first_key, scratch[4 * w + 0]);
    t.last_key = max(t.last_key, scratch[4 * w + 1]);
    t.full_from = max(t.full_from, scratch[4 * w + 2]);
    t.full_to = min(t.full_to, scratch[4 * w + 3]);
  }
  return t;
}

// Per-lane ldmatrix row and chunk (see fragment_address in sm80/config.cuh). Lane roles
// (common/mma_sm80.cuh): Q as the row-major A operand: matrices (rows 0-7 | 8-15) x
// (d 0-7 | 8-15); V rows (keys = the k dimension) through .trans: (keys 0-7, d 0-7),
// (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15) - the same lane -> (row, chunk)
// map as Q, so both share one offset. K rows as the col-major B operand: (keys 0-7, d 0-7),
// (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15).
struct FragmentOffsets {
  u32 qv;  // from the warp's first Q row / the key tile's first V row
  u32 k;   // from the key tile's first K row
};

__device__ __forceinline__ FragmentOffsets fragment_offsets(int lane) {
  return {lane_offset(lane % 16, lane / 16), lane_offset((lane % 8) + (lane / 16) * 8, (lane / 8) % 2)};
}

// S = Q K^T for this warp's rows against one key tile (fp32 accumulators, zeroed here).
// Q fragments come from shared memory per 16-wide d step (keeping Q out of registers leaves
// room for the D/2 * kMTiles output accumulators at D = 256).
__device__ __forceinline__ void compute_scores(float (&s)[kMTiles][kNTiles][4], u32 q_warp, u32 k_tile,
                                               const FragmentOffsets& f) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;

  const u32 q_lane = q_warp + f.qv;
  const u32 k_lane = k_tile + f.k;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    u32 a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(a[mt], fragment_address(q_lane, kk) + mt * 16 * kRowBytes);
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      u32 b[4];
      ldmatrix_x4(b, fragment_address(k_lane, kk) + np * 16 * kRowBytes);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816<kBf16Mma>(s[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<kBf16Mma>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// O += P V for one key tile; P comes straight from the score registers (the m16n8 accumulator
// layout of two adjacent n8 tiles is the m16k16 A-operand layout), rounded to the MMA's type.
__device__ __forceinline__ void accumulate_pv(float (&o)[kMTiles][kDTiles][4], const float (&p)[kMTiles][kNTiles][4],
                                              u32 v_tile, const FragmentOffsets& f) {
  const u32 v_lane = v_tile + f.qv;
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    u32 a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const float(&p0)[4] = p[mt][2 * kk];
      const float(&p1)[4] = p[mt][2 * kk + 1];
      constexpr int kMmaDtype = kBf16Mma ? kBfloat16 : kFloat16;
      a[mt][0] = pack_pair<kMmaDtype>(p0[0], p0[1]);
      a[mt][1] = pack_pair<kMmaDtype>(p0[2], p0[3]);
      a[mt][2] = pack_pair<kMmaDtype>(p1[0], p1[1]);
      a[mt][3] = pack_pair<kMmaDtype>(p1[2], p1[3]);
    }
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      u32 b[4];
      ldmatrix_x4_trans(b, fragment_address(v_lane, dp) + kk * 16 * kRowBytes);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816<kBf16Mma>(o[mt][2 * dp], a[mt], b[0], b[1]);
        mma_16816<kBf16Mma>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Sets scores of invisible keys to -inf. Thread (g, c) holds rows g and g + 8 of each row tile,
// keys 2c and 2c + 1 of each n8 tile; n0 is the key tile's first key. `ranges` points at the
// warp's first row in row_ranges.
__device__ __forceinline__ void apply_mask(float (&s)[kMTiles][kNTiles][4], const KeyRange* ranges, int n0, int lane) {
  const float ninf = neg_inf();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const KeyRange range = ranges[mt * 16 + lane / 4 + 8 * h];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const int j = n0 + nt * 8 + 2 * (lane % 4) + (e & 1);
          if (!key_visible(range, j)) s[mt][nt][e] = ninf;
        }
    }
}

// Online softmax step for one key tile: updates the running max m (raw score units) and the
// thread-partial sum l, rescales O, and turns the scores into p in place.
// Fully masked rows (m = -inf so far): the exponent offset is taken as 0 instead of -inf, so
// p = exp2(-inf) = 0 and the rescale factor exp2(-inf - 0) = 0 (O and l are still 0), never
// exp2(-inf + inf) = NaN (FA3's Check_inf).
__device__ __forceinline__ void online_softmax(float (&s)[kMTiles][kNTiles][4], float (&o)[kMTiles][kDTiles][4],
                                               float (&m)[kMTiles][2], float (&l)[kMTiles][2], float scale_log2) {
  const float ninf = neg_inf();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float row_max = m[mt][h];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) row_max = fmaxf(row_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
      // The four threads of a quad hold the same two rows.
      row_max = fmaxf(row_max, __shfl_xor_sync(0xFFFFFFFFu, row_max, 1));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xFFFFFFFFu, row_max, 2));
      const float offset = row_max == ninf ? 0.0f : row_max * scale_log2;
      const float alpha = fast_exp2(m[mt][h] * scale_log2 - offset);
      m[mt][h] = row_max;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float pe = fast_exp2(fmaf(s[mt][nt][e], scale_log2, -offset));
          s[mt][nt][e] = pe;
          sum += pe;
        }
      }
      l[mt][h] = l[mt][h] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        o[mt][dt][2 * h] *= alpha;
        o[mt][dt][2 * h + 1] *= alpha;
      }
    }
  }
}

// Normalizes O and writes it, in the output dtype, over this warp's own Q rows (no other warp
// reads them), then copies those rows to global memory (rows past q_len skipped).
__device__ __forceinline__ void write_output(float (&o)[kMTiles][kDTiles][4], float (&l)[kMTiles][2],
                                             float output_scale, u32 q_smem, char* out_head_base, i64 out_row_bytes,
                                             int tile_row0, int q_len, int warp_row0, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mt][h];
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
      // l == 0: the row saw no key (or every p underflowed): output 0, never 0/0.
      const float inv = sum > 0.0f ? output_scale / sum : 0.0f;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        o[mt][dt][2 * h] *= inv;
        o[mt][dt][2 * h + 1] *= inv;
      }
    }
  }
  // Every lane's ldmatrix reads of these Q rows are done before any lane overwrites them.
  __syncwarp();
  const int g = lane / 4;
  const int c = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + mt * 16 + g + 8 * h;
        const u32 v = pack_pair<kOutputDtype>(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
        const u32 addr = q_smem + out_stage_offset(row, dt * 8 + 2 * c);
        if constexpr (kOutBytes == 2)
          st_shared_b32(addr, v);
        else
          st_shared_b16(addr, v);
      }
  __syncwarp();
  store_out_rows(q_smem, out_head_base, out_row_bytes, tile_row0, warp_row0, q_len, lane);
}

__device__ __forceinline__ void run_prefill(const TsattnPrefillParams& params) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // 128-byte aligned base (fragment_address relies on it; kSmemBytes has the slack).
  const u32 align_pad = (128u - (smem_u32(smem_raw) & 127u)) & 127u;
  unsigned char* smem = smem_raw + align_pad;
  const u32 smem_base = smem_u32(smem);
  const u32 q_smem = smem_base + kQOffset;
  int* scratch = reinterpret_cast<int*>(smem + kReduceOffset);
  KeyRange* row_ranges = reinterpret_cast<KeyRange*>(smem + kRangeOffset);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warp_row0 = warp * kRowsPerWarp;
  const int g = lane / 4;
  const FragmentOffsets frag = fragment_offsets(lane);

  const int group_size = params.group_size > 0 ? params.group_size : 1;
  const WorkList list = work_list<kBlockM>(params);

  for (i64 w = blockIdx.x; w < list.items; w += gridDim.x) {
    WorkItem item;
    if (!work_item<kBlockM>(params, list, w, item)) continue;
    const int b = item.request;
    const RequestExtent req = item.extent;
    const int tile_row0 = item.q_tile * kBlockM;
    const int head = item.head;

    // Key ranges of this thread's rows (rows g and g + 8 of each of its row tiles).
    KeyRange rows[kMTiles][2];
    bool row_valid[kMTiles][2];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = tile_row0 + warp_row0 + mt * 16 + g + 8 * h;
        row_valid[mt][h] = i < req.q_len;
        rows[mt][h] = row_valid[mt][h] ? row_key_range(params, req, b, i) : KeyRange{kEmptyLo, kEmptyHi};
      }
    const TileRange range = reduce_tile_range(rows, row_valid, row_ranges, scratch, warp, lane);
    const int first_tile_key = range.first_key == kEmptyLo ? 0 : (range.first_key / kBlockN) * kBlockN;
    const int num_key_tiles = range.first_key == kEmptyLo ? 0 : (range.last_key - first_tile_key) / kBlockN + 1;

    {  // this item's head: the barrier in reduce_tile_range retired the previous item's buffers
      const int kv_head = head / group_size;
      const char* q_head =
          static_cast<const char*>(params.q) +
          token_offset(params.q_batch_stride, params.q_token_stride, params.q_head_stride, b, req.q_begin, head) *
              kInBytes;
      const char* k_head =
          static_cast<const char*>(params.k) +
          token_offset(params.k_batch_stride, params.k_token_stride, params.k_head_stride, b, req.kv_begin, kv_head) *
              kInBytes;
      const char* v_head =
          static_cast<const char*>(params.v) +
          token_offset(params.v_batch_stride, params.v_token_stride, params.v_head_stride, b, req.kv_begin, kv_head) *
              kInBytes;
      // Row strides are re-read from the (constant-bank) params where used: no live registers.
      const char* k_source = row_copy_source<kInBytes>(k_head, params.k_token_stride * kInBytes);
      const char* v_source = row_copy_source<kInBytes>(v_head, params.v_token_stride * kInBytes);

      float o[kMTiles][kDTiles][4];
      float m[kMTiles][2];
      float l[kMTiles][2];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
        m[mt][0] = m[mt][1] = neg_inf();
        l[mt][0] = l[mt][1] = 0.0f;
      }

      // Loads tile `tile` (keys first_tile_key + tile * BLOCK_N ..) into stage tile % 2.
      auto issue_kv = [&](int tile) {
        const int stage = tile & 1;
        const int n0 = first_tile_key + tile * kBlockN;
        const u32 k_dst =
            kFp8Input ? smem_base + kRawKOffset + stage * kRawTileBytes : smem_base + kKOffset + stage * kTileBytes;
        const u32 v_dst =
            kFp8Input ? smem_base + kRawVOffset + stage * kRawTileBytes : smem_base + kVOffset + stage * kTileBytes;
        load_rows_async<kBlockN, kInBytes>(k_dst, k_source, static_cast<const char*>(params.k),
                                           params.k_token_stride * kInBytes, n0, req.kv_len);
        load_rows_async<kBlockN, kInBytes>(v_dst, v_source, static_cast<const char*>(params.v),
                                           params.v_token_stride * kInBytes, n0, req.kv_len);
        cp_async_commit();
      };

      if (num_key_tiles > 0) {
        const i64 q_row_bytes = params.q_token_stride * kInBytes;
        if constexpr (kFp8Input)
          load_tile8_widen_sync<kBlockM>(q_smem, q_head, q_row_bytes, tile_row0, req.q_len);
        else
          load_rows_async<kBlockM, 2>(q_smem, row_copy_source<2>(q_head, q_row_bytes),
                                      static_cast<const char*>(params.q), q_row_bytes, tile_row0, req.q_len);
        issue_kv(0);  // one cp.async group: Q (16-bit inputs) and key tile 0
      }

      for (int tile = 0; tile < num_key_tiles; ++tile) {
        // Tile `tile` has landed for every thread, and every warp is done with tile - 1, whose
        // stage the next load overwrites: one barrier per tile covers both.
        cp_async_wait<0>();
        __syncthreads();
        if (tile + 1 < num_key_tiles) issue_kv(tile + 1);
        const int stage = tile & 1;
        u32 k_smem, v_smem;
        if constexpr (kFp8Input) {
          // Widen the landed raw tiles into the single f16 K/V buffers (free: the barrier above
          // retired tile - 1), then publish them.
          widen_tile8<kBlockN>(smem_base + kRawKOffset + stage * kRawTileBytes, smem_base + kKOffset);
          widen_tile8<kBlockN>(smem_base + kRawVOffset + stage * kRawTileBytes, smem_base + kVOffset);
          __syncthreads();
          k_smem = smem_base + kKOffset;
          v_smem = smem_base + kVOffset;
        } else {
          k_smem = smem_base + kKOffset + stage * kTileBytes;
          v_smem = smem_base + kVOffset + stage * kTileBytes;
        }

        const int n0 = first_tile_key + tile * kBlockN;
        float s[kMTiles][kNTiles][4];
        compute_scores(s, q_smem + warp_row0 * kRowBytes, k_smem, frag);
        // Element masks only where some row of the CTA tile does not see the whole key tile
        // (diagonal, window edge, ragged tail, per-row variable bounds).
        const bool full = range.full_from <= n0 && n0 + kBlockN - 1 <= range.full_to;
        if (!full) apply_mask(s, row_ranges + warp_row0, n0, lane);
        online_softmax(s, o, m, l, params.scale_log2);
        accumulate_pv(o, s, v_smem, frag);
      }

      char* out_head = static_cast<char*>(params.out) + token_offset(params.out_batch_stride, params.out_token_stride,
                                                                     params.out_head_stride, b, req.q_begin, head) *
                                                            kOutBytes;
      write_output(o, l, params.output_scale, q_smem, out_head, params.out_token_stride * kOutBytes, tile_row0,
                   req.q_len, warp_row0, lane);
#if TSATTN_LSE
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = tile_row0 + warp_row0 + mt * 16 + lane / 4 + 8 * h;
          write_row_lse(params, m[mt][h], l[mt][h], b, row, req.q_len, req.q_begin + row, head, lane % 4);
        }
#endif
    }
  }
}

}  // namespace sm80
}  // namespace tsattn_dev

extern "C" __global__ void __launch_bounds__(TSATTN_NUM_WARPS * 32)
    TSATTN_KERNEL_NAME(const __grid_constant__ TsattnPrefillParams params) {
  tsattn_dev::sm80::run_prefill(params);
}

#endif  // TSATTN_SM80_PREFILL_SM80_CUH
