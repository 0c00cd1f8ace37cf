// test_launch_plan.cpp - the launch plan (plan/launch_plan.hpp) without a GPU: the tile list and
// workspace of each layout, static and dynamic order, CTA pairs along heads, query tiles or none,
// the split tail, empty and odd-sized problems, and for a sweep of problems the invariants a launch
// relies on (regions aligned and disjoint, a grid that is resident at once). Expected values are
// worked out by hand from the rules the plan composes, not read back from it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/launch_plan.hpp"

namespace tsattn::test {
namespace {

constexpr int kMultiprocessors = 132;

// An sm80-like kernel: one CTA per work item, two resident per multiprocessor, no pairs, static order.
KernelFacts portable_kernel() {
  KernelFacts k;
  k.block_m = 128;
  k.ctas_per_multiprocessor = 2;
  return k;
}

// An sm90a 16-bit dense-capable kernel: pairs along heads and query tiles, dynamic order, split tail.
KernelFacts hopper_kernel() {
  KernelFacts k;
  k.block_m = 128;
  k.block_n = 128;
  k.dynamic_order = true;
  k.split_partial_bytes = 1000;
  k.ctas_per_multiprocessor = 1;
  k.pairs = true;
  k.pairs_along_tiles = true;
  k.max_active_pairs = 66;
  return k;
}

// The knobs a test sets; asking for one it left empty fails the test (the plan must not consult it).
// TSATTN_CTA_PAIRS steers every launch of a pairs kernel, so tests leave it "auto" unless they say.
struct Knobs {
  std::string work_order, split_tail, cta_pairs = "auto";
};
KnobReader reader(Knobs knobs) {
  return [knobs](Knob knob) -> std::string {
    const std::string& value = knob == Knob::work_order   ? knobs.work_order
                               : knob == Knob::split_tail ? knobs.split_tail
                               : knob == Knob::cta_pairs  ? knobs.cta_pairs
                                                          : std::string();
    if (value.empty()) FAIL("the plan read a knob it should not need: ", static_cast<int>(knob));
    return value;
  };
}

Problem fixed(int64_t batch, int64_t q_rows, int64_t kv_rows, int qo_heads, int kv_heads,
              MaskMode mask = MaskMode::dense) {
  Problem p;
  p.layout = Layout::fixed;
  p.batch = batch;
  p.q_tokens = q_rows;
  p.kv_tokens = kv_rows;
  p.num_qo_heads = qo_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = 128;
  p.mask = mask;
  return p;
}

// Packed, host indptrs; every request has as many keys as queries.
Problem packed_on_host(const std::vector<int32_t>& lengths, int qo_heads, int kv_heads,
                       MaskMode mask = MaskMode::dense) {
  Problem p = fixed(static_cast<int64_t>(lengths.size()), 0, 0, qo_heads, kv_heads, mask);
  p.layout = Layout::packed;
  p.indptr_on_host = true;
  p.qo_indptr_host = {0};
  for (const int32_t n : lengths) p.qo_indptr_host.push_back(p.qo_indptr_host.back() + n);
  p.kv_indptr_host = p.qo_indptr_host;
  p.q_tokens = p.kv_tokens = p.qo_indptr_host.back();
  return p;
}

// Packed, GPU indptrs (their values are not known on the host).
Problem packed_on_device(int64_t batch, int64_t q_rows, int qo_heads, int kv_heads) {
  Problem p = fixed(batch, q_rows, q_rows, qo_heads, kv_heads);
  p.layout = Layout::packed;
  return p;
}

std::vector<Region> regions(const WorkspaceLayout& w) {
  return {w.tile_count, w.list_state, w.work_counter, w.tiles,
          w.qo_indptr,  w.kv_indptr,  w.split_counts, w.split_partials};
}

void check_region(const Region& region, size_t offset, size_t bytes) {
  CHECK(region.offset == offset);
  CHECK(region.bytes == bytes);
}

TEST_SUITE("plan/launch_plan") {
  TEST_CASE("fixed layout, one CTA per item: the implicit list, no workspace, a grid of resident CTAs") {
    const Problem p = fixed(2, 1000, 1000, 32, 8);
    const LaunchPlan plan = plan_launch(p, portable_kernel(), kMultiprocessors, reader({}));
    CHECK(plan.pair_axis == PairAxis::none);
    CHECK(plan.tile_rows == 128);
    CHECK(plan.tile_list == TileList::implicit);
    CHECK(plan.max_tiles == 2 * 8);  // ceil(1000 / 128) = 8 tiles per request
    CHECK(plan.items == 16 * 32);
    CHECK(plan.max_items == (8 + 2) * 32);
    REQUIRE(plan.launches);
    CHECK_FALSE(plan.dynamic_order);
    CHECK(plan.walkers.slots == 132 * 2);  // 512 items over 264 resident CTAs
    CHECK(plan.walkers.items_per_slot == 1);
    CHECK(plan.tiles_per_chunk == 16);  // dense: the whole list is one chunk
    CHECK(plan.split_slots == 0);
    CHECK(plan.workspace.bytes == 0);
    CHECK_FALSE(plan.plans_on_device);
    CHECK(plan.transpose_ctas == 0);

    TsattnPrefillParams params{};
    fill_launch_params(plan, 0x10000, params);
    CHECK(params.pair_tiles == 0);
    CHECK(params.tiles_per_chunk == 16);
    CHECK(params.num_tiles == nullptr);
    CHECK(params.tiles == nullptr);
    CHECK(params.work_counter == nullptr);
    CHECK(params.split_flags == nullptr);
  }

  TEST_CASE("odd query lengths: a partial tile is a whole tile of the list") {
    const std::pair<int64_t, int64_t> rows_tiles[] = {{1, 1}, {127, 1}, {128, 1}, {129, 2}, {255, 2}, {257, 3}};
    for (const auto& [rows, tiles] : rows_tiles) {
      CAPTURE(rows);
      const LaunchPlan plan = plan_launch(fixed(3, rows, rows, 4, 4), portable_kernel(), kMultiprocessors, reader({}));
      CHECK(plan.max_tiles == 3 * tiles);
      CHECK(plan.items == 3 * tiles * 4);
      CHECK(plan.walkers.slots == std::min<int64_t>(3 * tiles * 4, 264));
      CHECK(plan.launches);
    }
  }

  TEST_CASE("no query rows: nothing launches and nothing is allocated") {
    const KernelFacts hopper = hopper_kernel();
    const Knobs knobs{"dynamic", "on"};
    for (const Problem& p : {fixed(2, 0, 16, 8, 8), fixed(0, 16, 16, 8, 8), packed_on_host({0, 0, 0}, 8, 8),
                             packed_on_host({}, 8, 8), packed_on_device(0, 0, 8, 8)}) {
      CAPTURE(static_cast<int>(p.layout));
      CAPTURE(p.batch);
      const LaunchPlan plan = plan_launch(p, hopper, kMultiprocessors, reader(knobs));
      CHECK(plan.max_tiles == 0);
      CHECK(plan.items == 0);
      CHECK_FALSE(plan.launches);
      CHECK(plan.workspace.bytes == 0);
      CHECK_FALSE(plan.plans_on_device);
      CHECK(plan.transpose_ctas == 0);
      CHECK(plan.split_slots == 0);
    }
    // GPU indptrs of requests that may all be empty: the planner still runs, the list bound is one
    // tile per request, and the kernel then finds no tiles.
    const LaunchPlan plan = plan_launch(packed_on_device(3, 0, 8, 8), portable_kernel(), kMultiprocessors, reader({}));
    CHECK(plan.max_tiles == 3);
    CHECK(plan.launches);
    CHECK(plan.plans_on_device);
  }

  TEST_CASE("static and dynamic order: the counter of the fixed layout, cleared for dynamic order") {
    const Problem causal = fixed(1, 4096, 4096, 8, 8, MaskMode::causal);
    KernelFacts kernel = hopper_kernel();
    kernel.pairs = false;
    const LaunchPlan dynamic = plan_launch(causal, kernel, kMultiprocessors, reader({"dynamic", ""}));
    CHECK(dynamic.dynamic_order);
    check_region(dynamic.workspace.work_counter, 0, 8);
    CHECK(dynamic.workspace.bytes == 8);
    CHECK(dynamic.workspace.clear_work_counter);
    CHECK(dynamic.workspace.upload_bytes == 0);
    TsattnPrefillParams params{};
    fill_launch_params(dynamic, 0x20000, params);
    CHECK(reinterpret_cast<uintptr_t>(params.work_counter) == 0x20000);

    // A causal list is never split; static order reads no counter and needs no workspace at all
    // (nothing to allocate for a one-shot call; a plan's counter bytes stay untouched, so zero).
    const LaunchPlan fixed_turns = plan_launch(causal, kernel, kMultiprocessors, reader({"static", ""}));
    CHECK_FALSE(fixed_turns.dynamic_order);
    CHECK(fixed_turns.workspace.bytes == 0);
    CHECK_FALSE(fixed_turns.workspace.clear_work_counter);
    TsattnPrefillParams static_params{};
    fill_launch_params(fixed_turns, 0x20000, static_params);
    CHECK(static_params.work_counter == nullptr);

    // "auto" keeps dense fixed-layout items (all of one cost) in static turns.
    CHECK_FALSE(
        plan_launch(fixed(1, 4096, 4096, 8, 8), kernel, kMultiprocessors, reader({"auto", "off"})).dynamic_order);
    // A kernel without a counter never asks for TSATTN_WORK_ORDER.
    CHECK_FALSE(plan_launch(causal, portable_kernel(), kMultiprocessors, reader({})).dynamic_order);
  }

  TEST_CASE("CTA pairs: along heads for even groups, along query tiles for MHA, none without a pairs kernel") {
    // GQA 4: pairs along heads, two items per slot, as many clusters as fit.
    const Problem gqa = fixed(1, 8192, 8192, 32, 8);
    const LaunchPlan heads = plan_launch(gqa, hopper_kernel(), kMultiprocessors, reader({"auto", "off"}));
    CHECK(heads.pair_axis == PairAxis::heads);
    CHECK(heads.tile_rows == 128);
    CHECK(heads.max_tiles == 64);
    CHECK(heads.items == 64 * 32);
    CHECK(heads.walkers.slots == 66);
    CHECK(heads.walkers.items_per_slot == 2);
    CHECK(heads.slots() == 1024);
    CHECK(heads.split_slots == 0);
    CHECK(heads.workspace.bytes == 0);  // static order without a split tail: no workspace
    CHECK_FALSE(heads.workspace.clear_work_counter);

    // MHA: a pair along query tiles walks tiles of 256 rows.
    const Problem mha = fixed(1, 2100, 2100, 2, 2, MaskMode::causal);
    const LaunchPlan tiles = plan_launch(mha, hopper_kernel(), kMultiprocessors, reader({"static", ""}));
    CHECK(tiles.pair_axis == PairAxis::query_tiles);
    CHECK(tiles.tile_rows == 256);
    CHECK(tiles.max_tiles == 9);  // ceil(2100 / 256)
    CHECK(tiles.items == 18);
    CHECK(tiles.walkers.slots == 18);  // fewer items than the 66 clusters that fit
    CHECK(tiles.walkers.items_per_slot == 1);
    TsattnPrefillParams params{};
    fill_launch_params(tiles, 0, params);
    CHECK(params.pair_tiles == 1);
    // TSATTN_CTA_PAIRS=off, or requests too short for pairs to pay: single CTAs.
    CHECK(plan_launch(mha, hopper_kernel(), kMultiprocessors, reader({"static", "", "off"})).pair_axis ==
          PairAxis::none);
    const Problem short_mha = fixed(1, 1000, 1000, 2, 2, MaskMode::causal);
    CHECK(plan_launch(short_mha, hopper_kernel(), kMultiprocessors, reader({"static", ""})).pair_axis ==
          PairAxis::none);

    // The module does not pair along query tiles: single CTAs of 128-row tiles.
    KernelFacts heads_only = hopper_kernel();
    heads_only.pairs_along_tiles = false;
    const LaunchPlan single = plan_launch(mha, heads_only, kMultiprocessors, reader({"static", ""}));
    CHECK(single.pair_axis == PairAxis::none);
    CHECK(single.tile_rows == 128);
    CHECK(single.max_tiles == 17);
    CHECK(single.walkers.slots == 34);
    CHECK(single.walkers.items_per_slot == 1);

    // No cluster of two fits: no pairs at all.
    KernelFacts no_pairs = hopper_kernel();
    no_pairs.pairs = false;
    CHECK(plan_launch(gqa, no_pairs, kMultiprocessors, reader({"auto", "off"})).pair_axis == PairAxis::none);
  }

  TEST_CASE("the split tail: the last F = W + S mod W slots by key tiles, counts and partials in the workspace") {
    // D128 S8K GQA 4: S = 1024 slots on W = 66 pairs, n = 64 key tiles each; F = 66 + 34 = 100.
    const Problem p = fixed(1, 8192, 8192, 32, 8);
    for (const char* mode : {"on", "auto"}) {
      CAPTURE(mode);
      // auto: whole slots take 16 rounds of 64 + 2 = 1056 tiles; the split walk 14 x 66 + ceil(6400 / 66)
      // + (2 + 1) x 2 + 1 = 1028.
      const LaunchPlan plan = plan_launch(p, hopper_kernel(), kMultiprocessors, reader({"auto", mode}));
      CHECK_FALSE(plan.dynamic_order);
      CHECK(plan.split_slots == 100);
      CHECK(plan.split_steps == 64);
      // The kernel can claim dynamically, so its counter keeps bytes [0, 8) even in static order;
      // 66 pairs x 2 CTAs x 8 warps of int counts = 4224 bytes at 16; the partials at the next 256.
      check_region(plan.workspace.work_counter, 0, 8);
      check_region(plan.workspace.split_counts, 16, 4224);
      check_region(plan.workspace.split_partials, 4352, 66 * 2 * 2 * 1000);
      CHECK(plan.workspace.bytes == 4352 + 66 * 2 * 2 * 1000);
      CHECK_FALSE(plan.workspace.clear_work_counter);
      TsattnPrefillParams params{};
      fill_launch_params(plan, 0x40000, params);
      CHECK(params.work_counter == nullptr);  // static order
      CHECK(params.split_slots == 100);
      CHECK(reinterpret_cast<uintptr_t>(params.split_flags) == 0x40000 + 16);
      CHECK(reinterpret_cast<uintptr_t>(params.split_partials) == 0x40000 + 4352);
    }
    const LaunchPlan off = plan_launch(p, hopper_kernel(), kMultiprocessors, reader({"auto", "off"}));
    CHECK(off.split_slots == 0);
    CHECK(off.workspace.bytes == 0);  // no split tail, static order: no workspace
    // Dynamic order never splits, and does not ask for TSATTN_SPLIT_TAIL.
    const LaunchPlan dynamic = plan_launch(p, hopper_kernel(), kMultiprocessors, reader({"dynamic", ""}));
    CHECK(dynamic.split_slots == 0);
    CHECK_FALSE(dynamic.workspace.split_counts.present());
    // Nor do a causal mask, the packed layout or a kernel without partial buffers.
    CHECK(plan_launch(fixed(1, 8192, 8192, 32, 8, MaskMode::causal), hopper_kernel(), kMultiprocessors,
                      reader({"static", ""}))
              .split_slots == 0);
    KernelFacts unsplittable = hopper_kernel();
    unsplittable.split_partial_bytes = 0;
    CHECK(plan_launch(p, unsplittable, kMultiprocessors, reader({"static", ""})).split_slots == 0);
    // A last round that is full has no tail to split: 66 tiles x 32 heads are 1056 slots, 16 rounds of 66.
    CHECK(plan_launch(fixed(1, 66 * 128, 1024, 32, 8), hopper_kernel(), kMultiprocessors, reader({"static", "on"}))
              .split_slots == 0);
  }

  TEST_CASE("packed layout, host indptrs: the list and the indptr copies are uploaded in one image") {
    // Requests of 1, 127, 129, 0 and 300 rows: 1 + 1 + 2 + 0 + 3 tiles of 128 rows.
    const Problem p = packed_on_host({1, 127, 129, 0, 300}, 2, 2);
    const LaunchPlan plan = plan_launch(p, portable_kernel(), kMultiprocessors, reader({}));
    REQUIRE(plan.tile_list == TileList::host_planned);
    CHECK(plan.max_tiles == 7);
    CHECK(plan.items == 14);
    CHECK(plan.walkers.slots == 14);
    std::set<std::pair<int, int>> tiles;
    for (const TsattnTile& t : plan.host_tiles) tiles.insert({t.request, t.q_tile});
    CHECK(tiles == std::set<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {2, 1}, {4, 0}, {4, 1}, {4, 2}});

    // 4-byte count at 0, 7 tiles of 8 bytes at 16, 6-entry indptrs at 80 and 112, the counter at 144.
    const WorkspaceLayout& w = plan.workspace;
    check_region(w.tile_count, 0, 4);
    check_region(w.tiles, 16, 56);
    check_region(w.qo_indptr, 80, 24);
    check_region(w.kv_indptr, 112, 24);
    check_region(w.work_counter, 144, 8);
    CHECK(w.bytes == 152);
    CHECK(w.upload_bytes == 152);
    CHECK_FALSE(w.clear_work_counter);  // uploaded as zero

    const std::vector<uint8_t> image = upload_image(plan, p);
    REQUIRE(image.size() == 152);
    int count = 0;
    std::memcpy(&count, image.data(), sizeof count);
    CHECK(count == 7);
    std::vector<TsattnTile> uploaded(7);
    std::memcpy(uploaded.data(), image.data() + 16, 56);
    for (size_t i = 0; i < uploaded.size(); ++i) {
      CHECK(uploaded[i].request == plan.host_tiles[i].request);
      CHECK(uploaded[i].q_tile == plan.host_tiles[i].q_tile);
    }
    std::vector<int32_t> qo(6), kv(6);
    std::memcpy(qo.data(), image.data() + 80, 24);
    std::memcpy(kv.data(), image.data() + 112, 24);
    CHECK(qo == std::vector<int32_t>{0, 1, 128, 257, 257, 557});
    CHECK(kv == qo);
    check_region(w.list_state, 4, 4);  // the int after the count: ready, so a kernel builds nothing
    int state = 0;
    std::memcpy(&state, image.data() + 4, sizeof state);
    CHECK(state == TSATTN_LIST_READY);
    for (const size_t zero : {8, 12, 72, 76, 104, 108, 136, 140, 144, 148})
      CHECK(image[zero] + image[zero + 1] + image[zero + 2] + image[zero + 3] == 0);

    TsattnPrefillParams params{};
    fill_launch_params(plan, 0x30000, params);
    CHECK(reinterpret_cast<uintptr_t>(params.num_tiles) == 0x30000);
    CHECK(reinterpret_cast<uintptr_t>(params.tiles) == 0x30000 + 16);
    CHECK(reinterpret_cast<uintptr_t>(params.qo_indptr) == 0x30000 + 80);
    CHECK(reinterpret_cast<uintptr_t>(params.kv_indptr) == 0x30000 + 112);
    CHECK(params.work_counter == nullptr);  // static order
    KernelFacts claiming = hopper_kernel();
    claiming.pairs = false;
    const LaunchPlan dynamic = plan_launch(p, claiming, kMultiprocessors, reader({"dynamic", ""}));
    CHECK(dynamic.workspace.bytes == 152);
    TsattnPrefillParams dynamic_params{};
    fill_launch_params(dynamic, 0x30000, dynamic_params);
    CHECK(reinterpret_cast<uintptr_t>(dynamic_params.work_counter) == 0x30000 + 144);
  }

