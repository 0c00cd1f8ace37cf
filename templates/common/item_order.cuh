// common/item_order.cuh - the order of the scheduler's work items (prefill_params.h, "The
// scheduler's work"): item w -> (tile list index, query head). Plain integer code, __host__ too, so
// a host unit test can check the order (tests/plan/test_work_order.cpp).
//
// A chunk is `tiles_per_chunk` consecutive tiles of the list (the last chunk may be shorter) times
// every head; inside it the items go kv head by kv head, then tile, then the query heads of the
// group. Items that share K/V are thus adjacent, so the CTAs running at the same time read the
// same K/V through L2 instead of from memory; chunks keep the heaviest-first order of the list.
// The query heads of one tile and kv head stay adjacent: CTA pairs take items 2s and 2s + 1, which
// are heads 2k and 2k + 1 of one tile when the group is even.
#ifndef TSATTN_COMMON_ITEM_ORDER_CUH
#define TSATTN_COMMON_ITEM_ORDER_CUH

#include "common/prelude.cuh"

namespace tsattn_dev {

struct ItemPlace {
  i64 tile_index;
  int head;
};

// The arithmetic inside a chunk: u32 in the 32-bit walk (u32 Index), where every value is >= 0 and
// unsigned divisions take about half the instructions of signed ones; int in the 64-bit walk.
template <class Index>
struct ChunkIndex {
  typedef int type;
};
template <>
struct ChunkIndex<u32> {
  typedef u32 type;
};

// w in [0, tiles * heads); group >= 1 divides heads; tiles_per_chunk >= 1 with
// tiles_per_chunk * heads < 2^31 (the host clamps it), so everything inside a chunk is 32-bit.
// Index: i64, or u32 where the caller knows tiles * heads < 2^31 (32-bit divisions are far
// cheaper in registers and instructions).
template <class Index = i64>
__host__ __device__ inline ItemPlace item_place(Index w, i64 list_tiles, int heads, int group, int tiles_per_chunk) {
  typedef typename ChunkIndex<Index>::type In;
  const Index tiles = static_cast<Index>(list_tiles);
  const Index chunk_items = static_cast<Index>(tiles_per_chunk) * heads;
  const Index chunk = w / chunk_items;
  const In in_chunk = static_cast<In>(w - chunk * chunk_items);
  const Index chunk_first_tile = chunk * tiles_per_chunk;
  const Index tiles_left = tiles - chunk_first_tile;
  const In chunk_tiles =
      tiles_left < static_cast<Index>(tiles_per_chunk) ? static_cast<In>(tiles_left) : static_cast<In>(tiles_per_chunk);
  const In heads_per_kv = static_cast<In>(group);
  const In kv_items = chunk_tiles * heads_per_kv;  // the items of one kv head in this chunk
  const In kv_head = in_chunk / kv_items;
  const In in_kv = in_chunk - kv_head * kv_items;
  const In tile_in_chunk = in_kv / heads_per_kv;
  ItemPlace place;
  place.tile_index = chunk_first_tile + tile_in_chunk;
  place.head = static_cast<int>(kv_head * heads_per_kv + (in_kv - tile_in_chunk * heads_per_kv));
  return place;
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_ITEM_ORDER_CUH
