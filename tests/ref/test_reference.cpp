// The CPU oracle against a naive fp64 attention written here straight from docs/contract.md (plain loops,
// masks as predicates on (i, j)), on fresh random inputs; plus hand-computed cases where the
// values make the visible keys readable from the output.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "api/dtype.hpp"
#include "api/validate.hpp"
#include "ref/float_formats.hpp"
#include "ref/reference.hpp"
#include "support/oracle_comparison.hpp"
#include "support/tensors.hpp"

namespace {

using tsattn::Problem;
using tsattn::Residency;
using tsattn::Tensor;
using tsattn::ref::Accumulation;
using tsattn::test::HostTensor;

uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("TSATTN_TEST_SEED")) return std::stoull(fixed);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

// One batch_prefill call to set up: `batch` requests of q_lens[0] x kv_lens[0] in the fixed
// layout, or one request per q_lens/kv_lens entry in the packed one.
struct Case {
  const char* name = "";
  tsattn_dtype in = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype out = TSATTN_DTYPE_BFLOAT16;
  bool packed = false;
  int64_t batch = 1;  // fixed layout only
  std::vector<int32_t> q_lens = {}, kv_lens = {};
  int hq = 4, hkv = 4, d = 128;
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  std::optional<double> sm_scale = std::nullopt;
  double output_scale = 1.0;
  bool fused_qkv = false;   // q, k, v are head slices of one [tokens, Hq + 2 Hkv, D] buffer
  bool padded_out = false;  // out skips one head's worth of elements after every token

  int64_t requests() const { return packed ? std::ssize(q_lens) : batch; }
  int64_t q_len(int64_t b) const { return packed ? q_lens[b] : q_lens[0]; }
  int64_t kv_len(int64_t b) const { return packed ? kv_lens[b] : kv_lens[0]; }
  int64_t total_q() const { return packed ? std::reduce(q_lens.begin(), q_lens.end(), int64_t{0}) : batch * q_lens[0]; }
  int64_t total_k() const {
    return packed ? std::reduce(kv_lens.begin(), kv_lens.end(), int64_t{0}) : batch * kv_lens[0];
  }
  int64_t q_first(int64_t b) const {
    return packed ? std::reduce(q_lens.begin(), q_lens.begin() + b, int64_t{0}) : b * q_lens[0];
  }
  int64_t kv_first(int64_t b) const {
    return packed ? std::reduce(kv_lens.begin(), kv_lens.begin() + b, int64_t{0}) : b * kv_lens[0];
  }
};

// The tensors of a Case, with their storage. Non-movable: views point into it.
class Setup {
 public:
  Setup(const Case& c, std::mt19937_64& rng) : c_(c) {
    const int64_t tq = c.packed ? c.total_q() : c.q_lens[0], tk = c.packed ? c.total_k() : c.kv_lens[0];
    auto shape = [&](int64_t tokens, int64_t heads) {
      return c.packed ? std::vector<int64_t>{tokens, heads, c.d} : std::vector<int64_t>{c.batch, tokens, heads, c.d};
    };
    if (c.fused_qkv) {
      REQUIRE(tq == tk);
      const int64_t width = c.hq + 2 * c.hkv;
      fused_ = HostTensor(c.in, shape(tq, width));
      fill_random(fused_, rng);
      const std::vector<int64_t> strides = tsattn::test::compact_strides(fused_.tensor.shape);
      q_ = slice(fused_, shape(tq, c.hq), strides, 0);
      k_ = slice(fused_, shape(tk, c.hkv), strides, c.hq * c.d);
      v_ = slice(fused_, shape(tk, c.hkv), strides, (c.hq + c.hkv) * c.d);
    } else {
      q_buf_ = HostTensor(c.in, shape(tq, c.hq));
      k_buf_ = HostTensor(c.in, shape(tk, c.hkv));
      v_buf_ = HostTensor(c.in, shape(tk, c.hkv));
      for (HostTensor* t : {&q_buf_, &k_buf_, &v_buf_}) fill_random(*t, rng);
      q_ = compact(q_buf_);
      k_ = compact(k_buf_);
      v_ = compact(v_buf_);
    }
    out_buf_ = HostTensor(c.out, shape(tq, c.hq + (c.padded_out ? 1 : 0)));
    out_ = c.padded_out ? slice(out_buf_, shape(tq, c.hq), tsattn::test::compact_strides(out_buf_.tensor.shape), 0)
                        : compact(out_buf_);
    std::memset(out_buf_.storage.get(), 0xFF, out_buf_.bytes);  // NaN in every output dtype

    if (c.packed) {
      std::vector<int32_t> qo{0}, kv{0};
      for (int64_t b = 0; b < c.requests(); ++b) {
        qo.push_back(qo.back() + c.q_lens[b]);
        kv.push_back(kv.back() + c.kv_lens[b]);
      }
      qo_indptr_ = tsattn::test::int32_tensor(qo);
      kv_indptr_ = tsattn::test::int32_tensor(kv);
    }
    if (c.mask == TSATTN_MASK_VARIABLE_WINDOW) random_bounds(rng);
  }
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;

