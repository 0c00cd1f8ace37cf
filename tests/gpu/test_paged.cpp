// test_paged.cpp - batch_prefill_with_paged_kv_cache and BatchPrefillPagedTSWrapper on the GPU
// (docs/paged_kv.md) against the CPU oracle (ref::reference_paged_prefill, fp64) on fresh random
// caches: shuffled page tables with repeated pages and partly filled last pages, NaN in every slot
// no request reads, out poisoned first. Every mask, both layouts, every page size, the four pool
// stride styles, host and GPU tables, all nine dtype pairs, odd sizes and empty requests; runs equal
// the one-shot call bit for bit, with lse against an fp64 log-sum-exp; on the sm90a family 16-bit
// calls run the paged kernels, which read the pages through TMA, bit for bit the call that gathers
// the pages first; a CUDA graph of a run replays with a changed page table; bad GPU tables are
// clamped without a fault. The kernel family is the
// process's (tools/dev/gpu_check.sh runs this suite again with TSATTN_KERNEL_FAMILY=sm80); run it
// under compute-sanitizer memcheck too.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "api/dtype.hpp"
#include "common/knobs.hpp"
#include "jit/driver/device_context.hpp"
#include "ref/compare.hpp"
#include "ref/float_formats.hpp"
#include "ref/paged_reference.hpp"
#include "ref/random_inputs.hpp"
#include "support/gpu.hpp"
#include "support/paged_kv_cases.hpp"
#include "support/scoped_env.hpp"

namespace tsattn::test {
namespace {

uint64_t test_seed() {
  const std::string configured = knob_string(Knob::test_seed);
  return configured.empty() ? std::random_device{}() : std::stoull(configured);
}

struct PagedCase {
  std::vector<RequestLengths> requests;
  int64_t page_size = 16;
  PageLayout layout = PageLayout::hnd;
  PoolStyle style = PoolStyle::compact;
  int hq = 4, hkv = 2, head_dim = 128;
  tsattn_dtype input = TSATTN_DTYPE_BFLOAT16, output = TSATTN_DTYPE_BFLOAT16;
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  bool device_tables = true;

  std::string describe() const {
    std::string lengths;
    for (const RequestLengths& r : requests) lengths += fmt::format("({},{})", r.q_len, r.kv_len);
    return fmt::format("{} {} page_size={} {} tables, Hq={} Hkv={} D={} {}->{} mask={} window={} lengths {}",
                       page_layout_name(layout), pool_style_name(style), page_size, device_tables ? "GPU" : "host", hq,
                       hkv, head_dim, dtype_name(input), dtype_name(output), static_cast<int>(mask), window_left,
                       lengths);
  }
};

// Host memory of one tensor and its device twin; the device view keeps the host view's strides
// and offset into its storage.
struct Mirrored {
  DeviceBuffer buffer;
  Tensor device;
  Mirrored() = default;
  Mirrored(const HostTensor& storage, const Tensor& host_view) : buffer(std::max<size_t>(storage.bytes, 16)) {
    device = host_view;
    device.device_type = TSATTN_DEVICE_CUDA;
    device.device_id = 0;
    device.data = static_cast<std::byte*>(buffer.data()) +
                  (static_cast<const std::byte*>(host_view.data) - storage.storage.get());
  }
  void upload(const HostTensor& storage) {
    if (storage.bytes > 0) buffer.upload(storage.storage.get(), storage.bytes);
  }
};

// One case's caches, q and outputs, on the host (the oracle's) and on the device (the library's).
class PagedData {
 public:
  PagedData(const PagedCase& c, std::mt19937_64& rng) : c_(c) {
    tables_ = random_page_tables(c.requests, c.page_size, rng);
    pools_ = make_page_pools(c.input, c.layout, tables_.num_pages, c.page_size, c.hkv, c.head_dim, c.style);
    fill_read_slots(pools_, tables_, rng);
    const int64_t total_q = tables_.total_q();
    q_ = HostTensor(c.input, {total_q, c.hq, c.head_dim});
    ref::fill_normal(c.input, q_.storage.get(), total_q * c.hq * c.head_dim, ref::input_stddev(c.input), rng);
    out_host_ = HostTensor(c.output, {total_q, c.hq, c.head_dim});
    k_dev_ = Mirrored(pools_.k_mem, pools_.k);
    k_dev_.upload(pools_.k_mem);
    if (pools_.v_mem.storage) {
      v_dev_ = Mirrored(pools_.v_mem, pools_.v);
      v_dev_.upload(pools_.v_mem);
    } else {  // interleaved: v is the other half of k's storage
      v_dev_.device = pools_.v;
      v_dev_.device.device_type = TSATTN_DEVICE_CUDA;
      v_dev_.device.data = static_cast<std::byte*>(k_dev_.buffer.data()) +
                           (static_cast<const std::byte*>(pools_.v.data) - pools_.k_mem.storage.get());
    }
    q_dev_ = Mirrored(q_, q_.tensor);
    q_dev_.upload(q_);
    for (Mirrored* out : {&out_a_, &out_b_}) *out = Mirrored(out_host_, out_host_.tensor);
    lse_host_ = HostTensor(TSATTN_DTYPE_FLOAT32, {total_q, c.hq});
    for (Mirrored* lse : {&lse_a_, &lse_b_}) *lse = Mirrored(lse_host_, lse_host_.tensor);
    set_tables(tables_);
  }

