// test_paged_reference.cpp - the CPU oracle of batch_prefill_with_paged_kv_cache against a naive fp64
// attention written here from docs/paged_kv.md: key j of request b read straight from the pool
// (page page_ids[b][j / page_size], slot j % page_size, through the view's strides), masks as
// predicates on (i, j). Fresh random inputs in the slots requests read and NaN everywhere else,
// so a gather that read a wrong slot shows up as NaN. Plus a hand-computed case and the rejections
// the oracle adds to the table and pool checks.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "api/dtype.hpp"
#include "ref/float_formats.hpp"
#include "ref/paged_reference.hpp"
#include "support/paged_kv_cases.hpp"
#include "support/oracle_comparison.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {
namespace {

using ref::Accumulation;
using ref::GatheredPagedProblem;
using ref::PagedArguments;

uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("TSATTN_TEST_SEED")) return std::stoull(fixed);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

struct PagedCase {
  const char* name = "";
  tsattn_dtype in = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype out = TSATTN_DTYPE_BFLOAT16;
  int hq = 4, hkv = 4, d = 128;
  PageLayout layout = PageLayout::hnd;
  int64_t page_size = 16;
  PoolStyle style = PoolStyle::compact;
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  std::optional<double> sm_scale = std::nullopt;
  double output_scale = 1.0;
  std::vector<RequestLengths> requests = {};
  bool repeats = true;  // page ids reused within and across requests
};

std::string describe(const PagedCase& c) {
  std::string lengths;
  for (const RequestLengths& r : c.requests) lengths += fmt::format(" {}/{}", r.q_len, r.kv_len);
  return fmt::format(
      "{}: {}->{} Hq/Hkv={}/{} D={} {} page_size={} {} mask={} window_left={} sm_scale={} "
      "output_scale={} Sq/Sk:{}",
      c.name, dtype_name(c.in), dtype_name(c.out), c.hq, c.hkv, c.d, page_layout_name(c.layout), c.page_size,
      pool_style_name(c.style), static_cast<int>(c.mask), c.window_left,
      c.sm_scale ? fmt::format("{}", *c.sm_scale) : std::string("default"), c.output_scale, lengths);
}

// A paged call's tensors with their storage. Non-movable: views point into it.
class PagedSetup {
 public:
  PagedSetup(const PagedCase& c, std::mt19937_64& rng) : c_(c) {
    tables_ = random_page_tables(c.requests, c.page_size, rng, c.repeats);
    pools_ = make_page_pools(c.in, c.layout, tables_.num_pages, c.page_size, c.hkv, c.d, c.style);
    fill_read_slots(pools_, tables_, rng);
    q_mem_ = HostTensor(c.in, {tables_.total_q(), c.hq, c.d});
    for (int64_t n = 0; n < tables_.total_q() * c.hq * c.d; ++n) store_random(c.in, q_mem_.tensor.data, n, rng);
    out_mem_ = HostTensor(c.out, {tables_.total_q(), c.hq, c.d});
    std::memset(out_mem_.storage.get(), 0xFF, out_mem_.bytes);  // NaN in every output dtype
    qo_mem_ = int32_tensor(tables_.qo_indptr);
    indptr_mem_ = int32_tensor(tables_.paged_kv_indptr);
    indices_mem_ = int32_tensor(tables_.paged_kv_indices);
    last_mem_ = int32_tensor(tables_.paged_kv_last_page_len);

    tsattn_prefill_options_init(&options_);
    options_.mask_type = c.mask;
    options_.window_left = c.window_left;
    options_.has_sm_scale = c.sm_scale.has_value();
    options_.sm_scale = c.sm_scale.value_or(0.0);
    options_.output_scale = c.output_scale;
    q = q_mem_.tensor;
    out = out_mem_.tensor;
    k_cache = pools_.k;
    v_cache = pools_.v;
    qo_indptr = qo_mem_.tensor;
    paged_kv_indptr = indptr_mem_.tensor;
    paged_kv_indices = indices_mem_.tensor;
    paged_kv_last_page_len = last_mem_.tensor;
  }
  PagedSetup(const PagedSetup&) = delete;
  PagedSetup& operator=(const PagedSetup&) = delete;