  // Replaces the decoded value of q, k or v element [token][head][d] (token global in the packed
  // layout, request-local with b in the fixed one).
  void set(char which, int64_t b, int64_t token, int64_t head, int64_t d, float value) {
    const Tensor& t = which == 'q' ? q_ : which == 'k' ? k_ : v_;
    tsattn::ref::store_element(t.dtype, t.data, offset(t, b, token, head, d), value);
  }
  void set_bounds(std::vector<int32_t> starts, std::vector<int32_t> ends) {
    starts_values_ = std::move(starts);
    ends_values_ = std::move(ends);
    make_bound_tensors();
  }

  Problem problem() const {
    const tsattn_tensor_view q = q_.view(), k = k_.view(), v = v_.view(), out = out_.view();
    const tsattn_tensor_view qo = qo_indptr_.tensor.view(), kv = kv_indptr_.tensor.view();
    const tsattn_tensor_view starts = starts_.tensor.view(), ends = ends_.tensor.view();
    tsattn_prefill_options options;
    tsattn_prefill_options_init(&options);
    options.mask_type = c_.mask;
    options.window_left = c_.window_left;
    options.has_sm_scale = c_.sm_scale.has_value();
    options.sm_scale = c_.sm_scale.value_or(0.0);
    options.output_scale = c_.output_scale;
    if (c_.mask == TSATTN_MASK_VARIABLE_WINDOW) {
      options.variable_window_token_starts = &starts;
      options.variable_window_token_ends = &ends;
    }
    const tsattn::Arguments args{&q, &k, &v, c_.packed ? &qo : nullptr, c_.packed ? &kv : nullptr, &options, &out};
    return tsattn::validate_arguments(args, Residency::host);
  }

