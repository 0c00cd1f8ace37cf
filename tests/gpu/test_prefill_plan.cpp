// test_prefill_plan.cpp - plans on the GPU (docs/contract.md, "Plan once, run every layer"): every
// run writes exactly the bytes of the one-shot call on the same fresh inputs (fixed and packed
// layouts, host and GPU indptrs, odd sizes, empty requests, smaller batches than planned, GQA, the
// masks, the split tail and both work orders), one plan serves many runs of different lengths, a
// CUDA graph of 32 runs replays with new indptr values, and validate=false never faults on values
// beyond the capacities (run these under compute-sanitizer memcheck too).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/knobs.hpp"
#include "gpu/plan_case.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "support/scoped_env.hpp"

namespace tsattn::test {
namespace {

uint64_t test_seed() {
  const std::string configured = knob_string(Knob::test_seed);
  return configured.empty() ? std::random_device{}() : std::stoull(configured);
}

// One run of `wrapper` and the one-shot call on the same fresh inputs: the same bytes, and the same kernel.
void check_run(const BatchPrefillTSWrapper& wrapper, const PlanCase& c, const Lengths& l, bool device_indptrs,
               std::mt19937_64& rng, CUstream stream) {
  const std::string what =
      fmt::format("{}; {}; {} indptrs", c.describe(), l.describe(), device_indptrs ? "GPU" : "host");
  INFO(what);
  RunData data(c, l, rng);
  data.poison();
  std::string message;
  REQUIRE_MESSAGE(data.one_shot(device_indptrs, stream, &message) == TSATTN_OK, message);
  const std::string one_shot_kernel = last_kernel_name();
  REQUIRE_MESSAGE(data.run(wrapper, device_indptrs, stream, true, &message) == TSATTN_OK, message);
  // A run without query rows launches nothing (a one-shot call with GPU indptrs launches an empty list).
  if (!last_kernel_name().empty()) CHECK(last_kernel_name() == one_shot_kernel);
  synchronize_device();
  data.check_identical(what);
}

const std::vector<Lengths>& fixed_lengths() {
  static const std::vector<Lengths> lengths = {
      {{1}, {1}},                          // one query, one key
      {{127, 127, 127}, {129, 129, 129}},  // odd sizes, a smaller batch than planned
      {{129, 129}, {257, 257}},
      {{256, 256, 256, 256}, {512, 512, 512, 512}},  // the capacities themselves
  };
  return lengths;
}

const std::vector<Lengths>& packed_lengths() {
  static const std::vector<Lengths> lengths = {
      {{1, 127, 0, 129}, {1, 200, 0, 129}},  // odd sizes and an empty request
      {{129}, {129}},                        // a smaller batch than planned
      {{0, 0}, {5, 0}},                      // no query rows at all: nothing launched
      {{256, 256, 1, 255}, {512, 300, 512, 256}},
  };
  return lengths;
}

TEST_SUITE("gpu/prefill_plan") {
  TEST_CASE("a run writes the one-shot call's bytes: layouts, indptrs, masks, heads, dtypes") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    Stream stream;
    struct Heads {
      int hq, hkv;
    };
    struct Mask {
      tsattn_mask_type mask;
      int64_t window;
    };
    const Mask masks[] = {
        {TSATTN_MASK_DENSE, -1}, {TSATTN_MASK_CAUSAL, -1}, {TSATTN_MASK_CAUSAL, 33}, {TSATTN_MASK_VARIABLE_WINDOW, -1}};
    int rotation = 0;
    for (bool packed : {false, true})
      for (const Mask& m : masks)
        for (const Heads& h : {Heads{8, 2}, Heads{4, 4}, Heads{6, 2}, Heads{3, 1}}) {
          PlanCase c;
          c.packed = packed;
          c.mask = m.mask;
          c.window_left = m.window;
          c.num_qo_heads = h.hq;
          c.num_kv_heads = h.hkv;
          // Dtypes and head dims rotate so every pair meets every layout without compiling every spec.
          const tsattn_dtype inputs[] = {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN};
          c.input = inputs[rotation % 3];
          c.output = c.input == TSATTN_DTYPE_FLOAT8_E4M3FN ? TSATTN_DTYPE_BFLOAT16 : c.input;
          c.head_dim = rotation % 4 == 3 ? 256 : 128;
          ++rotation;
          INFO(c.describe());
          const BatchPrefillTSWrapper wrapper(c.options());
          for (const Lengths& l : packed ? packed_lengths() : fixed_lengths()) {
            if (!packed) {
              check_run(wrapper, c, l, false, rng, stream.get());
              continue;
            }
            for (bool device_indptrs : {false, true}) check_run(wrapper, c, l, device_indptrs, rng, stream.get());
          }
        }
  }