  // New table values (same entry counts) into the host tables and their device copies.
  void set_tables(const PageTableValues& t) {
    tables_.qo_indptr = t.qo_indptr;
    tables_.paged_kv_indptr = t.paged_kv_indptr;
    tables_.paged_kv_indices = t.paged_kv_indices;
    tables_.paged_kv_last_page_len = t.paged_kv_last_page_len;
    const std::vector<int32_t>* values[] = {&tables_.qo_indptr, &tables_.paged_kv_indptr, &tables_.paged_kv_indices,
                                            &tables_.paged_kv_last_page_len};
    for (int i = 0; i < 4; ++i) {
      host_tables_[i] = int32_tensor(*values[i]);
      if (!device_tables_[i].buffer.data()) device_tables_[i] = Mirrored(host_tables_[i], host_tables_[i].tensor);
      device_tables_[i].upload(host_tables_[i]);
    }
  }

  void poison() {
    for (Mirrored* m : {&out_a_, &out_b_, &lse_a_, &lse_b_}) m->buffer.fill_bytes(0xFF);
  }

  const Tensor& table(int i) const { return c_.device_tables ? device_tables_[i].device : host_tables_[i].tensor; }
  PagedKvCache cache() const {
    return {k_dev_.device,
            v_dev_.device,
            table(1),
            table(2),
            table(3),
            c_.page_size,
            c_.layout == PageLayout::hnd ? TSATTN_KV_LAYOUT_HND : TSATTN_KV_LAYOUT_NHD};
  }

  PrefillOptions options(bool lse_a) const {
    PrefillOptions o;
    o.mask = c_.mask;
    o.window_left = c_.window_left;
    o.out_dtype = c_.output;
    o.lse = lse_a ? &lse_a_.device : nullptr;
    return o;
  }

  // The one-shot call into out a (and lse a).
  void one_shot(bool with_lse) const {
    batch_prefill_with_paged_kv_cache(q_dev_.device, cache(), table(0), out_a_.device, options(with_lse));
  }
  // A run into out b (and lse b).
  void run(const BatchPrefillPagedTSWrapper& w, bool with_lse, bool validate = true, CUstream stream = nullptr) const {
    RunOptions o;
    o.lse = with_lse ? &lse_b_.device : nullptr;
    o.validate = validate;
    o.stream = stream;
    w.run(q_dev_.device, cache(), table(0), out_b_.device, o);
  }

