// test_plan_capacity.cpp - a plan's workspace (plan/plan_capacity.hpp) holds every run within its
// capacities: for random capacities and kernels, and many shapes within each, plan_launch()'s
// workspace and V^T's buffer (plan_tensor_maps) fit the plan's bounds, and so does a shape beyond
// the capacities once clamp_to_capacity() has shrunk it (what a run with validate=false launches).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "plan/launch_plan.hpp"
#include "plan/plan_capacity.hpp"
#include "plan/tensor_maps.hpp"

namespace tsattn::test {
namespace {

// A kernel as the module table could report it, drawn at random.
KernelFacts random_kernel(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> coin(0, 1);
  KernelFacts k;
  k.block_m = coin(rng) ? 128 : 64;
  k.block_n = coin(rng) ? 128 : 64;
  k.dynamic_order = coin(rng);
  k.chunked_order = coin(rng);
  k.split_partial_bytes = coin(rng) ? std::uniform_int_distribution<int>(1, 70000)(rng) : 0;
  k.ctas_per_multiprocessor = std::uniform_int_distribution<int>(1, 3)(rng);
  k.pairs = coin(rng);
  k.pairs_along_tiles = k.pairs && coin(rng);
  k.max_active_pairs = k.pairs ? std::uniform_int_distribution<int>(1, 80)(rng) : 0;
  return k;
}

Capacity random_capacity(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> coin(0, 1);
  Capacity c;
  c.layout = coin(rng) ? Layout::fixed : Layout::packed;
  c.mask = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? MaskMode::causal : MaskMode::dense;
  c.batch = std::uniform_int_distribution<int64_t>(1, 40)(rng);
  c.max_q_len = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
  c.max_kv_len = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
  c.num_kv_heads = std::uniform_int_distribution<int>(1, 4)(rng);
  c.num_qo_heads = c.num_kv_heads * std::uniform_int_distribution<int>(1, 4)(rng);
  c.head_dim = coin(rng) ? 128 : 256;
  return c;
}

// A run's Problem of c's settings with these extents (packed: totals; the device plans its list).
Problem run_problem(const Capacity& c, int64_t batch, int64_t q_tokens, int64_t kv_tokens, bool e4m3) {
  Problem p;
  p.layout = c.layout;
  p.mask = c.mask;
  p.batch = batch;
  p.q_tokens = q_tokens;
  p.kv_tokens = kv_tokens;
  p.num_qo_heads = c.num_qo_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.input_dtype = e4m3 ? TSATTN_DTYPE_FLOAT8_E4M3FN : TSATTN_DTYPE_BFLOAT16;
  p.output_dtype = TSATTN_DTYPE_BFLOAT16;
  // Compact, 256-byte aligned stand-ins: only their geometry matters to the maps' plan.
  const auto compact = [&](int heads, int64_t tokens) {
    TokenTensor t;
    t.data = reinterpret_cast<void*>(uintptr_t{1} << 20);
    t.head_stride = c.head_dim;
    t.token_stride = int64_t{heads} * c.head_dim;
    t.batch_stride = c.layout == Layout::fixed ? tokens * t.token_stride : 0;
    return t;
  };
  p.q = p.out = compact(c.num_qo_heads, q_tokens);
  p.k = p.v = compact(c.num_kv_heads, kv_tokens);
  return p;
}

KnobReader knobs(const std::string& work_order, const std::string& split_tail) {
  return [=](Knob knob) { return knob == Knob::work_order ? work_order : split_tail; };
}

// plan_launch() and V^T for p fit the plan's workspace of c.
void check_fits(const Capacity& c, const KernelFacts& kernel, int multiprocessors, const Problem& p,
                const KnobReader& reader) {
  const PlanWorkspace w = plan_workspace(c, kernel, multiprocessors, true);
  const LaunchPlan plan = plan_launch(p, kernel, multiprocessors, reader);
  CHECK(plan.workspace.bytes <= w.launch.bytes);
  CHECK(plan.workspace.upload_bytes == 0);  // runs never upload a tile list
  if (plan.launches && kernel.dynamic_order) CHECK(plan.max_items <= max_items_bound(c, kernel.block_m));
  if (p.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN) {
    const TensorMapPlanOrReason maps = plan_tensor_maps(p, MapShape{kernel.block_m, kernel.block_n, 4, false});
    REQUIRE(maps.plan);
    REQUIRE(maps.plan->transposed_v);
    CHECK(maps.plan->transposed_v->bytes <= w.transposed_v.bytes);
  }
  // Regions never overlap, and the indptr copies hold batch + 1 entries of each indptr.
  CHECK(w.launch.offset + w.launch.bytes <= (w.indptrs.present() ? w.indptrs.offset : w.transposed_v.offset));
  if (c.layout == Layout::packed) CHECK(w.indptrs.bytes == 2 * static_cast<size_t>(c.batch + 1) * sizeof(int32_t));
  CHECK(w.transposed_v.offset + w.transposed_v.bytes <= w.bytes);
}

TEST_SUITE("plan/plan_capacity") {
  TEST_CASE("a plan's workspace holds the launch of every shape within its capacities") {
    std::mt19937_64 rng(20240607);
    const std::string orders[] = {"auto", "static", "dynamic"};
    const std::string splits[] = {"auto", "on", "off"};
    int shapes = 0;
    for (int round = 0; round < 300; ++round) {
      const Capacity c = random_capacity(rng);
      const KernelFacts kernel = random_kernel(rng);
      const int multiprocessors = std::uniform_int_distribution<int>(1, 140)(rng);
      const KnobReader reader = knobs(orders[round % 3], splits[(round / 3) % 3]);
      const bool e4m3 = round % 2 == 0;
      INFO("round ", round);
      // The corners, then random shapes within the capacities.
      std::vector<std::vector<int64_t>> lengths;  // {batch, per-request q, per-request kv}
      lengths.push_back({c.batch, c.max_q_len, c.max_kv_len});
      lengths.push_back({1, 1, 1});
      lengths.push_back({c.batch, 1, c.max_kv_len});
      for (int i = 0; i < 30; ++i)
        lengths.push_back({std::uniform_int_distribution<int64_t>(0, c.batch)(rng),
                           std::uniform_int_distribution<int64_t>(0, c.max_q_len)(rng),
                           std::uniform_int_distribution<int64_t>(0, c.max_kv_len)(rng)});
      for (const std::vector<int64_t>& l : lengths) {
        const int64_t batch = l[0];
        // Packed: the totals of `batch` requests of at most these lengths, drawn per request.
        int64_t q = l[1], kv = l[2];
        if (c.layout == Layout::packed) {
          q = kv = 0;
          for (int64_t b = 0; b < batch; ++b) {
            q += std::uniform_int_distribution<int64_t>(0, l[1])(rng);
            kv += std::uniform_int_distribution<int64_t>(0, l[2])(rng);
          }
          if (&l == &lengths.front()) q = batch * l[1], kv = batch * l[2];
        }
        INFO("batch ", batch, " q ", q, " kv ", kv);
        check_fits(c, kernel, multiprocessors, run_problem(c, batch, q, kv, e4m3), reader);
        ++shapes;
      }
    }
    MESSAGE(shapes, " shapes checked");
  }

  TEST_CASE("a shape beyond the capacities fits once clamped") {
    std::mt19937_64 rng(7);
    for (int round = 0; round < 200; ++round) {
      const Capacity c = random_capacity(rng);
      const KernelFacts kernel = random_kernel(rng);
      const int64_t batch = c.batch + std::uniform_int_distribution<int64_t>(0, 100)(rng);
      const int64_t q = c.q_tokens() + std::uniform_int_distribution<int64_t>(0, 5000)(rng);
      const int64_t kv = c.kv_tokens() + std::uniform_int_distribution<int64_t>(0, 5000)(rng);
      Problem p = run_problem(c, batch, q, kv, round % 2 == 0);
      clamp_to_capacity(p, c);
      CHECK(p.batch == std::min(batch, c.batch));
      CHECK(p.q_tokens == c.q_tokens());
      CHECK(p.kv_tokens == c.kv_tokens());
      INFO("round ", round);
      check_fits(c, kernel, 132, p, knobs("auto", "on"));
    }
  }

  TEST_CASE("the plan's workspace regions for each layout") {
    KernelFacts k;
    k.block_m = 128;
    k.ctas_per_multiprocessor = 1;
    k.dynamic_order = true;
    Capacity c;
    c.layout = Layout::packed;
    c.batch = 4;
    c.max_q_len = 300;
    c.max_kv_len = 500;
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    // ceil(1200 / 128) + 4 = 14 tiles after the count and the counter.
    CHECK(launch_workspace_bound(c, k, 132) == 32 + 14 * sizeof(TsattnTile));
    const PlanWorkspace packed = plan_workspace(c, k, 132, false);
    CHECK(packed.indptrs.offset == 256);
    CHECK(packed.indptrs.bytes == 2 * 5 * sizeof(int32_t));
    CHECK_FALSE(packed.transposed_v.present());
    CHECK(packed.bytes == 512);

    c.layout = Layout::fixed;
    CHECK(launch_workspace_bound(c, k, 132) == sizeof(unsigned long long));  // the work counter
    k.dynamic_order = false;
    CHECK(launch_workspace_bound(c, k, 132) == 0);
    k.split_partial_bytes = 1000;  // dense only: 132 CTAs x (8 counts, 2 parts)
    CHECK(launch_workspace_bound(c, k, 132) == 132 * 8 * 4 + 2 * 132 * 1000 + 256 - (132 * 8 * 4) % 256);
    c.mask = MaskMode::causal;
    CHECK(launch_workspace_bound(c, k, 132) == 0);
    // V^T: keys rounded up to 32 per batch entry, D bytes each, per kv head.
    CHECK(transposed_v_bound(c) == uint64_t{512} * 128 * 2 * 4);
    CHECK(max_items_bound(c, 128) == (3 + 4) * 8);
  }
}

}  // namespace
}  // namespace tsattn::test
