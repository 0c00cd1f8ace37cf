// test_work_order.cpp - the order of the scheduler's work items (templates/common/item_order.cuh,
// compiled here as host code) and the host's choice of chunk with its cost model
// (plan/work_order.hpp), without a GPU: every (tile, head) item exactly once, chunks in list order,
// kv heads contiguous inside a chunk, the two heads of a CTA pair adjacent, chunks of one tile
// giving the original order; and where the kernels claim their items dynamically.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "plan/device_code.hpp"
#include "plan/host_plan.hpp"
#include "plan/work_order.hpp"

namespace tsattn::test {
namespace {

// B=1 of `tokens` query and key tokens, 32 query heads on 8 kv heads, fixed layout (mask: Problem's default).
Problem one_sequence_gqa4(int64_t tokens) {
  Problem p;
  p.layout = Layout::fixed;
  p.batch = 1;
  p.q_tokens = p.kv_tokens = tokens;
  p.num_qo_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  return p;
}

using tsattn_dev::fast_divide;
using tsattn_dev::fast_divisor;
using tsattn_dev::item_divisors;
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
    // The 32-bit walk of the sm90a kernels (unsigned arithmetic) gives the same place.
    const ItemPlace narrow = item_place(static_cast<uint32_t>(w), tiles, heads, group, chunk);
    CHECK(narrow.tile_index == place.tile_index);
    CHECK(narrow.head == place.head);
    // So do the sm90a consumers, with the launch's divisors made once.
    const ItemPlace fast = item_place(static_cast<uint32_t>(w), item_divisors(tiles, heads, group, chunk));
    CHECK(fast.tile_index == place.tile_index);
    CHECK(fast.head == place.head);
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

