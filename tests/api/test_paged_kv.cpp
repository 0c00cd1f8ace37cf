// test_paged_kv.cpp - the paged KV cache's host side (docs/paged_kv.md): random tables give back
// the lengths and key locations they were built with, pools of every layout and stride style
// address the elements their views hold, and each rule rejects bad tables and pools with its kind
// and a message naming the argument, the entry and the request.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "api/paged_kv.hpp"
#include "support/paged_kv_cases.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {
namespace {

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kInt32Min = std::numeric_limits<int32_t>::min();

uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("TSATTN_TEST_SEED")) return std::stoull(fixed);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

// f() raises tsattn::Error of `kind` whose message holds every part.
void check_rejects(const std::function<void()>& f, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("accepted");
  } catch (const Error& e) {
    INFO("message: ", e.what());
    CHECK(e.kind() == kind);
    for (const std::string& part : parts) CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, part);
  }
}

// Lengths that hit the page edges and the odd sizes, plus a few at random.
int64_t random_length(int64_t page_size, std::mt19937_64& rng) {
  const int64_t edges[] = {0, 1, 127, 128, 129, page_size - 1, page_size, page_size + 1, 2 * page_size};
  if (rng() % 3) return edges[rng() % std::size(edges)];
  return static_cast<int64_t>(rng() % 300);
}

// Three requests at page_size 16: 3 pages (last holds 8), none, 2 pages (last holds 1).
PageTableValues three_requests() {
  PageTableValues t;
  t.page_size = 16;
  t.num_pages = 8;
  t.qo_indptr = {0, 5, 5, 12};
  t.paged_kv_indptr = {0, 3, 3, 5};
  t.paged_kv_indices = {4, 0, 6, 6, 2};
  t.paged_kv_last_page_len = {8, 0, 1};
  t.page_ids = {{4, 0, 6}, {}, {6, 2}};
  t.kv_len = {40, 0, 17};
  return t;
}

struct TableRejection {
  const char* rule;
  std::function<void(PageTableValues&, PagedKvTables&)> mutate;  // values first, then the view's fields
  ErrorKind kind;
  std::vector<std::string> parts;
};

