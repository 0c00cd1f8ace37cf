// paged/gather_pages.cuh - a paged KV cache gathered into packed K and V (gather_params.h), so that
// the packed-layout attention kernels run a paged call unchanged.
//
// Two kernels, queued in this order on one stream:
//   <symbol>_scan: one CTA computes each request's key count from the tables and their prefix
//     sums, kv_indptr; nothing is read back by the host, so a call stays graph-capturable.
//   <symbol>: warps take packed rows in turn; a row's request comes from a binary search of
//     kv_indptr, its page and slot from the tables, and the warp copies the row's K and V head rows
//     in 16-byte chunks (pages, heads and slots are all 16-byte aligned: the host checked).
// Table values may never have been checked (GPU-resident tables): every one is clamped where it is
// read, so no read or write leaves the tables, the pools or the outputs whatever they hold.
//   - paged_kv_indptr entries to [0, num_entries], a request whose end is below its start has no pages;
//   - last_page_len to [1, page_size], a request's keys to max_kv_len, the prefix sums to key_rows;
//   - page ids to [0, num_pages - 1], and no request has keys when the pools have no pages.
// Rows past kv_indptr[batch] are left as they are: the attention kernels read them only in tiles
// that cross a request's end, where they are masked and their V rows zeroed.
// The generated source defines TSATTN_GATHER_KERNEL_NAME.
#ifndef TSATTN_PAGED_GATHER_PAGES_CUH
#define TSATTN_PAGED_GATHER_PAGES_CUH

#include "common/prelude.cuh"
#include "paged/gather_params.h"

#define TSATTN_GATHER_CONCAT2(a, b) a##b
#define TSATTN_GATHER_CONCAT(a, b) TSATTN_GATHER_CONCAT2(a, b)

namespace tsattn_dev {
namespace gather {

constexpr int kThreads = TSATTN_GATHER_THREADS;
constexpr int kWarps = kThreads / 32;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one CTA");

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) { return min(max(v, lo), hi); }

// Request b's run of paged_kv_indices, clamped: [first, first + pages).
__device__ __forceinline__ void page_run(const TsattnGatherParams& p, int b, int& first, int& pages) {
  first = clamp_int(p.paged_kv_indptr[b], 0, p.num_entries);
  const int last = clamp_int(p.paged_kv_indptr[b + 1], 0, p.num_entries);
  pages = last > first ? last - first : 0;
}

// Request b's key count under the clamps above (64-bit: pages * page_size may pass 2^31).
__device__ __forceinline__ i64 request_keys(const TsattnGatherParams& p, int b) {
  if (p.num_pages <= 0) return 0;
  int first, pages;
  page_run(p, b, first, pages);
  if (pages == 0) return 0;
  const int last = clamp_int(p.paged_kv_last_page_len[b], 1, p.page_size);
  const i64 keys = static_cast<i64>(pages - 1) * p.page_size + last;
  return keys < p.max_kv_len ? keys : static_cast<i64>(p.max_kv_len);
}

// Inclusive sum of x over the CTA; `total` receives the CTA's sum. Uses `sums` (kWarps entries).
__device__ __forceinline__ i64 block_inclusive_sum(i64 x, i64* sums, i64& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const i64 y = __shfl_up_sync(0xFFFFFFFFu, x, offset);
    if (lane >= offset) x += y;
  }
  if (lane == 31) sums[warp] = x;
  __syncthreads();
  i64 before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sums[w];
    total += sums[w];
  }
  __syncthreads();  // sums is reused by the next call
  return before + x;
}

