#include "plan/tensor_maps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <limits>

#include <tsattn/tsattn.hpp>

#include "api/dtype.hpp"
#include "common/error.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn {

namespace {

// cuTensorMapEncodeTiled's rules (cuda.h): a 16-byte aligned base, strides that are multiples of
// 16 bytes below 2^40, extents of 1 to 2^32 (kept below 2^32 here, as for every int index).
constexpr uint64_t kTmaAlignment = 16;
constexpr uint64_t kStrideLimit = uint64_t{1} << 40;
constexpr uint64_t kExtentLimit = uint64_t{1} << 32;
// One box row is 128 bytes, the span of the 128-byte swizzle: 64 16-bit or 128 e4m3 elements,
// so a D128 or D256 row is loaded as 2 or 4 (e4m3: 1 or 2) boxes.
constexpr cuuint64_t kBoxRowBytes = 128;
// TMA coordinates are 32-bit signed.
constexpr int64_t kCoordinateLimit = int64_t{1} << 31;

// The maps carry the templates' descriptor bytes as the driver's type.
static_assert(sizeof(CUtensorMap) == sizeof(TsattnTmaDescriptor) &&
                  alignof(CUtensorMap) == alignof(TsattnTmaDescriptor),
              "TsattnTmaDescriptor (prefill_params.h) must match cuda.h's CUtensorMap");

const char* const kStridedDims[3] = {"head", "token", "batch"};  // dims 1..3 of a map

struct Extents {
  int64_t heads, tokens, batch;
};

// The packed layout has no batch dimension: one request stream of all tokens.
Extents q_extents(const Problem& p) { return {p.num_qo_heads, p.q_tokens, p.layout == Layout::fixed ? p.batch : 1}; }
Extents kv_extents(const Problem& p) { return {p.num_kv_heads, p.kv_tokens, p.layout == Layout::fixed ? p.batch : 1}; }

// The stride of a dimension of extent 1 is never multiplied by a non-zero coordinate, and the contract
// lets callers give any value there (size-1 dimensions are exempt from its alignment rules). The
// map gets the stride a compact tensor would have instead, which meets TMA's rules whatever the
// caller passed.
cuuint64_t stand_in_stride(cuuint64_t inner_stride, cuuint64_t inner_extent) {
  cuuint64_t bytes = 0;
  if (__builtin_mul_overflow(inner_stride, inner_extent, &bytes) || bytes >= kStrideLimit) return kTmaAlignment;
  return std::max((bytes + kTmaAlignment - 1) / kTmaAlignment * kTmaAlignment, kTmaAlignment);
}

// Fills g for one of q, k, v, out, or says which rule the tensor breaks.
std::optional<std::string> describe(const char* name, const TokenTensor& t, int head_dim, const Extents& e, int rows,
                                    cuuint64_t element_bytes, TensorMapGeometry& g) {
  g.tensor = name;
  g.base = t.data;
  // Every extent is at least 1 (the driver's rule): a tensor without tokens is never loaded from,
  // because the kernel issues no load for a request without keys (or rows).
  const int64_t extents[4] = {head_dim, e.heads, std::max<int64_t>(e.tokens, 1), std::max<int64_t>(e.batch, 1)};
  const char* const extent_names[4] = {"head dim", "heads", "tokens", "batch"};
  for (int i = 0; i < 4; ++i) {
    if (static_cast<uint64_t>(extents[i]) >= kExtentLimit)
      return fmt::format("{} has {} {}; TMA extents must be below 2^32", name, extents[i], extent_names[i]);
    g.dims[i] = static_cast<cuuint64_t>(extents[i]);
  }
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  if (address % kTmaAlignment != 0)
    return fmt::format("{}.data={:#x} is not {}-byte aligned (TMA needs it)", name, address, kTmaAlignment);
  const int64_t strides[3] = {t.head_stride, t.token_stride, t.batch_stride};
  for (int i = 0; i < 3; ++i) {
    const cuuint64_t inner_stride = i == 0 ? element_bytes : g.strides[i - 1];
    if (g.dims[i + 1] == 1) {
      g.strides[i] = stand_in_stride(inner_stride, g.dims[i]);
      continue;
    }
    // Validation bounds every addressable byte by int64, so this product cannot overflow.
    const auto bytes = static_cast<cuuint64_t>(strides[i]) * element_bytes;
    if (bytes % kTmaAlignment != 0)
      return fmt::format("{} {} stride is {} elements ({} bytes), not a multiple of {} bytes (TMA needs it)", name,
                         kStridedDims[i], strides[i], bytes, kTmaAlignment);
    if (bytes >= kStrideLimit)
      return fmt::format("{} {} stride is {} bytes; TMA strides must be below 2^40", name, kStridedDims[i], bytes);
    g.strides[i] = bytes;
  }
  g.box[0] = static_cast<cuuint32_t>(kBoxRowBytes / element_bytes);
  g.box[1] = 1;
  g.box[2] = static_cast<cuuint32_t>(rows);
  g.box[3] = 1;
  return std::nullopt;
}

// The page pools of a paged call: {d, head, slot, page} maps whose boxes are whole pages, and the
// tables the kernel looks the pages up in.
std::optional<std::string> describe_pages(const Problem& p, cuuint64_t element_bytes, TensorMapPlan& plan) {
  const PagedKeys& pages = *p.paged;
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (!paged_keys_fit(pages.entries, pages.page_size))
    return fmt::format("paged_kv_indices has {} entries; the paged kernels address at most 2^31 / page_size = {}",
                       pages.entries, (int64_t{1} << 31) / pages.page_size);
  const Extents pool{p.num_kv_heads, pages.page_size, pages.num_pages};
  // A pool without pages (an empty tensor may have no address) gives no request a key, so no box is
  // ever loaded from it; its maps take q's address, which TMA accepts.
  TokenTensor k = pages.k, v = pages.v;
  if (pages.num_pages == 0) k.data = v.data = p.q.data;
  const int box_rows = static_cast<int>(pages.page_size);  // one box per page
  std::optional<std::string> why = describe("k_cache", k, p.head_dim, pool, box_rows, element_bytes, plan.k);
  if (!why) why = describe("v_cache", v, p.head_dim, pool, box_rows, element_bytes, plan.v);
  plan.pages = TsattnPageTable{
      pages.page_indptr, pages.page_indices, static_cast<int>(std::min(pages.entries, kInt32Max)),
      static_cast<int>(std::min(pages.num_pages, kInt32Max)), std::countr_zero(static_cast<uint32_t>(pages.page_size))};
  return why;
}

// out is written with plain stores of out_store_bytes each (codegen/spec_table.hpp: element
// pairs, or 16-byte row chunks where the kernel stages O in shared memory), so out's address and
// strides must be multiples of that. Size-1 dimensions are exempt, as above.
std::optional<std::string> check_output(const Problem& p, int out_store_bytes) {
  const char* const stores = out_store_bytes == 16 ? "16-byte row chunks" : "pairs of elements";
  const auto address = reinterpret_cast<uintptr_t>(p.out.data);
  if (address % static_cast<uintptr_t>(out_store_bytes) != 0)
    return fmt::format("out.data={:#x} is not {}-byte aligned; the sm90a kernel stores {}", address, out_store_bytes,
                       stores);
  const Extents e = q_extents(p);
  const int64_t extents[3] = {e.heads, e.tokens, e.batch};
  const int64_t strides[3] = {p.out.head_stride, p.out.token_stride, p.out.batch_stride};
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = strides[i] * dtype_size(p.output_dtype);
    if (extents[i] > 1 && bytes % out_store_bytes != 0)
      return fmt::format(
          "out {} stride is {} elements ({} bytes), not a multiple of {} bytes; the sm90a kernel stores {}",
          kStridedDims[i], strides[i], bytes, out_store_bytes, stores);
  }
  return std::nullopt;
}

