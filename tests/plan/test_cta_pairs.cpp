// test_cta_pairs.cpp - the host's choice of CTA pairs (plan/cta_pairs.hpp), without a GPU: along
// heads for even GQA groups, along query tiles for MHA and odd groups where the module pairs that
// way (which masks do is the kernel's constant, checked on the GPU by test_attention.cpp), none
// without a pairs kernel; and the work list a pair along query tiles walks (2 x BLOCK_M-row tiles
// covering every row once).
#include <doctest/doctest.h>

#include <set>
#include <utility>

#include "plan/cta_pairs.hpp"
#include "plan/host_plan.hpp"

namespace tsattn::test {
namespace {

Problem heads_problem(int qo_heads, int kv_heads, MaskMode mask) {
  Problem p;
  p.batch = 1;
  p.q_tokens = p.kv_tokens = 4000;
  p.num_qo_heads = qo_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = 128;
  p.mask = mask;
  return p;
}

TEST_SUITE("plan/cta_pairs") {
  TEST_CASE("the pair axis: heads for even groups, query tiles for MHA and odd groups where the module can") {
    const PairsKernel both{true, true}, heads_only{true, false}, none{};
    for (const MaskMode mask : {MaskMode::dense, MaskMode::causal, MaskMode::variable_window}) {
      CAPTURE(static_cast<int>(mask));
      CHECK(choose_pair_axis(heads_problem(32, 8, mask), both) == PairAxis::heads);
      CHECK(choose_pair_axis(heads_problem(32, 8, mask), heads_only) == PairAxis::heads);
      CHECK(choose_pair_axis(heads_problem(32, 8, mask), none) == PairAxis::none);
      for (const auto& [qo, kv] : {std::pair{32, 32}, std::pair{9, 3}, std::pair{1, 1}}) {
        CAPTURE(qo);
        CHECK(choose_pair_axis(heads_problem(qo, kv, mask), both) == PairAxis::query_tiles);
        CHECK(choose_pair_axis(heads_problem(qo, kv, mask), heads_only) == PairAxis::none);
        CHECK(choose_pair_axis(heads_problem(qo, kv, mask), none) == PairAxis::none);
      }
      // Short requests: fixed causal ones (up to kShortCausalRows query rows each) and packed ones
      // (up to kShortPackedCausalRows or kShortPackedRows on average) run in single CTAs; pairs
      // along heads stay.
      Problem short_request = heads_problem(32, 32, mask);
      short_request.q_tokens = short_request.kv_tokens = kShortCausalRows;
      const bool causal = mask == MaskMode::causal;
      CHECK(query_tile_pairs_waste(short_request) == causal);
      CHECK(choose_pair_axis(short_request, both) == (causal ? PairAxis::none : PairAxis::query_tiles));
      CHECK(choose_pair_axis(short_request, both, "on") == PairAxis::query_tiles);
      short_request.num_kv_heads = 8;
      CHECK(choose_pair_axis(short_request, both) == PairAxis::heads);
      // Pairs along heads are left out for requests of at most kShortHeadPairRows query rows and
      // keys (fixed: Sq and Sk; packed: the means), whatever the mask; "on" keeps them.
      short_request.q_tokens = short_request.kv_tokens = kShortHeadPairRows + 1;
      CHECK_FALSE(head_pairs_waste(short_request));
      CHECK(choose_pair_axis(short_request, both) == PairAxis::heads);
      short_request.q_tokens = kShortHeadPairRows;  // a chunk of a longer prompt keeps its pairs
      CHECK_FALSE(head_pairs_waste(short_request));
      short_request.kv_tokens = kShortHeadPairRows;
      CHECK(head_pairs_waste(short_request));
      CHECK(choose_pair_axis(short_request, both) == PairAxis::none);
      CHECK(choose_pair_axis(short_request, heads_only) == PairAxis::none);
      CHECK(choose_pair_axis(short_request, both, "on") == PairAxis::heads);
      // Packed: by the means; packed dense calls up to kShortPackedRows, as along query tiles.
      Problem packed_gqa = heads_problem(32, 8, mask);
      packed_gqa.layout = Layout::packed;
      packed_gqa.batch = 16;
      const int64_t head_bound = mask == MaskMode::dense ? kShortPackedRows : kShortHeadPairRows;
      packed_gqa.q_tokens = packed_gqa.kv_tokens = 16 * head_bound;
      CHECK(mean_query_rows(packed_gqa) == head_bound);
      CHECK(mean_keys(packed_gqa) == head_bound);
      CHECK(choose_pair_axis(packed_gqa, both) == PairAxis::none);
      packed_gqa.q_tokens = packed_gqa.kv_tokens = 16 * head_bound + 16;
      CHECK(choose_pair_axis(packed_gqa, both) == PairAxis::heads);
      Problem packed = heads_problem(32, 32, mask);
      packed.layout = Layout::packed;
      packed.batch = 8;
      const int64_t bound = causal ? kShortPackedCausalRows : kShortPackedRows;
      packed.q_tokens = packed.kv_tokens = 8 * bound + 8;  // a mean just above the bound
      CHECK_FALSE(query_tile_pairs_waste(packed));
      packed.q_tokens = packed.kv_tokens = 8 * bound;
      CHECK(query_tile_pairs_waste(packed));
      // TSATTN_CTA_PAIRS=off: single CTAs whatever the kernel can do
      CHECK(choose_pair_axis(heads_problem(32, 8, mask), both, "off") == PairAxis::none);
      CHECK(choose_pair_axis(heads_problem(32, 32, mask), both, "off") == PairAxis::none);
      CHECK(choose_pair_axis(heads_problem(32, 32, mask), both, "auto") == PairAxis::query_tiles);
    }
    CHECK(list_tile_rows(PairAxis::query_tiles, 128) == 256);
    CHECK(list_tile_rows(PairAxis::heads, 128) == 128);
    CHECK(list_tile_rows(PairAxis::none, 128) == 128);
  }

  TEST_CASE("a pair along query tiles: the host list's 256-row tiles hold every 128-row tile once") {
    Problem p;
    p.layout = Layout::packed;
    p.mask = MaskMode::causal;
    p.num_qo_heads = p.num_kv_heads = 1;
    p.indptr_on_host = true;
    // Requests of 0, 1, 128, 129, 256, 300 and 1000 rows (Sq == Sk).
    p.qo_indptr_host = {0, 0, 1, 129, 258, 514, 814, 1814};
    p.kv_indptr_host = p.qo_indptr_host;
    p.batch = 7;
    p.q_tokens = p.kv_tokens = 1814;
    const std::vector<TsattnTile> pairs =
        plan_tiles_on_host(p, static_cast<int>(list_tile_rows(PairAxis::query_tiles, 128)));
    std::set<std::pair<int, int>> covered;  // (request, 128-row tile)
    int64_t previous_work = -1;
    for (const TsattnTile& t : pairs) {
      CAPTURE(t.request);
      CAPTURE(t.q_tile);
      const int64_t q_len = p.q_len(t.request);
      REQUIRE(int64_t{t.q_tile} * 256 < q_len);  // the kernel's test for a live entry
      for (int half = 0; half < 2; ++half)
        if ((2 * int64_t{t.q_tile} + half) * 128 < q_len)
          CHECK(covered.insert({t.request, 2 * t.q_tile + half}).second);
      const int64_t work = tile_work(p, q_len, p.kv_len(t.request), t.q_tile, 256);
      if (previous_work >= 0) CHECK(work <= previous_work);  // heaviest first
      previous_work = work;
    }
    CHECK(pairs.size() == 0 + 1 + 1 + 1 + 1 + 2 + 4);
    CHECK(covered.size() == 0 + 1 + 1 + 2 + 2 + 3 + 8);
  }
}

}  // namespace
}  // namespace tsattn::test