  // The call's arguments, from the tensors below as they are now.
  PagedArguments arguments() {
    views_ = {q.view(),
              k_cache.view(),
              v_cache.view(),
              qo_indptr.view(),
              paged_kv_indptr.view(),
              paged_kv_indices.view(),
              out.view(),
              paged_kv_last_page_len.view()};
    return {&views_[0], &views_[1],   &views_[2], &views_[3], &views_[4], &views_[5],
            &views_[7], c_.page_size, c_.layout,  &options_,  &views_[6]};
  }

  // The contract's math in double, with plain loops: [total_q][Hq][D], request by request.
  std::vector<double> naive() const {
    const int64_t d_count = c_.d, group = c_.hq / c_.hkv;
    const double scale = static_cast<float>(c_.sm_scale.value_or(1.0 / std::sqrt(static_cast<double>(c_.d))));
    std::vector<double> result(static_cast<size_t>(tables_.total_q() * c_.hq * d_count), 0.0);
    for (int64_t b = 0; b < tables_.batch(); ++b) {
      const int64_t sq = c_.requests[static_cast<size_t>(b)].q_len, sk = c_.requests[static_cast<size_t>(b)].kv_len;
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t row = tables_.qo_indptr[static_cast<size_t>(b)] + i;
        for (int64_t h = 0; h < c_.hq; ++h) {
          const auto dot = [&](int64_t j) {
            double sum = 0;
            for (int64_t d = 0; d < d_count; ++d)
              sum += load(q, (row * c_.hq + h) * d_count + d) * pool_value(pools_.k, b, j, h / group, d);
            return sum;
          };
          tsattn::testing::naive_attention_row(
              sk, d_count, scale, c_.output_scale, [&](int64_t j) { return visible(i, j, sq, sk); }, dot,
              [&](int64_t j, int64_t d) { return pool_value(pools_.v, b, j, h / group, d); },
              result.data() + (row * c_.hq + h) * d_count);
        }
      }
    }
    return result;
  }

  // Every element of out holds the encoding of values (write_output wrote them all).
  void check_written(const std::vector<float>& values) const {
    const int size = dtype_size(c_.out);
    int64_t wrong = 0;
    alignas(16) unsigned char expected[2];
    for (size_t n = 0; n < values.size(); ++n) {
      ref::store_element(c_.out, expected, 0, values[n]);
      wrong += std::memcmp(static_cast<const unsigned char*>(out.data) + n * static_cast<size_t>(size), expected,
                           static_cast<size_t>(size)) != 0;
    }
    CHECK(wrong == 0);
  }

  const PageTableValues& tables() const { return tables_; }
  PagePoolTensors& pools() { return pools_; }

  Tensor q, k_cache, v_cache, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, out;
  tsattn_prefill_options options_{};

 private:
  static double load(const Tensor& t, int64_t offset) { return ref::load_element(t.dtype, t.data, offset); }

  double pool_value(const Tensor& pool, int64_t b, int64_t j, int64_t head, int64_t d) const {
    const int64_t page = tables_.page_ids[static_cast<size_t>(b)][static_cast<size_t>(j / c_.page_size)];
    return load(pool, pools_.offset(pool, page, j % c_.page_size, head, d));
  }

  // docs/paged_kv.md "Masks": bottom-right aligned causal, with an optional left window.
  bool visible(int64_t i, int64_t j, int64_t sq, int64_t sk) const {
    if (c_.mask == TSATTN_MASK_DENSE) return true;
    return j <= i + (sk - sq) && (c_.window_left < 1 || j >= i + sk - sq - c_.window_left);
  }

  PagedCase c_;
  PageTableValues tables_;
  PagePoolTensors pools_;
  HostTensor q_mem_, out_mem_, qo_mem_, indptr_mem_, indices_mem_, last_mem_;
  std::vector<tsattn_tensor_view> views_;
};

