#include "plan/gather_launch.hpp"

#include <algorithm>
#include <limits>

#include "api/dtype.hpp"
#include "common/checked_int.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

int int32_clamped(int64_t value) { return static_cast<int>(std::clamp<int64_t>(value, 0, kInt32Max)); }

TsattnPagePool pool_params(const PagePool& pool) {
  const int64_t element = dtype_size(pool.dtype);
  // check_page_pools bounded every offset within the pool, so the byte strides fit.
  return {pool.data, pool.page_stride * element, pool.slot_stride * element, pool.head_stride * element};
}

}  // namespace

GatherWorkspace gather_workspace(const GatherCapacity& c) {
  GatherWorkspace w;
  const auto words = [](int64_t n) { return static_cast<size_t>(n) * sizeof(int32_t); };
  w.qo_indptr = {0, words(c.batch + 1)};
  w.paged_kv_indptr = {w.qo_indptr.offset + w.qo_indptr.bytes, words(c.batch + 1)};
  w.last_page_len = {w.paged_kv_indptr.offset + w.paged_kv_indptr.bytes, words(c.batch)};
  w.indices = {w.last_page_len.offset + w.last_page_len.bytes, words(c.index_entries)};
  w.kv_indptr = {align_up(w.indices.offset + w.indices.bytes, 256), words(c.batch + 1)};
  const auto rows = static_cast<size_t>((Checked<int64_t>(c.key_rows) * c.row_bytes).value());
  w.k = {align_up(w.kv_indptr.offset + w.kv_indptr.bytes, 256), rows};
  w.v = {align_up(w.k.offset + w.k.bytes, 256), rows};
  w.bytes = align_up(w.v.offset + w.v.bytes, 256);
  return w;
}

size_t table_image(const GatherWorkspace& w, const PagedKvTables& tables, int64_t batch, int64_t entries,
                   std::vector<int32_t>& image) {
  const auto word = [](const Region& r) { return r.offset / sizeof(int32_t); };
  const size_t words = word(w.indices) + static_cast<size_t>(entries);
  if (image.size() < words) image.resize(words);
  for (int64_t i = 0; i <= batch; ++i) {
    image[word(w.qo_indptr) + static_cast<size_t>(i)] = tables.qo_indptr[i];
    image[word(w.paged_kv_indptr) + static_cast<size_t>(i)] = tables.paged_kv_indptr[i];
  }
  for (int64_t i = 0; i < batch; ++i)
    image[word(w.last_page_len) + static_cast<size_t>(i)] = tables.paged_kv_last_page_len[i];
  for (int64_t i = 0; i < entries; ++i) image[word(w.indices) + static_cast<size_t>(i)] = tables.paged_kv_indices[i];
  return words;
}

DeviceTables uploaded_tables(const GatherWorkspace& w, uint64_t base, int64_t batch, int64_t entries) {
  const auto at = [&](const Region& r) { return reinterpret_cast<const int32_t*>(base + r.offset); };
  return {at(w.paged_kv_indptr), at(w.indices), at(w.last_page_len), batch, entries};
}

TsattnGatherParams gather_params(const PagePools& pools, const DeviceTables& tables, const GatherTarget& target) {
  TsattnGatherParams p{};
  p.paged_kv_indptr = tables.paged_kv_indptr;
  p.paged_kv_indices = tables.paged_kv_indices;
  p.paged_kv_last_page_len = tables.paged_kv_last_page_len;
  p.batch = int32_clamped(tables.batch);
  p.num_entries = int32_clamped(tables.entries);
  p.num_pages = int32_clamped(pools.k.num_pages);
  p.page_size = static_cast<int>(pools.k.page_size);
  p.max_kv_len = int32_clamped(target.max_kv_len);
  p.key_rows = int32_clamped(target.key_rows);
  p.kv_indptr = reinterpret_cast<int*>(target.kv_indptr);
  p.k_pool = pool_params(pools.k);
  p.v_pool = pool_params(pools.v);
  p.num_kv_heads = static_cast<int>(pools.k.num_kv_heads);
  p.row_chunks = static_cast<int>(pools.k.head_dim * dtype_size(pools.k.dtype) / TSATTN_GATHER_CHUNK_BYTES);
  p.k_out = reinterpret_cast<void*>(target.k);
  p.v_out = reinterpret_cast<void*>(target.v);
  return p;
}

unsigned gather_ctas(int64_t key_rows, int64_t resident_ctas) {
  if (key_rows <= 0) return 0;
  constexpr int64_t kWarps = TSATTN_GATHER_THREADS / 32;
  const int64_t needed = (key_rows + kWarps - 1) / kWarps;
  // CTAs beyond what the GPU holds would only queue behind the others.
  return static_cast<unsigned>(std::clamp<int64_t>(needed, 1, std::max<int64_t>(resident_ctas, 1)));
}

}  // namespace tsattn