// V^T of e4m3 inputs (prefill_params.h): [batch][kv head][d][keys] bytes, {key, d, kv head, batch}
// map with box {128, D, 1, 1}.
std::optional<std::string> describe_transposed_v(const Problem& p, TransposedV& t) {
  // At least one group: extents are >= 1 and the workspace is never empty.
  t.keys = std::max<int64_t>(
      p.layout == Layout::packed ? TSATTN_VT_PACKED_START(p.kv_tokens, p.batch) : TSATTN_VT_FIXED_KEYS(p.kv_tokens),
      32);
  if (t.keys >= kCoordinateLimit)
    return fmt::format("V^T would have {} columns (kv tokens {}, batch {}); TMA coordinates are 32-bit", t.keys,
                       p.kv_tokens, p.batch);
  const int64_t batch = p.layout == Layout::fixed ? p.batch : 1;
  TensorMapGeometry& g = t.map;
  g.tensor = "v^T";
  const cuuint64_t row = static_cast<cuuint64_t>(t.keys);
  g.dims[0] = row;
  g.dims[1] = static_cast<cuuint64_t>(p.head_dim);
  g.dims[2] = static_cast<cuuint64_t>(p.num_kv_heads);
  g.dims[3] = static_cast<cuuint64_t>(std::max<int64_t>(batch, 1));
  g.strides[0] = row;
  g.strides[1] = row * g.dims[1];
  g.strides[2] = g.strides[1] * g.dims[2];
  t.bytes = g.strides[2] * g.dims[3];
  if (g.strides[2] >= kStrideLimit)
    return fmt::format("V^T would take {} bytes per batch entry; TMA strides must be below 2^40", g.strides[2]);
  g.box[0] = static_cast<cuuint32_t>(kBoxRowBytes);  // keys: one byte each
  g.box[1] = static_cast<cuuint32_t>(p.head_dim);
  g.box[2] = 1;
  g.box[3] = 1;
  return std::nullopt;
}