  TEST_CASE("packed layout, GPU indptrs: the device planner fills a list bounded by tiles plus requests") {
    const Problem p = packed_on_device(4, 257, 4, 4);
    const LaunchPlan plan = plan_launch(p, portable_kernel(), kMultiprocessors, reader({}));
    REQUIRE(plan.tile_list == TileList::device_planned);
    CHECK(plan.max_tiles == 3 + 4);  // ceil(257 / 128) + one partial tile per request
    CHECK(plan.max_items == 7 * 4);
    CHECK(plan.plans_on_device);
    CHECK(plan.host_tiles.empty());
    const WorkspaceLayout& w = plan.workspace;
    check_region(w.tile_count, 0, 4);
    check_region(w.list_state, 4, 4);  // the kernel finds it as the int after *num_tiles
    check_region(w.work_counter, 16, 8);
    check_region(w.tiles, 32, 7 * 8);
    CHECK(w.bytes == 32 + 56);
    CHECK_FALSE(plan.list_in_kernel);  // a kernel that cannot build its list
    CHECK(w.upload_bytes == 0);
    CHECK_FALSE(w.clear_work_counter);  // the planner zeroes it
    CHECK_FALSE(w.qo_indptr.present());
    TsattnPrefillParams params{};
    params.qo_indptr = reinterpret_cast<const int*>(0x900);  // the caller's, from make_kernel_params
    fill_launch_params(plan, 0x50000, params);
    CHECK(reinterpret_cast<uintptr_t>(params.num_tiles) == 0x50000);
    CHECK(reinterpret_cast<uintptr_t>(params.tiles) == 0x50000 + 32);
    CHECK(reinterpret_cast<uintptr_t>(params.qo_indptr) == 0x900);
    CHECK(params.tiles_per_chunk == 7);
  }

