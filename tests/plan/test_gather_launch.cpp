// test_gather_launch.cpp - the page gather's memory and launch as values (plan/gather_launch.hpp):
// the workspace's regions (disjoint, aligned, sized), the host tables' upload image, the kernels'
// parameters (byte strides of every layout and stride style, clamps to int32) and the grid.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <limits>
#include <random>
#include <vector>

#include "api/paged_kv.hpp"
#include "plan/gather_launch.hpp"
#include "support/paged_kv_cases.hpp"

namespace tsattn::test {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

bool disjoint(const Region& a, const Region& b) {
  return a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
}

TEST_SUITE("plan/gather_launch") {
  TEST_CASE("the workspace: tables back to back, then kv_indptr, k and v at 256-byte boundaries") {
    for (const GatherCapacity c : {GatherCapacity{1, 0, 0, 256}, GatherCapacity{3, 7, 129, 512},
                                   GatherCapacity{64, 64 * 512, 64 * 8192, 4096}}) {
      INFO(c.batch, " requests, ", c.index_entries, " entries, ", c.key_rows, " rows of ", c.row_bytes, " bytes");
      const GatherWorkspace w = gather_workspace(c);
      CHECK(w.qo_indptr.offset == 0);
      CHECK(w.qo_indptr.bytes == 4 * static_cast<size_t>(c.batch + 1));
      CHECK(w.paged_kv_indptr.offset == w.qo_indptr.bytes);
      CHECK(w.paged_kv_indptr.bytes == 4 * static_cast<size_t>(c.batch + 1));
      CHECK(w.last_page_len.offset == w.paged_kv_indptr.offset + w.paged_kv_indptr.bytes);
      CHECK(w.last_page_len.bytes == 4 * static_cast<size_t>(c.batch));
      CHECK(w.indices.offset == w.last_page_len.offset + w.last_page_len.bytes);
      CHECK(w.indices.bytes == 4 * static_cast<size_t>(c.index_entries));
      CHECK(w.kv_indptr.bytes == 4 * static_cast<size_t>(c.batch + 1));
      CHECK(w.k.bytes == static_cast<size_t>(c.key_rows * c.row_bytes));
      CHECK(w.v.bytes == w.k.bytes);
      const Region regions[] = {w.qo_indptr, w.paged_kv_indptr, w.last_page_len, w.indices, w.kv_indptr, w.k, w.v};
      for (const Region& r : {w.kv_indptr, w.k, w.v}) CHECK(r.offset % 256 == 0);
      for (size_t i = 0; i < std::size(regions); ++i) {
        CHECK(regions[i].offset + regions[i].bytes <= w.bytes);
        for (size_t j = i + 1; j < std::size(regions); ++j) CHECK(disjoint(regions[i], regions[j]));
      }
      CHECK(w.bytes % 256 == 0);
    }
  }

  TEST_CASE("the host tables' image holds each table at its region, up to the last page id used") {
    std::mt19937_64 rng(7);
    const PageTableValues t = random_page_tables({{3, 40}, {0, 0}, {5, 17}, {2, 64}}, 16, rng);
    const PagedKvTables tables = t.tables();
    const int64_t batch = t.batch(), entries = t.paged_kv_indptr.back();
    // A plan's layout: capacities above this call's.
    const GatherWorkspace w = gather_workspace({batch + 3, entries + 10, 1000, 256});
    std::vector<int32_t> image;
    const size_t words = table_image(w, tables, batch, entries, image);
    CHECK(words == w.indices.offset / 4 + static_cast<size_t>(entries));
    CHECK(image.size() >= words);
    for (int64_t i = 0; i <= batch; ++i) {
      CHECK(image[w.qo_indptr.offset / 4 + static_cast<size_t>(i)] == t.qo_indptr[static_cast<size_t>(i)]);
      CHECK(image[w.paged_kv_indptr.offset / 4 + static_cast<size_t>(i)] == t.paged_kv_indptr[static_cast<size_t>(i)]);
    }
    for (int64_t i = 0; i < batch; ++i)
      CHECK(image[w.last_page_len.offset / 4 + static_cast<size_t>(i)] ==
            t.paged_kv_last_page_len[static_cast<size_t>(i)]);
    for (int64_t i = 0; i < entries; ++i)
      CHECK(image[w.indices.offset / 4 + static_cast<size_t>(i)] == t.paged_kv_indices[static_cast<size_t>(i)]);

    const DeviceTables uploaded = uploaded_tables(w, 0x10000, batch, entries);
    CHECK(reinterpret_cast<uintptr_t>(uploaded.paged_kv_indptr) == 0x10000 + w.paged_kv_indptr.offset);
    CHECK(reinterpret_cast<uintptr_t>(uploaded.paged_kv_indices) == 0x10000 + w.indices.offset);
    CHECK(reinterpret_cast<uintptr_t>(uploaded.paged_kv_last_page_len) == 0x10000 + w.last_page_len.offset);
    CHECK(uploaded.batch == batch);
    CHECK(uploaded.entries == entries);
  }

  TEST_CASE("the parameters address every pool element as its view does, in bytes") {
    for (tsattn_dtype dtype : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN})
      for (PageLayout layout : {PageLayout::hnd, PageLayout::nhd})
        for (PoolStyle style : {PoolStyle::compact, PoolStyle::padded, PoolStyle::permuted, PoolStyle::interleaved}) {
          INFO(page_layout_name(layout), " ", pool_style_name(style), " ", static_cast<int>(dtype));
          const PagePoolTensors p = make_page_pools(dtype, layout, 5, 32, 3, 128, style);
          const tsattn_tensor_view k = p.k.view(), v = p.v.view();
          const PagePools pools = check_page_pools(&k, &v, layout, 32, Residency::host);
          const DeviceTables tables{nullptr, nullptr, nullptr, 2, 9};
          const TsattnGatherParams params = gather_params(pools, tables, {100, 200, 0x1000, 0x2000, 0x3000});
          const int64_t element = dtype == TSATTN_DTYPE_BFLOAT16 ? 2 : 1;
          CHECK(params.row_chunks == 128 * element / 16);
          CHECK(params.num_kv_heads == 3);
          CHECK(params.num_pages == 5);
          CHECK(params.page_size == 32);
          CHECK(params.batch == 2);
          CHECK(params.num_entries == 9);
          CHECK(params.max_kv_len == 100);
          CHECK(params.key_rows == 200);
          CHECK(reinterpret_cast<uintptr_t>(params.kv_indptr) == 0x1000);
          CHECK(reinterpret_cast<uintptr_t>(params.k_out) == 0x2000);
          CHECK(reinterpret_cast<uintptr_t>(params.v_out) == 0x3000);
          for (const auto& [pool, tensor, view] :
               {std::tuple{params.k_pool, &p.k, pools.k}, std::tuple{params.v_pool, &p.v, pools.v}}) {
            CHECK(pool.data == tensor->data);
            for (int64_t page : {0, 4})
              for (int64_t slot : {0, 31})
                for (int64_t head : {0, 2}) {
                  const int64_t bytes = page * pool.page_stride + slot * pool.slot_stride + head * pool.head_stride;
                  CHECK(bytes == p.offset(*tensor, page, slot, head, 0) * element);
                  CHECK(bytes % 16 == 0);
                }
          }
        }
  }