  // The contract's math in double, with plain loops: [total_q][Hq][D], request by request.
  std::vector<double> naive() const {
    const int64_t d_count = c_.d, group = c_.hq / c_.hkv;
    const double scale = static_cast<float>(c_.sm_scale.value_or(1.0 / std::sqrt(static_cast<double>(c_.d))));
    std::vector<double> result(static_cast<size_t>(c_.total_q() * c_.hq * d_count), 0.0);
    for (int64_t b = 0; b < c_.requests(); ++b) {
      const int64_t sq = c_.q_len(b), sk = c_.kv_len(b);
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t row = c_.q_first(b) + i;
        for (int64_t h = 0; h < c_.hq; ++h) {
          const auto dot = [&](int64_t j) {
            double sum = 0;
            for (int64_t d = 0; d < d_count; ++d)
              sum += get(q_, b, q_token(b, i), h, d) * get(k_, b, kv_token(b, j), h / group, d);
            return sum;
          };
          tsattn::testing::naive_attention_row(
              sk, d_count, scale, c_.output_scale, [&](int64_t j) { return visible(row, i, j, sq, sk); }, dot,
              [&](int64_t j, int64_t d) { return get(v_, b, kv_token(b, j), h / group, d); },
              result.data() + (row * c_.hq + h) * d_count);
        }
      }
    }
    return result;
  }

  // Every element of out's view equals the encoding of values; nothing else in its buffer moved.
  void check_written(const std::vector<float>& values) const {
    const int size = tsattn::dtype_size(c_.out);
    int64_t touched = 0, wrong = 0;
    for (int64_t n = 0; n < static_cast<int64_t>(out_buf_.bytes) / size; ++n) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(out_buf_.storage.get()) + n * size;
      touched += !std::all_of(bytes, bytes + size, [](unsigned char x) { return x == 0xFF; });
    }
    alignas(16) unsigned char expected[2];
    for (int64_t b = 0; b < c_.requests(); ++b)
      for (int64_t i = 0; i < c_.q_len(b); ++i)
        for (int64_t h = 0; h < c_.hq; ++h)
          for (int64_t d = 0; d < c_.d; ++d) {
            const float value = values[static_cast<size_t>(((c_.q_first(b) + i) * c_.hq + h) * c_.d + d)];
            tsattn::ref::store_element(c_.out, expected, 0, value);
            const auto* got =
                static_cast<const unsigned char*>(out_.data) + offset(out_, b, q_token(b, i), h, d) * size;
            wrong += std::memcmp(got, expected, static_cast<size_t>(size)) != 0;
          }
    CHECK(wrong == 0);
    CHECK(touched == c_.total_q() * c_.hq * c_.d);
  }

  const Tensor& out() const { return out_; }
  int64_t q_token(int64_t b, int64_t i) const { return c_.packed ? c_.q_first(b) + i : i; }
  int64_t kv_token(int64_t b, int64_t j) const { return c_.packed ? c_.kv_first(b) + j : j; }
  int64_t offset(const Tensor& t, int64_t b, int64_t token, int64_t head, int64_t d) const {
    const std::vector<int64_t>& s = t.strides;
    return c_.packed ? token * s[0] + head * s[1] + d * s[2] : b * s[0] + token * s[1] + head * s[2] + d * s[3];
  }

 private:
  static void fill_random(HostTensor& t, std::mt19937_64& rng) {
    // The contract's test inputs: 0.2 * randn, 0.125 * randn for FP8; redrawn where a value would be 0.
    const float sigma = t.tensor.dtype == TSATTN_DTYPE_FLOAT8_E4M3FN ? 0.125f : 0.2f;
    std::normal_distribution<float> normal(0.0f, sigma);
    const int64_t n = static_cast<int64_t>(t.bytes) / tsattn::dtype_size(t.tensor.dtype);
    for (int64_t i = 0; i < n; ++i) {
      float x;
      do {
        tsattn::ref::store_element(t.tensor.dtype, t.tensor.data, i, normal(rng));
        x = tsattn::ref::load_element(t.tensor.dtype, t.tensor.data, i);
      } while (x == 0.0f);
    }
  }
  static Tensor compact(const HostTensor& t) {
    Tensor view = t.tensor;
    view.strides = tsattn::test::compact_strides(view.shape);
    return view;
  }
  static Tensor slice(const HostTensor& t, std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t first) {
    Tensor view = t.tensor;
    view.data = static_cast<unsigned char*>(t.tensor.data) + first * tsattn::dtype_size(t.tensor.dtype);
    view.shape = std::move(shape);
    view.strides = std::move(strides);
    return view;
  }

  double get(const Tensor& t, int64_t b, int64_t token, int64_t head, int64_t d) const {
    return tsattn::ref::load_element(t.dtype, t.data, offset(t, b, token, head, d));
  }

  // docs/contract.md "Masks", verbatim: row is the global query row (bounds are indexed by it).
  bool visible(int64_t row, int64_t i, int64_t j, int64_t sq, int64_t sk) const {
    switch (c_.mask) {
      case TSATTN_MASK_DENSE: return true;
      case TSATTN_MASK_CAUSAL: return j <= i + (sk - sq) && (c_.window_left < 1 || j >= i + sk - sq - c_.window_left);
      case TSATTN_MASK_VARIABLE_WINDOW:
        return starts_values_[static_cast<size_t>(row)] <= j && j <= ends_values_[static_cast<size_t>(row)];
    }
    return false;
  }

  // Mostly valid windows, plus out-of-range and inverted ones.
  void random_bounds(std::mt19937_64& rng) {
    starts_values_.clear();
    ends_values_.clear();
    for (int64_t b = 0; b < c_.requests(); ++b) {
      const int32_t sk = static_cast<int32_t>(c_.kv_len(b));
      for (int64_t i = 0; i < c_.q_len(b); ++i) {
        std::uniform_int_distribution<int32_t> wild(-5, sk + 5);
        int32_t s = wild(rng), e = wild(rng);
        if (rng() % 4 != 0 && sk > 0) {
          s = std::uniform_int_distribution<int32_t>(0, sk - 1)(rng);
          e = std::uniform_int_distribution<int32_t>(s, sk - 1)(rng);
        }
        starts_values_.push_back(s);
        ends_values_.push_back(e);
      }
    }
    make_bound_tensors();
  }
  void make_bound_tensors() {
    const std::vector<int64_t> shape =
        c_.packed ? std::vector<int64_t>{c_.total_q()} : std::vector<int64_t>{c_.batch, c_.q_lens[0]};
    starts_ = tsattn::test::int32_tensor(starts_values_, shape);
    ends_ = tsattn::test::int32_tensor(ends_values_, shape);
  }

  Case c_;
  HostTensor fused_, q_buf_, k_buf_, v_buf_, out_buf_, qo_indptr_, kv_indptr_, starts_, ends_;
  Tensor q_, k_, v_, out_;
  std::vector<int32_t> starts_values_, ends_values_;
};

