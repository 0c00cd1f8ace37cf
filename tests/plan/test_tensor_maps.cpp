// test_tensor_maps.cpp - the sm90a family's TMA descriptors, planned without a GPU: the maps of
// valid problems (fixed, packed, empty, size-1 dimensions with any stride), and a reason for every
// rule a problem can break. Rules the validator already enforces are broken by editing the Problem
// after validation, as a later relaxation of the contract could.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "api/call_builder.hpp"
#include "plan/tensor_maps.hpp"

namespace tsattn::test {
namespace {

// out_store_bytes 4: pairs of 16-bit elements, the kernels that do not stage O.
std::string reason_of(const Problem& p, int block_m = 128, int block_n = 128, int out_store_bytes = 4) {
  const TensorMapPlanOrReason planned = plan_tensor_maps(p, {block_m, block_n, out_store_bytes, false});
  CHECK(planned.plan.has_value() == planned.reason.empty());
  return planned.reason;
}

TensorMapPlan plan_of(const Problem& p, int block_m = 128, int block_n = 128, bool out_map = false) {
  const TensorMapPlanOrReason planned = plan_tensor_maps(p, {block_m, block_n, out_map ? 16 : 4, out_map});
  INFO(planned.reason);
  REQUIRE(planned.plan.has_value());
  return *planned.plan;
}

void check_geometry(const TensorMapGeometry& g, const void* base, std::vector<cuuint64_t> dims,
                    std::vector<cuuint64_t> strides, std::vector<cuuint32_t> box) {
  CAPTURE(g.tensor);
  CHECK(g.base == base);
  CHECK(std::vector<cuuint64_t>(g.dims, g.dims + 4) == dims);
  CHECK(std::vector<cuuint64_t>(g.strides, g.strides + 3) == strides);
  CHECK(std::vector<cuuint32_t>(g.box, g.box + 4) == box);
}

// Boxes of 16-bit q, k and v: 64 elements (128 bytes) by `rows` tokens.
std::vector<cuuint32_t> box16(cuuint32_t rows) { return {64, 1, rows, 1}; }

void shift(void*& data, int bytes) { data = static_cast<std::byte*>(data) + bytes; }

TEST_SUITE("plan/tensor_maps") {
  TEST_CASE("fixed layout: rank-4 maps {d, head, token, batch} with byte strides and BLOCK_M/BLOCK_N boxes") {
    const Problem p = CallBuilder::fixed(2, 16, 32, 8, 2, 128, TSATTN_DTYPE_BFLOAT16).validate();
    const TensorMapPlan plan = plan_of(p, 128, 64);
    CHECK(plan.data_type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    check_geometry(plan.q, p.q.data, {128, 8, 16, 2}, {256, 8 * 256, 16 * 8 * 256}, box16(128));
    check_geometry(plan.k, p.k.data, {128, 2, 32, 2}, {256, 2 * 256, 32 * 2 * 256}, box16(64));
    check_geometry(plan.v, p.v.data, {128, 2, 32, 2}, {256, 2 * 256, 32 * 2 * 256}, box16(64));
    CHECK(std::string(plan.q.tensor) == "q");
    CHECK_FALSE(plan.transposed_v.has_value());
    CHECK_FALSE(plan.out.has_value());
  }

  TEST_CASE("out through TMA: out's map in the output dtype, one warp's 16 rows per box") {
    CallBuilder call = CallBuilder::fixed(2, 16, 32, 8, 2, 128, TSATTN_DTYPE_BFLOAT16);
    call.set_out_dtype(TSATTN_DTYPE_FLOAT16);
    call.out.strides = {16 * 8 * 136, 8 * 136, 136, 1};  // rows padded to 136 elements: out's own strides
    const Problem p = call.validate();
    const TensorMapPlan plan = plan_of(p, 128, 160, true);
    REQUIRE(plan.out.has_value());
    CHECK(plan.data_type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    CHECK(plan.out_data_type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
    check_geometry(*plan.out, p.out.data, {128, 8, 16, 2}, {272, 8 * 272, 16 * 8 * 272}, box16(16));
    CHECK(std::string(plan.out->tensor) == "out");

    // Packed: all requests' tokens in one stream, as for q.
    const Problem packed = CallBuilder::packed({5, 0, 7}, {9, 3, 7}, 4, 1, 128).validate();
    const TensorMapPlan packed_plan = plan_of(packed, 128, 128, true);
    REQUIRE(packed_plan.out.has_value());
    check_geometry(*packed_plan.out, packed.out.data, {128, 4, 12, 1}, {256, 4 * 256, 12 * 4 * 256}, box16(16));
  }

  TEST_CASE("packed layout: batch extent 1 with a compact stand-in stride, float16, D256") {
    const Problem p = CallBuilder::packed({5, 0, 7}, {9, 3, 7}, 4, 1, 256, TSATTN_DTYPE_FLOAT16).validate();
    const TensorMapPlan plan = plan_of(p);
    CHECK(plan.data_type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
    check_geometry(plan.q, p.q.data, {256, 4, 12, 1}, {512, 4 * 512, 12 * 4 * 512}, box16(128));
    // One kv head: its stride is unused as well, and stands in as compact.
    check_geometry(plan.k, p.k.data, {256, 1, 19, 1}, {512, 512, 19 * 512}, box16(128));
  }

  TEST_CASE("paged keys: {d, head, slot, page} maps of the pools in boxes of one page, and the page table") {
    Problem p = CallBuilder::packed({5, 0, 7}, {9, 3, 7}, 8, 2, 128, TSATTN_DTYPE_BFLOAT16).validate();
    alignas(16) static std::byte k_pool[64], v_pool[64];
    static const int32_t indptr[4] = {}, indices[1] = {};
    PagedKeys pages;
    // NHD pages of 64 slots: [page][slot][head][d] with a padded page (stride 40000 elements).
    pages.k = {k_pool, 40000, 2 * 128, 128};
    // HND pages of the same keys: [page][head][slot][d].
    pages.v = {v_pool, 40000, 128, 64 * 128};
    pages.num_pages = 13;
    pages.page_size = 64;
    pages.page_indptr = indptr;
    pages.page_indices = indices;
    pages.entries = 21;
    p.paged = pages;
    const TensorMapPlan plan = plan_of(p, 128, 128);
    check_geometry(plan.q, p.q.data, {128, 8, 12, 1}, {256, 8 * 256, 12 * 8 * 256}, box16(128));
    check_geometry(plan.k, k_pool, {128, 2, 64, 13}, {256, 2 * 256, 80000}, box16(64));
    check_geometry(plan.v, v_pool, {128, 2, 64, 13}, {64 * 256, 256, 80000}, box16(64));
    CHECK(std::string(plan.k.tensor) == "k_cache");
    REQUIRE(plan.pages.has_value());
    CHECK(plan.pages->page_indptr == indptr);
    CHECK(plan.pages->page_indices == indices);
    CHECK(plan.pages->entries == 21);
    CHECK(plan.pages->num_pages == 13);
    CHECK(plan.pages->page_shift == 6);
    // A pool without pages gets q's address (no box is ever loaded from it) and extents of 1.
    p.paged->num_pages = 0;
    p.paged->k.data = p.paged->v.data = nullptr;
    const TensorMapPlan empty = plan_of(p, 128, 128);
    CHECK(empty.k.base == p.q.data);
    CHECK(empty.k.dims[3] == 1);
    CHECK(empty.pages->num_pages == 0);
    // Tables too long for 32-bit paged keys (entries * page_size <= 2^31).
    CHECK(paged_keys_fit(int64_t{1} << 25, 64));
    CHECK_FALSE(paged_keys_fit((int64_t{1} << 25) + 1, 64));
    p.paged->entries = (int64_t{1} << 25) + 1;
    CHECK(reason_of(p).find("paged_kv_indices has 33554433 entries") != std::string::npos);
    p.paged->entries = 21;
    // Pool strides break TMA's rules as any tensor's do, named after the pool.
    p.paged->num_pages = 13;
    p.paged->k.data = k_pool;
    p.paged->k.batch_stride = 40001;
    CHECK(reason_of(p).find("k_cache") != std::string::npos);
  }

  TEST_CASE("no keys at all: every extent stays >= 1 (the kernel loads nothing from k and v)") {
    Problem p = CallBuilder::packed({3, 4}, {0, 0}, 2, 2).validate();
    CHECK(p.kv_tokens == 0);
    const TensorMapPlan plan = plan_of(p);
    CHECK(plan.k.dims[2] == 1);
    CHECK(plan.k.strides[2] % 16 == 0);
  }

  TEST_CASE("size-1 dimensions may carry any stride: the maps never use it") {
    CallBuilder call = CallBuilder::fixed(1, 16, 32, 1, 1, 128);
    call.q.strides = {12345, 128, 7, 1};  // batch and head have extent 1
    call.out.strides = {3, 128, 5, 1};
    const Problem p = call.validate();
    const TensorMapPlan plan = plan_of(p);
    check_geometry(plan.q, p.q.data, {128, 1, 16, 1}, {256, 256, 16 * 256}, box16(128));
  }

  TEST_CASE("fp8 inputs: bytes, 128-element boxes, and v read as V^T from a workspace") {
    // Fixed: Sk = 33 -> 64 V^T columns per (batch, kv head, d) row.
    const Problem p = CallBuilder::fixed(2, 16, 33, 8, 2, 128, TSATTN_DTYPE_FLOAT8_E4M3FN).validate();
    const TensorMapPlan plan = plan_of(p, 128, 128);
    CHECK(plan.data_type == CU_TENSOR_MAP_DATA_TYPE_UINT8);
    check_geometry(plan.q, p.q.data, {128, 8, 16, 2}, {128, 8 * 128, 16 * 8 * 128}, {128, 1, 128, 1});
    check_geometry(plan.k, p.k.data, {128, 2, 33, 2}, {128, 2 * 128, 33 * 2 * 128}, {128, 1, 128, 1});
    REQUIRE(plan.transposed_v.has_value());
    const TransposedV& vt = *plan.transposed_v;
    CHECK(vt.keys == 64);
    CHECK(vt.bytes == 2u * 2 * 128 * 64);
    check_geometry(vt.map, nullptr, {64, 128, 2, 2}, {64, 128 * 64, 2 * 128 * 64}, {128, 128, 1, 1});

    // Packed: requests start at multiples of 32 with a 32-column step each:
    // TSATTN_VT_PACKED_START(total 19, batch 3) = 32 * (1 + 3).
    const Problem packed = CallBuilder::packed({5, 0, 7}, {9, 3, 7}, 4, 1, 256, TSATTN_DTYPE_FLOAT8_E4M3FN).validate();
    const TensorMapPlan packed_plan = plan_of(packed);
    REQUIRE(packed_plan.transposed_v.has_value());
    CHECK(packed_plan.transposed_v->keys == 128);
    check_geometry(packed_plan.transposed_v->map, nullptr, {128, 256, 1, 1}, {128, 256 * 128, 256 * 128},
                   {128, 256, 1, 1});

    // No keys: each request still takes its 32-column step (the workspace is never empty).
    const Problem empty = CallBuilder::packed({3, 4}, {0, 0}, 2, 2, 128, TSATTN_DTYPE_FLOAT8_E4M3FN).validate();
    CHECK(plan_of(empty).transposed_v->keys == 64);
    const Problem no_keys = CallBuilder::fixed(1, 3, 0, 2, 2, 128, TSATTN_DTYPE_FLOAT8_E4M3FN).validate();
    CHECK(plan_of(no_keys).transposed_v->keys == 32);

    // V^T columns are TMA coordinates (32-bit).
    Problem huge = p;
    huge.kv_tokens = int64_t{1} << 31;
    CHECK(reason_of(huge).find("V^T would have 2147483648 columns") == 0);
  }

  TEST_CASE("V^T packed layout: requests never overlap and stay inside the row, malformed indptrs too") {
    std::mt19937_64 rng(20261130);
    for (int trial = 0; trial < 2000; ++trial) {
      const int batch = std::uniform_int_distribution<int>(1, 12)(rng);
      const bool malformed = trial % 4 == 3;
      std::vector<int64_t> indptr(batch + 1, 0);
      for (int b = 1; b <= batch; ++b) {
        const int64_t max_len = trial % 3 == 0 ? 340 : 40;  // short requests end inside 32-key groups
        const int64_t len = std::uniform_int_distribution<int64_t>(0, max_len)(rng);
        indptr[b] = indptr[b - 1] + len;
      }
      const int64_t total = indptr[batch];
      if (malformed)  // what the kernels see under graph capture: any values, clamped to [0, total]
        for (int64_t& v : indptr) v = std::uniform_int_distribution<int64_t>(0, total)(rng);
      const int64_t row = TSATTN_VT_PACKED_START(total, int64_t{batch});
      int64_t previous_end = 0;
      for (int b = 0; b < batch; ++b) {
        const int64_t begin = indptr[b], len = std::max<int64_t>(indptr[b + 1] - begin, 0);
        const int64_t start = TSATTN_VT_PACKED_START(begin, int64_t{b});
        CAPTURE(trial);
        CAPTURE(b);
        CHECK(start % 32 == 0);     // 32-key groups and 16-byte TMA coordinates line up
        CHECK(start + len <= row);  // every column a request addresses is in the row
        if (!malformed) {
          CHECK(start >= previous_end);  // requests never overlap
          previous_end = start + len;
        }
      }
    }
  }

  TEST_CASE("each TMA rule broken gives a reason naming the tensor and the value") {
    const Problem valid = CallBuilder::fixed(2, 16, 32, 8, 2, 128).validate();
    CHECK(reason_of(valid).empty());

    Problem p = valid;
    shift(p.q.data, 8);
    CHECK(reason_of(p).find("q.data=0x") == 0);
    CHECK(reason_of(p).find("is not 16-byte aligned") != std::string::npos);

    p = valid;
    p.k.token_stride = 2 * 128 + 4;  // 520 bytes
    CHECK(reason_of(p) == "k token stride is 260 elements (520 bytes), not a multiple of 16 bytes (TMA needs it)");

    p = valid;
    p.v.batch_stride = int64_t{1} << 40;
    CHECK(reason_of(p) == "v batch stride is 2199023255552 bytes; TMA strides must be below 2^40");

    p = valid;
    p.q_tokens = int64_t{1} << 32;
    CHECK(reason_of(p) == "q has 4294967296 tokens; TMA extents must be below 2^32");
  }

  TEST_CASE("out must take aligned element pairs") {
    const Problem valid = CallBuilder::fixed(2, 16, 32, 8, 2, 128).validate();
    Problem p = valid;
    p.out.token_stride = 8 * 128 + 1;
    CHECK(reason_of(p) ==
          "out token stride is 1025 elements (2050 bytes), not a multiple of 4 bytes; the sm90a kernel "
          "stores pairs of elements");

    p = valid;
    shift(p.out.data, 2);
    CHECK(reason_of(p).find("is not 4-byte aligned; the sm90a kernel stores pairs of elements") != std::string::npos);

    // fp8 out: pairs are 2 bytes.
    CallBuilder fp8_out = CallBuilder::fixed(2, 16, 32, 8, 2, 128);
    fp8_out.set_out_dtype(TSATTN_DTYPE_FLOAT8_E4M3FN);
    p = fp8_out.validate();
    CHECK(reason_of(p).empty());
    shift(p.out.data, 1);
    CHECK(reason_of(p, 128, 128, 2).find("is not 2-byte aligned") != std::string::npos);
  }

  TEST_CASE("out of kernels that stage O takes 16-byte row chunks, and size-1 dimensions take any stride") {
    const Problem valid = CallBuilder::fixed(2, 16, 32, 8, 2, 128).validate();
    CHECK(reason_of(valid, 128, 160, 16).empty());
    Problem p = valid;
    p.out.head_stride = 128 + 4;  // 264 bytes: element pairs fit, 16-byte chunks do not
    p.out.token_stride = 8 * 132;
    p.out.batch_stride = 16 * 8 * 132;
    CHECK(reason_of(p).empty());
    CHECK(reason_of(p, 128, 160, 16) ==
          "out head stride is 132 elements (264 bytes), not a multiple of 16 bytes; the sm90a kernel stores 16-byte "
          "row chunks");
    p = valid;
    p.out.batch_stride += 4;
    CHECK(reason_of(p, 128, 160, 16).find("out batch stride is 16388 elements (32776 bytes), not a multiple of 16") ==
          0);
    p = valid;
    shift(p.out.data, 8);
    CHECK(reason_of(p).empty());
    CHECK(reason_of(p, 128, 160, 16).find("is not 16-byte aligned; the sm90a kernel stores 16-byte row chunks") !=
          std::string::npos);
    // One query token per request and one batch entry: those strides are never used.
    Problem single = CallBuilder::fixed(1, 1, 32, 8, 2, 128).validate();
    single.out.token_stride = 3;
    single.out.batch_stride = 5;
    CHECK(reason_of(single, 128, 160, 16).empty());
  }

  TEST_CASE("make_tensor_maps reports a planning reason without calling the driver") {
    Problem p = CallBuilder::fixed(1, 16, 32, 8, 2, 128, TSATTN_DTYPE_FLOAT8_E4M3FN).validate();
    shift(p.k.data, 8);
    const TensorMapsOrReason maps = make_tensor_maps(p, {128, 128, 4, false});
    CHECK_FALSE(maps.ok());
    CHECK(maps.reason.find("k.data=0x") == 0);
  }
}

}  // namespace
}  // namespace tsattn::test
