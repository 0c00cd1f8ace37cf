#include "api/paged_kv.hpp"

#include <algorithm>
#include <limits>

#include <fmt/ranges.h>

#include "api/dtype.hpp"
#include "api/tensor_checks.hpp"
#include "api/validate.hpp"
#include "common/checked_int.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The tensor axis that holds the slots of a page (the other three are fixed: pages 0, D 3).
int slot_axis(PageLayout layout) { return layout == PageLayout::hnd ? 2 : 1; }
int head_axis(PageLayout layout) { return layout == PageLayout::hnd ? 1 : 2; }

const char* pool_shape_text(PageLayout layout) {
  return layout == PageLayout::hnd ? "[num_pages, Hkv, page_size, D]" : "[num_pages, page_size, Hkv, D]";
}

// An indptr starts at 0 and never decreases; where it must end is the caller's rule.
void check_indptr_start_and_order(const HostInt32Array& indptr, const char* name) {
  if (indptr[0] != 0) raise(ErrorKind::value, "{}[0]={} must be 0", name, indptr[0]);
  for (int64_t i = 1; i < indptr.size; ++i)
    if (indptr[i] < indptr[i - 1])
      raise(ErrorKind::value, "{} must be non-decreasing, but {}[{}]={} < {}[{}]={}", name, name, i, indptr[i], name,
            i - 1, indptr[i - 1]);
}

PagePool make_pool(const CheckedTensor& t, PageLayout layout, int64_t page_size) {
  PagePool pool;
  pool.data = t.view->data;
  pool.dtype = static_cast<tsattn_dtype>(t.view->dtype);
  pool.layout = layout;
  pool.num_pages = t.shape[0];
  pool.page_size = page_size;
  pool.num_kv_heads = t.shape[head_axis(layout)];
  pool.head_dim = t.shape[3];
  pool.page_stride = t.strides[0];
  pool.slot_stride = t.strides[slot_axis(layout)];
  pool.head_stride = t.strides[head_axis(layout)];
  return pool;
}

}  // namespace

const char* page_layout_name(PageLayout layout) { return layout == PageLayout::hnd ? "HND" : "NHD"; }

void check_page_size(int64_t page_size) {
  if (page_size < 1) raise(ErrorKind::value, "page_size={} must be >= 1", page_size);
  if (std::find(std::begin(kPageSizes), std::end(kPageSizes), page_size) == std::end(kPageSizes))
    raise(ErrorKind::not_implemented, "page_size={} is not supported; supported: {}", page_size,
          fmt::join(kPageSizes, ", "));
}

HostInt32Array host_int32_array(const tsattn_tensor_view* view, const char* name) {
  const CheckedTensor t = inspect_tensor(view, name);
  // As for batch_prefill's indptrs: another index dtype is a TypeError.
  if (t.view->dtype != TSATTN_DTYPE_INT32)
    raise(ErrorKind::type, "{} has dtype {}; expected int32", name, dtype_name(t.view->dtype));
  if (t.ndim() != 1) raise(ErrorKind::value, "{} must be 1-D (got shape {})", name, t.shape_text());
  if (!t.on_host()) raise(ErrorKind::value, "{} must be in host memory here (got {})", name, t.device_text());
  if (t.numel > 0 && reinterpret_cast<uintptr_t>(t.view->data) % alignof(int32_t) != 0)
    raise(ErrorKind::value, "{}.data is not 4-byte aligned", name);
  // inspect_tensor() bounded (size - 1) * stride, so every entry's offset fits in int64.
  return {static_cast<const int32_t*>(t.view->data), t.shape[0], t.strides[0]};
}

int64_t PagedKvTables::kv_len(int64_t b) const {
  const int64_t page_count = pages(b);
  if (page_count == 0) return 0;
  return (Checked<int64_t>(page_count - 1) * page_size + paged_kv_last_page_len[b]).value();
}

