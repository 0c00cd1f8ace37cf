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

// Division by a divisor fixed for the launch, as a multiply-high, an add and a shift (the round-up
// method: m = floor(2^32 (2^s - d) / d) + 1, s = ceil(log2 d)); exact for n < 2^31 and
// 1 <= d < 2^31 (d = 0 divides by 1). A hardware u32 division is a float reciprocal and two
// conversions, about 15 dependent instructions, and the sm90a consumers decode at each item's
// start with no GEMM of their own in flight (docs/PERF.md, serving step 8).
struct FastDivisor {
  u32 d, m, s;
};

__host__ __device__ inline FastDivisor fast_divisor(u32 d) {
  FastDivisor f;
  f.d = d > 0 ? d : 1;
  f.s = 0;
  while ((1ull << f.s) < f.d) ++f.s;
  f.m = static_cast<u32>(((1ull << 32) * ((1ull << f.s) - f.d)) / f.d + 1);
  return f;
}

__host__ __device__ inline u32 fast_divide(u32 n, const FastDivisor& f) {
  const u32 high = static_cast<u32>((static_cast<u64>(f.m) * n) >> 32);
  return (high + n) >> f.s;
}

// item_place's 32-bit walk with the launch's divisors made once (item_divisors): the same places.
struct ItemDivisors {
  FastDivisor chunk_items;    // tiles_per_chunk * heads
  FastDivisor kv_items;       // tiles_per_chunk * group: the items of one kv head in a whole chunk
  FastDivisor last_kv_items;  // the same in the last chunk, which may be shorter
  FastDivisor group;
  u32 tiles_per_chunk, last_chunk;
};

__host__ __device__ inline ItemDivisors item_divisors(i64 list_tiles, int heads, int group, int tiles_per_chunk) {
  ItemDivisors d;
  const u32 tiles = static_cast<u32>(list_tiles), per_chunk = static_cast<u32>(tiles_per_chunk);
  d.tiles_per_chunk = per_chunk;
  d.last_chunk = tiles > 0 ? (tiles - 1) / per_chunk : 0;
  d.chunk_items = fast_divisor(per_chunk * static_cast<u32>(heads));
  d.kv_items = fast_divisor(per_chunk * static_cast<u32>(group));
  d.last_kv_items = fast_divisor((tiles - d.last_chunk * per_chunk) * static_cast<u32>(group));
  d.group = fast_divisor(static_cast<u32>(group));
  return d;
}

__host__ __device__ inline ItemPlace item_place(u32 w, const ItemDivisors& d) {
  const u32 chunk = fast_divide(w, d.chunk_items);
  const u32 in_chunk = w - chunk * d.chunk_items.d;
  const FastDivisor& kv_items = chunk == d.last_chunk ? d.last_kv_items : d.kv_items;
  const u32 kv_head = fast_divide(in_chunk, kv_items);
  const u32 in_kv = in_chunk - kv_head * kv_items.d;
  const u32 tile_in_chunk = fast_divide(in_kv, d.group);
  ItemPlace place;
  place.tile_index = static_cast<i64>(chunk) * d.tiles_per_chunk + tile_in_chunk;
  place.head = static_cast<int>(kv_head * d.group.d + (in_kv - tile_in_chunk * d.group.d));
  return place;
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_ITEM_ORDER_CUH