  TEST_CASE("the split tail and both work orders: the same decisions as the one-shot call") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    struct Knobs {
      const char* split_tail;
      const char* work_order;
      tsattn_mask_type mask;
    };
    for (const Knobs& k : {Knobs{"on", "auto", TSATTN_MASK_DENSE}, Knobs{"auto", "auto", TSATTN_MASK_DENSE},
                           Knobs{"off", "static", TSATTN_MASK_CAUSAL}, Knobs{"auto", "dynamic", TSATTN_MASK_CAUSAL}}) {
      // Knobs are read when the plan is made (and by every one-shot call).
      testing::ScopedEnv env;
      env.set("TSATTN_SPLIT_TAIL", k.split_tail).set("TSATTN_WORK_ORDER", k.work_order);
      const PlanCase c{
          .batch_size = 2, .max_q = 2048, .max_kv = 2048, .num_qo_heads = 16, .num_kv_heads = 4, .mask = k.mask};
      CAPTURE(k.split_tail);
      CAPTURE(k.work_order);
      const BatchPrefillTSWrapper wrapper(c.options());
      for (int s : {1000, 1537, 2048}) check_run(wrapper, c, {{s, s}, {s, s}}, false, rng, nullptr);
      PlanCase packed = c;
      packed.packed = true;
      const BatchPrefillTSWrapper packed_wrapper(packed.options());
      check_run(packed_wrapper, packed, {{1000, 2048}, {1500, 2048}}, true, rng, nullptr);
    }
  }