PagedKvLengths check_paged_kv_tables(const PagedKvTables& t) {
  check_page_size(t.page_size);

  // Entry counts: B from qo_indptr, as in batch_prefill.
  if (t.qo_indptr.size < 1) raise(ErrorKind::value, "qo_indptr must have B+1 >= 1 entries (got 0)");
  const int64_t batch = t.batch();
  if (batch > kInt32Max) raise(ErrorKind::value, "batch size {} is too large (int32)", batch);
  if (t.paged_kv_indptr.size != t.qo_indptr.size)
    raise(ErrorKind::value, "qo_indptr has {} entries but paged_kv_indptr has {}; both need B+1", t.qo_indptr.size,
          t.paged_kv_indptr.size);
  if (t.paged_kv_last_page_len.size != batch)
    raise(ErrorKind::value, "paged_kv_last_page_len has {} entries but needs B={} (qo_indptr has B+1={} entries)",
          t.paged_kv_last_page_len.size, batch, t.qo_indptr.size);

  check_indptr_start_and_order(t.qo_indptr, "qo_indptr");
  if (t.qo_indptr[batch] != t.total_q)
    raise(ErrorKind::value, "qo_indptr[-1]={} must equal q.shape[0]={}", t.qo_indptr[batch], t.total_q);

  // paged_kv_indices may be longer than the tables use (a preallocated buffer): the rest is unread.
  check_indptr_start_and_order(t.paged_kv_indptr, "paged_kv_indptr");
  if (t.paged_kv_indptr[batch] > t.paged_kv_indices.size)
    raise(ErrorKind::value, "paged_kv_indptr[-1]={} exceeds paged_kv_indices.shape[0]={}", t.paged_kv_indptr[batch],
          t.paged_kv_indices.size);

  // Lengths before page ids, so that a table too long to scan fails on its length first.
  PagedKvLengths lengths;
  lengths.kv_len.resize(static_cast<size_t>(batch));
  lengths.kv_indptr.assign(static_cast<size_t>(batch + 1), 0);
  Checked<int64_t> total = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t page_count = t.pages(b);
    int64_t keys = 0;
    if (page_count > 0) {
      const int32_t last = t.paged_kv_last_page_len[b];
      if (last < 1 || last > t.page_size)
        raise(ErrorKind::value, "paged_kv_last_page_len[{}]={} must be in [1, page_size={}]: request {} has {} page{}",
              b, last, t.page_size, b, page_count, page_count == 1 ? "" : "s");
      // page_count < 2^31 and page_size <= 128 keep this far inside int64; checked all the same.
      const Checked<int64_t> checked_keys = Checked<int64_t>(page_count - 1) * t.page_size + last;
      if (checked_keys.overflowed() || checked_keys.value() > kInt32Max)
        raise(ErrorKind::value,
              "request {} has {} pages of page_size={} with {} keys in the last: more than 2^31-1 keys in one request",
              b, page_count, t.page_size, last);
      keys = checked_keys.value();
    }
    lengths.kv_len[static_cast<size_t>(b)] = keys;
    total = total + keys;
    lengths.kv_indptr[static_cast<size_t>(b + 1)] = total.value();  // B < 2^31 requests of < 2^31 keys each
  }

  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t n = t.paged_kv_indptr[b]; n < t.paged_kv_indptr[b + 1]; ++n) {
      const int32_t page_id = t.paged_kv_indices[n];
      if (page_id < 0 || page_id >= t.num_pages)
        raise(ErrorKind::value, "paged_kv_indices[{}]={} is out of range [0, num_pages={}) (page {} of request {})", n,
              page_id, t.num_pages, n - t.paged_kv_indptr[b], b);
    }
  }
  return lengths;
}

KeySlot locate_key(const PagedKvTables& t, int64_t b, int64_t j) {
  if (b < 0 || b >= t.batch()) raise(ErrorKind::value, "request b={} is outside the batch of B={}", b, t.batch());
  const int64_t keys = t.kv_len(b);
  if (j < 0 || j >= keys) raise(ErrorKind::value, "key j={} is outside request {}'s Sk={} keys", j, b, keys);
  const int64_t entry = t.paged_kv_indptr[b] + j / t.page_size;
  return {t.paged_kv_indices[entry], j % t.page_size};
}

int64_t PagePool::element_offset(int64_t page, int64_t slot, int64_t head, int64_t d) const {
  return (Checked<int64_t>(page) * page_stride + Checked<int64_t>(slot) * slot_stride +
          Checked<int64_t>(head) * head_stride + d)
      .value();
}

int64_t paged_element_offset(const PagedKvTables& tables, const PagePool& pool, int64_t b, int64_t j, int64_t head,
                             int64_t d) {
  const KeySlot key = locate_key(tables, b, j);
  return pool.element_offset(key.page_id, key.slot, head, d);
}

PagePools check_page_pools(const tsattn_tensor_view* k_cache, const tsattn_tensor_view* v_cache, PageLayout layout,
                           int64_t page_size, Residency residency) {
  check_page_size(page_size);
  const CheckedTensor k = inspect_tensor(k_cache, "k_cache");
  const CheckedTensor v = inspect_tensor(v_cache, "v_cache");

  if (!is_attention_dtype(k.view->dtype))
    raise(ErrorKind::not_implemented, "k_cache has dtype {}; supported: {}", dtype_name(k.view->dtype),
          supported_dtypes());
  if (v.view->dtype != k.view->dtype)
    raise(ErrorKind::not_implemented, "k_cache and v_cache must share one dtype (got k_cache={}, v_cache={})",
          dtype_name(k.view->dtype), dtype_name(v.view->dtype));

  check_residency(k, residency, k.view->device_id, k.name);
  check_residency(v, residency, k.view->device_id, k.name);

  if (k.ndim() != 4)
    raise(ErrorKind::value, "k_cache must be 4-D {} for kv_layout='{}' (got shape {})", pool_shape_text(layout),
          page_layout_name(layout), k.shape_text());
  if (v.shape != k.shape)
    raise(ErrorKind::value, "v_cache.shape={} must equal k_cache.shape={}", v.shape_text(), k.shape_text());
  const int axis = slot_axis(layout);
  if (k.shape[axis] != page_size)
    raise(ErrorKind::value, "k_cache.shape[{}]={} must equal page_size={} (kv_layout='{}': {})", axis, k.shape[axis],
          page_size, page_layout_name(layout), pool_shape_text(layout));

  check_attention_strides(k);
  check_attention_strides(v);
  return {make_pool(k, layout, page_size), make_pool(v, layout, page_size)};
}

}  // namespace tsattn