  TEST_CASE("packed layout, GPU indptrs: the kernel builds its own list in dynamic order, up to its batch limit") {
    KernelFacts kernel = hopper_kernel();
    kernel.list_in_kernel_max_batch = 128;
    for (const int64_t batch : {1, 4, 128, 129}) {
      CAPTURE(batch);
      const Problem p = packed_on_device(batch, 257, 32, 8);
      const LaunchPlan plan = plan_launch(p, kernel, kMultiprocessors, reader({"auto", ""}));
      REQUIRE(plan.plans_on_device);
      CHECK(plan.dynamic_order);  // packed calls claim
      CHECK(plan.list_in_kernel == (batch <= 128));
      CHECK(plan.workspace.list_state.offset == plan.workspace.tile_count.offset + sizeof(int));
    }
    // Static order never reads the state word: the planner builds the list.
    const Problem p = packed_on_device(4, 257, 32, 8);
    CHECK_FALSE(plan_launch(p, kernel, kMultiprocessors, reader({"static", ""})).list_in_kernel);
    kernel.list_in_kernel_max_batch = 0;  // a module that cannot (e4m3, the portable family)
    CHECK_FALSE(plan_launch(p, kernel, kMultiprocessors, reader({"auto", ""})).list_in_kernel);
  }

  TEST_CASE("the V^T pre-pass: a warp per 32 keys of a request, 4 per CTA, at most 16 CTAs per multiprocessor") {
    const std::pair<Problem, int64_t> cases[] = {
        {fixed(2, 128, 8192, 8, 8), 8192},        // 2 x 256 groups: 128 CTAs
        {packed_on_device(4, 512, 8, 8), 1024},   // 32 groups: 8 CTAs
        {fixed(1, 128, 32, 8, 8), 32},            // one group: one CTA
        {fixed(8, 128, 1 << 20, 8, 8), 1 << 20},  // 262144 groups: capped at 132 x 16
    };
    const unsigned expected[] = {128, 8, 1, 132 * 16};
    for (size_t i = 0; i < std::size(cases); ++i) {
      CAPTURE(i);
      KernelFacts kernel = portable_kernel();
      kernel.transposed_v_keys = cases[i].second;
      CHECK(plan_launch(cases[i].first, kernel, kMultiprocessors, reader({})).transpose_ctas == expected[i]);
    }
  }

