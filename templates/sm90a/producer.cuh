// sm90a/producer.cuh - the producer warp: one elected lane issues every TMA load of the CTA's
// items, Q into its buffer and each key tile's K and V into the 2-stage rings. Paged kernels load
// a key tile page by page instead, one lane per page (load_paged_kv_tiles).
#ifndef TSATTN_SM90A_PRODUCER_CUH
#define TSATTN_SM90A_PRODUCER_CUH

#include "sm90a/tile_scheduler.cuh"

namespace tsattn_dev {
namespace sm90a {

// Claims `stage` of the ring whose full/empty barriers start at index full0/empty0: waits until
// the consumers released it (producer parity) and announces the stage's bytes on its full
// barrier, whose address it returns for the loads.
__device__ __forceinline__ u32 claim_stage(u32 bars, u32 full0, u32 empty0, u32 stage, u32 empty_parity, u32 bytes) {
  wait_phase(bars + 8 * (empty0 + stage), empty_parity);
  mbarrier_arrive_expect_tx(bars + 8 * (full0 + stage), bytes);
  return bars + 8 * (full0 + stage);
}

// One K (or 16-bit V) tile, keys token .. token + BLOCK_N - 1 of a {d, head, token, batch} map:
// D / kSlabElements boxes of kSlabElements x BLOCK_N (paged kernels: one page of a {d, head, slot,
// page} map, the box a page's rows). In a CTA pair this CTA loads the slabs s with s % 2 == its
// rank, into both CTAs.
template <u32 kCtas>
__device__ __forceinline__ void load_kv_tile(const TsattnTmaDescriptor& map, u32 dst, u32 full_bar, int kv_head,
                                             int token, int batch) {
#pragma unroll
  for (int s = 0; s < kSlabs; ++s) {
    if constexpr (kCtas == 1)
      tma_load_4d(dst + s * kKvSlabBytes, map, full_bar, kSlabElements * s, kv_head, token, batch);
    else if (s % 2 == static_cast<int>(cluster_ctarank()))
      tma_load_4d_multicast(dst + s * kKvSlabBytes, map, full_bar, kSlabElements * s, kv_head, token, batch, 0x3);
  }
}

// One V^T tile (e4m3), columns column .. column + BLOCK_N - 1 of the {key, d, head, batch} map:
// kVtSlabs boxes of 128 keys x D rows (the last may reach past the tile; those keys go unused).
__device__ __forceinline__ void load_vt_tile(const TsattnTmaDescriptor& map, u32 dst, u32 full_bar, int kv_head,
                                             int column, int batch) {
#pragma unroll
  for (int s = 0; s < kVtSlabs; ++s)
    tma_load_4d(dst + s * kVtSlabBytes, map, full_bar, column + 128 * s, 0, kv_head, batch);
}

// The V^T column of key 0 of the item's request (prefill_params.h).
__device__ __forceinline__ int vt_first_column(const WorkItem& item) {
#if TSATTN_PACKED
  return TSATTN_VT_PACKED_START(item.extent.kv_begin, item.request);
#else
  (void)item;
  return 0;
#endif
}

#if TSATTN_PAGED_KV
// One K or V tile of a paged kernel: the leader claims the stage (its ring's barriers start at
// full0 / empty0), then every lane with a box loads that box's slabs (in a CTA pair, this CTA's
// half of them, multicast into both) to dst, the lane's rows of the stage.
template <u32 kCtas>
__device__ __forceinline__ void load_paged_tile(const TsattnTmaDescriptor& map, u32 dst, u32 bars, u32 full0,
                                                u32 empty0, u32 stage, u32 parity, bool leader, bool has_box,
                                                int kv_head, int slot, int page) {
  if (leader) claim_stage(bars, full0, empty0, stage, parity, kKStageBytes);
  __syncwarp();  // the stage is free before any lane loads into it
  if (has_box) load_kv_tile<kCtas>(map, dst, bars + 8 * (full0 + stage), kv_head, slot, page);  // {slot, page}
}

// Paged kernels: the K and V tiles of one item, key tile by key tile. Lane b looks up page b of the
// tile (one box: TsattnPageTable) a tile ahead, so the table reads overlap the previous
// tile's waits; then K's tile and V's (load_paged_tile). Keys past the request's end (a tile that
// crosses it) read whatever page the entries after its own name, clamped to the tables and the
// pool, as the packed layout reads the next request's rows: their scores are masked and their V
// rows zeroed (sm90a/mainloop.cuh). Paged kernels are those whose producer keeps 40 registers
// (codegen/spec_table.cpp). Returns kv_uses past the item's tiles.
template <u32 kCtas>
__device__ __forceinline__ u32 load_paged_kv_tiles(const TsattnPrefillParams& params, const TsattnTensorMaps& maps,
                                                   u32 smem, u32 bars, const WorkItem& item, const KeyTiles& tiles,
                                                   u32 kv_uses, int lane, bool leader) {
  const TsattnPageTable& pages = maps.pages;
  const int kv_head = item.head / max(params.group_size, 1);
  // Key j of the request is paged key first * page_size + j: its entry is the paged key's high bits
  // and its slot the low ones (entries * page_size <= 2^31 leaves room for 2^31 keys in 32 bits:
  // paged_keys_fit in plan/tensor_maps.hpp).
  const u32 first = static_cast<u32>(min(max(__ldg(pages.page_indptr + item.request), 0), pages.entries));
  const bool has_box = lane < (kBlockN >> pages.page_shift) && pages.entries > 0;
  static_assert(kKStageBytes == kVStageBytes, "16-bit K and V stages are alike: one offset and byte count");
  const u32 end = kv_uses + static_cast<u32>(tiles.num_tiles);
  // The table entry of a lane's box (clamped to the table); its page is read one tile ahead.
  const auto entry_of = [&](u32 paged_key) {
    return pages.page_indices + min(paged_key >> pages.page_shift, static_cast<u32>(pages.entries - 1));
  };
  u32 key = (first << pages.page_shift) + static_cast<u32>(tiles.first_key + (lane << pages.page_shift));
  int next_page = has_box && kv_uses < end ? __ldg(entry_of(key)) : 0;
  for (; kv_uses < end; ++kv_uses, key += kBlockN) {
    const int page = min(max(next_page, 0), pages.num_pages - 1);
    if (has_box && kv_uses + 1 < end) next_page = __ldg(entry_of(key + kBlockN));
    const u32 stage = kv_uses % kStages, parity = ((kv_uses / kStages) & 1) ^ 1;
    const int slot = static_cast<int>(key & ((1u << pages.page_shift) - 1));
    const u32 offset = stage * kKStageBytes + (static_cast<u32>(lane) << pages.page_shift) * 128u;
    // K first, then V, as the consumers release them: V's stage frees a GEMM later.
    load_paged_tile<kCtas>(maps.k, smem + kKOffset + offset, bars, kKFull, kKEmpty, stage, parity, leader, has_box,
                           kv_head, slot, page);
    load_paged_tile<kCtas>(maps.v, smem + kVOffset + offset, bars, kVFull, kVEmpty, stage, parity, leader, has_box,
                           kv_head, slot, page);
  }
  return kv_uses;
}
#endif

template <u32 kCtas>
__device__ __forceinline__ void produce(const TsattnPrefillParams& params, const TsattnTensorMaps& maps, u32 smem,
                                        u32 bars) {
  const int lane = threadIdx.x % 32;
  const bool leader = elect_one_sync();
  const int group_size = params.group_size > 0 ? params.group_size : 1;
  u32 q_uses = 0, kv_uses = 0;
  ItemWalk<kCtas, true> walk(params);
  WorkItem item;
  while (walk.next(params, smem, bars, item)) {
    const KeyTiles tiles = walk.key_tiles(params, item, lane);
    if (tiles.num_tiles == 0) continue;  // the consumers write zeros without Q or K/V
    if (leader) {
      const int batch = batch_coord(item);
      const int q_token = item.extent.q_begin + item.q_tile * kBlockM;
      const u32 qb = q_uses % kQBuffers, q_full = bars + 8 * (kQFull + qb);
      wait_phase(bars + 8 * (kQEmpty + qb), ((q_uses / kQBuffers) & 1) ^ 1);
      mbarrier_arrive_expect_tx(q_full, kQBytes);
#pragma unroll
      for (int s = 0; s < kSlabs; ++s)
        tma_load_4d(smem + kQOffset + qb * kQBytes + s * kQSlabBytes, maps.q, q_full, kSlabElements * s, item.head,
                    q_token, batch);
      const int kv_head = item.head / group_size;
      if constexpr (!kPagedKv) {
        for (int t = 0; t < tiles.num_tiles; ++t, ++kv_uses) {
          const u32 stage = kv_uses % kStages, parity = ((kv_uses / kStages) & 1) ^ 1;
          const int key = tiles.first_key + t * kBlockN;
          const u32 k_dst = smem + kKOffset + stage * kKStageBytes, v_dst = smem + kVOffset + stage * kVStageBytes;
          load_kv_tile<kCtas>(maps.k, k_dst, claim_stage(bars, kKFull, kKEmpty, stage, parity, kKStageBytes), kv_head,
                              item.extent.kv_begin + key, batch);
          const u32 v_full = claim_stage(bars, kVFull, kVEmpty, stage, parity, kVStageBytes);
          if constexpr (kE4m3Inputs)
            load_vt_tile(maps.v, v_dst, v_full, kv_head, vt_first_column(item) + key, batch);
          else
            load_kv_tile<kCtas>(maps.v, v_dst, v_full, kv_head, item.extent.kv_begin + key, batch);
        }
      }
    } else if constexpr (!kPagedKv) {
      kv_uses += tiles.num_tiles;
    }
#if TSATTN_PAGED_KV
    kv_uses = load_paged_kv_tiles<kCtas>(params, maps, smem, bars, item, tiles, kv_uses, lane, leader);
#endif
    ++q_uses;
    __syncwarp();  // the other lanes wait for the leader before the next item's shuffles
  }
}

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_PRODUCER_CUH