  TEST_CASE("short keys: a run takes the one-shot call's key width, by its own lengths") {
    // A dense bf16 D128 plan holds both widths (kernel_choice.hpp, has_short_keys_variant): each
    // run takes the 128-key variant exactly where the one-shot call does (plan/short_keys.hpp), so
    // check_run's bytes and names agree run by run, whatever the capacities say.
    TSATTN_REQUIRE_GPU();
    if (driver::device_info(0).cc_major != 9 || knob_string(Knob::kernel_family) != "auto") {
      MESSAGE("skipped: needs a compute capability 9.x device 0 and no TSATTN_KERNEL_FAMILY");
      return;
    }
    std::mt19937_64 rng(test_seed());
    Stream stream;
    testing::ScopedEnv env;
    env.set("TSATTN_SHORT_KEYS", nullptr);
    for (tsattn_dtype dtype : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT16}) {
      PlanCase c{.batch_size = 4, .max_q = 512, .max_kv = 8192, .input = dtype, .output = dtype};
      const BatchPrefillTSWrapper wrapper(c.options());
      struct Run {
        Lengths lengths;
        bool short_keys;
      };
      for (const Run& r : {Run{{{512, 512}, {512, 512}}, true}, Run{{{64}, {8192}}, false},
                           Run{{{127, 127, 127}, {129, 129, 129}}, false}, Run{{{1}, {1}}, true},
                           Run{{{256, 256, 256, 256}, {256, 256, 256, 256}}, true}}) {
        check_run(wrapper, c, r.lengths, false, rng, stream.get());
        CHECK(last_kernel_name().ends_with(".short_keys") == r.short_keys);
      }
      PlanCase packed = c;
      packed.packed = true;
      const BatchPrefillTSWrapper packed_wrapper(packed.options());
      // Host indptrs: every request's keys (an empty one among them); GPU indptrs: the 160-key kernel.
      // Keys 1, 127, 0, 129: 128-key tiles walk 512 columns, 160-key ones 480, so the usual kernel.
      for (const Run& r : {Run{{{100, 0, 256}, {500, 7, 512}}, true}, Run{{{64, 64}, {8192, 512}}, false},
                           Run{{{1, 127, 0, 129}, {1, 127, 0, 129}}, false}}) {
        check_run(packed_wrapper, packed, r.lengths, false, rng, stream.get());
        CHECK(last_kernel_name().ends_with(".short_keys") == r.short_keys);
        check_run(packed_wrapper, packed, r.lengths, true, rng, stream.get());
        CHECK_FALSE(last_kernel_name().ends_with(".short_keys"));
      }
    }
    // Forced when the plan is made (and at every one-shot call): one width for every run.
    for (const char* forced : {"on", "off"}) {
      CAPTURE(forced);
      env.set("TSATTN_SHORT_KEYS", forced);
      const PlanCase c{.batch_size = 2, .max_q = 256, .max_kv = 4096};
      const BatchPrefillTSWrapper wrapper(c.options());
      for (const Lengths& l : {Lengths{{256, 256}, {512, 512}}, Lengths{{100}, {4096}}}) {
        check_run(wrapper, c, l, false, rng, stream.get());
        CHECK(last_kernel_name().ends_with(".short_keys") == (std::string(forced) == "on"));
      }
    }
  }

  TEST_CASE("one plan serves many runs of different lengths") {
    TSATTN_REQUIRE_GPU();
    const uint64_t seed = test_seed();
    MESSAGE("seed ", seed, " (set TSATTN_TEST_SEED to replay)");
    std::mt19937_64 rng(seed);
    Stream stream;
    for (bool packed : {true, false})
      for (tsattn_mask_type mask : {TSATTN_MASK_CAUSAL, TSATTN_MASK_DENSE}) {
        const PlanCase c{.packed = packed, .batch_size = 6, .max_q = 300, .max_kv = 700, .mask = mask};
        const BatchPrefillTSWrapper wrapper(c.options());
        for (int i = 0; i < 24; ++i) check_run(wrapper, c, random_lengths(c, rng), i % 2 == 1, rng, stream.get());
      }
  }

  TEST_CASE("packed runs build their tile list in the kernel up to 128 requests, through the planner above") {
    // One workspace serves both: the kernel's list (state word 0 -> building -> ready -> 0 at the
    // last claim) and the planner's (ready, left 0 by the kernel's last claim). Runs alternate, and
    // each must equal the one-shot call, whose list always comes from the planner.
    TSATTN_REQUIRE_GPU();
    const uint64_t seed = test_seed();
    MESSAGE("seed ", seed, " (set TSATTN_TEST_SEED to replay)");
    std::mt19937_64 rng(seed);
    Stream stream;
    for (tsattn_mask_type mask : {TSATTN_MASK_CAUSAL, TSATTN_MASK_DENSE}) {
      const PlanCase c{.packed = true, .batch_size = 160, .max_q = 140, .max_kv = 300, .mask = mask};
      const BatchPrefillTSWrapper wrapper(c.options());
      for (int i = 0; i < 8; ++i) {
        Lengths l = random_lengths(c, rng);
        const size_t batch = i % 2 == 0 ? 150 : 1 + i * 17;  // above and within the kernel's 128
        while (l.q.size() < batch) {
          l.q.push_back(l.q.back());
          l.kv.push_back(l.kv.back());
        }
        l.q.resize(batch);
        l.kv.resize(batch);
        check_run(wrapper, c, l, true, rng, stream.get());
      }
    }
  }

  TEST_CASE("a CUDA graph of 32 runs replays with new GPU indptr values, as 32 one-shot calls") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const driver::Api& cu = driver::api();
    Stream stream;
    const PlanCase c{.packed = true, .batch_size = 5, .max_q = 200, .max_kv = 400, .mask = TSATTN_MASK_CAUSAL};
    const BatchPrefillTSWrapper wrapper(c.options());
    // 32 runs of fixed totals, each with its own tensors and indptrs.
    constexpr int kRuns = 32;
    const Lengths start{{100, 50, 0, 150, 7}, {200, 50, 10, 300, 40}};
    std::vector<std::unique_ptr<RunData>> runs;
    for (int i = 0; i < kRuns; ++i) runs.push_back(std::make_unique<RunData>(c, start, rng));
    // Warm up outside the capture (the first run of a kernel may load it), then capture.
    std::string message;
    REQUIRE_MESSAGE(runs[0]->run(wrapper, true, stream.get(), true, &message) == TSATTN_OK, message);
    stream.synchronize();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    driver::check(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    tsattn_status captured = TSATTN_OK;
    for (int i = 0; i < kRuns && captured == TSATTN_OK; ++i)
      captured = runs[static_cast<size_t>(i)]->run(wrapper, true, stream.get(), true, &message);
    driver::check(cu.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    REQUIRE_MESSAGE(captured == TSATTN_OK, message);
    driver::check(cu.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");

    // New lengths with the same totals per replay: 200 + 100 + ... split anew, Sq <= Sk per request.
    const auto resplit = [&] {
      std::vector<int32_t> qo{0}, kv{0};
      int32_t q_left = 307, extra_left = 293;
      for (int b = 0; b < 5; ++b) {
        const int32_t q = b == 4 ? q_left : std::uniform_int_distribution<int32_t>(0, std::min(q_left, 200))(rng);
        const int32_t extra =
            b == 4 ? extra_left : std::uniform_int_distribution<int32_t>(0, std::min(extra_left, 400 - q))(rng);
        q_left -= q;
        extra_left -= extra;
        qo.push_back(qo.back() + q);
        kv.push_back(kv.back() + q + extra);
      }
      return std::pair{qo, kv};
    };
    for (int replay = 0; replay < 3; ++replay) {
      CAPTURE(replay);
      for (auto& run : runs) {
        const auto [qo, kv] = resplit();
        run->set_indptrs(qo, kv);
        run->poison();
      }
      driver::check(cu.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
      stream.synchronize();
      for (int i = 0; i < kRuns; ++i) {
        RunData& run = *runs[static_cast<size_t>(i)];
        REQUIRE_MESSAGE(run.one_shot(true, stream.get(), &message) == TSATTN_OK, message);
        stream.synchronize();
        run.check_identical(fmt::format("replay {}, run {}", replay, i));
      }
    }
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
  }

  TEST_CASE("host indptrs while the stream captures are a ValueError, as in the one-shot call") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const driver::Api& cu = driver::api();
    Stream stream;
    PlanCase c;
    c.packed = true;
    const BatchPrefillTSWrapper wrapper(c.options());
    RunData data(c, {{10, 20}, {10, 20}}, rng);
    std::string message;
    driver::check(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    const tsattn_status status = data.run(wrapper, false, stream.get(), true, &message);
    CUgraph graph = nullptr;
    driver::check(cu.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    if (graph) cu.cuGraphDestroy(graph);
    CHECK(status == TSATTN_ERROR_VALUE);
    CHECK(message.find("capturing") != std::string::npos);
  }

  TEST_CASE("validate=true: shapes beyond the capacities are ValueErrors and nothing is written") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    for (bool packed : {false, true}) {
      const PlanCase c{.packed = packed, .batch_size = 2, .max_q = 64, .max_kv = 64};
      const BatchPrefillTSWrapper wrapper(c.options());
      const Lengths too_long = packed ? Lengths{{65, 1}, {64, 1}} : Lengths{{65, 65}, {64, 64}};
      const Lengths too_many = Lengths{{8, 8, 8}, {8, 8, 8}};
      for (const Lengths* lengths : {&too_long, &too_many})
        for (bool device_indptrs : {false, true}) {
          const Lengths& l = *lengths;
          if (!packed && device_indptrs) continue;
          RunData data(c, l, rng);
          data.poison();
          std::string message;
          const tsattn_status status = data.run(wrapper, device_indptrs, nullptr, true, &message);
          synchronize_device();
          CAPTURE(message);
          // GPU indptr values are not read by a run: one long request within the totals is clamped, not refused.
          if (packed && device_indptrs && lengths == &too_long) {
            CHECK(status == TSATTN_OK);
            continue;
          }
          CHECK(status == TSATTN_ERROR_VALUE);
          const bool names_capacity = message.find("exceeds the plan's") != std::string::npos ||
                                      message.find("more than the plan's") != std::string::npos;
          CHECK(names_capacity);
          CHECK(data.poisoned_run_elements() ==
                static_cast<int64_t>(data.out_run.shape[0]) * (packed ? 1 : data.out_run.shape[1]) * 8 * 128);
        }
    }
  }

  TEST_CASE("validate=false with values beyond the capacities runs without faults") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    Stream stream;
    SUBCASE("fixed: tensors larger than the plan write only the planned prefix") {
      const PlanCase c{.batch_size = 2, .max_q = 64, .max_kv = 100};
      const BatchPrefillTSWrapper wrapper(c.options());
      RunData data(c, {{130, 130, 130}, {300, 300, 300}}, rng);
      data.poison();
      std::string message;
      REQUIRE_MESSAGE(data.run(wrapper, false, stream.get(), false, &message) == TSATTN_OK, message);
      stream.synchronize();
      // 2 of 3 requests, 64 of 130 rows each: the rest stays poisoned.
      const int64_t row = int64_t{c.num_qo_heads} * c.head_dim;
      CHECK(data.poisoned_run_elements() == 3 * 130 * row - 2 * 64 * row);
    }
    SUBCASE("packed: malformed and oversized indptrs, on the GPU and on the host") {
      const PlanCase c{.packed = true, .batch_size = 3, .max_q = 64, .max_kv = 64, .mask = TSATTN_MASK_CAUSAL};
      const BatchPrefillTSWrapper wrapper(c.options());
      const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> bad = {
          {{0, 500, 20, 1000000, -5}, {0, -100, 40, 7, 2000000000}},  // decreasing, negative, huge
          {{-2147483647, 2147483647, 0, 1, 2}, {2147483647, -2147483647, 3, 3, 3}},
          {{0, 64, 128, 192, 256}, {0, 64, 128, 192, 256}},  // one request more than planned
      };
      for (bool device_indptrs : {true, false})
        for (const auto& [qo, kv] : bad) {
          RunData data(c, {{64, 64, 64, 64}, {64, 64, 64, 64}}, rng);  // 256 rows > 3 x 64
          data.set_indptrs(qo, kv);
          data.poison();
          std::string message;
          CHECK_MESSAGE(data.run(wrapper, device_indptrs, stream.get(), false, &message) == TSATTN_OK, message);
          stream.synchronize();  // throws if a kernel faulted
        }
    }
  }
}

}  // namespace
}  // namespace tsattn::test