// The largest b in [0, batch - 1] with kv_indptr[b] <= row, for 0 <= row < kv_indptr[batch]:
// the request that owns packed row `row` (requests without keys are stepped over).
__device__ __forceinline__ int owner(const int* kv_indptr, int batch, int row) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (kv_indptr[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ uint4 load_chunk(const char* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

}  // namespace gather
}  // namespace tsattn_dev

// Writes kv_indptr[0 .. batch]. One CTA of TSATTN_GATHER_THREADS threads.
extern "C" __global__ void __launch_bounds__(TSATTN_GATHER_THREADS)
    TSATTN_GATHER_CONCAT(TSATTN_GATHER_KERNEL_NAME, _scan)(const __grid_constant__ TsattnGatherParams p) {
  using namespace tsattn_dev;
  using namespace tsattn_dev::gather;
  __shared__ i64 sums[kWarps];
  if (threadIdx.x == 0) p.kv_indptr[0] = 0;
  i64 before = 0;  // keys of the requests of earlier rounds: < 2^31 requests of < 2^31 keys each
  for (int base = 0; base < p.batch; base += kThreads) {
    const int b = base + static_cast<int>(threadIdx.x);
    const i64 keys = b < p.batch ? request_keys(p, b) : 0;
    i64 round_total;
    const i64 end = before + block_inclusive_sum(keys, sums, round_total);
    if (b < p.batch) p.kv_indptr[b + 1] = static_cast<int>(end < p.key_rows ? end : static_cast<i64>(p.key_rows));
    before += round_total;
  }
}

// Copies every packed row below kv_indptr[batch] (written by the scan) from its page.
extern "C" __global__ void __launch_bounds__(TSATTN_GATHER_THREADS)
    TSATTN_GATHER_KERNEL_NAME(const __grid_constant__ TsattnGatherParams p) {
  using namespace tsattn_dev;
  using namespace tsattn_dev::gather;
  if (p.batch <= 0 || p.num_entries <= 0 || p.num_pages <= 0) return;  // no request has keys
  const int rows = clamp_int(p.kv_indptr[p.batch], 0, p.key_rows);
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * kWarps;
  const int head_chunks = p.num_kv_heads * p.row_chunks;  // per row and tensor
  const i64 row_bytes = static_cast<i64>(head_chunks) * TSATTN_GATHER_CHUNK_BYTES;
  // 64-bit, so that row + warps cannot wrap near 2^31 rows.
  for (i64 r = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows; r += warps) {
    const int row = static_cast<int>(r);
    const int b = owner(p.kv_indptr, p.batch, row);
    int first, pages;
    page_run(p, b, first, pages);
    const int key = row - p.kv_indptr[b];  // < request_keys(b) <= pages * page_size
    // Inside the request's run by the scan's clamps; clamped again against tables that changed since.
    const i64 entry = min(static_cast<i64>(first) + key / p.page_size, static_cast<i64>(p.num_entries) - 1);
    const i64 page = clamp_int(p.paged_kv_indices[entry], 0, p.num_pages - 1);
    const i64 slot = key % p.page_size;
    const char* k_page =
        static_cast<const char*>(p.k_pool.data) + page * p.k_pool.page_stride + slot * p.k_pool.slot_stride;
    const char* v_page =
        static_cast<const char*>(p.v_pool.data) + page * p.v_pool.page_stride + slot * p.v_pool.slot_stride;
    char* k_row = static_cast<char*>(p.k_out) + static_cast<i64>(row) * row_bytes;
    char* v_row = static_cast<char*>(p.v_out) + static_cast<i64>(row) * row_bytes;
    for (int u = lane; u < 2 * head_chunks; u += 32) {
      const bool is_v = u >= head_chunks;
      const int unit = is_v ? u - head_chunks : u;
      const int head = unit / p.row_chunks, chunk = unit % p.row_chunks;
      const i64 src = head * (is_v ? p.v_pool.head_stride : p.k_pool.head_stride) +
                      static_cast<i64>(chunk) * TSATTN_GATHER_CHUNK_BYTES;
      const uint4 value = load_chunk((is_v ? v_page : k_page) + src);
      *reinterpret_cast<uint4*>((is_v ? v_row : k_row) + static_cast<i64>(unit) * TSATTN_GATHER_CHUNK_BYTES) = value;
    }
  }
}

#endif  // TSATTN_PAGED_GATHER_PAGES_CUH
