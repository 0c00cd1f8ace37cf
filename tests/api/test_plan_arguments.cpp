// test_plan_arguments.cpp - plans without a GPU (api/plan_arguments.hpp, the C ABI's plan entry
// points): every plan option rule, every run check against a plan's capacities (the one-shot
// call's rules still apply), what an unchecked run still reads and how it clamps, and the C ABI's
// create/run/destroy error paths.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "api/call_builder.hpp"
#include "api/plan_arguments.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn::test {
namespace {

// A valid plan: fixed layout, capacities B=4, Sq=64, Sk=128, Hq=8, Hkv=2, D=128, bf16.
tsattn_prefill_plan_options plan_options(tsattn_layout layout = TSATTN_LAYOUT_FIXED) {
  tsattn_prefill_plan_options o;
  tsattn_prefill_plan_options_init(&o);
  o.layout = layout;
  o.batch_size = 4;
  o.max_seq_len_q = 64;
  o.max_kv_len = 128;
  o.num_qo_heads = 8;
  o.num_kv_heads = 2;
  o.head_dim = 128;
  return o;
}

const tsattn_prefill_plan_options* ptr(const tsattn_prefill_plan_options& options) { return &options; }

void check_error(const std::function<void()>& body, tsattn_status status, const std::vector<const char*>& parts) {
  try {
    body();
    FAIL("no error raised");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(static_cast<tsattn_status>(e.kind()) == status);
    for (const char* part : parts) {
      CAPTURE(part);
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  }
}

struct PlanRule {
  const char* rule;
  std::function<void(tsattn_prefill_plan_options&)> mutate;
  tsattn_status expected;
  std::vector<const char*> parts;
};

const std::vector<PlanRule>& plan_rules() {
  constexpr auto kValue = TSATTN_ERROR_VALUE;
  constexpr auto kNotImpl = TSATTN_ERROR_NOT_IMPLEMENTED;
  static const std::vector<PlanRule> rules = {
      {"struct_size too small", [](auto& o) { o.struct_size = 8; }, kValue, {"options.struct_size=8", "_init()"}},
      {"struct_size too large", [](auto& o) { o.struct_size += 8; }, kNotImpl, {"newer tsattn"}},
      {"layout", [](auto& o) { o.layout = 2; }, kValue, {"layout=2"}},
      {"mask code", [](auto& o) { o.mask_type = 7; }, kValue, {"mask_type=7"}},
      {"window 0", [](auto& o) { o.window_left = 0; }, kValue, {"window_left=0"}},
      {"window without causal", [](auto& o) { o.window_left = 8; }, kValue, {"window_left=8", "causal"}},
      {"sm_scale nan",
       [](auto& o) {
         o.has_sm_scale = 1;
         o.sm_scale = -1.0;
       },
       kValue,
       {"sm_scale=-1"}},
      {"output_scale 0", [](auto& o) { o.output_scale = 0.0; }, kValue, {"output_scale=0"}},
      {"out_dtype float32", [](auto& o) { o.out_dtype = TSATTN_DTYPE_FLOAT32; }, kNotImpl, {"out_dtype=float32"}},
      {"q_dtype int8", [](auto& o) { o.q_dtype = TSATTN_DTYPE_INT8; }, kNotImpl, {"q_dtype=int8", "supported"}},
      {"kv_dtype differs",
       [](auto& o) { o.kv_dtype = TSATTN_DTYPE_FLOAT16; },
       kNotImpl,
       {"share one dtype", "kv_dtype=float16"}},
      {"head dim 64", [](auto& o) { o.head_dim = 64; }, kNotImpl, {"head_dim=64", "128, 256"}},
      {"no qo heads", [](auto& o) { o.num_qo_heads = 0; }, kValue, {"num_qo_heads=0"}},
      {"Hq not a multiple", [](auto& o) { o.num_qo_heads = 7; }, kValue, {"num_qo_heads=7", "num_kv_heads=2"}},
      {"batch 0", [](auto& o) { o.batch_size = 0; }, kValue, {"batch_size=0 must be >= 1"}},
      {"max_seq_len_q negative", [](auto& o) { o.max_seq_len_q = -3; }, kValue, {"max_seq_len_q=-3"}},
      {"max_kv_len 0", [](auto& o) { o.max_kv_len = 0; }, kValue, {"max_kv_len=0"}},
      {"device -1", [](auto& o) { o.device_id = -1; }, kValue, {"device=-1"}},
      {"too many query rows",
       [](auto& o) { o.max_seq_len_q = int64_t{1} << 30; },
       kValue,
       {"batch_size=4", "max_seq_len_q=1073741824", "2^31-1"}},
      {"too many key rows", [](auto& o) { o.max_kv_len = int64_t{1} << 29; }, kValue, {"max_kv_len=536870912"}},
  };
  return rules;
}

// A run of a plan, on fake CUDA tensors (host memory the checks never read, except host indptrs).
struct RunCase {
  const char* rule;
  tsattn_layout layout;
  std::function<CallBuilder()> call;
  std::function<void(tsattn_prefill_plan_options&)> plan;  // changes to the valid plan, if any
  tsattn_status expected = TSATTN_ERROR_VALUE;
  std::vector<const char*> parts;
};

CallBuilder fixed_call(int64_t batch, int64_t sq, int64_t sk) { return CallBuilder::fixed(batch, sq, sk); }

const std::vector<RunCase>& run_cases() {
  static const std::vector<RunCase> cases = {
      {"batch beyond capacity",
       TSATTN_LAYOUT_FIXED,
       [] { return fixed_call(5, 16, 32); },
       {},
       TSATTN_ERROR_VALUE,
       {"B=q.shape[0]=5", "batch_size=4"}},
      {"Sq beyond capacity",
       TSATTN_LAYOUT_FIXED,
       [] { return fixed_call(2, 65, 128); },
       {},
       TSATTN_ERROR_VALUE,
       {"Sq=q.shape[1]=65", "max_seq_len_q=64"}},
      {"Sk beyond capacity",
       TSATTN_LAYOUT_FIXED,
       [] { return fixed_call(2, 16, 129); },
       {},
       TSATTN_ERROR_VALUE,
       {"Sk=k.shape[1]=129", "max_kv_len=128"}},
      {"heads differ from the plan",
       TSATTN_LAYOUT_FIXED,
       [] { return CallBuilder::fixed(2, 16, 32, 4, 2); },
       {},
       TSATTN_ERROR_VALUE,
       {"Hq=q.shape[2]=4", "num_qo_heads=8"}},
      {"kv heads differ from the plan",
       TSATTN_LAYOUT_FIXED,
       [] { return CallBuilder::fixed(2, 16, 32, 8, 4); },
       {},
       TSATTN_ERROR_VALUE,
       {"Hkv=k.shape[2]=4", "num_kv_heads=2"}},
      {"head dim differs from the plan",
       TSATTN_LAYOUT_FIXED,
       [] { return CallBuilder::fixed(2, 16, 32, 8, 2, 256); },
       {},
       TSATTN_ERROR_VALUE,
       {"head_dim=q.shape[-1]=256", "head_dim=128"}},
      {"dtype differs from the plan",
       TSATTN_LAYOUT_FIXED,
       [] {
         CallBuilder c = CallBuilder::fixed(2, 16, 32, 8, 2, 128, TSATTN_DTYPE_FLOAT16);
         c.set_out_dtype(TSATTN_DTYPE_BFLOAT16);
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"q has dtype float16", "q_dtype is bfloat16"}},
      {"out dtype differs from the plan's",
       TSATTN_LAYOUT_FIXED,
       [] {
         CallBuilder c = fixed_call(2, 16, 32);
         c.set_out_dtype(TSATTN_DTYPE_FLOAT16);
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"out_dtype=bfloat16", "out.dtype=float16"}},
      {"another device",
       TSATTN_LAYOUT_FIXED,
       [] {
         CallBuilder c = fixed_call(2, 16, 32);
         for (Tensor* t : {&c.q, &c.k, &c.v, &c.out}) t->device_id = 1;
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"q is on cuda:1", "plan is for cuda:0"}},
      {"the one-shot rules still apply",
       TSATTN_LAYOUT_FIXED,
       [] {
         CallBuilder c = fixed_call(2, 16, 32);
         c.q.strides = {16 * 8 * 128, 8 * 128, 100, 1};
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"q.stride(2)=100"}},
      {"causal Sq > Sk",
       TSATTN_LAYOUT_FIXED,
       [] { return fixed_call(2, 33, 32); },
       [](auto& o) { o.mask_type = TSATTN_MASK_CAUSAL; },
       TSATTN_ERROR_VALUE,
       {"Sq=q.shape[1]=33 > Sk=k.shape[1]=32"}},
      {"indptrs for a fixed plan",
       TSATTN_LAYOUT_FIXED,
       [] { return CallBuilder::packed({4}, {4}); },
       {},
       TSATTN_ERROR_VALUE,
       {"fixed layout", "qo_indptr was given"}},
      {"no indptrs for a packed plan",
       TSATTN_LAYOUT_PACKED,
       [] { return fixed_call(2, 16, 32); },
       {},
       TSATTN_ERROR_VALUE,
       {"packed layout", "qo_indptr and kv_indptr are required"}},
      {"one indptr for a packed plan",
       TSATTN_LAYOUT_PACKED,
       [] {
         CallBuilder c = CallBuilder::packed({4, 5}, {8, 9});
         c.kv_indptr.reset();
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"must be given together"}},
      {"packed batch beyond capacity",
       TSATTN_LAYOUT_PACKED,
       [] {
         return CallBuilder::packed({1, 1, 1, 1, 1}, {1, 1, 1, 1, 1});
       },
       {},
       TSATTN_ERROR_VALUE,
       {"B=qo_indptr.shape[0]-1=5", "batch_size=4"}},
      {"a request's Sq beyond capacity",
       TSATTN_LAYOUT_PACKED,
       [] {
         return CallBuilder::packed({10, 65}, {10, 100});
       },
       {},
       TSATTN_ERROR_VALUE,
       {"request 1 has Sq=qo_indptr[2]-qo_indptr[1]=65", "max_seq_len_q=64"}},
      {"a request's Sk beyond capacity",
       TSATTN_LAYOUT_PACKED,
       [] {
         return CallBuilder::packed({10, 6}, {129, 100});
       },
       {},
       TSATTN_ERROR_VALUE,
       {"request 0 has Sk=kv_indptr[1]-kv_indptr[0]=129", "max_kv_len=128"}},
      {"packed total beyond capacity (GPU indptrs)",
       TSATTN_LAYOUT_PACKED,
       [] {
         CallBuilder c = CallBuilder::packed({200, 57}, {10, 10});
         c.qo_indptr = c.qo_mem->fake_cuda();  // values unknown on the host: only the totals count
         c.kv_indptr = c.kv_mem->fake_cuda();
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"total_q=q.shape[0]=257", "batch_size*max_seq_len_q=256"}},
      {"bad indptr values, as in the one-shot call",
       TSATTN_LAYOUT_PACKED,
       [] {
         CallBuilder c = CallBuilder::packed({4, 5}, {8, 9});
         c.qo_mem->as<int32_t>()[1] = 10;
         return c;
       },
       {},
       TSATTN_ERROR_VALUE,
       {"qo_indptr must be non-decreasing"}},
      {"variable-window plan without bounds",
       TSATTN_LAYOUT_FIXED,
       [] { return fixed_call(2, 16, 32); },
       [](auto& o) { o.mask_type = TSATTN_MASK_VARIABLE_WINDOW; },
       TSATTN_ERROR_VALUE,
       {"requires both variable_window_token_starts"}},
  };
  return cases;
}

RunViews run_views(CallBuilder::Views& w, const CallBuilder& c) {
  const Arguments a = c.arguments(w);
  return {a.q,
          a.k,
          a.v,
          a.qo_indptr,
          a.kv_indptr,
          a.out,
          a.options ? a.options->variable_window_token_starts : nullptr,
          a.options ? a.options->variable_window_token_ends : nullptr};
}

TEST_SUITE("api/plan_arguments") {
  TEST_CASE("every plan option rule is rejected with its kind and a message naming the option") {
    CHECK_NOTHROW(check_plan_options(ptr(plan_options())));
    for (const PlanRule& rule : plan_rules()) {
      CAPTURE(rule.rule);
      tsattn_prefill_plan_options o = plan_options();
      rule.mutate(o);
      check_error([&] { check_plan_options(&o); }, rule.expected, rule.parts);
      // The C ABI reports the same before it needs a device, and hands back no plan.
      tsattn_prefill_plan* plan = reinterpret_cast<tsattn_prefill_plan*>(&o);
      CHECK(tsattn_prefill_plan_create(&o, &plan) == rule.expected);
      CHECK(plan == nullptr);
      for (const char* part : rule.parts)
        CHECK(std::string(tsattn_last_error_message()).find(part) != std::string::npos);
    }
  }

  TEST_CASE("plan settings: defaults resolved as the one-shot call resolves them") {
    tsattn_prefill_plan_options o = plan_options(TSATTN_LAYOUT_PACKED);
    o.mask_type = TSATTN_MASK_CAUSAL;
    o.window_left = 16;
    const PlanSettings s = check_plan_options(&o);
    CHECK(s.base.layout == Layout::packed);
    CHECK(s.base.output_dtype == TSATTN_DTYPE_BFLOAT16);  // out_dtype unset: q's
    CHECK(s.scalars.out_dtype == TSATTN_DTYPE_BFLOAT16);
    CHECK(s.base.sm_scale == doctest::Approx(1.0 / std::sqrt(128.0)));
    CHECK(s.base.window_left == 16);
    CHECK(s.capacity.q_tokens() == 4 * 64);
    CHECK(s.capacity.kv_tokens() == 4 * 128);
    CHECK(s.base.q_tokens == 256);
  }

  TEST_CASE("a checked run is held to the one-shot rules and to the plan's capacities") {
    for (const RunCase& rc : run_cases()) {
      CAPTURE(rc.rule);
      tsattn_prefill_plan_options o = plan_options(rc.layout);
      if (rc.plan) rc.plan(o);
      const PlanSettings plan = check_plan_options(&o);
      CallBuilder call = rc.call();
      CallBuilder::Views w = call.views();
      const RunViews views = run_views(w, call);
      check_error([&] { checked_run_problem(plan, views, nullptr); }, rc.expected, rc.parts);
    }
  }

  TEST_CASE("a checked run within the capacities gives the one-shot call's Problem") {
    const PlanSettings plan = check_plan_options(ptr(plan_options(TSATTN_LAYOUT_PACKED)));
    CallBuilder call = CallBuilder::packed({64, 0, 1}, {128, 3, 1});
    CallBuilder::Views w = call.views();
    const Problem run = checked_run_problem(plan, run_views(w, call), nullptr);
    const Problem one_shot = call.validate();
    CHECK(run.batch == one_shot.batch);
    CHECK(run.q_tokens == one_shot.q_tokens);
    CHECK(run.kv_tokens == one_shot.kv_tokens);
    CHECK(run.sm_scale == one_shot.sm_scale);
    CHECK(run.output_scale == one_shot.output_scale);
    CHECK(run.indptr_on_host);
    CHECK(run.qo_indptr_host == one_shot.qo_indptr_host);
  }

  TEST_CASE("an unchecked run reads only structure, and clamps lengths to the capacities") {
    const PlanSettings fixed = check_plan_options(ptr(plan_options()));
    SUBCASE("shapes beyond capacity are clamped, not rejected") {
      CallBuilder call = fixed_call(6, 100, 300);
      CallBuilder::Views w = call.views();
      const Problem p = unchecked_run_problem(fixed, run_views(w, call), nullptr);
      CHECK(p.batch == 4);
      CHECK(p.q_tokens == 64);
      CHECK(p.kv_tokens == 128);
      CHECK(p.q.token_stride == 8 * 128);  // the tensors' own strides
      CHECK(p.q.batch_stride == 100 * 8 * 128);
      CHECK(p.k.batch_stride == 300 * 2 * 128);
    }
    SUBCASE("values the checked path would reject are not looked at") {
      CallBuilder call = fixed_call(2, 16, 32);
      call.q.strides = {16 * 8 * 128, 8 * 128, 100, 1};
      call.q.device_id = 3;
      CallBuilder::Views w = call.views();
      CHECK_NOTHROW(unchecked_run_problem(fixed, run_views(w, call), nullptr));
    }
    SUBCASE("packed: batch and totals clamped; indptr values never read") {
      const PlanSettings packed = check_plan_options(ptr(plan_options(TSATTN_LAYOUT_PACKED)));
      CallBuilder call = CallBuilder::packed({100, 100, 100, 100, 100, 100}, {1, 1, 1, 1, 1, 1});
      call.qo_mem->as<int32_t>()[2] = -7;
      CallBuilder::Views w = call.views();
      const Problem p = unchecked_run_problem(packed, run_views(w, call), nullptr);
      CHECK(p.batch == 4);
      CHECK(p.q_tokens == 256);
      CHECK(p.kv_tokens == 6);
      CHECK(p.indptr_on_host);
      call.kv_indptr = call.kv_mem->fake_cuda();  // one on each side: the host one cannot be read safely
      w = call.views();
      check_error([&] { unchecked_run_problem(packed, run_views(w, call), nullptr); }, TSATTN_ERROR_VALUE,
                  {"both be on the host or both on the GPU"});
    }
    SUBCASE("what the reads depend on is still required") {
      const auto unchecked = [&](const std::function<void(CallBuilder&)>& mutate) {
        return [=] {
          CallBuilder call = fixed_call(2, 16, 32);
          mutate(call);
          CallBuilder::Views w = call.views();
          unchecked_run_problem(fixed, run_views(w, call), nullptr);
        };
      };
      check_error(unchecked([](CallBuilder& c) { c.null_argument = "v"; }), TSATTN_ERROR_VALUE, {"v is required"});
      check_error(unchecked([](CallBuilder& c) { c.q.shape = {2, 16, 1024}; }), TSATTN_ERROR_VALUE, {"q must be 4-D"});
      check_error(unchecked([](CallBuilder& c) { c.k.dtype = TSATTN_DTYPE_FLOAT16; }), TSATTN_ERROR_VALUE,
                  {"k has dtype float16", "expects bfloat16"});
      check_error(unchecked([](CallBuilder& c) { c.q.shape[2] = c.out.shape[2] = 16; }), TSATTN_ERROR_VALUE,
                  {"Hq=q.shape[-2]=16", "num_qo_heads=8"});
      check_error(unchecked([](CallBuilder& c) { c.out.shape[1] = 8; }), TSATTN_ERROR_VALUE,
                  {"out.shape must equal q.shape"});
      check_error(unchecked([](CallBuilder& c) { c.k.shape[0] = c.v.shape[0] = 1; }), TSATTN_ERROR_VALUE,
                  {"batch sizes differ"});
    }
    SUBCASE("variable-window bounds must cover q's rows") {
      tsattn_prefill_plan_options o = plan_options();
      o.mask_type = TSATTN_MASK_VARIABLE_WINDOW;
      const PlanSettings plan = check_plan_options(&o);
      CallBuilder call = fixed_call(2, 16, 32);
      call.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
      call.ends_mem = int32_tensor(std::vector<int32_t>(30, 3), {2, 15});
      call.ends = call.ends_mem->fake_cuda();
      CallBuilder::Views w = call.views();
      check_error([&] { unchecked_run_problem(plan, run_views(w, call), nullptr); }, TSATTN_ERROR_VALUE,
                  {"variable_window_token_ends.shape[1]=15 must equal q.shape[1]=16"});
    }
  }

  TEST_CASE("C ABI: option structs, null arguments and plans without a device") {
    tsattn_prefill_plan_options o;
    tsattn_prefill_plan_options_init(&o);
    CHECK(o.struct_size == sizeof(tsattn_prefill_plan_options));
    CHECK(o.layout == TSATTN_LAYOUT_FIXED);
    CHECK(o.out_dtype == TSATTN_DTYPE_UNSET);
    CHECK(o.window_left == -1);
    CHECK(o.output_scale == 1.0);
    tsattn_prefill_run_options r;
    tsattn_prefill_run_options_init(&r);
    CHECK(r.struct_size == sizeof(tsattn_prefill_run_options));
    CHECK(r.validate == 1);
    CHECK(r.lse == nullptr);
    CHECK(r.stream == nullptr);
    tsattn_prefill_plan_options_init(nullptr);  // no-ops
    tsattn_prefill_run_options_init(nullptr);
    tsattn_prefill_plan_destroy(nullptr);

    const tsattn_prefill_plan_options valid = plan_options();
    CHECK(tsattn_prefill_plan_create(&valid, nullptr) == TSATTN_ERROR_VALUE);
    CHECK(std::string(tsattn_last_error_message()).find("plan is a null pointer") != std::string::npos);
    tsattn_prefill_plan* plan = nullptr;
    CHECK(tsattn_prefill_plan_create(nullptr, &plan) == TSATTN_ERROR_VALUE);
    CHECK(std::string(tsattn_last_error_message()).find("options is required") != std::string::npos);

    CallBuilder call = fixed_call(2, 16, 32);
    CallBuilder::Views w = call.views();
    CHECK(tsattn_prefill_plan_run(nullptr, &w.q, &w.k, &w.v, nullptr, nullptr, nullptr, &w.out) == TSATTN_ERROR_VALUE);
    CHECK(std::string(tsattn_last_error_message()).find("plan is a null pointer") != std::string::npos);
    CHECK(std::string(tsattn_last_kernel_name()).empty());
    r.struct_size = 4;
    CHECK(tsattn_prefill_plan_run(nullptr, &w.q, &w.k, &w.v, nullptr, nullptr, &r, &w.out) == TSATTN_ERROR_VALUE);
    CHECK(std::string(tsattn_last_error_message()).find("options.struct_size=4") != std::string::npos);

    if (!driver::unavailable_reason().empty()) {
      // No GPU here: a valid plan is a RuntimeError saying why, as the one-shot call's is.
      CHECK(tsattn_prefill_plan_create(&valid, &plan) == TSATTN_ERROR_RUNTIME);
      CHECK(plan == nullptr);
      CHECK(std::string(tsattn_last_error_message()) == driver::unavailable_reason());
      // The C++ layer throws it, and holds no plan afterwards.
      BatchPrefillTSWrapper wrapper;
      PlanOptions options;
      options.batch_size = 1;
      options.max_seq_len_q = options.max_kv_len = 16;
      options.num_qo_heads = options.num_kv_heads = 1;
      options.head_dim = 128;
      check_error([&] { wrapper.plan(options); }, TSATTN_ERROR_RUNTIME, {"libcuda.so.1"});
      CHECK_FALSE(wrapper.planned());
      check_error([&] { wrapper.run(call.q, call.k, call.v, call.out); }, TSATTN_ERROR_VALUE,
                  {"plan is a null pointer"});
    }
  }
}

}  // namespace
}  // namespace tsattn::test
