// test_short_keys.cpp - when a call runs the short-key variant (plan/short_keys.hpp), without a
// GPU: the padded key work of 128- and 160-key tiles (D128) and of 64- and 80-key tiles (D256),
// summed over requests, at the lengths measured (D128: 256, 512, 1K keys short, 2K and 8K the usual
// kernel; D256: 256 short, 512 and longer usual), packed lists from host indptrs, GPU indptrs (no
// lengths: the usual kernel), TSATTN_SHORT_KEYS forcing either way, and the choice of spec it leads
// to (sm90a 16-bit D128 dense, D256 dense and plain causal).
#include <doctest/doctest.h>

#include <vector>

#include "api/call_builder.hpp"
#include "api/kernel_choice.hpp"
#include "common/knobs.hpp"
#include "plan/short_keys.hpp"
#include "support/scoped_env.hpp"

namespace tsattn::test {
namespace {

Problem fixed_problem(int64_t batch, int64_t kv_len, int64_t head_dim = 128) {
  Problem p;
  p.batch = batch;
  p.q_tokens = kv_len;
  p.kv_tokens = kv_len;
  p.num_qo_heads = p.num_kv_heads = 8;
  p.head_dim = head_dim;
  return p;
}

// A packed problem whose host kv_indptr holds these lengths.
Problem packed_problem(const std::vector<int32_t>& kv_lens, int64_t head_dim = 128) {
  Problem p;
  p.layout = Layout::packed;
  p.batch = static_cast<int64_t>(kv_lens.size());
  p.num_qo_heads = p.num_kv_heads = 8;
  p.head_dim = head_dim;
  p.indptr_on_host = true;
  p.kv_indptr_host = {0};
  for (int32_t len : kv_lens) p.kv_indptr_host.push_back(p.kv_indptr_host.back() + len);
  p.qo_indptr_host = p.kv_indptr_host;
  p.q_tokens = p.kv_tokens = p.kv_indptr_host.back();
  return p;
}

driver::DeviceInfo hopper() {
  driver::DeviceInfo device;
  device.cc_major = 9;
  device.multiprocessors = 132;
  device.name = "test device";
  return device;
}

TEST_SUITE("plan/short_keys") {
  TEST_CASE("padded key work: 128 x sum ceil(Sk/128) against 0.97 x 160 x sum ceil(Sk/160)") {
    CHECK(padded_keys(1, 128) == 128);
    CHECK(padded_keys(1, 160) == 160);
    CHECK(padded_keys(160, 160) == 160);
    CHECK(padded_keys(161, 160) == 320);
    CHECK(padded_keys(0, 128) == 0);
    CHECK(padded_keys(-5, 160) == 0);
    PaddedKeyWork work;
    work.add(512);
    CHECK(work.short_keys == 512);
    CHECK(work.usual == 640);
    CHECK(work.short_keys_pay());  // 512 < 620.8
    work.add(2048);
    CHECK(work.short_keys == 512 + 2048);
    CHECK(work.usual == 640 + 2080);
    // The 0.97: a saving of 3% or less keeps the usual kernel. 3 x 160 = 480 keys: 512 padded
    // against 480 x 0.97 = 465.6; 5 x 128 = 640 against 4 x 160 = 640: equal work, usual kernel;
    // 129 keys: two 128-key tiles against one of 160.
    for (const auto& [kv_len, expected] : std::vector<std::pair<int64_t, bool>>{{1, true},
                                                                                {128, true},
                                                                                {129, false},
                                                                                {160, false},
                                                                                {161, true},
                                                                                {256, true},
                                                                                {320, false},
                                                                                {480, false},
                                                                                {512, true},
                                                                                {640, false},
                                                                                {1000, true},
                                                                                {1024, true},
                                                                                {1152, true},
                                                                                {1280, false},
                                                                                {2048, false},
                                                                                {4096, false},
                                                                                {8192, false},
                                                                                {1000000, false}}) {
      CAPTURE(kv_len);
      PaddedKeyWork one;
      one.add(kv_len);
      CHECK(one.short_keys_pay() == expected);
      CHECK((100 * padded_keys(kv_len, 128) < 97 * padded_keys(kv_len, 160)) == expected);
    }
    PaddedKeyWork none;  // no keys at all: nothing to save
    CHECK_FALSE(none.short_keys_pay());
  }

  TEST_CASE("the lengths measured: 256, 512 and 1K keys take 128-key tiles, 2K and 8K keep 160") {
    // H200, bf16: 128-key tiles took 0.86 (S256), 0.85-0.89 (S512), 0.94-0.95 (S1K) and 1.01 (S2K)
    // of the 160-key kernel's time. At 2K the rule keeps 160: 2048 keys pad to 2080 with 160 (1.5%).
    for (int64_t batch : {1, 4, 16, 32}) {
      CAPTURE(batch);
      CHECK(short_keys_pay(fixed_problem(batch, 256), {}));
      CHECK(short_keys_pay(fixed_problem(batch, 512), {}));
      CHECK(short_keys_pay(fixed_problem(batch, 1024), {}));
      CHECK_FALSE(short_keys_pay(fixed_problem(batch, 2048), {}));
      CHECK_FALSE(short_keys_pay(fixed_problem(batch, 8192), {}));
    }
  }

  TEST_CASE("D256: 64 x sum ceil(Sk/64) against 0.87 x 80 x sum ceil(Sk/80), 256 keys short, 512 and more not") {
    // H200, bf16, B32 x S256: 64-key tiles took 0.92-0.93 of the 80-key kernel's time, dense and
    // causal; from B8 x S1K on 1.01-1.09 (B16 x S512: dense 1.00-1.01, causal 0.97).
    const KeyTileWidths widths = key_tile_widths(256);
    CHECK(widths.short_keys == 64);
    CHECK(widths.usual == 80);
    for (const auto& [kv_len, expected] : std::vector<std::pair<int64_t, bool>>{{1, true},
                                                                                {64, true},
                                                                                {65, false},
                                                                                {80, false},
                                                                                {128, true},
                                                                                {192, true},
                                                                                {256, true},
                                                                                {320, false},
                                                                                {384, false},
                                                                                {512, false},
                                                                                {1024, false},
                                                                                {8192, false}}) {
      CAPTURE(kv_len);
      PaddedKeyWork one{widths};
      one.add(kv_len);
      CHECK(one.short_keys_pay() == expected);
      CHECK((100 * padded_keys(kv_len, 64) < 87 * padded_keys(kv_len, 80)) == expected);
      CHECK(short_keys_pay(fixed_problem(4, kv_len, 256), {}) == expected);
    }
    // Packed: summed over requests. 3 x 256 (768 against 960) and one of 512 (512 against 560):
    // 1280 < 0.87 x 1520 = 1322.4; 256 and 512: 768 against 0.87 x 880 = 765.6.
    const Problem three = packed_problem({256, 256, 256, 512}, 256);
    CHECK(short_keys_pay(three, three.kv_indptr_host));
    const Problem two = packed_problem({256, 512}, 256);
    CHECK_FALSE(short_keys_pay(two, two.kv_indptr_host));
  }

  TEST_CASE("packed lists: every request's keys from the host indptrs, and GPU indptrs keep the usual kernel") {
    CHECK(short_keys_pay(packed_problem({512, 512, 512}), packed_problem({512, 512, 512}).kv_indptr_host));
    CHECK_FALSE(short_keys_pay(packed_problem({8192, 8192}), packed_problem({8192, 8192}).kv_indptr_host));
    // Summed over requests: 3 x 512 (short 1536, usual 1920) and one of 8192 (8192 against 8320):
    // 9728 < 0.97 x 10240 = 9932.8.
    Problem mixed = packed_problem({512, 512, 512, 8192});
    CHECK(short_keys_pay(mixed, mixed.kv_indptr_host));
    // One 512 and one 8192: 8704 against 0.97 x 8960 = 8691.2.
    mixed = packed_problem({512, 8192});
    CHECK_FALSE(short_keys_pay(mixed, mixed.kv_indptr_host));
    // Empty requests pad nothing: the others decide.
    Problem with_empty = packed_problem({0, 300, 0, 200});  // 384 + 256 = 640 against 0.97 x (320 + 320)
    CHECK_FALSE(short_keys_pay(with_empty, with_empty.kv_indptr_host));
    with_empty = packed_problem({0, 256, 0, 129});  // 256 + 256 = 512 against 0.97 x (320 + 160) = 465.6
    CHECK_FALSE(short_keys_pay(with_empty, with_empty.kv_indptr_host));
    with_empty = packed_problem({0, 256, 0, 100});  // 256 + 128 = 384 against 0.97 x (320 + 160)
    CHECK(short_keys_pay(with_empty, with_empty.kv_indptr_host));
    Problem all_empty = packed_problem({0, 0});
    CHECK_FALSE(short_keys_pay(all_empty, all_empty.kv_indptr_host));
    // GPU indptrs: no lengths on the host, whatever the totals say.
    Problem gpu = packed_problem({512, 512});
    gpu.indptr_on_host = false;
    CHECK_FALSE(short_keys_pay(gpu, {}));
    CHECK_FALSE(wants_short_keys(gpu, {}, "auto"));
    CHECK(wants_short_keys(gpu, {}, "on"));
    // Values of a run that was not validated (the plan reads them as uploaded): any answer, no fault.
    const std::vector<int32_t> wild{0, 2147483647, -2147483647, 5, 2147483647};
    (void)short_keys_pay(packed_problem({1}), wild);
  }

  TEST_CASE("the spec: D256 dense and plain causal have a variant of 64-key tiles") {
    const driver::DeviceInfo device = hopper();
    for (tsattn_mask_type mask : {TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL}) {
      CAPTURE(mask);
      CallBuilder call = CallBuilder::fixed(2, 100, 256, 8, 2, 256);
      call.options.mask_type = mask;
      const Problem p = call.validate();
      const KernelChoice usual = choose_spec(p, device, Arch::sm_90a, false);
      const KernelChoice variant = choose_spec(p, device, Arch::sm_90a, false, true);
      CHECK(usual.tile.block_n == 80);
      CHECK(variant.tile.block_n == 64);
      CHECK(map_shape(variant).block_n == 64);
      KernelSpec same = variant.spec;
      same.short_keys = false;
      CHECK(same == usual.spec);
      CHECK(wants_short_keys(p, {}, "auto"));  // 256 keys: the rule takes it
    }
  }

  TEST_CASE("TSATTN_SHORT_KEYS: auto follows the rule, on and off force it, bad values are errors") {
    const Problem short_call = fixed_problem(16, 512), long_call = fixed_problem(1, 8192);
    CHECK(wants_short_keys(short_call, {}, "auto"));
    CHECK_FALSE(wants_short_keys(long_call, {}, "auto"));
    CHECK(wants_short_keys(long_call, {}, "on"));
    CHECK_FALSE(wants_short_keys(short_call, {}, "off"));
    testing::ScopedEnv env;
    env.set("TSATTN_SHORT_KEYS", nullptr);
    CHECK(knob_string(Knob::short_keys) == "auto");
    env.set("TSATTN_SHORT_KEYS", " ON ");
    CHECK(knob_string(Knob::short_keys) == "on");
    env.set("TSATTN_SHORT_KEYS", "off");
    CHECK(knob_string(Knob::short_keys) == "off");
    env.set("TSATTN_SHORT_KEYS", "sometimes");
    CHECK_THROWS_WITH_AS(knob_string(Knob::short_keys), "TSATTN_SHORT_KEYS='sometimes' is not one of auto|off|on",
                         Error);
    CHECK_FALSE(knob_info(Knob::short_keys).affects_cache_key);  // it picks a spec; specs have their own keys
  }

  TEST_CASE("the spec: the short-key variant only where the table has one, ignored elsewhere") {
    const driver::DeviceInfo device = hopper();
    CallBuilder call = CallBuilder::fixed(2, 100, 512, 8, 2, 128);
    const Problem dense = call.validate();
    const KernelChoice usual = choose_spec(dense, device, Arch::sm_90a, false);
    const KernelChoice variant = choose_spec(dense, device, Arch::sm_90a, false, true);
    CHECK_FALSE(usual.spec.short_keys);
    CHECK(variant.spec.short_keys);
    CHECK(usual.tile.block_n == 160);
    CHECK(variant.tile.block_n == 128);
    CHECK(map_shape(variant).block_n == 128);  // K and V boxes of 128 rows
    CHECK(canonical_name(variant.spec) == "prefill.sm90a.sm_90a.d128.bf16_bf16.dense.fixed.short_keys");
    KernelSpec same = variant.spec;
    same.short_keys = false;
    CHECK(same == usual.spec);  // the axis is all that differs
    CHECK(choose_spec(dense, device, Arch::sm_90a, true, true).spec.lse);
    // Kinds without a variant keep their one kernel whatever is asked.
    CallBuilder causal = CallBuilder::fixed(2, 100, 512, 8, 2, 128);
    causal.options.mask_type = TSATTN_MASK_CAUSAL;
    CHECK_FALSE(choose_spec(causal.validate(), device, Arch::sm_90a, false, true).spec.short_keys);
    CallBuilder d256_window = CallBuilder::fixed(2, 100, 512, 8, 2, 256);
    d256_window.options.mask_type = TSATTN_MASK_CAUSAL;
    d256_window.options.window_left = 64;
    CHECK_FALSE(choose_spec(d256_window.validate(), device, Arch::sm_90a, false, true).spec.short_keys);
    CallBuilder fp8 = CallBuilder::fixed(2, 100, 512, 8, 2, 128, TSATTN_DTYPE_FLOAT8_E4M3FN);
    CHECK_FALSE(choose_spec(fp8.validate(), device, Arch::sm_90a, false, true).spec.short_keys);
    // The portable family has one width.
    driver::DeviceInfo ampere = device;
    ampere.cc_major = 8;
    const KernelChoice portable = choose_spec(dense, ampere, Arch::sm_80, false, true);
    CHECK(portable.spec.family == KernelFamily::sm80);
    CHECK_FALSE(portable.spec.short_keys);
    CHECK_FALSE(choose_kernel(dense, ampere, Arch::sm_80).spec.short_keys);
  }
}

}  // namespace
}  // namespace tsattn::test