std::vector<PagedCase> fixed_cases() {
  std::vector<PagedCase> cases;
  cases.push_back({.name = "dense HND 16 compact, odd sizes and empty requests",
                   .requests = {{1, 1}, {127, 129}, {0, 40}, {5, 0}, {129, 127}, {0, 0}}});
  cases.push_back({.name = "causal bottom-right NHD 32 padded fp16 8/2",
                   .in = TSATTN_DTYPE_FLOAT16,
                   .out = TSATTN_DTYPE_FLOAT16,
                   .hq = 8,
                   .hkv = 2,
                   .layout = PageLayout::nhd,
                   .page_size = 32,
                   .style = PoolStyle::padded,
                   .mask = TSATTN_MASK_CAUSAL,
                   .sm_scale = 0.3,
                   .output_scale = 1.7,
                   .requests = {{3, 100}, {127, 129}, {1, 1}, {0, 0}, {64, 64}, {0, 33}}});
  cases.push_back({.name = "causal window HND 64 permuted e4m3->bf16 6/3 d256",
                   .in = TSATTN_DTYPE_FLOAT8_E4M3FN,
                   .hq = 6,
                   .hkv = 3,
                   .d = 256,
                   .page_size = 64,
                   .style = PoolStyle::permuted,
                   .mask = TSATTN_MASK_CAUSAL,
                   .window_left = 17,
                   .sm_scale = 0.05,
                   .output_scale = 2.5,
                   .requests = {{129, 200}, {1, 129}, {40, 127}, {1, 1}}});
  cases.push_back({.name = "dense NHD 128 interleaved bf16->e4m3 8/1, Sq > Sk",
                   .out = TSATTN_DTYPE_FLOAT8_E4M3FN,
                   .hq = 8,
                   .hkv = 1,
                   .layout = PageLayout::nhd,
                   .page_size = 128,
                   .style = PoolStyle::interleaved,
                   .output_scale = 3.0,
                   .requests = {{70, 300}, {2, 128}, {0, 5}, {129, 1}}});
  cases.push_back({.name = "causal window 1 HND 128 interleaved fp16->bf16 4/2 d256",
                   .in = TSATTN_DTYPE_FLOAT16,
                   .hkv = 2,
                   .d = 256,
                   .page_size = 128,
                   .style = PoolStyle::interleaved,
                   .mask = TSATTN_MASK_CAUSAL,
                   .window_left = 1,
                   .requests = {{127, 129}, {129, 257}, {0, 1}}});
  return cases;
}

// A configuration drawn at random (a different corner each run), within what the contract accepts.
PagedCase random_case(std::mt19937_64& rng) {
  auto pick = [&](auto... options) {
    const std::vector values{options...};
    return values[rng() % values.size()];
  };
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  PagedCase c{.name = "random"};
  c.in = pick(TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN);
  c.out = pick(TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN);
  std::tie(c.hq, c.hkv) = pick(std::pair{4, 4}, std::pair{8, 2}, std::pair{6, 3}, std::pair{4, 1});
  c.d = pick(128, 256);
  c.layout = pick(PageLayout::hnd, PageLayout::nhd);
  c.page_size = pick(int64_t{16}, int64_t{32}, int64_t{64}, int64_t{128});
  c.style = pick(PoolStyle::compact, PoolStyle::padded, PoolStyle::permuted, PoolStyle::interleaved);
  c.mask = pick(TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL);
  if (c.mask == TSATTN_MASK_CAUSAL && rng() % 2) c.window_left = uniform(1, 40);
  if (rng() % 2) c.sm_scale = std::uniform_real_distribution<double>(0.02, 0.5)(rng);
  c.output_scale = std::uniform_real_distribution<double>(0.25, 4.0)(rng);
  for (int64_t b = uniform(1, 4); b > 0; --b) {
    // Causal needs Sq <= Sk: the queries are the last Sq of the request's keys.
    const int64_t kv = pick(int64_t{0}, int64_t{1}, int64_t{127}, int64_t{129}, c.page_size, uniform(0, 200));
    const int64_t q = c.mask == TSATTN_MASK_CAUSAL ? uniform(0, kv) : pick(int64_t{0}, int64_t{1}, uniform(0, 130));
    c.requests.push_back({q, kv});
  }
  return c;
}

// Head dim of the hand-computed case: v of logical key j is 1 at d == j, so D must exceed Sk.
constexpr int kHandD = 128;

