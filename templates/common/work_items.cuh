// common/work_items.cuh - the scheduler's work list as both kernel families read it
// (prefill_params.h, "The scheduler's work"; the item order is common/item_order.cuh), taken by
// persistent CTAs as blockIdx.x, blockIdx.x + gridDim.x, ...
#ifndef TSATTN_COMMON_WORK_ITEMS_CUH
#define TSATTN_COMMON_WORK_ITEMS_CUH

#include "common/item_order.cuh"
#include "common/prelude.cuh"
#include "common/request.cuh"
#include "prefill_params.h"

namespace tsattn_dev {

struct WorkList {
  i64 items;                 // tiles * heads
  i64 tiles;                 // entries of the tile list
  i64 implicit_per_request;  // fixed layout: query tiles per request
  int heads;
  int group;            // query heads per kv head (>= 1)
  int tiles_per_chunk;  // >= 1, and tiles_per_chunk * heads < 2^31 (the host clamps it)
};

template <int kBlockM>
__device__ __forceinline__ WorkList work_list(const TsattnPrefillParams& p) {
  WorkList list;
  list.heads = max(p.num_qo_heads, 0);
  // 64-bit so that no count overflows.
  list.implicit_per_request = (static_cast<i64>(max(p.q_tokens, 0)) + kBlockM - 1) / kBlockM;
  const i64 num_tiles = p.tiles ? static_cast<i64>(max(*p.num_tiles, 0)) : list.implicit_per_request * max(p.batch, 0);
  list.tiles = num_tiles;
  list.items = num_tiles * list.heads;
  list.group = max(p.group_size, 1);
  list.tiles_per_chunk = max(p.tiles_per_chunk, 1);
  return list;
}

struct WorkItem {
  int request;  // b
  int q_tile;   // rows q_tile * BLOCK_M ..
  int head;     // query head
  RequestExtent extent;
};

// An implicit list's tile index as its request and the number of whole rounds of requests before it.
struct ImplicitSplit {
  i64 request, round;
};

// The item of list tile `tile_index` and query head head_of(); false when the entry does nothing.
// Tiles come from the library's own planners; the checks only make a corrupt entry do nothing
// instead of addressing outside the tensors. The result is uniform over the CTA. split_implicit(i)
// gives the implicit list's ImplicitSplit of tile i; kCheckHead: the head may lie past the last
// (a chunked decode of a corrupt entry).
template <int kBlockM, bool kCheckHead, class Index, class HeadOf, class SplitImplicit>
__device__ __forceinline__ bool item_at(const TsattnPrefillParams& p, const WorkList& list, Index tile_index,
                                        HeadOf head_of, SplitImplicit split_implicit, WorkItem& item) {
  TsattnTile tile;
  if (p.tiles) {
    tile = p.tiles[tile_index];
  } else {
    // The implicit list: q_tile descending (the last tiles of a causal request see the most keys).
    const ImplicitSplit split = split_implicit(tile_index);
    tile.request = static_cast<int>(split.request);
    tile.q_tile = static_cast<int>(list.implicit_per_request - 1 - split.round);
  }
  if (tile.request < 0 || tile.request >= p.batch || tile.q_tile < 0 || (kCheckHead && head_of() >= list.heads))
    return false;
  item.request = tile.request;
  item.q_tile = tile.q_tile;
  item.head = head_of();
  item.extent = request_extent(p, tile.request);
  return static_cast<i64>(tile.q_tile) * kBlockM < item.extent.q_len;
}

// Decodes item w. kChunked false: one tile per chunk whatever tiles_per_chunk says (query head
// w % heads of tile w / heads), for kernels whose key loop the chunk arithmetic slows down (such a
// module exports tsattn_chunked_order = 0, and the host plans one tile per chunk). kNarrow: the
// caller knows list.items < 2^31, so the index arithmetic runs in 32 bits, unsigned.
template <int kBlockM, bool kChunked = true, bool kNarrow = false>
__device__ __forceinline__ bool work_item(const TsattnPrefillParams& p, const WorkList& list, i64 w, WorkItem& item) {
  // Narrow: unsigned, since every index is >= 0 and u32 divisions are cheaper than int ones.
  using Index = typename Select<kNarrow, u32, i64>::type;
  ItemPlace place = {0, 0};
  if constexpr (kChunked)
    place = item_place<Index>(static_cast<Index>(w), list.tiles, list.heads, list.group, list.tiles_per_chunk);
  const Index tile_index = kChunked ? static_cast<Index>(place.tile_index) : static_cast<Index>(w) / list.heads;
  const auto split = [&](Index i) {
    return ImplicitSplit{static_cast<i64>(i % p.batch), static_cast<i64>(i / p.batch)};
  };
  if constexpr (kChunked)
    return item_at<kBlockM, true>(
        p, list, tile_index, [head = place.head] { return head; }, split, item);
  else
    return item_at<kBlockM, false>(
        p, list, tile_index, [&] { return static_cast<int>(w % list.heads); }, split, item);
}

// The same for the 32-bit chunked walk, with the launch's divisors made once (item_divisors, and
// the batch's): no hardware division on the decoding warp's path.
template <int kBlockM>
__device__ __forceinline__ bool work_item(const TsattnPrefillParams& p, const WorkList& list,
                                          const ItemDivisors& divisors, const FastDivisor& batch, u32 w,
                                          WorkItem& item) {
  const ItemPlace place = item_place(w, divisors);
  const auto split = [&](u32 i) {
    const u32 round = fast_divide(i, batch);
    return ImplicitSplit{static_cast<i64>(i - round * batch.d), static_cast<i64>(round)};
  };
  return item_at<kBlockM, true>(
      p, list, static_cast<u32>(place.tile_index), [head = place.head] { return head; }, split, item);
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_WORK_ITEMS_CUH