// k and v of the packed or fixed layout, rows of BLOCK_N keys; for e4m3 inputs v is read as V^T
// from a workspace instead (v itself is read by the transpose kernel with plain 16-byte loads, the
// contract's alignment).
std::optional<std::string> describe_packed_kv(const Problem& p, int block_n, cuuint64_t element_bytes,
                                              TensorMapPlan& plan) {
  std::optional<std::string> why = describe("k", p.k, p.head_dim, kv_extents(p), block_n, element_bytes, plan.k);
  if (why) return why;
  if (p.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN) {
    plan.transposed_v.emplace();
    return describe_transposed_v(p, *plan.transposed_v);
  }
  return describe("v", p.v, p.head_dim, kv_extents(p), block_n, element_bytes, plan.v);
}

std::optional<std::string> encode_one(const driver::Api& cu, CUtensorMapDataType type, const TensorMapGeometry& g,
                                      TsattnTmaDescriptor& out) {
  CUtensorMap map;
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result = cu.cuTensorMapEncodeTiled(
      &map, type, 4, g.base, g.dims, g.strides, g.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    const char* error = nullptr;
    cu.cuGetErrorName(result, &error);
    return error ? fmt::format("cuTensorMapEncodeTiled for {} failed with {}", g.tensor, error)
                 : fmt::format("cuTensorMapEncodeTiled for {} failed with CUresult {}", g.tensor,
                               static_cast<int>(result));
  }
  std::memcpy(&out, &map, sizeof(map));
  return std::nullopt;
}

CUtensorMapDataType map_data_type(tsattn_dtype dtype) {
  switch (dtype) {
    case TSATTN_DTYPE_FLOAT16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case TSATTN_DTYPE_BFLOAT16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    default: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // e4m3: bytes
  }
}

}  // namespace

bool paged_keys_fit(int64_t entries, int64_t page_size) {
  return page_size > 0 && entries <= (int64_t{1} << 31) / page_size;
}