TEST_SUITE("ref/paged_reference") {
  TEST_CASE("matches a naive fp64 attention read straight from the pages, in both accumulation modes") {
    const uint64_t seed = fresh_seed();
    INFO("seed ", seed, " (set TSATTN_TEST_SEED to repeat)");
    std::mt19937_64 rng(seed);
    std::vector<PagedCase> cases = fixed_cases();
    for (int n = 0; n < 8; ++n) cases.push_back(random_case(rng));
    for (const PagedCase& c : cases) {
      INFO(describe(c));
      PagedSetup setup(c, rng);
      const GatheredPagedProblem gathered(setup.arguments());
      const Problem& p = gathered.problem();
      CHECK(p.layout == Layout::packed);
      CHECK(p.batch == std::ssize(c.requests));
      for (size_t b = 0; b < c.requests.size(); ++b) {
        CHECK(gathered.lengths().kv_len[b] == c.requests[b].kv_len);
        CHECK(p.kv_len(static_cast<int64_t>(b)) == c.requests[b].kv_len);
        CHECK(p.q_len(static_cast<int64_t>(b)) == c.requests[b].q_len);
      }
      const std::vector<double> want = setup.naive();

      const std::vector<float> fp64 = ref::reference_prefill(p, Accumulation::fp64);
      const tsattn::testing::OracleComparison exact = tsattn::testing::compare_with_naive(fp64, want, 1e-6, 1e-9);
      INFO("fp64: ", exact.mismatches, " mismatches, first at ", exact.first_bad, ", relative norm ",
           exact.relative_norm);
      CHECK(exact.mismatches == 0);

      const std::vector<float> fp32 = ref::reference_paged_prefill(setup.arguments(), Accumulation::fp32);
      const tsattn::testing::OracleComparison single = tsattn::testing::compare_with_naive(fp32, want, 1e-3, 1e-5);
      INFO("fp32: relative norm ", single.relative_norm, ", first mismatch at ", single.first_bad);
      CHECK(single.relative_norm < 1e-5);
      CHECK(single.mismatches == 0);

      ref::write_output(p, fp64);
      setup.check_written(fp64);
    }
  }

  TEST_CASE("hand-computed: shuffled pages keep key order, causal is bottom-right per request") {
    std::mt19937_64 rng(fresh_seed());
    for (const PageLayout layout : {PageLayout::hnd, PageLayout::nhd}) {
      for (const int64_t window_left : {int64_t{-1}, int64_t{2}}) {
        INFO(page_layout_name(layout), " window_left ", window_left);
        const PagedCase c{.name = "one-hot",
                          .hq = 1,
                          .hkv = 1,
                          .d = kHandD,
                          .layout = layout,
                          .mask = TSATTN_MASK_CAUSAL,
                          .window_left = window_left,
                          .requests = {{2, 20}, {3, 3}, {0, 5}, {1, 50}},
                          .repeats = false};  // a page's values belong to one request here
        PagedSetup setup(c, rng);
        // Every score equal (softmax is a plain average); v of key j is e_j.
        PagePoolTensors& pools = setup.pools();
        const PageTableValues& t = setup.tables();
        for (int64_t n = 0; n < t.total_q() * kHandD; ++n)
          ref::store_element(c.in, setup.q.data, n, n % 3 ? 0.25f : -0.5f);
        for (int64_t b = 0; b < t.batch(); ++b)
          for (int64_t j = 0; j < t.kv_len[static_cast<size_t>(b)]; ++j) {
            const int64_t page = t.page_ids[static_cast<size_t>(b)][static_cast<size_t>(j / c.page_size)];
            for (int64_t d = 0; d < kHandD; ++d) {
              ref::store_element(c.in, pools.k.data, pools.offset(pools.k, page, j % c.page_size, 0, d), 0.5f);
              ref::store_element(c.in, pools.v.data, pools.offset(pools.v, page, j % c.page_size, 0, d),
                                 d == j ? 1.0f : 0.0f);
            }
          }
        const std::vector<float> out = ref::reference_paged_prefill(setup.arguments());
        // (packed row, first visible key, last visible key)
        const std::vector<std::array<int64_t, 3>> rows =
            window_left < 0 ? std::vector<std::array<int64_t, 3>>{{0, 0, 18}, {1, 0, 19}, {2, 0, 0},
                                                                  {3, 0, 1},  {4, 0, 2},  {5, 0, 49}}
                            : std::vector<std::array<int64_t, 3>>{{0, 16, 18}, {1, 17, 19}, {2, 0, 0},
                                                                  {3, 0, 1},   {4, 0, 2},   {5, 47, 49}};
        REQUIRE(out.size() == rows.size() * kHandD);
        for (const auto& [row, first, last] : rows) {
          INFO("row ", row);
          for (int64_t d = 0; d < kHandD; ++d) {
            const double want = d >= first && d <= last ? 1.0 / static_cast<double>(last - first + 1) : 0.0;
            INFO("d ", d);
            CHECK(out[static_cast<size_t>(row * kHandD + d)] == doctest::Approx(want).epsilon(1e-6));
          }
        }
      }
    }
  }

  TEST_CASE("the oracle's own rejections, and table and pool errors passing through") {
    std::mt19937_64 rng(fresh_seed());
    const PagedCase base{.name = "base", .requests = {{5, 40}, {9, 4}, {0, 0}}};
    auto rejects = [&](const std::function<void(PagedSetup&)>& mutate, ErrorKind kind, const std::string& part) {
      PagedSetup setup(base, rng);
      mutate(setup);
      try {
        ref::reference_paged_prefill(setup.arguments());
        FAIL("accepted: ", part);
      } catch (const Error& e) {
        INFO("message: ", e.what());
        CHECK(e.kind() == kind);
        CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, part);
      }
    };
    rejects([](PagedSetup& s) { s.options_.mask_type = TSATTN_MASK_VARIABLE_WINDOW; }, ErrorKind::value,
            "mask_type='variable_window' is not available with a paged KV cache; use 'dense' or 'causal'");
    tsattn_tensor_view lse{};
    rejects([&](PagedSetup& s) { s.options_.lse = &lse; }, ErrorKind::value,
            "lse: the paged CPU reference computes no log-sum-exp");
    rejects([](PagedSetup& s) { s.options_.struct_size = 8; }, ErrorKind::value, "options.struct_size=8 is smaller");
    rejects(
        [](PagedSetup& s) {
          s.q.shape = {1, 14, 4, 128};
        },
        ErrorKind::value, "q must be 3-D [total_q, Hq, D] (got shape [1, 14, 4, 128])");
    rejects(
        [](PagedSetup& s) {
          s.q.shape = {14, 2, 256};
        },
        ErrorKind::value, "head dims differ: q.shape[-1]=256 but k_cache.shape[-1]=128");
    rejects(
        [](PagedSetup& s) {
          s.q.shape = {14, 6, 64};
        },
        ErrorKind::value, "head dims differ: q.shape[-1]=64 but k_cache.shape[-1]=128");
    rejects(
        [](PagedSetup& s) {
          s.q.shape = {7, 6, 128};
        },
        ErrorKind::value, "qo_indptr[-1]=14 must equal q.shape[0]=7");
    rejects(
        [](PagedSetup& s) {
          s.q.shape = {14, 6, 128};
          s.out.shape = s.q.shape;
        },
        ErrorKind::value, "Hq=q.shape[1]=6 must be a multiple of Hkv=k_cache.shape[1]=4");
    rejects([](PagedSetup& s) { s.options_.mask_type = TSATTN_MASK_CAUSAL; }, ErrorKind::value,
            "mask_type='causal' needs Sq <= Sk in every request; request 1 has Sq=9 > Sk=4");
    rejects(
        [](PagedSetup& s) {
          s.out = s.k_cache;
          s.out.shape = s.q.shape;
          s.out.strides = {};
        },
        ErrorKind::value, "out overlaps k_cache");
    rejects([](PagedSetup& s) { s.paged_kv_indices.dtype = TSATTN_DTYPE_INT64; }, ErrorKind::type,
            "paged_kv_indices has dtype int64; expected int32");
    rejects([](PagedSetup& s) { static_cast<int32_t*>(s.paged_kv_last_page_len.data)[1] = 17; }, ErrorKind::value,
            "paged_kv_last_page_len[1]=17 must be in [1, page_size=16]: request 1 has 1 page");
    rejects([](PagedSetup& s) { s.v_cache.device_type = TSATTN_DEVICE_CUDA; }, ErrorKind::value,
            "v_cache must be in host memory for the CPU reference (got cuda:0)");
    rejects([](PagedSetup& s) { s.qo_indptr.device_type = TSATTN_DEVICE_CUDA; }, ErrorKind::value,
            "qo_indptr must be in host memory here (got cuda:0)");
  }
}

}  // namespace
}  // namespace tsattn::test
