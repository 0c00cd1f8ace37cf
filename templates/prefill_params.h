// prefill_params.h - the one host/device ABI of the prefill kernels.
//
// Included by host C++ (src/) and embedded into every generated kernel source (NVRTC, no
// include directories), so it uses plain C types only. The kernel takes it by value as a
// __grid_constant__ parameter.
// Bump TSATTN_PARAMS_VERSION with any change to these structs: it is serialized into every
// launch and its text is part of every cache key.
#ifndef TSATTN_PREFILL_PARAMS_H
#define TSATTN_PREFILL_PARAMS_H

#define TSATTN_PARAMS_VERSION 8

// One query tile: rows q_tile*BLOCK_M .. of request `request` (q_tile*2*BLOCK_M .. when
// TsattnPrefillParams::pair_tiles is set: a tile pair's entry).
struct TsattnTile {
  int request;
  int q_tile;
};

// The values of a packed list's state word (TsattnPrefillParams::tiles).
#define TSATTN_LIST_EMPTY 0
#define TSATTN_LIST_BUILDING 1
#define TSATTN_LIST_READY 2

struct TsattnPrefillParams {
  // Attention tensors as [batch][token][head][d], d contiguous. Strides are in elements.
  // Element (b, t, h, d) of request b: base + b*batch_stride + (token_offset(b) + t)*token_stride
  // + h*head_stride + d, where token_offset(b) is indptr[b] (packed layout) or 0 (fixed layout).
  // The packed layout has no batch dimension: every batch stride (bounds included) is 0 there.
  const void* q;
  const void* k;
  const void* v;
  void* out;
  long long q_batch_stride, q_token_stride, q_head_stride;
  long long k_batch_stride, k_token_stride, k_head_stride;
  long long v_batch_stride, v_token_stride, v_head_stride;
  long long out_batch_stride, out_token_stride, out_head_stride;

  // Packed layout: int32 [batch+1] on the device. Values are clamped to [0, q_tokens] /
  // [0, kv_tokens] and made non-decreasing before use, so malformed indptrs passed under graph
  // capture (never validated on the host) cannot move any access out of bounds.
  const int* qo_indptr;
  const int* kv_indptr;
  // Fixed layout: Sq and Sk. Packed layout: total_q and total_k (the tensors' extents).
  int q_tokens;
  int kv_tokens;
  int batch;

  int num_qo_heads;
  int group_size;   // query heads per kv head: kv head = qo head / group_size
  int window_left;  // causal window specs only: >= 1, clamped by the host to kv_tokens

  // Variable-window specs only: int32 bounds, element (b, i) at
  // base + b*batch_stride + (qo_token_offset(b) + i)*row_stride. Inclusive; clamped to [0, Sk).
  const int* window_starts;
  const int* window_ends;
  long long starts_batch_stride, starts_row_stride;
  long long ends_batch_stride, ends_row_stride;

  float scale_log2;  // sm_scale * log2(e): scores go through exp2
  float output_scale;

  // The scheduler's work: items w in [0, num_tiles * num_qo_heads), one (tile, query head) each,
  // in chunks of tiles_per_chunk consecutive tiles x all heads; inside a chunk kv head by kv head,
  // then tile, then the query heads of the group (common/work_items.cuh decodes it). Items that
  // share K/V are adjacent, so they run at the same time on neighbouring CTAs and read K/V through
  // L2; the host picks the chunk (plan/work_order.hpp). Tiles come heaviest first. Persistent
  // CTAs (or CTA pairs: slots) take slots blockIdx.x, blockIdx.x + gridDim.x, ... in turn, or,
  // when work_counter is set, claim the next slot from it whenever they need one (see below).
  // tiles == 0 (fixed layout): the implicit list of batch * ceil(q_tokens / BLOCK_M) tiles in
  // q_tile-descending order (the last tiles of a causal request see the most keys), then request.
  // Otherwise tiles[0 .. *num_tiles) in device memory, from the host or the device planner, or
  // built by the kernel itself. The int after *num_tiles is then the list's state word, read in
  // dynamic order only: TSATTN_LIST_EMPTY, the first CTA to take it (TSATTN_LIST_BUILDING) builds
  // the list; TSATTN_LIST_READY, it is in memory. The launch's last claim sets it back to empty
  // (plan/list_in_kernel.cuh).
  const TsattnTile* tiles;
  const int* num_tiles;
  int tiles_per_chunk;  // >= 1; tiles_per_chunk * num_qo_heads < 2^31
  // The sm90a CTA-pairs kernel only (0 elsewhere): 0, the two CTAs of a cluster take query heads
  // 2k and 2k + 1 of one tile (even GQA groups); 1, pairs along query tiles: every tile of the
  // list (implicit or planned) is 2 * BLOCK_M rows, and cluster rank r takes its r-th BLOCK_M rows
  // (MHA and odd groups). The item order, chunks and planners then count in those tiles.
  int pair_tiles;
  // Dynamic order (sm90a kernels with tsattn_dynamic_order = 1; null elsewhere): a 64-bit counter
  // in device memory, zero at launch and private to it. Each CTA (pair) claims its next slot with
  // atomicAdd(work_counter, 1) and stops at the first claim past the list, so items of unequal
  // cost (causal, windows, ragged batches) end together instead of by the static turn's luck. The
  // launch's last claim sets it back to zero, so memory that stays with the launches (a plan's
  // workspace) is zeroed once, not before every launch.
  unsigned long long* work_counter;
  // Split tail (sm90a modules with tsattn_split_partial_bytes > 0: 16-bit dense D128, fixed
  // layout; only in the static order; 0 and null elsewhere). All slots cost the same there, so the
  // static turn's last round leaves walkers idle whenever the slots are not a multiple of the
  // walkers W (CTAs, or CTA pairs). split_slots = F (W <= F < 2 W, slots - F a multiple of W) hands
  // the last F slots out by key tiles instead (common/split_tail.cuh): walker w takes tiles
  // [w F n / W, (w + 1) F n / W) of those slots' F x n (n per slot), so a slot may be cut in two
  // parts, at the end of a walker's share and at the start of the next walker's. Each part writes
  // its unnormalized O, row maxima and row sums to split_partials (tsattn_split_partial_bytes per
  // boundary b (1 .. W - 1), CTA of the cluster and part (0: the slot's first keys, 1: the rest))
  // and counts itself on split_flags (int, per boundary, CTA and consumer warp: W x CTAs x 8,
  // zeroed before the launch); the second to arrive merges both and writes the output.
  int split_slots;
  int* split_flags;
  float* split_partials;