TEST_SUITE("api/paged_kv") {
  TEST_CASE("random tables give back their lengths, prefix sums and key locations") {
    const uint64_t seed = fresh_seed();
    INFO("seed ", seed, " (set TSATTN_TEST_SEED to repeat)");
    std::mt19937_64 rng(seed);
    for (const int64_t page_size : kPageSizes) {
      for (int n = 0; n < 12; ++n) {
        std::vector<RequestLengths> requests(1 + rng() % 6);
        for (RequestLengths& r : requests) {
          r.kv_len = random_length(page_size, rng);
          r.q_len = static_cast<int64_t>(rng() % (r.kv_len + 2));
        }
        const PageTableValues t = random_page_tables(requests, page_size, rng);
        const PagedKvTables tables = t.tables();
        INFO("page_size ", page_size, " requests ", requests.size());
        const PagedKvLengths lengths = check_paged_kv_tables(tables);

        REQUIRE(lengths.kv_len.size() == requests.size());
        REQUIRE(lengths.kv_indptr.size() == requests.size() + 1);
        int64_t keys_before = 0, pages_total = 0;
        std::set<int32_t> distinct;
        for (size_t b = 0; b < requests.size(); ++b) {
          CHECK(lengths.kv_len[b] == requests[b].kv_len);
          CHECK(tables.kv_len(static_cast<int64_t>(b)) == requests[b].kv_len);
          CHECK(lengths.kv_indptr[b] == keys_before);
          keys_before += requests[b].kv_len;
          for (int64_t j = 0; j < requests[b].kv_len; ++j) {
            const KeySlot key = locate_key(tables, static_cast<int64_t>(b), j);
            CHECK(key.page_id == t.page_ids[b][static_cast<size_t>(j / page_size)]);
            CHECK(key.slot == j % page_size);
          }
          pages_total += std::ssize(t.page_ids[b]);
          distinct.insert(t.page_ids[b].begin(), t.page_ids[b].end());
        }
        CHECK(lengths.kv_indptr.back() == keys_before);
        // The generator's promise: ids repeat wherever there are two pages.
        if (pages_total >= 2) CHECK(std::ssize(distinct) < pages_total);
      }
    }
  }

  TEST_CASE("tables are read through their strides, and a stride-0 table repeats one entry") {
    const PageTableValues t = three_requests();
    // Every entry of paged_kv_indices twice: a stride-2 view of it holds the original values.
    std::vector<int32_t> doubled;
    for (const int32_t id : t.paged_kv_indices) doubled.insert(doubled.end(), {id, -99});
    PagedKvTables tables = t.tables();
    tables.paged_kv_indices = {doubled.data(), std::ssize(t.paged_kv_indices), 2};
    const PagedKvLengths lengths = check_paged_kv_tables(tables);
    CHECK(lengths.kv_len == std::vector<int64_t>{40, 0, 17});
    CHECK(lengths.kv_indptr == std::vector<int64_t>{0, 40, 40, 57});
    CHECK(locate_key(tables, 2, 16).page_id == 2);
    CHECK(locate_key(tables, 2, 16).slot == 0);
    CHECK(locate_key(tables, 0, 39).page_id == 6);
    CHECK(locate_key(tables, 0, 39).slot == 7);

    const int32_t page = 5;
    tables.paged_kv_indices = {&page, 5, 0};
    check_paged_kv_tables(tables);
    for (int64_t j = 0; j < 40; ++j) CHECK(locate_key(tables, 0, j).page_id == 5);

    // host_int32_array takes the stride from the view.
    HostTensor storage = int32_tensor(doubled);
    Tensor view = storage.tensor;
    view.shape = {5};
    view.strides = {2};
    const tsattn_tensor_view v = view.view();
    const HostInt32Array array = host_int32_array(&v, "paged_kv_indices");
    CHECK(array.size == 5);
    CHECK(array.stride == 2);
    for (int64_t i = 0; i < 5; ++i) CHECK(array[i] == t.paged_kv_indices[static_cast<size_t>(i)]);
  }

  TEST_CASE("what a request without pages, unused indices and an empty batch may hold") {
    for (const int32_t last : {0, -1, 17, kInt32Min, kInt32Max}) {
      PageTableValues t = three_requests();
      t.paged_kv_last_page_len[1] = last;                                       // request 1 has no pages: unread
      t.paged_kv_indices.insert(t.paged_kv_indices.end(), {-1, kInt32Max, 8});  // past paged_kv_indptr[-1]: unread
      const PagedKvLengths lengths = check_paged_kv_tables(t.tables());
      CHECK(lengths.kv_len[1] == 0);
      CHECK(lengths.kv_indptr == std::vector<int64_t>{0, 40, 40, 57});
    }
    PageTableValues empty;
    empty.qo_indptr = {0};
    empty.paged_kv_indptr = {0};
    const PagedKvLengths lengths = check_paged_kv_tables(empty.tables());
    CHECK(lengths.kv_len.empty());
    CHECK(lengths.kv_indptr == std::vector<int64_t>{0});
    // A request with queries and no keys, and pages of a full last page.
    PageTableValues t = three_requests();
    t.paged_kv_last_page_len[0] = 16;
    CHECK(check_paged_kv_tables(t.tables()).kv_len[0] == 48);
  }

  TEST_CASE("every table rule rejects with its message") {
    const std::vector<TableRejection> cases = {
        {"page_size 0", [](auto&, auto& v) { v.page_size = 0; }, ErrorKind::value, {"page_size=0 must be >= 1"}},
        {"page_size negative", [](auto&, auto& v) { v.page_size = -16; }, ErrorKind::value, {"page_size=-16"}},
        {"page_size 24",
         [](auto&, auto& v) { v.page_size = 24; },
         ErrorKind::not_implemented,
         {"page_size=24 is not supported; supported: 16, 32, 64, 128"}},
        {"page_size 2^62",
         [](auto&, auto& v) { v.page_size = int64_t{1} << 62; },
         ErrorKind::not_implemented,
         {"page_size=4611686018427387904 is not supported"}},
        {"qo_indptr without entries",
         [](auto&, auto& v) { v.qo_indptr.size = 0; },
         ErrorKind::value,
         {"qo_indptr must have B+1 >= 1 entries (got 0)"}},
        {"paged_kv_indptr longer",
         [](auto& t, auto& v) {
           t.paged_kv_indptr.push_back(5);
           v.paged_kv_indptr = {t.paged_kv_indptr.data(), 5, 1};
         },
         ErrorKind::value,
         {"qo_indptr has 4 entries but paged_kv_indptr has 5; both need B+1"}},
        {"paged_kv_last_page_len shorter",
         [](auto&, auto& v) { v.paged_kv_last_page_len.size = 2; },
         ErrorKind::value,
         {"paged_kv_last_page_len has 2 entries but needs B=3 (qo_indptr has B+1=4 entries)"}},
        {"qo_indptr starts at 1",
         [](auto& t, auto&) { t.qo_indptr[0] = 1; },
         ErrorKind::value,
         {"qo_indptr[0]=1 must be 0"}},
        {"qo_indptr decreases",
         [](auto& t, auto&) { t.qo_indptr[2] = 4; },
         ErrorKind::value,
         {"qo_indptr must be non-decreasing, but qo_indptr[2]=4 < qo_indptr[1]=5"}},
        {"qo_indptr ends short of q",
         [](auto&, auto& v) { v.total_q = 13; },
         ErrorKind::value,
         {"qo_indptr[-1]=12 must equal q.shape[0]=13"}},
        {"paged_kv_indptr starts at 1",
         [](auto& t, auto&) { t.paged_kv_indptr[0] = 1; },
         ErrorKind::value,
         {"paged_kv_indptr[0]=1 must be 0"}},
        {"paged_kv_indptr decreases",
         [](auto& t, auto&) { t.paged_kv_indptr[2] = 2; },
         ErrorKind::value,
         {"paged_kv_indptr must be non-decreasing, but paged_kv_indptr[2]=2 < paged_kv_indptr[1]=3"}},
        {"paged_kv_indptr wraps to INT32_MIN",
         [](auto& t, auto&) {
           t.paged_kv_indptr = {0, 3, kInt32Max, kInt32Min};
         },
         ErrorKind::value,
         {"paged_kv_indptr[3]=-2147483648 < paged_kv_indptr[2]=2147483647"}},
        {"paged_kv_indptr past paged_kv_indices",
         [](auto&, auto& v) { v.paged_kv_indices.size = 4; },
         ErrorKind::value,
         {"paged_kv_indptr[-1]=5 exceeds paged_kv_indices.shape[0]=4"}},
        {"last_page_len 0",
         [](auto& t, auto&) { t.paged_kv_last_page_len[0] = 0; },
         ErrorKind::value,
         {"paged_kv_last_page_len[0]=0 must be in [1, page_size=16]: request 0 has 3 pages"}},
        {"last_page_len past the page",
         [](auto& t, auto&) { t.paged_kv_last_page_len[2] = 17; },
         ErrorKind::value,
         {"paged_kv_last_page_len[2]=17 must be in [1, page_size=16]: request 2 has 2 pages"}},
        {"last_page_len negative",
         [](auto& t, auto&) { t.paged_kv_last_page_len[2] = -1; },
         ErrorKind::value,
         {"paged_kv_last_page_len[2]=-1"}},
        {"last_page_len INT32_MAX",
         [](auto& t, auto&) { t.paged_kv_last_page_len[0] = kInt32Max; },
         ErrorKind::value,
         {"paged_kv_last_page_len[0]=2147483647 must be in [1, page_size=16]"}},
        {"page id negative",
         [](auto& t, auto&) { t.paged_kv_indices[3] = -1; },
         ErrorKind::value,
         {"paged_kv_indices[3]=-1 is out of range [0, num_pages=8) (page 0 of request 2)"}},
        {"page id num_pages",
         [](auto& t, auto&) { t.paged_kv_indices[1] = 8; },
         ErrorKind::value,
         {"paged_kv_indices[1]=8 is out of range [0, num_pages=8) (page 1 of request 0)"}},
        {"page id INT32_MAX",
         [](auto& t, auto&) { t.paged_kv_indices[4] = kInt32Max; },
         ErrorKind::value,
         {"paged_kv_indices[4]=2147483647", "(page 1 of request 2)"}},
        {"pools without pages",
         [](auto&, auto& v) { v.num_pages = 0; },
         ErrorKind::value,
         {"paged_kv_indices[0]=4 is out of range [0, num_pages=0)"}},
    };
    for (const TableRejection& c : cases) {
      INFO(c.rule);
      PageTableValues t = three_requests();
      PagedKvTables view = t.tables();
      c.mutate(t, view);
      check_rejects([&] { check_paged_kv_tables(view); }, c.kind, c.parts);
    }
  }

  TEST_CASE("key counts near 2^31 and sums past it: checked, never wrapped") {
    const int32_t page = 0;
    PageTableValues t;
    t.num_pages = 1;
    t.qo_indptr = {0, 0};
    t.paged_kv_last_page_len = {1};
    // INT32_MAX pages of 16 keys: 2^35 keys. paged_kv_indices repeats one entry (stride 0), and
    // the length fails before any page id is read.
    t.page_size = 16;
    t.paged_kv_indptr = {0, kInt32Max};
    PagedKvTables tables = t.tables();
    tables.paged_kv_indices = {&page, kInt32Max, 0};
    check_rejects([&] { check_paged_kv_tables(tables); }, ErrorKind::value,
                  {"request 0 has 2147483647 pages of page_size=16 with 1 keys in the last: more than 2^31-1 keys"});

    // 2^24 pages of 128: 2^31 - 1 keys when the last holds 127, one too many when it holds 128.
    t.page_size = 128;
    t.paged_kv_indptr = {0, 1 << 24};
    t.paged_kv_last_page_len = {127};
    tables = t.tables();
    tables.paged_kv_indices = {&page, 1 << 24, 0};
    CHECK(check_paged_kv_tables(tables).kv_len[0] == kInt32Max);
    CHECK(locate_key(tables, 0, kInt32Max - 1).slot == 126);
    t.paged_kv_last_page_len = {128};
    tables.paged_kv_last_page_len = t.tables().paged_kv_last_page_len;
    check_rejects([&] { check_paged_kv_tables(tables); }, ErrorKind::value,
                  {"request 0 has 16777216 pages of page_size=128 with 128 keys in the last"});

    // Two such requests: 2^32 - 2 keys in all, which the int64 prefix sums hold.
    t.qo_indptr = {0, 0, 0};
    t.paged_kv_indptr = {0, 1 << 24, 1 << 25};
    t.paged_kv_last_page_len = {127, 127};
    tables = t.tables();
    tables.paged_kv_indices = {&page, 1 << 25, 0};
    const PagedKvLengths lengths = check_paged_kv_tables(tables);
    CHECK(lengths.kv_indptr == std::vector<int64_t>{0, kInt32Max, int64_t{2} * kInt32Max});
    CHECK(locate_key(tables, 1, kInt32Max - 1).page_id == 0);

    // More than 2^31 - 1 requests (every table a stride-0 view of one entry).
    const int32_t zero = 0;
    PagedKvTables many = t.tables();
    const int64_t entries = int64_t{kInt32Max} + 2;
    many.qo_indptr = many.paged_kv_indptr = {&zero, entries, 0};
    many.paged_kv_last_page_len = {&zero, entries - 1, 0};
    check_rejects([&] { check_paged_kv_tables(many); }, ErrorKind::value,
                  {"batch size 2147483648 is too large (int32)"});

    // qo_indptr up to INT32_MAX rows is fine; past it the int32 wraps and reads as a decrease.
    t.qo_indptr = {0, kInt32Max, kInt32Min};
    check_rejects([&] { check_paged_kv_tables(t.tables()); }, ErrorKind::value,
                  {"qo_indptr must be non-decreasing, but qo_indptr[2]=-2147483648 < qo_indptr[1]=2147483647"});

    // Unchecked tables: kv_len and element offsets raise rather than wrap.
    const PageTableValues small = three_requests();
    PagedKvTables huge = small.tables();
    huge.page_size = int64_t{1} << 62;
    check_rejects([&] { (void)huge.kv_len(0); }, ErrorKind::runtime, {"integer overflow"});
    PagePool pool;
    pool.page_stride = int64_t{1} << 62;
    CHECK(pool.element_offset(1, 0, 0, 5) == (int64_t{1} << 62) + 5);
    check_rejects([&] { (void)pool.element_offset(2, 0, 0, 0); }, ErrorKind::runtime, {"integer overflow"});
    pool.page_stride = 0;
    pool.slot_stride = int64_t{1} << 61;
    check_rejects([&] { (void)pool.element_offset(0, 4, 0, 0); }, ErrorKind::runtime, {"integer overflow"});
  }

  TEST_CASE("locate_key refuses keys outside the request") {
    const PageTableValues t = three_requests();
    const PagedKvTables tables = t.tables();
    check_rejects([&] { locate_key(tables, 0, 40); }, ErrorKind::value, {"key j=40 is outside request 0's Sk=40 keys"});
    check_rejects([&] { locate_key(tables, 1, 0); }, ErrorKind::value, {"key j=0 is outside request 1's Sk=0 keys"});
    check_rejects([&] { locate_key(tables, 2, -1); }, ErrorKind::value, {"key j=-1"});
    check_rejects([&] { locate_key(tables, 3, 0); }, ErrorKind::value, {"request b=3 is outside the batch of B=3"});
  }

  TEST_CASE("pools of every layout and stride style address what their views hold") {
    const uint64_t seed = fresh_seed();
    INFO("seed ", seed, " (set TSATTN_TEST_SEED to repeat)");
    std::mt19937_64 rng(seed);
    for (const PageLayout layout : {PageLayout::hnd, PageLayout::nhd})
      for (const PoolStyle style : {PoolStyle::compact, PoolStyle::padded, PoolStyle::permuted, PoolStyle::interleaved})
        for (const tsattn_dtype dtype : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN}) {
          const int64_t page_size = kPageSizes[rng() % std::size(kPageSizes)], heads = 1 + rng() % 3, d = 128;
          INFO(page_layout_name(layout), " ", pool_style_name(style), " dtype ", dtype, " page_size ", page_size,
               " Hkv ", heads);
          const std::vector<RequestLengths> requests = {{3, 129}, {0, 0}, {1, 1}, {5, page_size}};
          const PageTableValues t = random_page_tables(requests, page_size, rng);
          const PagePoolTensors p = make_page_pools(dtype, layout, t.num_pages, page_size, heads, d, style);
          const tsattn_tensor_view k = p.k.view(), v = p.v.view();
          const PagePools pools = check_page_pools(&k, &v, layout, page_size, Residency::host);
          for (const PagePool* pool : {&pools.k, &pools.v}) {
            CHECK(pool->dtype == dtype);
            CHECK(pool->layout == layout);
            CHECK(pool->num_pages == t.num_pages);
            CHECK(pool->page_size == page_size);
            CHECK(pool->num_kv_heads == heads);
            CHECK(pool->head_dim == d);
          }
          CHECK(pools.k.data == p.k.data);
          CHECK(pools.v.data == p.v.data);
          const PagedKvTables tables = t.tables();
          check_paged_kv_tables(tables);
          for (int64_t b = 0; b < t.batch(); ++b)
            for (int64_t j = 0; j < t.kv_len[static_cast<size_t>(b)]; j += 1 + static_cast<int64_t>(rng() % 7)) {
              const int64_t page = t.page_ids[static_cast<size_t>(b)][static_cast<size_t>(j / page_size)];
              const int64_t h = static_cast<int64_t>(rng() % heads), dim = static_cast<int64_t>(rng() % d);
              CHECK(paged_element_offset(tables, pools.k, b, j, h, dim) == p.offset(p.k, page, j % page_size, h, dim));
              CHECK(paged_element_offset(tables, pools.v, b, j, h, dim) == p.offset(p.v, page, j % page_size, h, dim));
            }
          // The corner elements, against offsets written out for each style.
          const int64_t last_page = t.num_pages - 1, slot = page_size - 1, h = heads - 1, dim = d - 1;
          const int64_t hnd = ((last_page * heads + h) * page_size + slot) * d + dim;
          const int64_t nhd = ((last_page * page_size + slot) * heads + h) * d + dim;
          const int64_t own = layout == PageLayout::hnd ? hnd : nhd, other = layout == PageLayout::hnd ? nhd : hnd;
          switch (style) {
            case PoolStyle::compact: CHECK(pools.k.element_offset(last_page, slot, h, dim) == own); break;
            case PoolStyle::permuted: CHECK(pools.k.element_offset(last_page, slot, h, dim) == other); break;
            case PoolStyle::interleaved: {
              const int64_t page_elements = heads * page_size * d;
              CHECK(pools.k.element_offset(last_page, slot, h, dim) == own + last_page * page_elements);
              CHECK(static_cast<std::byte*>(pools.v.data) - static_cast<std::byte*>(pools.k.data) ==
                    page_elements * dtype_size(dtype));
              break;
            }
            case PoolStyle::padded: {
              // Storage [N + 1, A + 1, B + 3, D + 16] for views [N, A, B, D].
              const int64_t middle = layout == PageLayout::hnd ? heads + 1 : page_size + 1;
              const int64_t inner = layout == PageLayout::hnd ? page_size + 3 : heads + 3;
              const int64_t first = layout == PageLayout::hnd ? h : slot, second = layout == PageLayout::hnd ? slot : h;
              CHECK(pools.k.element_offset(last_page, slot, h, dim) ==
                    ((last_page * middle + first) * inner + second) * (d + 16) + dim);
              break;
            }
          }
        }
  }

  TEST_CASE("pools on a CUDA device: one device for both") {
    HostTensor k_mem(TSATTN_DTYPE_FLOAT16, {4, 2, 32, 256}), v_mem(TSATTN_DTYPE_FLOAT16, {4, 2, 32, 256});
    Tensor k = k_mem.fake_cuda(1), v = v_mem.fake_cuda(1);
    tsattn_tensor_view kv = k.view(), vv = v.view();
    const PagePools pools = check_page_pools(&kv, &vv, PageLayout::hnd, 32, Residency::cuda);
    CHECK(pools.k.head_dim == 256);
    CHECK(pools.k.num_kv_heads == 2);
    v = v_mem.fake_cuda(0);
    vv = v.view();
    check_rejects([&] { check_page_pools(&kv, &vv, PageLayout::hnd, 32, Residency::cuda); }, ErrorKind::value,
                  {"v_cache is on cuda:0 but k_cache is on cuda:1; all tensors must share one device"});
    v = v_mem.tensor;
    vv = v.view();
    check_rejects([&] { check_page_pools(&kv, &vv, PageLayout::hnd, 32, Residency::cuda); }, ErrorKind::value,
                  {"v_cache must be a CUDA tensor (got cpu)"});
    check_rejects([&] { check_page_pools(&kv, &vv, PageLayout::hnd, 32, Residency::host); }, ErrorKind::value,
                  {"k_cache must be in host memory for the CPU reference (got cuda:1)"});
  }

  TEST_CASE("every pool rule rejects with its message") {
    struct PoolRejection {
      const char* rule;
      PageLayout layout;
      int64_t page_size;
      std::function<void(Tensor& k, Tensor& v)> mutate;
      ErrorKind kind;
      std::vector<std::string> parts;
    };
    constexpr int64_t k2Pow40 = int64_t{1} << 40, k2Pow60 = int64_t{1} << 60, k2Pow62 = int64_t{1} << 62;
    const auto hnd = PageLayout::hnd, nhd = PageLayout::nhd;
    const std::vector<PoolRejection> cases = {
        {"page_size 48",
         hnd,
         48,
         [](Tensor&, Tensor&) {},
         ErrorKind::not_implemented,
         {"page_size=48 is not supported"}},
        {"k_cache float32",
         hnd,
         16,
         [](Tensor& k, Tensor&) { k.dtype = TSATTN_DTYPE_FLOAT32; },
         ErrorKind::not_implemented,
         {"k_cache has dtype float32; supported: float16, bfloat16, float8_e4m3fn"}},
        {"v_cache another dtype",
         hnd,
         16,
         [](Tensor&, Tensor& v) { v.dtype = TSATTN_DTYPE_FLOAT16; },
         ErrorKind::not_implemented,
         {"k_cache and v_cache must share one dtype (got k_cache=bfloat16, v_cache=float16)"}},
        {"k_cache 3-D",
         hnd,
         16,
         [](Tensor& k, Tensor&) {
           k.shape = {6, 2, 16 * 128};
           k.strides = {};
         },
         ErrorKind::value,
         {"k_cache must be 4-D [num_pages, Hkv, page_size, D] for kv_layout='HND' (got shape [6, 2, 2048])"}},
        {"k_cache 5-D for NHD",
         nhd,
         16,
         [](Tensor& k, Tensor&) {
           k.shape = {6, 1, 2, 16, 128};
           k.strides = {};
         },
         ErrorKind::value,
         {"k_cache must be 4-D [num_pages, page_size, Hkv, D] for kv_layout='NHD'"}},
        {"v_cache fewer pages",
         hnd,
         16,
         [](Tensor&, Tensor& v) { v.shape[0] = 5; },
         ErrorKind::value,
         {"v_cache.shape=[5, 2, 16, 128] must equal k_cache.shape=[6, 2, 16, 128]"}},
        {"HND slot axis is not page_size",
         hnd,
         32,
         [](Tensor&, Tensor&) {},
         ErrorKind::value,
         {"k_cache.shape[2]=16 must equal page_size=32 (kv_layout='HND': [num_pages, Hkv, page_size, D])"}},
        {"an HND pool read as NHD",
         nhd,
         16,
         [](Tensor&, Tensor&) {},
         ErrorKind::value,
         {"k_cache.shape[1]=2 must equal page_size=16 (kv_layout='NHD': [num_pages, page_size, Hkv, D])"}},
        {"D not contiguous",
         hnd,
         16,
         [](Tensor& k, Tensor&) {
           k.strides = {8192, 4096, 256, 2};
         },
         ErrorKind::value,
         {"k_cache.stride(3)=2: the head dimension must be contiguous (stride 1)"}},
        {"slot stride off 16 bytes",
         hnd,
         16,
         [](Tensor&, Tensor& v) {
           v.strides = {8192, 2080, 130, 1};
         },
         ErrorKind::value,
         {"v_cache.stride(2)=130 elements (260 bytes) is not a multiple of 16 bytes"}},
        {"page stride off 16 bytes",
         hnd,
         16,
         [](Tensor& k, Tensor&) {
           k.strides = {4100, 2048, 128, 1};
         },
         ErrorKind::value,
         {"k_cache.stride(0)=4100 elements (8200 bytes) is not a multiple of 16 bytes"}},
        {"data off 16 bytes",
         hnd,
         16,
         [](Tensor&, Tensor& v) { v.data = static_cast<std::byte*>(v.data) + 2; },
         ErrorKind::value,
         {"v_cache.data=0x", "is not 16-byte aligned"}},
        {"negative stride",
         hnd,
         16,
         [](Tensor& k, Tensor&) {
           k.strides = {-4096, 2048, 128, 1};
         },
         ErrorKind::value,
         {"k_cache.strides=[-4096, 2048, 128, 1]: negative strides are not supported"}},
        {"null k_cache data",
         hnd,
         16,
         [](Tensor& k, Tensor&) { k.data = nullptr; },
         ErrorKind::value,
         {"k_cache.data is null but k_cache has shape [6, 2, 16, 128]"}},
        {"page stride past int64",
         hnd,
         16,
         [](Tensor& k, Tensor&) {
           k.strides = {k2Pow62, 2048, 128, 1};
         },
         ErrorKind::value,
         {"k_cache.shape=[6, 2, 16, 128] with k_cache.strides=[4611686018427387904, 2048, 128, 1] overflows int64: "
          "the largest element offset is not representable"}},
        {"byte span past int64",
         hnd,
         16,
         [](Tensor&, Tensor& v) {
           v.strides = {k2Pow60, 2048, 128, 1};
         },
         ErrorKind::value,
         {"overflows int64: the byte span is not representable"}},
        {"element count past int64",
         nhd,
         16,
         [](Tensor& k, Tensor& v) {
           for (Tensor* t : {&k, &v}) {
             t->shape = {k2Pow40, 16, k2Pow40, 128};
             t->strides = {0, 0, 0, 1};
           }
         },
         ErrorKind::value,
         {"k_cache.shape=[1099511627776, 16, 1099511627776, 128]", "the element count (the product of the extents)"}},
    };
    for (const PoolRejection& c : cases) {
      INFO(c.rule);
      HostTensor k_mem(TSATTN_DTYPE_BFLOAT16, {6, 2, 16, 128}), v_mem(TSATTN_DTYPE_BFLOAT16, {6, 2, 16, 128});
      Tensor k = k_mem.tensor, v = v_mem.tensor;
      c.mutate(k, v);
      const tsattn_tensor_view kv = k.view(), vv = v.view();
      check_rejects([&] { check_page_pools(&kv, &vv, c.layout, c.page_size, Residency::host); }, c.kind, c.parts);
    }
    check_rejects([&] { check_page_pools(nullptr, nullptr, hnd, 16, Residency::host); }, ErrorKind::value,
                  {"k_cache is required (got a null tensor view)"});
  }

  TEST_CASE("table views: int32, 1-D, in host memory, aligned") {
    HostTensor mem = int32_tensor({0, 3, 3, 5, 7, 9});
    Tensor t = mem.tensor;
    auto rejects = [&](ErrorKind kind, const std::string& part) {
      const tsattn_tensor_view view = t.view();
      check_rejects([&] { host_int32_array(&view, "paged_kv_indptr"); }, kind, {part});
      t = mem.tensor;
    };
    t.dtype = TSATTN_DTYPE_INT64;
    rejects(ErrorKind::type, "paged_kv_indptr has dtype int64; expected int32");
    t.shape = {2, 3};
    rejects(ErrorKind::value, "paged_kv_indptr must be 1-D (got shape [2, 3])");
    t = mem.fake_cuda();
    rejects(ErrorKind::value, "paged_kv_indptr must be in host memory here (got cuda:0)");
    t.data = static_cast<std::byte*>(t.data) + 2;
    t.shape = {2};
    rejects(ErrorKind::value, "paged_kv_indptr.data is not 4-byte aligned");
    t.device_type = TSATTN_DEVICE_CUDA_HOST;  // pinned host memory is host memory
    const tsattn_tensor_view pinned = t.view();
    CHECK(host_int32_array(&pinned, "paged_kv_indptr")[3] == 5);
  }
}

}  // namespace
}  // namespace tsattn::test