// A configuration drawn at random (a different corner each run), within what the contract accepts.
Case random_case(std::mt19937_64& rng) {
  auto pick = [&](auto... options) {
    const std::vector values{options...};
    return values[rng() % values.size()];
  };
  auto uniform = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  Case c{.name = "random"};
  c.in = pick(TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN);
  c.out = pick(TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN);
  std::tie(c.hq, c.hkv) = pick(std::pair{4, 4}, std::pair{8, 2}, std::pair{6, 3}, std::pair{8, 1});
  c.d = pick(128, 256);
  c.mask = pick(TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL, TSATTN_MASK_VARIABLE_WINDOW);
  if (c.mask == TSATTN_MASK_CAUSAL && rng() % 2) c.window_left = uniform(1, 40);
  if (rng() % 2) c.sm_scale = std::uniform_real_distribution<double>(0.02, 0.5)(rng);
  c.output_scale = std::uniform_real_distribution<double>(0.25, 4.0)(rng);
  c.packed = rng() % 2;
  c.fused_qkv = rng() % 4 == 0;
  c.padded_out = rng() % 4 == 0;
  const int requests = c.packed ? uniform(1, 4) : 1;
  c.batch = c.packed ? 1 : uniform(1, 3);
  for (int b = 0; b < requests; ++b) {
    // Causal needs Sq <= Sk; fused q/k/v share their token count; fixed requests are non-empty.
    const int32_t q = uniform(c.packed ? 0 : 1, 70);
    int32_t k = c.mask == TSATTN_MASK_CAUSAL ? q + uniform(0, 60) : uniform(c.packed ? 0 : 1, 90);
    if (c.fused_qkv) k = q;
    c.q_lens.push_back(q);
    c.kv_lens.push_back(k);
  }
  return c;
}

std::string describe(const Case& c) {
  std::string lengths;
  for (size_t b = 0; b < c.q_lens.size(); ++b) lengths += fmt::format(" {}/{}", c.q_lens[b], c.kv_lens[b]);
  return fmt::format(
      "{}: {}->{} {} Hq/Hkv={}/{} D={} mask={} window_left={} sm_scale={} output_scale={}{}{} "
      "Sq/Sk:{}",
      c.name, tsattn::dtype_name(c.in), tsattn::dtype_name(c.out),
      c.packed ? std::string("packed") : fmt::format("fixed B={}", c.batch), c.hq, c.hkv, c.d, static_cast<int>(c.mask),
      c.window_left, c.sm_scale ? fmt::format("{}", *c.sm_scale) : std::string("default"), c.output_scale,
      c.fused_qkv ? " fused_qkv" : "", c.padded_out ? " padded_out" : "", lengths);
}

