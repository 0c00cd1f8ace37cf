// test_paged_arguments.cpp - the paged call's argument rules (api/paged_arguments.hpp) without a GPU:
// what inspect_paged_kv gives for valid calls (host and GPU tables), and every rejection through the
// C ABI, one argument broken at a time: kind and a message naming the argument and value. Tensors
// are fake CUDA views of host memory (the checks never read them); host tables are real.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "api/paged_arguments.hpp"
#include "support/paged_kv_cases.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {
namespace {

Tensor as_cuda(Tensor t) {
  t.device_type = TSATTN_DEVICE_CUDA;
  t.device_id = 0;
  return t;
}

struct PagedResult {
  tsattn_status status;
  std::string message;
};

// A valid paged call: 3 requests, Hq 4, Hkv 2, D 128, page_size 16, HND, host tables.
struct PagedCall {
  PageTableValues t;
  PagePoolTensors pools;
  HostTensor q_mem, out_mem, qo_mem, indptr_mem, indices_mem, last_mem;
  Tensor q, k_cache, v_cache, out, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len;
  std::optional<Tensor> lse;
  HostTensor lse_mem;
  int64_t page_size = 16;
  int32_t kv_layout = TSATTN_KV_LAYOUT_HND;
  tsattn_prefill_options options{};

  PagedCall() {
    std::mt19937_64 rng(11);
    t = random_page_tables({{5, 40}, {0, 0}, {7, 17}}, 16, rng);
    pools = make_page_pools(TSATTN_DTYPE_BFLOAT16, PageLayout::hnd, t.num_pages, 16, 2, 128, PoolStyle::compact);
    k_cache = as_cuda(pools.k);
    v_cache = as_cuda(pools.v);
    q_mem = HostTensor(TSATTN_DTYPE_BFLOAT16, {t.total_q(), 4, 128});
    out_mem = HostTensor(TSATTN_DTYPE_BFLOAT16, {t.total_q(), 4, 128});
    q = q_mem.fake_cuda();
    out = out_mem.fake_cuda();
    set_tables();
    tsattn_prefill_options_init(&options);
  }

  void set_tables() {
    qo_mem = int32_tensor(t.qo_indptr);
    indptr_mem = int32_tensor(t.paged_kv_indptr);
    indices_mem = int32_tensor(t.paged_kv_indices);
    last_mem = int32_tensor(t.paged_kv_last_page_len);
    qo_indptr = qo_mem.tensor;
    paged_kv_indptr = indptr_mem.tensor;
    paged_kv_indices = indices_mem.tensor;
    paged_kv_last_page_len = last_mem.tensor;
  }

  void tables_on_gpu() {
    for (Tensor* table : {&qo_indptr, &paged_kv_indptr, &paged_kv_indices, &paged_kv_last_page_len})
      *table = as_cuda(*table);
  }

  PagedResult call() {
    const tsattn_tensor_view qv = q.view(), kc = k_cache.view(), vc = v_cache.view(), ov = out.view(),
                             qo = qo_indptr.view(), indptr = paged_kv_indptr.view(), indices = paged_kv_indices.view(),
                             last = paged_kv_last_page_len.view();
    std::optional<tsattn_tensor_view> lse_view;
    if (lse) lse_view = lse->view();
    tsattn_prefill_options o = options;
    o.lse = lse_view ? &*lse_view : nullptr;
    const tsattn_status status = tsattn_batch_prefill_with_paged_kv_cache(&qv, &kc, &vc, &qo, &indptr, &indices, &last,
                                                                          page_size, kv_layout, &o, &ov);
    return {status, tsattn_last_error_message()};
  }

