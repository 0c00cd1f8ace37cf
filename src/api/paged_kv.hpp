// paged_kv.hpp - the keys and values of batch_prefill_with_paged_kv_cache (docs/paged_kv.md): where
// a request's key j lives in the page pools, and the checks of the pools and of the page tables.
//
// A request's keys are its pages, in table order, each page_size keys long except the last, which
// holds paged_kv_last_page_len[b] keys. Everything here runs on the host: the table checks read
// host-resident tables; the pool checks read only shapes and strides. Errors are tsattn::Error
// with the argument's name and the offending value, as in validate.cpp.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <vector>

#include "api/problem.hpp"

namespace tsattn {

// Where the head axis sits in a page: HND pages are [Hkv, page_size, D], NHD pages
// [page_size, Hkv, D]. D is the innermost axis in both.
enum class PageLayout { hnd, nhd };
const char* page_layout_name(PageLayout layout);  // "HND", "NHD"

// The page sizes the kernels are built for.
inline constexpr int64_t kPageSizes[] = {16, 32, 64, 128};
// page_size < 1 is a ValueError; another size the kernels are not built for a NotImplementedError.
void check_page_size(int64_t page_size);

// A 1-D int32 array in host memory, read through its stride (a table the caller handed over).
struct HostInt32Array {
  const int32_t* data = nullptr;
  int64_t size = 0;
  int64_t stride = 1;  // elements; any value >= 0 (0 repeats one entry)
  int32_t operator[](int64_t i) const { return data[i * stride]; }
};

// An int32 table view in host memory (CPU or pinned): int32 (TypeError otherwise), 1-D, 4-byte
// aligned, any non-negative stride (ValueError otherwise).
HostInt32Array host_int32_array(const tsattn_tensor_view* view, const char* name);

// The four tables of one call, as the caller gave them.
struct PagedKvTables {
  int64_t page_size = 32;
  int64_t num_pages = 0;                  // pages in each pool: valid page ids are [0, num_pages)
  int64_t total_q = 0;                    // q.shape[0], where qo_indptr must end
  HostInt32Array qo_indptr;               // [B + 1] query rows of each request in q
  HostInt32Array paged_kv_indptr;         // [B + 1] each request's run of paged_kv_indices
  HostInt32Array paged_kv_indices;        // [>= paged_kv_indptr[B]] page ids
  HostInt32Array paged_kv_last_page_len;  // [B] keys in each request's last page

  int64_t batch() const { return qo_indptr.size - 1; }
  int64_t pages(int64_t b) const { return int64_t{paged_kv_indptr[b + 1]} - paged_kv_indptr[b]; }
  // Sk_b = (pages - 1) * page_size + last_page_len, or 0 without pages (last_page_len unread).
  // Only for tables that passed check_paged_kv_tables, which bounds it by 2^31 - 1.
  int64_t kv_len(int64_t b) const;
};

// The key counts the checked tables describe.
struct PagedKvLengths {
  std::vector<int64_t> kv_len;     // [B]: Sk_b
  std::vector<int64_t> kv_indptr;  // [B + 1]: prefix sums of kv_len, the keys' rows once packed
};

// Every rule of docs/paged_kv.md on host tables, in this order: the page size; B + 1 entries in
// both indptrs and B in paged_kv_last_page_len, B <= 2^31 - 1; qo_indptr starts at 0, never decreases and ends at
// total_q; paged_kv_indptr starts at 0, never decreases and ends within paged_kv_indices; each
// request with pages has a last_page_len in [1, page_size] and at most 2^31 - 1 keys; every page
// id it names is in [0, num_pages). Raises tsattn::Error (value, or not_implemented for an
// unsupported page size) naming the table, the entry and the request.
PagedKvLengths check_paged_kv_tables(const PagedKvTables& tables);

// Key j (0 <= j < Sk_b) of request b: in page page_id at position slot (0 <= slot < page_size).
struct KeySlot {
  int32_t page_id = 0;
  int64_t slot = 0;
};
// Tables that passed check_paged_kv_tables; j outside [0, Sk_b) is a ValueError.
KeySlot locate_key(const PagedKvTables& tables, int64_t b, int64_t j);

// One page pool (k_cache or v_cache) as the kernels and the CPU oracle address it. Element
// (page, slot, head, d) is at data + page*page_stride + slot*slot_stride + head*head_stride + d,
// whichever the layout: the layout only decides which tensor axis each stride comes from.
struct PagePool {
  void* data = nullptr;
  tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16;
  PageLayout layout = PageLayout::hnd;
  int64_t num_pages = 0, page_size = 0, num_kv_heads = 0, head_dim = 0;
  int64_t page_stride = 0, slot_stride = 0, head_stride = 0;  // elements

  // Computed without overflow; one that overflows int64 raises (kind runtime) instead of wrapping.
  // Within the extents, the offset is at most the largest one check_page_pools bounded.
  int64_t element_offset(int64_t page, int64_t slot, int64_t head, int64_t d) const;
};

// Element (key j, head, d) of request b in pool: locate_key, then the pool's offset.
int64_t paged_element_offset(const PagedKvTables& tables, const PagePool& pool, int64_t b, int64_t j, int64_t head,
                             int64_t d);

struct PagePools {
  PagePool k, v;
};

// k_cache and v_cache: 4-D in the layout's shape with page_size on the slot axis; one attention
// dtype (NotImplementedError otherwise) and one shape for both; in host memory (residency host) or
// on one CUDA device (residency cuda); sizes that fit int64 (inspect_tensor); D contiguous, data
// and every other stride 16-byte aligned (check_attention_strides). Any other non-negative strides
// are accepted: padded pages, permuted axes, K and V interleaved in one buffer. Pools are only
// read, so pages may overlap. Raises tsattn::Error naming the pool, the axis and the value.
PagePools check_page_pools(const tsattn_tensor_view* k_cache, const tsattn_tensor_view* v_cache, PageLayout layout,
                           int64_t page_size, Residency residency);

}  // namespace tsattn