// Hand-picked configurations covering every mask, layout, GQA ratio, head dim and dtype.
std::vector<Case> fixed_cases() {
  std::vector<Case> cases;
  auto add = [&](Case c) { cases.push_back(std::move(c)); };
  add({.name = "dense fixed bf16 4/4 d128", .batch = 2, .q_lens = {77}, .kv_lens = {77}});
  add({.name = "causal fixed fp16 8/2 d128 Sq<Sk scales",
       .in = TSATTN_DTYPE_FLOAT16,
       .out = TSATTN_DTYPE_FLOAT16,
       .batch = 2,
       .q_lens = {40},
       .kv_lens = {150},
       .hq = 8,
       .hkv = 2,
       .mask = TSATTN_MASK_CAUSAL,
       .sm_scale = 0.3,
       .output_scale = 1.7});
  add({.name = "causal window fixed e4m3->bf16 6/3 d256",
       .in = TSATTN_DTYPE_FLOAT8_E4M3FN,
       .q_lens = {100},
       .kv_lens = {100},
       .hq = 6,
       .hkv = 3,
       .d = 256,
       .mask = TSATTN_MASK_CAUSAL,
       .window_left = 17,
       .sm_scale = 0.05,
       .output_scale = 2.5});
  add({.name = "causal packed bf16->e4m3 8/1 d128 empty request",
       .out = TSATTN_DTYPE_FLOAT8_E4M3FN,
       .packed = true,
       .q_lens = {33, 0, 70, 5},
       .kv_lens = {50, 20, 140, 5},
       .hq = 8,
       .hkv = 1,
       .mask = TSATTN_MASK_CAUSAL,
       .output_scale = 3.0});
  add({.name = "dense packed fp16 8/2 d256 Sq>Sk and Sk=0",
       .in = TSATTN_DTYPE_FLOAT16,
       .out = TSATTN_DTYPE_BFLOAT16,
       .packed = true,
       .q_lens = {90, 12, 7},
       .kv_lens = {31, 0, 64},
       .hq = 8,
       .hkv = 2,
       .d = 256,
       .padded_out = true});
  add({.name = "variable window fixed bf16 4/4 d128",
       .batch = 2,
       .q_lens = {50},
       .kv_lens = {120},
       .mask = TSATTN_MASK_VARIABLE_WINDOW,
       .sm_scale = 0.2});
  add({.name = "variable window packed bf16 6/3 d256",
       .out = TSATTN_DTYPE_FLOAT16,
       .packed = true,
       .q_lens = {20, 0, 45},
       .kv_lens = {60, 10, 30},
       .hq = 6,
       .hkv = 3,
       .d = 256,
       .mask = TSATTN_MASK_VARIABLE_WINDOW});
  add({.name = "causal window fused QKV fixed bf16 8/2 d128",
       .batch = 2,
       .q_lens = {64},
       .kv_lens = {64},
       .hq = 8,
       .hkv = 2,
       .mask = TSATTN_MASK_CAUSAL,
       .window_left = 5,
       .fused_qkv = true});
  add({.name = "variable window fused QKV packed fp16 4/4 d256",
       .in = TSATTN_DTYPE_FLOAT16,
       .out = TSATTN_DTYPE_FLOAT16,
       .packed = true,
       .q_lens = {30, 45},
       .kv_lens = {30, 45},
       .d = 256,
       .mask = TSATTN_MASK_VARIABLE_WINDOW,
       .output_scale = 0.5,
       .fused_qkv = true,
       .padded_out = true});
  add({.name = "dense fixed e4m3->e4m3 8/1 d256",
       .in = TSATTN_DTYPE_FLOAT8_E4M3FN,
       .out = TSATTN_DTYPE_FLOAT8_E4M3FN,
       .q_lens = {20},
       .kv_lens = {200},
       .hq = 8,
       .hkv = 1,
       .d = 256,
       .sm_scale = 0.7,
       .output_scale = 40.0});
  add({.name = "causal window wider than Sk fp16 6/3",
       .in = TSATTN_DTYPE_FLOAT16,
       .batch = 3,
       .q_lens = {9},
       .kv_lens = {70},
       .hq = 6,
       .hkv = 3,
       .mask = TSATTN_MASK_CAUSAL,
       .window_left = 1000});
  add({.name = "causal window 1 packed e4m3 fused 4/4 d128",
       .in = TSATTN_DTYPE_FLOAT8_E4M3FN,
       .packed = true,
       .q_lens = {17, 66},
       .kv_lens = {17, 66},
       .mask = TSATTN_MASK_CAUSAL,
       .window_left = 1,
       .fused_qkv = true});
  add({.name = "dense long rows fixed bf16 8/2 d128", .q_lens = {16}, .kv_lens = {1000}, .hq = 8, .hkv = 2});
  return cases;
}