  PagedKv inspect(TableValues values = TableValues::checked) const {
    const tsattn_tensor_view qv = q.view(), kc = k_cache.view(), vc = v_cache.view(), ov = out.view(),
                             qo = qo_indptr.view(), indptr = paged_kv_indptr.view(), indices = paged_kv_indices.view(),
                             last = paged_kv_last_page_len.view();
    return inspect_paged_kv({&qv, &kc, &vc, &qo, &indptr, &indices, &last, &ov, nullptr}, page_size,
                            page_layout(kv_layout), paged_mask(&options), values);
  }
};

using Mutation = std::function<void(PagedCall&)>;

void check_rejected(const Mutation& mutate, tsattn_status status, const std::vector<std::string>& parts) {
  PagedCall c;
  mutate(c);
  const auto r = c.call();
  INFO("message: ", r.message);
  CHECK(r.status == status);
  for (const std::string& part : parts) CHECK_MESSAGE(r.message.find(part) != std::string::npos, part);
}

TEST_SUITE("api/paged_arguments") {
  TEST_CASE("valid calls: host tables give each request's keys, GPU tables their addresses") {
    PagedCall c;
    const PagedKv host = c.inspect();
    CHECK(host.tables_on_host);
    CHECK(host.batch == 3);
    CHECK(host.total_q == 12);
    CHECK(host.lengths.kv_len == std::vector<int64_t>{40, 0, 17});
    CHECK(host.lengths.kv_indptr == std::vector<int64_t>{0, 40, 40, 57});
    CHECK(host.pools.k.num_kv_heads == 2);

    c.tables_on_gpu();
    const PagedKv device = c.inspect();
    CHECK_FALSE(device.tables_on_host);
    CHECK(device.batch == 3);
    CHECK(device.device.paged_kv_indptr == c.paged_kv_indptr.data);
    CHECK(device.device.paged_kv_indices == c.paged_kv_indices.data);
    CHECK(device.device.paged_kv_last_page_len == c.paged_kv_last_page_len.data);
    CHECK(device.device.entries == static_cast<int64_t>(c.t.paged_kv_indices.size()));

    // Unchecked host tables are not read: an out-of-range page id passes.
    PagedCall bad;
    bad.t.paged_kv_indices[0] = -5;
    bad.set_tables();
    CHECK(bad.inspect(TableValues::unchecked).tables_on_host);
    CHECK_THROWS_AS(bad.inspect(), Error);
  }

  TEST_CASE("options: no variable_window mask or bounds, scalars as batch_prefill") {
    check_rejected([](PagedCall& c) { c.options.mask_type = TSATTN_MASK_VARIABLE_WINDOW; }, TSATTN_ERROR_VALUE,
                   {"mask_type='variable_window' is not available with a paged KV cache"});
    tsattn_tensor_view bounds{};
    check_rejected([&](PagedCall& c) { c.options.variable_window_token_starts = &bounds; }, TSATTN_ERROR_VALUE,
                   {"variable_window_token_starts and _ends are not available with a paged KV cache"});
    check_rejected([](PagedCall& c) { c.options.struct_size = 8; }, TSATTN_ERROR_VALUE,
                   {"options.struct_size=8 is smaller"});
  }

  TEST_CASE("page size and layout") {
    check_rejected([](PagedCall& c) { c.page_size = 24; }, TSATTN_ERROR_NOT_IMPLEMENTED,
                   {"page_size=24 is not supported; supported: 16, 32, 64, 128"});
    check_rejected([](PagedCall& c) { c.page_size = 0; }, TSATTN_ERROR_VALUE, {"page_size=0 must be >= 1"});
    check_rejected([](PagedCall& c) { c.page_size = 32; }, TSATTN_ERROR_VALUE,
                   {"k_cache.shape[2]=16 must equal page_size=32"});
    check_rejected([](PagedCall& c) { c.kv_layout = 7; }, TSATTN_ERROR_VALUE,
                   {"kv_layout=7 is not one of HND (0), NHD (1)"});
    // NHD reads the same pools' axes the other way round.
    check_rejected([](PagedCall& c) { c.kv_layout = TSATTN_KV_LAYOUT_NHD; }, TSATTN_ERROR_VALUE,
                   {"k_cache.shape[1]=2 must equal page_size=16", "kv_layout='NHD'"});
  }

  TEST_CASE("q against the pools, and the pools") {
    check_rejected([](PagedCall& c) { c.q.dtype = TSATTN_DTYPE_FLOAT16; }, TSATTN_ERROR_NOT_IMPLEMENTED,
                   {"q, k_cache and v_cache must share one dtype", "q=float16", "k_cache=bfloat16"});
    check_rejected(
        [](PagedCall& c) {
          c.q.shape = {12, 3, 128};
        },
        TSATTN_ERROR_VALUE, {"Hq=q.shape[1]=3 must be a multiple of Hkv=k_cache.shape[1]=2"});
    check_rejected(
        [](PagedCall& c) {
          c.q.shape = {12, 4, 256};
        },
        TSATTN_ERROR_VALUE, {"head dims differ: q.shape[-1]=256 but k_cache.shape[-1]=128"});
    check_rejected([](PagedCall& c) { c.q.shape = {12, 512}; }, TSATTN_ERROR_VALUE, {"q must be 3-D"});
    check_rejected([](PagedCall& c) { c.q.device_id = 1; }, TSATTN_ERROR_VALUE, {"q is on cuda:1", "k_cache"});
    check_rejected([](PagedCall& c) { c.v_cache.dtype = TSATTN_DTYPE_FLOAT16; }, TSATTN_ERROR_NOT_IMPLEMENTED,
                   {"k_cache and v_cache must share one dtype"});
    check_rejected([](PagedCall& c) { c.k_cache = c.pools.k; }, TSATTN_ERROR_VALUE,
                   {"k_cache must be a CUDA tensor (got cpu)"});
  }

  TEST_CASE("tables: int32 (TypeError otherwise), 1-D, one side, B+1, B+1 and B entries") {
    check_rejected(
        [](PagedCall& c) {
          c.indices_mem = HostTensor(TSATTN_DTYPE_INT64, {4});
          c.paged_kv_indices = c.indices_mem.tensor;
        },
        TSATTN_ERROR_TYPE, {"paged_kv_indices has dtype int64; expected int32"});
    check_rejected([](PagedCall& c) { c.qo_indptr.dtype = TSATTN_DTYPE_INT64; }, TSATTN_ERROR_TYPE,
                   {"qo_indptr has dtype int64; expected int32"});
    check_rejected(
        [](PagedCall& c) {
          c.paged_kv_last_page_len.shape = {1, 3};
        },
        TSATTN_ERROR_VALUE, {"paged_kv_last_page_len must be 1-D (got shape [1, 3])"});
    check_rejected([](PagedCall& c) { c.paged_kv_indices = as_cuda(c.paged_kv_indices); }, TSATTN_ERROR_VALUE,
                   {"must all be on the host or all on the GPU", "paged_kv_indices on cuda:0"});
    check_rejected([](PagedCall& c) { c.paged_kv_indptr.shape = {3}; }, TSATTN_ERROR_VALUE,
                   {"qo_indptr has 4 entries but paged_kv_indptr has 3; both need B+1"});
    check_rejected([](PagedCall& c) { c.paged_kv_last_page_len.shape = {2}; }, TSATTN_ERROR_VALUE,
                   {"paged_kv_last_page_len has 2 entries but needs B=3"});
    // On the GPU: contiguous and on q's device.
    check_rejected(
        [](PagedCall& c) {
          c.tables_on_gpu();
          c.paged_kv_indices.shape = {2};
          c.paged_kv_indices.strides = {2};
        },
        TSATTN_ERROR_VALUE, {"paged_kv_indices on the GPU must be contiguous (got stride 2)"});
    check_rejected(
        [](PagedCall& c) {
          c.tables_on_gpu();
          c.qo_indptr.device_id = 1;
        },
        TSATTN_ERROR_VALUE, {"qo_indptr is on cuda:1"});
  }

  TEST_CASE("host table values: every rule of docs/paged_kv.md, naming the table, entry and request") {
    check_rejected(
        [](PagedCall& c) {
          c.t.paged_kv_indices[c.t.paged_kv_indptr[2]] = static_cast<int32_t>(c.t.num_pages);
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"is out of range [0, num_pages=", "(page 0 of request 2)"});
    check_rejected(
        [](PagedCall& c) {
          c.t.paged_kv_indices[1] = -1;
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"paged_kv_indices[1]=-1 is out of range", "(page 1 of request 0)"});
    check_rejected(
        [](PagedCall& c) {
          c.t.paged_kv_last_page_len[2] = 17;
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"paged_kv_last_page_len[2]=17 must be in [1, page_size=16]: request 2 has 2 pages"});
    check_rejected(
        [](PagedCall& c) {
          c.t.qo_indptr.back() = 11;
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"qo_indptr[-1]=11 must equal q.shape[0]=12"});
    check_rejected(
        [](PagedCall& c) {
          c.t.paged_kv_indptr[1] = 9;
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"paged_kv_indptr must be non-decreasing"});
    check_rejected(
        [](PagedCall& c) {
          c.t.paged_kv_indices.resize(static_cast<size_t>(c.t.paged_kv_indptr.back() - 1));
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"exceeds paged_kv_indices.shape[0]"});
    // Causal needs Sq <= Sk: request 1 has 0 queries and 0 keys, request 2 7 queries and 17 keys.
    check_rejected(
        [](PagedCall& c) {
          c.options.mask_type = TSATTN_MASK_CAUSAL;
          c.t.paged_kv_last_page_len[2] = 1;                    // 17 -> 2 pages: 16 + 1 keys; 7 queries still fit
          c.t.paged_kv_indptr[3] = c.t.paged_kv_indptr[2] + 1;  // one page of 1 key: Sk = 1 < Sq = 7
          c.set_tables();
        },
        TSATTN_ERROR_VALUE, {"mask_type='causal' needs Sq <= Sk in every request; request 2 has Sq=7 > Sk=1"});
  }

  TEST_CASE("what the call writes must not overlap what it reads") {
    check_rejected([](PagedCall& c) { c.out = c.k_cache; }, TSATTN_ERROR_VALUE, {"out", "k_cache"});
    check_rejected(
        [](PagedCall& c) {
          c.tables_on_gpu();
          c.lse_mem = HostTensor(TSATTN_DTYPE_FLOAT32, {12, 4});
          c.lse = c.lse_mem.fake_cuda();
          c.lse->data = c.paged_kv_indices.data;
        },
        TSATTN_ERROR_VALUE, {"lse", "paged_kv_indices"});
  }

  TEST_CASE("paged plan options: their own rules, then a packed plan's") {
    const auto create = [](const std::function<void(tsattn_paged_prefill_plan_options&)>& mutate) {
      tsattn_paged_prefill_plan_options o;
      tsattn_paged_prefill_plan_options_init(&o);
      o.batch_size = 4;
      o.max_seq_len_q = 64;
      o.max_kv_len = 256;
      o.num_qo_heads = 8;
      o.num_kv_heads = 2;
      o.head_dim = 128;
      mutate(o);
      tsattn_paged_prefill_plan* plan = reinterpret_cast<tsattn_paged_prefill_plan*>(1);
      const tsattn_status status = tsattn_paged_prefill_plan_create(&o, &plan);
      CHECK(plan == nullptr);
      return std::pair{status, std::string(tsattn_last_error_message())};
    };
    tsattn_paged_prefill_plan_options defaults;
    tsattn_paged_prefill_plan_options_init(&defaults);
    CHECK(defaults.struct_size == sizeof(tsattn_paged_prefill_plan_options));
    CHECK(defaults.page_size == 32);
    CHECK(defaults.kv_layout == TSATTN_KV_LAYOUT_HND);
    CHECK(defaults.window_left == -1);
    CHECK(defaults.output_scale == 1.0);

    const struct {
      std::function<void(tsattn_paged_prefill_plan_options&)> mutate;
      tsattn_status status;
      std::string part;
    } cases[] = {
        {[](auto& o) { o.page_size = 8; }, TSATTN_ERROR_NOT_IMPLEMENTED, "page_size=8 is not supported"},
        {[](auto& o) { o.kv_layout = 2; }, TSATTN_ERROR_VALUE, "kv_layout=2 is not one of HND (0), NHD (1)"},
        {[](auto& o) { o.mask_type = TSATTN_MASK_VARIABLE_WINDOW; }, TSATTN_ERROR_VALUE,
         "mask_type='variable_window' is not available with a paged KV cache"},
        {[](auto& o) { o.struct_size = 16; }, TSATTN_ERROR_VALUE, "options.struct_size=16 is smaller"},
        {[](auto& o) { o.head_dim = 64; }, TSATTN_ERROR_NOT_IMPLEMENTED, "head_dim=64 is not supported"},
        {[](auto& o) { o.batch_size = 0; }, TSATTN_ERROR_VALUE, "batch_size=0 must be >= 1"},
        {[](auto& o) { o.kv_dtype = TSATTN_DTYPE_FLOAT16; }, TSATTN_ERROR_NOT_IMPLEMENTED, "must share one dtype"},
        {[](auto& o) { o.window_left = 8; }, TSATTN_ERROR_VALUE, "window_left=8 requires mask_type='causal'"},
    };
    for (const auto& c : cases) {
      const auto [status, message] = create(c.mutate);
      INFO("message: ", message);
      CHECK(status == c.status);
      CHECK(message.find(c.part) != std::string::npos);
    }
    CHECK(tsattn_paged_prefill_plan_create(nullptr, nullptr) == TSATTN_ERROR_VALUE);
    CHECK(tsattn_paged_prefill_plan_run(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr) == TSATTN_ERROR_VALUE);
    CHECK(std::string(tsattn_last_error_message()).find("tsattn_paged_prefill_plan_create") != std::string::npos);
    tsattn_paged_prefill_plan_destroy(nullptr);
  }
}

}  // namespace
}  // namespace tsattn::test