  PagedPlanOptions plan_options(int64_t batch_size, int64_t max_q, int64_t max_kv) const {
    PagedPlanOptions o;
    o.batch_size = batch_size;
    o.max_seq_len_q = max_q;
    o.max_kv_len = max_kv;
    o.num_qo_heads = c_.hq;
    o.num_kv_heads = c_.hkv;
    o.head_dim = c_.head_dim;
    o.q_dtype = o.kv_dtype = c_.input;
    o.out_dtype = c_.output;
    o.mask = c_.mask;
    o.window_left = c_.window_left;
    o.page_size = c_.page_size;
    o.kv_layout = c_.layout == PageLayout::hnd ? TSATTN_KV_LAYOUT_HND : TSATTN_KV_LAYOUT_NHD;
    return o;
  }

  // The oracle for the current host tables and pools.
  std::vector<float> expected() const {
    const tsattn_tensor_view q = q_.tensor.view(), k = pools_.k.view(), v = pools_.v.view(),
                             out = out_host_.tensor.view();
    tsattn_tensor_view tables[4];
    for (int i = 0; i < 4; ++i) tables[i] = host_tables_[i].tensor.view();
    tsattn_prefill_options o;
    tsattn_prefill_options_init(&o);
    o.mask_type = c_.mask;
    o.window_left = c_.window_left;
    o.out_dtype = c_.output;
    const ref::PagedArguments args{&q,         &k,           &v,        &tables[0], &tables[1], &tables[2],
                                   &tables[3], c_.page_size, c_.layout, &o,         &out};
    return ref::reference_paged_prefill(args);
  }

  // The fp64 log-sum-exp of every row and head (-inf without a visible key), from the gathered keys.
  std::vector<double> expected_lse() const {
    const tsattn_tensor_view q = q_.tensor.view(), k = pools_.k.view(), v = pools_.v.view(),
                             out = out_host_.tensor.view();
    tsattn_tensor_view tables[4];
    for (int i = 0; i < 4; ++i) tables[i] = host_tables_[i].tensor.view();
    tsattn_prefill_options o;
    tsattn_prefill_options_init(&o);
    o.mask_type = c_.mask;
    o.window_left = c_.window_left;
    o.out_dtype = c_.output;
    const ref::GatheredPagedProblem gathered(
        {&q, &k, &v, &tables[0], &tables[1], &tables[2], &tables[3], c_.page_size, c_.layout, &o, &out});
    const Problem& p = gathered.problem();
    std::vector<double> lse;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.q_len(b); ++i)
        for (int h = 0; h < p.num_qo_heads; ++h) {
          const KeyRange range = p.mask == MaskMode::causal
                                     ? causal_key_range(i, p.q_len(b), p.kv_len(b), p.window_left)
                                     : KeyRange{0, p.kv_len(b) - 1};
          std::vector<double> scores;
          for (int64_t j = std::max<int64_t>(range.first, 0); j <= range.last; ++j) {
            double dot = 0;
            for (int d = 0; d < p.head_dim; ++d)
              dot += double{ref::load_element(p.input_dtype, p.q.data,
                                              (p.q_token_offset(b) + i) * p.q.token_stride + h * p.q.head_stride + d)} *
                     ref::load_element(
                         p.input_dtype, p.k.data,
                         (p.kv_token_offset(b) + j) * p.k.token_stride + (h / p.group_size()) * p.k.head_stride + d);
            scores.push_back(double{p.sm_scale} * dot);
          }
          if (scores.empty()) {
            lse.push_back(-std::numeric_limits<double>::infinity());
            continue;
          }
          const double m = *std::max_element(scores.begin(), scores.end());
          double sum = 0;
          for (double s : scores) sum += std::exp(s - m);
          lse.push_back(m + std::log(sum));
        }
    return lse;
  }