// Head dim of the hand-computed cases: v[key] is 1 at d == key, so d must exceed the key count.
constexpr int kHandD = 128;

// Sets q and k so that every score is equal (softmax is then a plain average) and v[key] = e_key.
void one_hot_values(Setup& s, const Case& c) {
  for (int64_t b = 0; b < c.requests(); ++b) {
    for (int64_t i = 0; i < c.q_len(b); ++i)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t d = 0; d < c.d; ++d) s.set('q', b, s.q_token(b, i), h, d, d % 3 ? 0.25f : -0.5f);
    for (int64_t j = 0; j < c.kv_len(b); ++j)
      for (int64_t h = 0; h < c.hkv; ++h)
        for (int64_t d = 0; d < c.d; ++d) {
          s.set('k', b, s.kv_token(b, j), h, d, d % 2 ? 0.5f : 0.125f);
          // The key's global number, so rows of the wrong request would show up too.
          s.set('v', b, s.kv_token(b, j), h, d, d == c.kv_first(b) + j ? 1.0f : 0.0f);
        }
  }
}

// The output of (row, head 0) must be 1/n on exactly the listed global keys, 0 elsewhere.
void check_averaged(const std::vector<float>& out, int64_t row, int hq, const std::vector<int64_t>& keys) {
  INFO("row ", row);
  for (int64_t d = 0; d < kHandD; ++d) {
    const bool expected = std::find(keys.begin(), keys.end(), d) != keys.end();
    const double want = expected ? 1.0 / static_cast<double>(keys.size()) : 0.0;
    INFO("d ", d);
    CHECK(out[static_cast<size_t>((row * hq) * kHandD + d)] == doctest::Approx(want).epsilon(1e-6));
  }
}

}  // namespace

