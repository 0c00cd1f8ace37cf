// gather_launch.hpp - the page gather of a paged call as values (templates/paged/gather_params.h):
// the device memory one call or plan lays out for it, the host tables as one upload, and the
// kernels' parameters and grid.
//
// Pure: no driver, no global state, so tests/plan/test_gather_launch.cpp checks it without a GPU.
// api/paged_execute.cpp (one-shot calls) and api/paged_prefill_plan.cpp (plans) allocate and fill
// what it lays out and launch what it says.
#pragma once

#include <cstdint>
#include <vector>

#include "api/paged_kv.hpp"
#include "paged/gather_params.h"
#include "plan/launch_plan.hpp"

namespace tsattn {

// What the memory must hold: a call's own sizes, or a plan's capacities.
struct GatherCapacity {
  int64_t batch = 0;          // requests
  int64_t index_entries = 0;  // entries of paged_kv_indices copied from host-resident tables
  int64_t key_rows = 0;       // packed keys, all requests together (paged kernels: 1, a stand-in row)
  int64_t row_bytes = 0;      // one packed key: Hkv * D * element bytes (a multiple of 16)
};

// One device buffer, [tables | kv_indptr | k | v]. `tables` holds the copies of host-resident
// tables as int32 arrays back to back, in the order qo_indptr (batch + 1), paged_kv_indptr
// (batch + 1), paged_kv_last_page_len (batch), paged_kv_indices (index_entries): one upload fills
// them. kv_indptr (batch + 1 int32) is the scan's output; k and v are the packed keys and values,
// [key_rows, Hkv, D] each. kv_indptr, k and v start at 256-byte boundaries.
struct GatherWorkspace {
  Region qo_indptr, paged_kv_indptr, last_page_len, indices;
  Region kv_indptr, k, v;
  size_t bytes = 0;
};

GatherWorkspace gather_workspace(const GatherCapacity& c);

// Host-resident tables in the layout of `w`: image[0, n) is what to upload to w.qo_indptr.offset,
// with n = the words up to the last of `entries` page ids. Reads entries [0, batch] of both indptrs,
// [0, batch) of last_page_len and [0, entries) of paged_kv_indices; batch and entries must fit w.
// Returns n; `image` is resized to hold it (its words between the arrays are left as they were).
size_t table_image(const GatherWorkspace& w, const PagedKvTables& tables, int64_t batch, int64_t entries,
                   std::vector<int32_t>& image);

// The page tables as the gather reads them, in device memory.
struct DeviceTables {
  const int32_t* paged_kv_indptr = nullptr;  // [batch + 1]
  const int32_t* paged_kv_indices = nullptr;
  const int32_t* paged_kv_last_page_len = nullptr;  // [batch]
  int64_t batch = 0;
  int64_t entries = 0;  // of paged_kv_indices that may be read
};

// The copies of host-resident tables in a workspace of layout `w` at device address `base`
// (batch requests, `entries` page ids uploaded).
DeviceTables uploaded_tables(const GatherWorkspace& w, uint64_t base, int64_t batch, int64_t entries);

// What a gather launch needs beyond the tables.
struct GatherTarget {
  int64_t max_kv_len = 0;  // keys of one request at most (the scan cuts off the rest)
  int64_t key_rows = 0;    // rows of k and v: the prefix sums stop there
  uint64_t kv_indptr = 0;  // device addresses of the workspace's regions
  uint64_t k = 0;
  uint64_t v = 0;
};

// The parameters of both kernels. Values past int32 (a caller's pool of more than 2^31 - 1 pages,
// a plan's max_kv_len) are clamped to it: no page id or key count is larger.
TsattnGatherParams gather_params(const PagePools& pools, const DeviceTables& tables, const GatherTarget& target);

// CTAs of the copy kernel for key_rows rows (one warp per row in turn), at most `resident_ctas`
// (what the GPU holds at once); 0 when there is no row to copy.
unsigned gather_ctas(int64_t key_rows, int64_t resident_ctas);

}  // namespace tsattn