  // Log-sum-exp output (kernels generated with TSATTN_LSE 1, launched exactly when lse is not
  // null). fp32, element (b, i, h) at lse + b*lse_batch_stride + (qo_token_offset(b) +
  // i)*lse_token_stride + h*lse_head_stride: the natural log of the sum of exp(sm_scale * q.k) over
  // the row's visible keys, -inf for a row that sees none. Only the host and those kernels declare
  // these fields: the driver copies a parameter at the size its kernel declares, so a kernel
  // without lse reads the host's struct up to split_partials, and the parameters after the struct
  // (the device planner's, the V^T transpose's) keep the offsets they have without lse.
#if !defined(TSATTN_LSE) || TSATTN_LSE
  float* lse;
  long long lse_batch_stride, lse_token_stride, lse_head_stride;
#endif
};

// The sm90a family's second kernel parameter: TMA descriptors (the driver's opaque CUtensorMap,
// filled by cuTensorMapEncodeTiled; 128 bytes, 128-byte aligned as CUDA 13's cuda.h declares it)
// for q, k and v. Each is a rank-4 map {d, head, token, batch} of 16-bit elements with 128-byte
// swizzle and box {64, 1, rows, 1} (rows = BLOCK_M for q, BLOCK_N for k and v); the packed layout
// has batch extent 1. Out-of-range boxes are zero-filled by the hardware.
// o, for kernels that store their output through TMA (TSATTN_TMA_OUTPUT), maps out the same way,
// in the output dtype, with box {64, 1, 16, 1} (one consumer warp's rows); stores skip the rows
// past the map's tokens. Other kernels get it zeroed and never read it.
struct TsattnTmaDescriptor {
  alignas(128) unsigned long long opaque[16];
};

// Paged kernels (generated with TSATTN_PAGED_KV 1): K and V stay in their page pools, and k and v
// map a pool as {d, head, slot, page} with box {64, 1, page_size, 1}: one box is one page. Key j of
// request b is slot j % page_size of page page_indices[page_indptr[b] + j / page_size] (page_size =
// 2^page_shift, at most 128 and a divisor of the paged kernels' 128-key tiles, so a tile is whole
// pages). Table values may never have been checked (GPU tables): indptr entries and page-table
// indices are clamped to [0, entries] and page ids to [0, num_pages), so no load leaves the tables
// or the pools; the keys themselves come from kv_indptr (the page scan's prefix sums).

struct TsattnPageTable {
  const int* page_indptr;   // [batch + 1]
  const int* page_indices;  // [entries]
  int entries;
  int num_pages;
  int page_shift;  // 4, 5, 6 or 7
};

struct TsattnTensorMaps {
  TsattnTmaDescriptor q;
  TsattnTmaDescriptor k;
  TsattnTmaDescriptor v;
  TsattnTmaDescriptor o;
  // Declared by the host and by paged kernels only; the others read the maps up to o (the driver
  // copies a parameter at the size its kernel declares).
#if !defined(TSATTN_PAGED_KV) || TSATTN_PAGED_KV
  TsattnPageTable pages;
#endif
};

// e4m3 inputs on the sm90a family: 8-bit wgmma reads its B operand only K-major, so O += P V
// needs V^T. Before the attention kernel, tsattn_transpose_v (sm90a/transpose_v.cuh) writes V^T
// into a workspace of bytes [batch][kv head][d][keys] (the packed layout has batch 1), and maps.v
// is a rank-4 map {key, d, kv head, batch} of it with box {128, D, 1, 1}. Within every 32-key
// group the keys are permuted (sm90a/wgmma.cuh, e4m3_key_of_slot). A request's keys start at a
// multiple of 32 so that groups and TMA coordinates (multiples of 16 bytes) line up:
//   fixed layout: key j of every batch entry at column j; keys per row: TSATTN_VT_FIXED_KEYS(Sk)
//   packed layout: key j of request b at column TSATTN_VT_PACKED_START(kv_begin of b, b) + j,
//   where kv_begin is the sanitized kv_indptr[b]; keys per row: TSATTN_VT_PACKED_START(total_k,
//   batch). Starts grow by at least the request's length (ceil(x / 32) >= ceil(y / 32) +
//   (x - y - 31) / 32), so requests never overlap; columns of no request hold zeros.
#define TSATTN_VT_FIXED_KEYS(kv_tokens) ((((kv_tokens) + 31) / 32) * 32)
#define TSATTN_VT_PACKED_START(kv_begin, request) (32 * (((kv_begin) + 31) / 32 + (request)))

#endif  // TSATTN_PREFILL_PARAMS_H