  TEST_CASE("division by a launch's divisor (fast_divide) is exact below 2^31") {
    std::mt19937 rng(20261203);
    std::uniform_int_distribution<uint32_t> any(0, (1u << 31) - 1);
    std::vector<uint32_t> divisors = {1, 2, 3, 5, 6, 7, 31, 100, 127, 129, 641, 65535, 65537, (1u << 31) - 1};
    for (int k = 1; k < 31; ++k) divisors.insert(divisors.end(), {(1u << k) - 1, 1u << k, (1u << k) + 1});
    for (int i = 0; i < 200; ++i) divisors.push_back(std::max(any(rng), 1u));
    for (const uint32_t d : divisors) {
      CAPTURE(d);
      const auto f = fast_divisor(d);
      std::vector<uint32_t> dividends = {0, 1, d - 1, d, d + 1, 2 * d - 1, (1u << 31) - 1, (1u << 31) - d};
      for (int i = 0; i < 200; ++i) dividends.push_back(any(rng));
      for (const uint32_t n : dividends) {
        if (n >= (1u << 31)) continue;
        CAPTURE(n);
        REQUIRE(fast_divide(n, f) == n / d);
      }
    }
    // A zero divisor (an empty list's) divides by one instead of faulting.
    CHECK(fast_divide(7, fast_divisor(0)) == 7);
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

  TEST_CASE("the cost model: round-robin slots, a CTA pair's step costs one item") {
    const std::vector<double> equal(10, 3.0);
    // 10 tiles x 2 heads over 3 slots: 7, 7 and 6 items.
    CHECK(predicted_makespan(equal, 2, 1, 1, {3, 1}) == doctest::Approx(21.0));
    CHECK(predicted_makespan(equal, 2, 1, 10, {3, 1}) == doctest::Approx(21.0));
    // Pairs: 20 items are 10 steps over 3 slots: 4, 3, 3.
    CHECK(predicted_makespan(equal, 2, 2, 4, {3, 2}) == doctest::Approx(12.0));
    // Heaviest first, one tile per chunk: slot 0 takes tiles 0 and 2 of costs 5, 4, 3, 2.
    CHECK(predicted_makespan({5, 4, 3, 2}, 1, 1, 1, {2, 1}) == doctest::Approx(8.0));
    // One chunk of all four tiles with two kv heads: items 5 4 3 2 5 4 3 2 over 2 slots.
    CHECK(predicted_makespan({5, 4, 3, 2}, 2, 1, 4, {2, 1}) == doctest::Approx(16.0));
  }

  TEST_CASE("the cost model walks the items in the order the kernels decode them (item_place)") {
    std::mt19937_64 rng(20261130);
    std::uniform_real_distribution<double> cost(1.0, 40.0);
    const std::pair<int, int> head_groups[] = {{1, 1}, {8, 1}, {8, 2}, {32, 4}, {6, 3}, {32, 8}, {16, 16}};
    for (const int64_t tiles : {1, 3, 16, 17, 64})
      for (const auto& [heads, group] : head_groups)
        for (const int chunk : {1, 2, 4, 16, 100})
          for (const ListWalkers walkers :
               {ListWalkers{1, 1}, ListWalkers{7, 1}, ListWalkers{132, 1}, ListWalkers{5, 2}, ListWalkers{66, 2}}) {
            if (walkers.items_per_slot == 2 && group % 2 != 0) continue;  // pairs need even groups
            CAPTURE(tiles);
            CAPTURE(heads);
            CAPTURE(group);
            CAPTURE(chunk);
            CAPTURE(walkers.slots);
            CAPTURE(walkers.items_per_slot);
            std::vector<double> costs(static_cast<size_t>(tiles));
            for (double& c : costs) c = cost(rng);
            // The oracle: slot s takes steps s, s + slots, ...; a step is items_per_slot items and
            // costs its first item's tile.
            std::vector<double> load(static_cast<size_t>(walkers.slots), 0.0);
            const int64_t steps = (tiles * heads + walkers.items_per_slot - 1) / walkers.items_per_slot;
            for (int64_t step = 0; step < steps; ++step) {
              const ItemPlace first = item_place(step * walkers.items_per_slot, tiles, heads, group, chunk);
              load[static_cast<size_t>(step % walkers.slots)] += costs[static_cast<size_t>(first.tile_index)];
            }
            const double expected = *std::max_element(load.begin(), load.end());
            CHECK(predicted_makespan(costs, heads, group, chunk, walkers) == doctest::Approx(expected));
          }
  }

  TEST_CASE("the host's chunk: the whole list for dense, one tile for windows, the model's pick for causal") {
    Problem p = one_sequence_gqa4(2048);
    const ListWalkers pairs{66, 2}, singles{132, 1};
    p.mask = MaskMode::dense;
    CHECK(tiles_per_chunk(p, 128, nullptr, 16, pairs, false) == 16);
    CHECK(tiles_per_chunk(p, 128, nullptr, 0, pairs, false) == 1);
    p.mask = MaskMode::variable_window;
    CHECK(tiles_per_chunk(p, 128, nullptr, 16, pairs, false) == 1);
    p.mask = MaskMode::causal;
    p.window_left = 1024;
    CHECK(tiles_per_chunk(p, 128, nullptr, 16, pairs, false) == 1);
    p.window_left = -1;

    // Causal, 16 tiles x 32 heads over 66 CTA pairs (4 items per pair): one chunk of 16 tiles
    // would give some pairs only the heaviest tiles; the pick is within 2% of the best chunk.
    const auto check_pick = [&](ListWalkers walkers) {
      const int chunk = tiles_per_chunk(p, 128, nullptr, 16, walkers, false);
      std::vector<double> costs;
      for (int t = 15; t >= 0; --t) costs.push_back(t + 1 + 1.5);  // tile t sees t + 1 key tiles
      double best = 1e30;
      for (const int c : {1, 2, 4, 8, 16})
        best = std::min(best, predicted_makespan(costs, 32, p.group_size(), c, walkers));
      CHECK(predicted_makespan(costs, 32, p.group_size(), chunk, walkers) <= best * 1.02);
      return chunk;
    };
    CHECK(check_pick(pairs) < 16);
    p.num_kv_heads = 32;
    CHECK(check_pick(singles) >= 1);

    // Many items per slot: 16 tiles per chunk without the model.
    p.batch = 4;
    p.q_tokens = p.kv_tokens = 16384;
    CHECK(tiles_per_chunk(p, 128, nullptr, 512, singles, false) == 16);
    // Claimed: the whole list is one chunk, so a request's tiles of one head run close together.
    CHECK(tiles_per_chunk(p, 128, nullptr, 512, singles, true) == 512);

    // A short list planned on the device: one tile per chunk.
    p.layout = Layout::packed;
    p.batch = 2;
    p.q_tokens = p.kv_tokens = 1024;
    p.indptr_on_host = false;
    CHECK(tiles_per_chunk(p, 128, nullptr, 10, singles, false) == 1);

    // A host-planned list: the model on its tiles.
    p.indptr_on_host = true;
    p.qo_indptr_host = p.kv_indptr_host = {0, 768, 1024};
    const std::vector<TsattnTile> host = plan_tiles_on_host(p, 128);
    const int chunk = tiles_per_chunk(p, 128, &host, static_cast<int64_t>(host.size()), singles, false);
    CHECK(chunk >= 1);
    CHECK(chunk <= 16);

    // Clamped so that a chunk's items stay 32-bit.
    p.mask = MaskMode::dense;
    p.num_qo_heads = p.num_kv_heads = 1 << 20;
    const int64_t huge = int64_t{1} << 40;
    CHECK(int64_t{tiles_per_chunk(p, 128, nullptr, huge, singles, false)} * p.num_qo_heads <=
          std::numeric_limits<int32_t>::max());
  }

  TEST_CASE("dynamic order: where items differ in cost and each CTA has enough work, unless forced") {
    Problem p = one_sequence_gqa4(8192);
    p.mask = MaskMode::causal;
    // 64 query tiles seeing 1..64 key tiles: 2080 per head, over 132 CTAs.
    const double s8k = key_tiles_per_cta(p, 128, nullptr, 132);
    CHECK(s8k == doctest::Approx(2080.0 * 32 / 132));
    CHECK(claims_dynamically(p, "auto", 128, nullptr, 132));
    CHECK_FALSE(claims_dynamically(p, "static", 128, nullptr, 132));
    p.q_tokens = p.kv_tokens = 2048;  // 136 per head: 33 per CTA, too little to win the claims back
    const double s2k = key_tiles_per_cta(p, 128, nullptr, 132);
    CHECK(s2k == doctest::Approx(136.0 * 32 / 132));
    CHECK_FALSE(claims_dynamically(p, "auto", 128, nullptr, 132));
    CHECK(claims_dynamically(p, "dynamic", 128, nullptr, 132));
    p.batch = 8;  // the same shape eight times over
    CHECK(key_tiles_per_cta(p, 128, nullptr, 132) == doctest::Approx(8 * s2k));
    CHECK(claims_dynamically(p, "auto", 128, nullptr, 132));
    p.q_tokens = p.kv_tokens = 512;  // a causal D128 batch claims however little work each CTA has
    CHECK(key_tiles_per_cta(p, 128, nullptr, 132) < 256);
    CHECK(claims_dynamically(p, "auto", 128, nullptr, 132));
    p.head_dim = 256;  // D256 batches claim only with enough work
    CHECK_FALSE(claims_dynamically(p, "auto", 128, nullptr, 132));
    p.head_dim = 128;
    p.window_left = 64;  // so do windowed ones
    CHECK_FALSE(claims_dynamically(p, "auto", 128, nullptr, 132));
    p.window_left = -1;
    p.q_tokens = p.kv_tokens = 2048;
    p.mask = MaskMode::dense;  // every item of a fixed dense call costs the same
    CHECK_FALSE(claims_dynamically(p, "auto", 128, nullptr, 132));
    CHECK(claims_dynamically(p, "dynamic", 128, nullptr, 1000000));  // forced, however little work
    p.mask = MaskMode::variable_window;  // the host counts every key for per-row windows: 496 per CTA
    CHECK(claims_dynamically(p, "auto", 128, nullptr, 132));

    // Packed: requests of different lengths, so dense items differ too; the host's list gives the work.
    p.layout = Layout::packed;
    p.mask = MaskMode::dense;
    p.batch = 2;
    p.q_tokens = p.kv_tokens = 1024 + 256;
    p.indptr_on_host = true;
    p.qo_indptr_host = p.kv_indptr_host = {0, 1024, 1024 + 256};
    const std::vector<TsattnTile> host = plan_tiles_on_host(p, 128);
    CHECK(key_tiles_per_cta(p, 128, &host, 4) == doctest::Approx((8.0 * 8 + 2 * 2) * 32 / 4));
    CHECK(claims_dynamically(p, "auto", 128, &host, 4));
    CHECK(claims_dynamically(p, "auto", 128, &host, 132));  // packed requests claim however little work
    CHECK_FALSE(claims_dynamically(p, "static", 128, &host, 4));
    // Planned on the device: the work is unknown on the host, and ragged batches gain the most.
    p.indptr_on_host = false;
    CHECK(key_tiles_per_cta(p, 128, nullptr, 132) == std::numeric_limits<double>::infinity());
    CHECK(claims_dynamically(p, "auto", 128, nullptr, 132));
  }
}

}  // namespace
}  // namespace tsattn::test