  TEST_CASE("every plan: regions aligned, disjoint and inside the workspace, and a grid that is resident at once") {
    const KernelFacts kernels[] = {portable_kernel(), hopper_kernel(), [] {
                                     KernelFacts k = hopper_kernel();
                                     k.pairs_along_tiles = false;
                                     k.max_active_pairs = 3;
                                     return k;
                                   }()};
    const std::pair<int, int> heads[] = {{32, 8}, {8, 8}, {9, 3}, {1, 1}};
    const Knobs knobs[] = {{"auto", "auto"}, {"static", "on"}, {"dynamic", "off"}};
    int plans = 0;
    for (const KernelFacts& kernel : kernels)
      for (const auto& [qo_heads, kv_heads] : heads)
        for (const MaskMode mask : {MaskMode::dense, MaskMode::causal})
          for (const int64_t rows : {1, 127, 129, 1000, 4097})
            for (const Knobs& knob : knobs) {
              const Problem problems[] = {fixed(3, rows, rows, qo_heads, kv_heads, mask),
                                          packed_on_host({static_cast<int32_t>(rows), 0, 5, static_cast<int32_t>(rows)},
                                                         qo_heads, kv_heads, mask),
                                          packed_on_device(4, rows, qo_heads, kv_heads)};
              for (const Problem& p : problems) {
                CAPTURE(static_cast<int>(p.layout));
                CAPTURE(p.indptr_on_host);
                CAPTURE(qo_heads);
                CAPTURE(rows);
                const LaunchPlan plan = plan_launch(p, kernel, kMultiprocessors, reader(knob));
                REQUIRE(plan.launches);
                ++plans;
                CHECK(plan.items == plan.max_tiles * qo_heads);
                CHECK(plan.walkers.slots >= 1);
                CHECK(plan.walkers.slots <= plan.slots());
                if (plan.paired())
                  CHECK(plan.walkers.slots <= kernel.max_active_pairs);  // clusters of 2 that fit at once
                else
                  CHECK(plan.walkers.slots <= int64_t{kMultiprocessors} * kernel.ctas_per_multiprocessor);
                CHECK(plan.tiles_per_chunk >= 1);
                CHECK(int64_t{plan.tiles_per_chunk} * qo_heads < (int64_t{1} << 31));
                if (plan.split_slots > 0) {
                  CHECK(plan.split_slots >= plan.walkers.slots);
                  CHECK(plan.split_slots < 2 * plan.walkers.slots);
                }
                std::vector<Region> present;
                for (const Region& r : regions(plan.workspace))
                  if (r.present()) present.push_back(r);
                std::sort(present.begin(), present.end(),
                          [](const Region& a, const Region& b) { return a.offset < b.offset; });
                size_t end = 0;
                for (const Region& r : present) {
                  // The list's state word is the int after the tile count; every other region is 16-byte aligned.
                  const Region& state = plan.workspace.list_state;
                  const bool state_word = state.present() && r.offset == state.offset;
                  CHECK(r.offset % (state_word ? 4 : 16) == 0);
                  CHECK(r.offset >= end);
                  end = r.offset + r.bytes;
                }
                CHECK(end == plan.workspace.bytes);
                CHECK(plan.workspace.upload_bytes <= plan.workspace.bytes);
                if (plan.workspace.split_partials.present()) CHECK(plan.workspace.split_partials.offset % 256 == 0);
              }
            }
    CHECK(plans == 3 * 4 * 2 * 5 * 3 * 3);
  }
}

}  // namespace
}  // namespace tsattn::test