TEST_SUITE("ref/reference") {
  TEST_CASE("matches a naive fp64 softmax on random problems, in both accumulation modes") {
    const uint64_t seed = fresh_seed();
    INFO("seed ", seed, " (set TSATTN_TEST_SEED to repeat)");
    std::mt19937_64 rng(seed);
    std::vector<Case> cases = fixed_cases();
    for (int n = 0; n < 8; ++n) cases.push_back(random_case(rng));
    for (const Case& c : cases) {
      INFO(describe(c));
      Setup setup(c, rng);
      const Problem p = setup.problem();
      const std::vector<double> want = setup.naive();

      const std::vector<float> fp64 = tsattn::ref::reference_prefill(p, Accumulation::fp64);
      const tsattn::testing::OracleComparison exact = tsattn::testing::compare_with_naive(fp64, want, 1e-6, 1e-9);
      INFO("fp64: ", exact.mismatches, " mismatches, first at ", exact.first_bad, ", relative norm ",
           exact.relative_norm);
      CHECK(exact.mismatches == 0);

      const std::vector<float> fp32 = tsattn::ref::reference_prefill(p, Accumulation::fp32);
      const tsattn::testing::OracleComparison single = tsattn::testing::compare_with_naive(fp32, want, 1e-3, 1e-5);
      INFO("fp32: relative norm ", single.relative_norm, ", first mismatch at ", single.first_bad);
      CHECK(single.relative_norm < 1e-5);
      CHECK(single.mismatches == 0);

      tsattn::ref::write_output(p, fp64);
      setup.check_written(fp64);
    }
  }

  TEST_CASE("the contract's window example: Sq=2, Sk=4, W=1") {
    const Case c{.name = "window",
                 .q_lens = {2},
                 .kv_lens = {4},
                 .hq = 1,
                 .hkv = 1,
                 .d = kHandD,
                 .mask = TSATTN_MASK_CAUSAL,
                 .window_left = 1};
    std::mt19937_64 rng(fresh_seed());
    Setup s(c, rng);
    one_hot_values(s, c);
    const std::vector<float> out = tsattn::ref::reference_prefill(s.problem());
    check_averaged(out, 0, 1, {1, 2});
    check_averaged(out, 1, 1, {2, 3});
  }

  TEST_CASE("causal with Sq < Sk is bottom-right aligned and dense allows Sq > Sk") {
    std::mt19937_64 rng(fresh_seed());
    const Case causal{
        .name = "causal", .q_lens = {3}, .kv_lens = {5}, .hq = 1, .hkv = 1, .d = kHandD, .mask = TSATTN_MASK_CAUSAL};
    Setup s(causal, rng);
    one_hot_values(s, causal);
    std::vector<float> out = tsattn::ref::reference_prefill(s.problem());
    check_averaged(out, 0, 1, {0, 1, 2});
    check_averaged(out, 1, 1, {0, 1, 2, 3});
    check_averaged(out, 2, 1, {0, 1, 2, 3, 4});

    const Case dense{.name = "dense", .q_lens = {5}, .kv_lens = {3}, .hq = 1, .hkv = 1, .d = kHandD};
    Setup t(dense, rng);
    one_hot_values(t, dense);
    out = tsattn::ref::reference_prefill(t.problem());
    for (int64_t row = 0; row < 5; ++row) check_averaged(out, row, 1, {0, 1, 2});
  }

  TEST_CASE("an empty request in a packed batch: its rows are absent, its neighbours right") {
    std::mt19937_64 rng(fresh_seed());
    const Case c{
        .name = "packed", .packed = true, .q_lens = {2, 0, 3}, .kv_lens = {3, 4, 2}, .hq = 1, .hkv = 1, .d = kHandD};
    Setup s(c, rng);
    one_hot_values(s, c);
    const Problem p = s.problem();
    CHECK(tsattn::ref::output_rows(p) == 5);
    CHECK(tsattn::ref::output_row(p, 2, 0) == 2);
    const std::vector<float> out = tsattn::ref::reference_prefill(p);
    REQUIRE(out.size() == 5 * kHandD);
    check_averaged(out, 0, 1, {0, 1, 2});
    check_averaged(out, 1, 1, {0, 1, 2});
    // Request 2 owns global keys 7 and 8.
    for (int64_t row = 2; row < 5; ++row) check_averaged(out, row, 1, {7, 8});
  }

  TEST_CASE("variable windows: inverted ranges output exactly 0, out-of-range bounds are clamped") {
    std::mt19937_64 rng(fresh_seed());
    const Case c{.name = "bounds",
                 .q_lens = {7},
                 .kv_lens = {4},
                 .hq = 1,
                 .hkv = 1,
                 .d = kHandD,
                 .mask = TSATTN_MASK_VARIABLE_WINDOW};
    Setup s(c, rng);
    one_hot_values(s, c);
    s.set_bounds({3, -5, 2, -3, 4, 1, 0}, {1, 100, 99, 0, 10, 1, 3});
    const std::vector<float> out = tsattn::ref::reference_prefill(s.problem());
    for (const int64_t empty_row : {0, 4}) {
      INFO("row ", empty_row);
      CHECK(std::all_of(out.begin() + empty_row * kHandD, out.begin() + (empty_row + 1) * kHandD,
                        [](float x) { return x == 0.0f && !std::signbit(x); }));
    }
    check_averaged(out, 1, 1, {0, 1, 2, 3});
    check_averaged(out, 2, 1, {2, 3});
    check_averaged(out, 3, 1, {0});
    check_averaged(out, 5, 1, {1});
    check_averaged(out, 6, 1, {0, 1, 2, 3});
  }

  TEST_CASE("GQA: query head h reads kv head h / (Hq / Hkv)") {
    std::mt19937_64 rng(fresh_seed());
    for (const auto& [hq, hkv] : {std::pair{8, 2}, std::pair{6, 3}, std::pair{8, 1}, std::pair{4, 4}}) {
      INFO("Hq ", hq, " Hkv ", hkv);
      const Case c{.name = "gqa", .batch = 2, .q_lens = {5}, .kv_lens = {9}, .hq = hq, .hkv = hkv, .d = kHandD};
      Setup s(c, rng);
      // Random q and k; v of kv head g is the constant g + 1, so any average reveals g.
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t j = 0; j < 9; ++j)
          for (int64_t g = 0; g < hkv; ++g)
            for (int64_t d = 0; d < kHandD; ++d) s.set('v', b, j, g, d, static_cast<float>(g + 1));
      const std::vector<float> out = tsattn::ref::reference_prefill(s.problem());
      for (int64_t row = 0; row < 10; ++row)
        for (int64_t h = 0; h < hq; ++h) {
          INFO("row ", row, " head ", h);
          CHECK(out[static_cast<size_t>((row * hq + h) * kHandD + 17)] ==
                doctest::Approx(static_cast<double>(h / (hq / hkv) + 1)).epsilon(1e-6));
        }
    }
  }

  TEST_CASE("write_output rounds to the output dtype and saturates e4m3 at 448") {
    std::mt19937_64 rng(fresh_seed());
    const Case c{.name = "saturate",
                 .out = TSATTN_DTYPE_FLOAT8_E4M3FN,
                 .batch = 2,
                 .q_lens = {3},
                 .kv_lens = {6},
                 .hq = 2,
                 .hkv = 2,
                 .d = kHandD,
                 .output_scale = 4.0};
    Setup s(c, rng);
    // v is +-256 by kv head: the output is +-1024 before rounding, beyond e4m3's 448.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t g = 0; g < 2; ++g)
          for (int64_t d = 0; d < kHandD; ++d) s.set('v', b, j, g, d, g == 0 ? 256.0f : -256.0f);
    const Problem p = s.problem();
    const std::vector<float> values = tsattn::ref::reference_prefill(p);
    CHECK(values[0] == doctest::Approx(1024.0));
    tsattn::ref::write_output(p, values);
    const auto* bytes = static_cast<const uint8_t*>(s.out().data);
    for (int64_t n = 0; n < 2 * 3 * 2 * kHandD; ++n) {
      const int64_t head = n / kHandD % 2;
      INFO("element ", n);
      CHECK(bytes[n] == (head == 0 ? 0x7E : 0xFE));
    }
    s.check_written(values);
    CHECK_THROWS_AS(tsattn::ref::write_output(p, std::vector<float>(5, 1.0f)), tsattn::Error);
  }

  TEST_CASE("the oracle refuses a Problem meant for CUDA tensors") {
    std::mt19937_64 rng(fresh_seed());
    Case c{.name = "cuda", .q_lens = {4}, .kv_lens = {4}};
    Setup s(c, rng);
    Problem p = s.problem();
    p.residency = Residency::cuda;
    try {
      (void)tsattn::ref::reference_prefill(p);
      FAIL("reference_prefill accepted a CUDA Problem");
    } catch (const tsattn::Error& e) {
      CHECK(e.kind() == tsattn::ErrorKind::value);
    }
  }

}  // TEST_SUITE