  TEST_CASE("counts past int32 are clamped to it, and the grid covers the rows up to what the GPU holds") {
    const PagePoolTensors p =
        make_page_pools(TSATTN_DTYPE_BFLOAT16, PageLayout::hnd, 2, 16, 1, 128, PoolStyle::compact);
    const tsattn_tensor_view k = p.k.view(), v = p.v.view();
    PagePools pools = check_page_pools(&k, &v, PageLayout::hnd, 16, Residency::host);
    pools.k.num_pages = int64_t{1} << 40;  // a pool no int32 page id reaches the end of
    const TsattnGatherParams params =
        gather_params(pools, {nullptr, nullptr, nullptr, 1, int64_t{1} << 33}, {int64_t{1} << 35, kInt32Max, 0, 0, 0});
    CHECK(params.num_pages == kInt32Max);
    CHECK(params.num_entries == kInt32Max);
    CHECK(params.max_kv_len == kInt32Max);

    CHECK(gather_ctas(0, 1000) == 0);
    CHECK(gather_ctas(1, 1000) == 1);
    CHECK(gather_ctas(8, 1000) == 1);  // one warp per row: 8 warps per CTA
    CHECK(gather_ctas(9, 1000) == 2);
    CHECK(gather_ctas(kInt32Max, 1056) == 1056);
    CHECK(gather_ctas(100, 0) == 1);
  }
}

}  // namespace
}  // namespace tsattn::test
