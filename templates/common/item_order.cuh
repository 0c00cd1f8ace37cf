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

// w in [0, tiles * heads); group >= 1 divides heads; tiles_per_chunk >= 1 with
// tiles_per_chunk * heads < 2^31 (the host clamps it), so everything inside a chunk is 32-bit.
// Index: i64, or int where the caller knows tiles * heads < 2^31 (32-bit divisions are far
// cheaper in registers and instructions).
template <class Index = i64>
__host__ __device__ inline ItemPlace item_place(Index w, i64 list_tiles, int heads, int group, int tiles_per_chunk) {
  const Index tiles = static_cast<Index>(list_tiles);
  const Index chunk_items = static_cast<Index>(tiles_per_chunk) * heads;
  const Index chunk = w / chunk_items;
  const int in_chunk = static_cast<int>(w - chunk * chunk_items);
  const Index chunk_first_tile = chunk * tiles_per_chunk;
  const Index tiles_left = tiles - chunk_first_tile;
  const int chunk_tiles = tiles_left < tiles_per_chunk ? static_cast<int>(tiles_left) : tiles_per_chunk;
  const int kv_items = chunk_tiles * group;  // the items of one kv head in this chunk
  const int kv_head = in_chunk / kv_items;
  const int in_kv = in_chunk - kv_head * kv_items;
  const int tile_in_chunk = in_kv / group;
  ItemPlace place;
  place.tile_index = chunk_first_tile + tile_in_chunk;
  place.head = kv_head * group + (in_kv - tile_in_chunk * group);
  return place;
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_ITEM_ORDER_CUH