  std::vector<std::byte> download(const Mirrored& m) const {
    std::vector<std::byte> bytes(m.buffer.size());
    m.buffer.download(bytes.data(), bytes.size());
    return bytes;
  }
  std::vector<std::byte> out_a() const { return download(out_a_); }
  std::vector<std::byte> out_b() const { return download(out_b_); }
  std::vector<std::byte> lse_a() const { return download(lse_a_); }
  std::vector<std::byte> lse_b() const { return download(lse_b_); }
  size_t out_bytes() const { return out_host_.bytes; }
  size_t lse_bytes() const { return lse_host_.bytes; }

  ref::Comparison compare(const std::vector<std::byte>& actual) const {
    return ref::compare_output(c_.output, actual.data(), expected(), c_.hq, c_.head_dim,
                               ref::tolerance_for(c_.input, c_.output));
  }

  PageTableValues& tables() { return tables_; }
  PagePoolTensors& pools() { return pools_; }
  Mirrored& k_device() { return k_dev_; }
  Mirrored& v_device() { return v_dev_; }
  Mirrored& device_table(int i) { return device_tables_[i]; }
  const PagedCase& c() const { return c_; }

 private:
  PagedCase c_;
  PageTableValues tables_;
  PagePoolTensors pools_;
  HostTensor q_, out_host_, lse_host_;
  HostTensor host_tables_[4];
  Mirrored k_dev_, v_dev_, q_dev_, out_a_, out_b_, lse_a_, lse_b_;
  Mirrored device_tables_[4];
};

void check_close(const PagedData& data, const std::vector<std::byte>& out, const std::string& what) {
  const ref::Comparison r = data.compare(out);
  INFO(what, ": ", r.first_problem, "; max abs error ", r.max_abs_error, ", relative norm ", r.rel_norm_error);
  CHECK(r.unwritten == 0);
  CHECK(r.outside_tolerance == 0);
  CHECK(r.rel_norm_error <= ref::tolerance_for(data.c().input, data.c().output).rel_norm + r.rounding_floor);
}

// Per-request lengths with odd sizes and empty requests; causal ones keep Sq <= Sk.
std::vector<RequestLengths> random_requests(tsattn_mask_type mask, std::mt19937_64& rng) {
  const RequestLengths odd[] = {{1, 1}, {127, 127}, {129, 129}, {0, 0}, {5, 0}, {0, 33}, {64, 300}, {3, 200}};
  std::vector<RequestLengths> requests;
  for (int n = 0; n < 5; ++n) {
    RequestLengths r = odd[rng() % std::size(odd)];
    if (mask == TSATTN_MASK_CAUSAL) r.q_len = std::min(r.q_len, r.kv_len);
    requests.push_back(r);
  }
  return requests;
}

// Runs the rest of the test case twice (doctest subcases): with the paged kernels reading the pages
// wherever the device has them, at every page size (TSATTN_PAGED_KV=kernel), and with the pages
// gathered first.
void each_way_of_reading_pages(testing::ScopedEnv& env) {
  const char* mode = "gather";
  SUBCASE("TSATTN_PAGED_KV=kernel") { mode = "kernel"; }
  SUBCASE("TSATTN_PAGED_KV=gather") { mode = "gather"; }
  env.set("TSATTN_PAGED_KV", mode);
}

TEST_SUITE("gpu/paged") {
  TEST_CASE("paged calls match the oracle: every mask, layout, page size, pool style, host and GPU tables") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const std::pair<tsattn_mask_type, int64_t> masks[] = {
        {TSATTN_MASK_DENSE, -1}, {TSATTN_MASK_CAUSAL, -1}, {TSATTN_MASK_CAUSAL, 40}};
    const PoolStyle styles[] = {PoolStyle::compact, PoolStyle::padded, PoolStyle::permuted, PoolStyle::interleaved};
    for (const auto& [mask, window] : masks)
      for (PageLayout layout : {PageLayout::hnd, PageLayout::nhd})
        for (int64_t page_size : kPageSizes)
          for (bool device_tables : {false, true}) {
            PagedCase c;
            c.requests = random_requests(mask, rng);
            c.mask = mask;
            c.window_left = window;
            c.layout = layout;
            c.page_size = page_size;
            c.style = styles[rng() % std::size(styles)];
            c.device_tables = device_tables;
            PagedData data(c, rng);
            data.poison();
            INFO(c.describe());
            REQUIRE_NOTHROW(data.one_shot(false));
            synchronize_device();
            check_close(data, data.out_a(), "one-shot");
          }
  }

