// test_work_order.cpp - the order of the scheduler's work items (templates/common/item_order.cuh,
// compiled here as host code) and the host's choice of chunk (plan/work_order.hpp), without a GPU:
// every (tile, head) item exactly once, chunks in list order, kv heads contiguous inside a chunk,
// the two heads of a CTA pair adjacent, and chunks of one tile giving the original order.
#include <doctest/doctest.h>

#include <limits>
#include <set>
#include <utility>

// item_order.cuh is __host__ __device__ code for NVRTC; a host compiler needs the qualifiers gone.
#define __host__
#define __device__
#include "common/item_order.cuh"
#undef __host__
#undef __device__

#include "plan/work_order.hpp"

namespace tsattn::test {
namespace {

using tsattn_dev::item_place;
using tsattn_dev::ItemPlace;

void check_order(int64_t tiles, int heads, int group, int chunk) {
  CAPTURE(tiles);
  CAPTURE(heads);
  CAPTURE(group);
  CAPTURE(chunk);
  std::set<std::pair<int64_t, int>> seen;
  ItemPlace previous{-1, -1};
  for (int64_t w = 0; w < tiles * heads; ++w) {
    CAPTURE(w);
    const ItemPlace place = item_place(w, tiles, heads, group, chunk);
    REQUIRE(place.tile_index >= 0);
    REQUIRE(place.tile_index < tiles);
    REQUIRE(place.head >= 0);
    REQUIRE(place.head < heads);
    CHECK(seen.insert({place.tile_index, place.head}).second);
    if (chunk == 1) {
      CHECK(place.tile_index == w / heads);
      CHECK(place.head == w % heads);
    }
    if (w > 0) {
      const int64_t chunk_now = place.tile_index / chunk, chunk_before = previous.tile_index / chunk;
      CHECK(chunk_now >= chunk_before);  // chunks keep the list's (heaviest-first) order
      // Inside a chunk: kv head by kv head, each kv head's tiles in list order.
      if (chunk_now == chunk_before) {
        const int kv_now = place.head / group, kv_before = previous.head / group;
        CHECK(kv_now >= kv_before);
        if (kv_now == kv_before) CHECK(place.tile_index >= previous.tile_index);
      }
    }
    // CTA pairs (even groups): items 2s and 2s + 1 are heads 2k and 2k + 1 of one tile.
    if (group % 2 == 0 && w % 2 == 1) {
      CHECK(place.tile_index == previous.tile_index);
      CHECK(place.head == previous.head + 1);
      CHECK(previous.head % 2 == 0);
    }
    previous = place;
  }
  CHECK(static_cast<int64_t>(seen.size()) == tiles * heads);
}

TEST_SUITE("plan/work_order") {
  TEST_CASE("every (tile, head) item exactly once, chunks in list order, kv heads contiguous, pairs adjacent") {
    const std::pair<int, int> head_groups[] = {{1, 1}, {8, 1}, {8, 2}, {8, 8}, {32, 4}, {6, 3}, {12, 6}};
    for (const int64_t tiles : {1, 2, 5, 16, 17, 64})
      for (const auto& [heads, group] : head_groups)
        for (const int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{16}, tiles, tiles + 5})
          check_order(tiles, heads, group, static_cast<int>(chunk));
  }

  TEST_CASE("a chunk shares K/V: with one chunk a kv head's items are all adjacent") {
    // 3 tiles, 4 heads in 2 groups of 2: kv head 0's six items come first.
    const ItemPlace expected[] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1},
                                  {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 2}, {2, 3}};
    for (int64_t w = 0; w < 12; ++w) {
      CAPTURE(w);
      const ItemPlace place = item_place(w, 3, 4, 2, 3);
      CHECK(place.tile_index == expected[w].tile_index);
      CHECK(place.head == expected[w].head);
    }
  }

  TEST_CASE("the host's chunk: the whole list for dense, 16 tiles for causal, one for windows, 32-bit items") {
    Problem p;
    p.num_qo_heads = 32;
    p.mask = MaskMode::dense;
    CHECK(tiles_per_chunk(p, 64) == 64);
    CHECK(tiles_per_chunk(p, 0) == 1);
    p.mask = MaskMode::causal;
    CHECK(tiles_per_chunk(p, 64) == 16);
    CHECK(tiles_per_chunk(p, 3) == 16);  // item_place shortens the last chunk to the list
    p.window_left = 1024;
    CHECK(tiles_per_chunk(p, 64) == 1);
    p.window_left = -1;
    p.mask = MaskMode::variable_window;
    CHECK(tiles_per_chunk(p, 100) == 1);
    p.mask = MaskMode::dense;
    p.window_left = -1;
    p.num_qo_heads = 1 << 20;
    const int64_t huge = int64_t{1} << 40;
    CHECK(int64_t{tiles_per_chunk(p, huge)} * p.num_qo_heads <= std::numeric_limits<int32_t>::max());
    CHECK(tiles_per_chunk(p, huge) >= 1);
  }
}

}  // namespace
}  // namespace tsattn::test