TensorMapPlanOrReason plan_tensor_maps(const Problem& p, const MapShape& shape) {
  TensorMapPlanOrReason result;
  TensorMapPlan plan;
  plan.data_type = map_data_type(p.input_dtype);
  const auto element_bytes = static_cast<cuuint64_t>(dtype_size(p.input_dtype));
  std::optional<std::string> why = describe("q", p.q, p.head_dim, q_extents(p), shape.block_m, element_bytes, plan.q);
  if (!why)
    why = p.paged ? describe_pages(p, element_bytes, plan) : describe_packed_kv(p, shape.block_n, element_bytes, plan);
  if (!why) why = check_output(p, shape.out_store_bytes);
  if (!why && shape.out_map) {
    plan.out.emplace();
    plan.out_data_type = map_data_type(p.output_dtype);
    why = describe("out", p.out, p.head_dim, q_extents(p), kOutMapRows,
                   static_cast<cuuint64_t>(dtype_size(p.output_dtype)), *plan.out);
  }
  if (why) {
    result.reason = std::move(*why);
  } else {
    result.plan = plan;
  }
  return result;
}

namespace {

bool same_geometry(const TensorMapGeometry& a, const TensorMapGeometry& b) {
  return a.tensor == b.tensor && a.base == b.base && std::equal(std::begin(a.dims), std::end(a.dims), b.dims) &&
         std::equal(std::begin(a.strides), std::end(a.strides), b.strides) &&
         std::equal(std::begin(a.box), std::end(a.box), b.box);
}

// One map, from the cache entry when it holds this geometry (cache may be null: no cache).
std::optional<std::string> encode_through(const driver::Api& cu, CUtensorMapDataType type, const TensorMapGeometry& g,
                                          TensorMapCache::Entry* entry, TsattnTmaDescriptor& out) {
  if (entry != nullptr && entry->valid && entry->data_type == type && same_geometry(entry->geometry, g)) {
    out = entry->map;
    return std::nullopt;
  }
  std::optional<std::string> why = encode_one(cu, type, g, out);
  if (entry != nullptr) *entry = {!why, type, g, out};
  return why;
}

TensorMapsOrReason encode_maps(const TensorMapPlan& plan, TensorMapCache* cache) {
  TensorMapsOrReason result;
  const driver::Api* cu = nullptr;
  try {
    cu = &driver::api();
  } catch (const Error& e) {
    result.reason = e.what();
    return result;
  }
  const auto entry = [&](TensorMapCache::Entry TensorMapCache::*role) { return cache ? &(cache->*role) : nullptr; };
  std::optional<std::string> why =
      encode_through(*cu, plan.data_type, plan.q, entry(&TensorMapCache::q), result.maps.q);
  if (!why) why = encode_through(*cu, plan.data_type, plan.k, entry(&TensorMapCache::k), result.maps.k);
  if (!why && !plan.transposed_v)
    why = encode_through(*cu, plan.data_type, plan.v, entry(&TensorMapCache::v), result.maps.v);
  if (!why && plan.out)
    why = encode_through(*cu, plan.out_data_type, *plan.out, entry(&TensorMapCache::out), result.maps.o);
  if (why) result.reason = std::move(*why);
  result.transposed_v = plan.transposed_v;
  if (plan.pages) result.maps.pages = *plan.pages;
  return result;
}

}  // namespace

TensorMapsOrReason encode_tensor_maps(const TensorMapPlan& plan) { return encode_maps(plan, nullptr); }

TensorMapsOrReason encode_tensor_maps(const TensorMapPlan& plan, TensorMapCache& cache) {
  return encode_maps(plan, &cache);
}

void encode_transposed_v_map(const TransposedV& transposed, void* base, TsattnTmaDescriptor& out) {
  TensorMapGeometry g = transposed.map;
  g.base = base;
  if (std::optional<std::string> why = encode_one(driver::api(), CU_TENSOR_MAP_DATA_TYPE_UINT8, g, out))
    raise(ErrorKind::runtime, "{}", *why);
}

TensorMapsOrReason make_tensor_maps(const Problem& p, const MapShape& shape) {
  TensorMapPlanOrReason planned = plan_tensor_maps(p, shape);
  if (!planned.plan) {
    TensorMapsOrReason result;
    result.reason = std::move(planned.reason);
    return result;
  }
  return encode_tensor_maps(*planned.plan);
}

}  // namespace tsattn