  TEST_CASE("every dtype pair, GQA ratios and head dim 256") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const tsattn_dtype dtypes[] = {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN};
    for (tsattn_dtype input : dtypes)
      for (tsattn_dtype output : dtypes) {
        PagedCase c;
        c.requests = {{3, 40}, {0, 0}, {70, 129}};
        c.input = input;
        c.output = output;
        c.mask = TSATTN_MASK_CAUSAL;
        c.layout = rng() % 2 ? PageLayout::hnd : PageLayout::nhd;
        PagedData data(c, rng);
        data.poison();
        INFO(c.describe());
        REQUIRE_NOTHROW(data.one_shot(false));
        synchronize_device();
        check_close(data, data.out_a(), "one-shot");
      }
    for (const auto& [hq, hkv, d] : {std::tuple{8, 1, 256}, std::tuple{6, 2, 256}, std::tuple{8, 8, 128}}) {
      PagedCase c;
      c.requests = {{129, 300}, {1, 17}};
      c.hq = hq;
      c.hkv = hkv;
      c.head_dim = d;
      c.page_size = 32;
      c.layout = PageLayout::nhd;
      c.style = PoolStyle::interleaved;
      c.mask = TSATTN_MASK_CAUSAL;
      PagedData data(c, rng);
      data.poison();
      INFO(c.describe());
      REQUIRE_NOTHROW(data.one_shot(false));
      synchronize_device();
      check_close(data, data.out_a(), "one-shot");
    }
  }

  TEST_CASE("a plan's runs equal the one-shot call bit for bit, with lse against the fp64 log-sum-exp") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    for (const auto& [mask, window] :
         {std::pair{TSATTN_MASK_DENSE, int64_t{-1}}, std::pair{TSATTN_MASK_CAUSAL, int64_t{-1}},
          std::pair{TSATTN_MASK_CAUSAL, int64_t{40}}})
      for (bool device_tables : {false, true}) {
        PagedCase c;
        c.mask = mask;
        c.window_left = window;
        c.device_tables = device_tables;
        c.page_size = 32;
        c.hq = 8;
        c.layout = rng() % 2 ? PageLayout::nhd : PageLayout::hnd;
        BatchPrefillPagedTSWrapper w;
        for (int round = 0; round < 3; ++round) {  // one plan, runs of other shapes
          c.requests = random_requests(mask, rng);
          PagedData data(c, rng);
          if (!w.planned()) w.plan(data.plan_options(8, 512, 512));
          INFO(c.describe());
          for (bool with_lse : {false, true}) {
            data.poison();
            REQUIRE_NOTHROW(data.one_shot(with_lse));
            const std::string one_shot_kernel = last_kernel_name();
            REQUIRE_NOTHROW(data.run(w, with_lse));
            if (!last_kernel_name().empty()) CHECK(last_kernel_name() == one_shot_kernel);
            synchronize_device();
            const std::vector<std::byte> a = data.out_a(), b = data.out_b();
            CHECK(std::memcmp(a.data(), b.data(), data.out_bytes()) == 0);
            check_close(data, b, with_lse ? "run with lse" : "run");
            if (!with_lse) continue;
            const std::vector<std::byte> lse_a = data.lse_a(), lse_b = data.lse_b();
            CHECK(std::memcmp(lse_a.data(), lse_b.data(), data.lse_bytes()) == 0);
            const std::vector<double> want = data.expected_lse();
            std::vector<float> got(want.size());
            std::memcpy(got.data(), lse_b.data(), got.size() * sizeof(float));
            int64_t bad = 0;
            std::string first_bad;
            for (size_t i = 0; i < want.size(); ++i) {
              const bool ok = std::isinf(want[i]) ? (std::isinf(got[i]) && got[i] < 0)
                                                  : std::fabs(got[i] - want[i]) <= 1e-3 + 1e-4 * std::fabs(want[i]);
              if (!ok && bad++ == 0) first_bad = fmt::format("lse element {}: got {} want {}", i, got[i], want[i]);
            }
            INFO(first_bad);
            CHECK(bad == 0);
          }
        }
      }
  }

  TEST_CASE("sm90a: 16-bit D128 calls read the pages through TMA (.paged kernels), bit for bit the gathered call") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const std::string family = knob_string(Knob::kernel_family);
    const bool hopper = family == "sm90a" || (family == "auto" && driver::device_info(0).cc_major == 9);
    testing::ScopedEnv env;
    // Dense paged kernels are the 128-key variant: the gathered call takes it too, for the same bits.
    env.set("TSATTN_SHORT_KEYS", "on");
    const std::pair<tsattn_mask_type, int64_t> masks[] = {
        {TSATTN_MASK_DENSE, -1}, {TSATTN_MASK_CAUSAL, -1}, {TSATTN_MASK_CAUSAL, 100}};
    for (const auto& [mask, window] : masks)
      for (int64_t page_size : kPageSizes)
        for (PageLayout layout : {PageLayout::hnd, PageLayout::nhd})
          for (int head_dim : {128, 256}) {
            PagedCase c;
            // Odd sizes and empty requests, and one long enough for many key tiles of every width.
            c.requests = random_requests(mask, rng);
            c.requests.push_back({mask == TSATTN_MASK_CAUSAL ? 211 : 300, 1001});
            c.mask = mask;
            c.window_left = window;
            c.page_size = page_size;
            c.layout = layout;
            c.head_dim = head_dim;
            c.hq = head_dim == 128 ? 8 : 4;
            c.hkv = head_dim == 128 ? 2 : 1;
            c.style = rng() % 2 ? PoolStyle::compact : PoolStyle::interleaved;
            c.device_tables = rng() % 2 == 0;
            if (rng() % 4 == 0) c.output = TSATTN_DTYPE_FLOAT8_E4M3FN;
            if (rng() % 2 == 0) c.input = TSATTN_DTYPE_FLOAT16;
            PagedData data(c, rng);
            INFO(c.describe());
            env.set("TSATTN_PAGED_KV", "kernel");
            data.poison();
            REQUIRE_NOTHROW(data.one_shot(false));
            const std::string paged_kernel = last_kernel_name();
            synchronize_device();
            const std::vector<std::byte> paged = data.out_a();
            check_close(data, paged, "pages read by the kernel");
            env.set("TSATTN_PAGED_KV", "gather");
            data.poison();
            REQUIRE_NOTHROW(data.one_shot(false));
            const std::string gathered_kernel = last_kernel_name();
            synchronize_device();
            CHECK(std::memcmp(paged.data(), data.out_a().data(), data.out_bytes()) == 0);
            // The same kernel but for the loads: ".paged" after the layout, on the Hopper family at
            // D128 (D256 calls gather).
            std::string expected = gathered_kernel;
            const size_t layout_end = expected.find(".packed") + std::string_view(".packed").size();
            REQUIRE(layout_end < expected.size() + 1);
            if (hopper && head_dim == 128) expected.insert(layout_end, ".paged");
            CHECK(paged_kernel == expected);
            // By default pages of 16 keys are gathered: the faster way for them.
            env.set("TSATTN_PAGED_KV", nullptr);
            REQUIRE_NOTHROW(data.one_shot(false));
            CHECK(last_kernel_name() == (page_size >= 32 ? expected : gathered_kernel));
          }
  }

  TEST_CASE("validate: runs beyond the plan's capacities are errors, or clamped without a fault") {
    TSATTN_REQUIRE_GPU();
    testing::ScopedEnv env;
    each_way_of_reading_pages(env);
    std::mt19937_64 rng(test_seed());
    PagedCase c;
    c.requests = {{2, 301}, {1, 5}, {1, 5}, {1, 5}, {1, 5}};
    c.page_size = 16;
    for (bool device_tables : {false, true}) {
      c.device_tables = device_tables;
      PagedData data(c, rng);
      BatchPrefillPagedTSWrapper w(data.plan_options(4, 100, 300));
      try {
        data.run(w, false);
        FAIL("a run beyond the capacities was accepted");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::value);
        CHECK(std::string(e.what()).find("exceeds the plan's batch_size=4") != std::string::npos);
      }
      REQUIRE_NOTHROW(data.run(w, true, /*validate=*/false));
      synchronize_device();
    }
  }

  TEST_CASE("a CUDA graph of a run replays with a changed page table") {
    TSATTN_REQUIRE_GPU();
    testing::ScopedEnv env;
    each_way_of_reading_pages(env);
    std::mt19937_64 rng(test_seed());
    PagedCase c;
    c.requests = {{20, 90}, {0, 0}, {64, 64}, {1, 129}};
    c.mask = TSATTN_MASK_CAUSAL;
    c.layout = PageLayout::nhd;
    c.style = PoolStyle::compact;  // a page is one block of page_stride elements: moved with one copy
    PagedData data(c, rng);
    BatchPrefillPagedTSWrapper w(data.plan_options(4, 128, 256));
    Stream stream;
    REQUIRE_NOTHROW(data.run(w, false, true, stream.get()));  // warm-up: nothing loads during capture
    stream.synchronize();
    const driver::Api& cu = driver::api();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    driver::check(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    std::string message;
    try {
      data.run(w, false, true, stream.get());
    } catch (const Error& e) {
      message = e.what();
    }
    driver::check(cu.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    REQUIRE_MESSAGE(message.empty(), message);
    driver::check(cu.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");
    for (int replay = 0; replay < 3; ++replay) {
      if (replay > 0) {
        // The same keys under other page ids: every page moves to a random new id (its slots with
        // it) and the table follows, in host and device memory alike.
        PageTableValues& t = data.tables();
        std::vector<int32_t> moved_to(static_cast<size_t>(t.num_pages));
        std::iota(moved_to.begin(), moved_to.end(), 0);
        std::shuffle(moved_to.begin(), moved_to.end(), rng);
        for (HostTensor* mem : {&data.pools().k_mem, &data.pools().v_mem}) {
          const size_t page_bytes = mem->bytes / static_cast<size_t>(t.num_pages);
          std::vector<std::byte> old(mem->storage.get(), mem->storage.get() + mem->bytes);
          for (size_t p = 0; p < moved_to.size(); ++p)
            std::memcpy(mem->storage.get() + static_cast<size_t>(moved_to[p]) * page_bytes, old.data() + p * page_bytes,
                        page_bytes);
        }
        data.k_device().upload(data.pools().k_mem);
        data.v_device().upload(data.pools().v_mem);
        PageTableValues next = t;
        for (int32_t n = 0; n < t.paged_kv_indptr.back(); ++n)
          next.paged_kv_indices[static_cast<size_t>(n)] =
              moved_to[static_cast<size_t>(t.paged_kv_indices[static_cast<size_t>(n)])];
        data.set_tables(next);
      }
      data.poison();
      driver::check(cu.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
      stream.synchronize();
      INFO("replay ", replay);
      check_close(data, data.out_b(), "graph replay");
    }
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
  }

  TEST_CASE("bad GPU tables are clamped: no fault, the other requests unaffected") {
    TSATTN_REQUIRE_GPU();
    testing::ScopedEnv env;
    each_way_of_reading_pages(env);
    std::mt19937_64 rng(test_seed());
    PagedCase c;
    c.requests = {{30, 70}, {20, 40}, {40, 129}};
    PagedData data(c, rng);
    // Finite values in every slot, so that a clamped read of any slot stays finite.
    for (HostTensor* mem : {&data.pools().k_mem, &data.pools().v_mem}) {
      if (!mem->storage) continue;
      for (size_t i = 0; i < mem->bytes / 2; ++i)
        if (std::isnan(ref::bfloat16_to_float(reinterpret_cast<uint16_t*>(mem->storage.get())[i])))
          reinterpret_cast<uint16_t*>(mem->storage.get())[i] = ref::float_to_bfloat16(0.1f);
    }
    data.k_device().upload(data.pools().k_mem);
    data.v_device().upload(data.pools().v_mem);
    const std::vector<float> good = data.expected();
    BatchPrefillPagedTSWrapper w(data.plan_options(3, 64, 160));

    PageTableValues bad = data.tables();
    for (int32_t n = bad.paged_kv_indptr[1]; n < bad.paged_kv_indptr[2]; ++n)
      bad.paged_kv_indices[static_cast<size_t>(n)] = n % 2 ? std::numeric_limits<int32_t>::min() : 1 << 30;
    bad.paged_kv_last_page_len[1] = 1 << 20;
    // Behind the library's back, as a caller under graph capture could: the host copies stay valid.
    const auto write_device = [&](const PageTableValues& t) {
      const std::vector<int32_t>* values[] = {&t.qo_indptr, &t.paged_kv_indptr, &t.paged_kv_indices,
                                              &t.paged_kv_last_page_len};
      for (int i = 0; i < 4; ++i) data.device_table(i).buffer.upload(values[i]->data(), values[i]->size() * 4);
    };
    write_device(bad);
    for (bool through_run : {false, true}) {
      INFO("through ", (through_run ? "a run" : "the one-shot call"));
      data.poison();
      REQUIRE_NOTHROW(through_run ? data.run(w, false, false) : data.one_shot(false));
      synchronize_device();
      const std::vector<std::byte> out = through_run ? data.out_b() : data.out_a();
      const int64_t row = int64_t{c.hq} * c.head_dim;
      for (int b = 0; b < 3; ++b) {
        const int64_t first = data.tables().qo_indptr[b] * row, last = data.tables().qo_indptr[b + 1] * row;
        int64_t wrong = 0, non_finite = 0;
        for (int64_t e = first; e < last; ++e) {
          const float x = ref::load_element(c.output, out.data(), e);
          non_finite += !std::isfinite(x);
          wrong += b != 1 &&
                   std::fabs(x - good[static_cast<size_t>(e)]) > 1e-2 + 2e-2 * std::fabs(good[static_cast<size_t>(e)]);
        }
        INFO("request ", b);
        CHECK(non_finite == 0);
        CHECK(wrong == 0);
      }
    }
    // Garbage indptrs and page lengths everywhere: no fault.
    for (const auto& [indptr, last] : {std::pair{std::vector<int32_t>{5, -7, std::numeric_limits<int32_t>::max(), 3},
                                                 std::vector<int32_t>{0, -1, 17}},
                                       std::pair{std::vector<int32_t>{0, 9, 1, 1 << 30},
                                                 std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 16, 0}}}) {
      PageTableValues garbage = data.tables();
      garbage.paged_kv_indptr = indptr;
      garbage.paged_kv_last_page_len = last;
      garbage.qo_indptr = {0, std::numeric_limits<int32_t>::max(), -4, static_cast<int32_t>(data.tables().total_q())};
      write_device(garbage);
      REQUIRE_NOTHROW(data.one_shot(false));
      REQUIRE_NOTHROW(data.run(w, false, false));
      synchronize_device();
    }
  }
}

}  // namespace
}  // namespace tsattn::test
