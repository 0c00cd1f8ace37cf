// plan/device_plan.cuh - the scheduler's device path: the tile list built on the GPU from
// device-resident indptrs, with no host synchronization, so a call can be captured in a CUDA
// graph (the planner then runs at every replay and sees the indptr values of that replay).
//
// It is compiled into every packed-layout module beside the attention kernel, so its BLOCK_M and
// mask always match the kernel that consumes its list. One CTA: planning touches a few integers
// per request, far below one attention tile's work.
//
// Order: heaviest tiles first (longest processing time first), by a counting sort over 128
// logarithmic work buckets (4 per power of two); the order inside a bucket is whatever the
// atomics give, which only permutes tiles of nearly equal work.
#ifndef TSATTN_PLAN_DEVICE_PLAN_CUH
#define TSATTN_PLAN_DEVICE_PLAN_CUH

#include "common/request.cuh"
#include "plan/list_in_kernel.cuh"
#include "prefill_params.h"

namespace tsattn_dev {
namespace plan {

constexpr int kThreads = 1024;
constexpr int kBuckets = 128;

// Keys the tile's rows can see, as the width of the union of their ranges (docs/contract.md, "Masks").
__device__ __forceinline__ int tile_work(int q_len, int kv_len, int tile, int rows, int window_left) {
#if TSATTN_MASK == TSATTN_MASK_CODE_CAUSAL
  const int first_row = tile * rows;
  const int last_row = min(q_len, first_row + rows) - 1;
  // Bottom-right aligned diagonal; 64-bit so no window or length can overflow.
  const long long diag_first = static_cast<long long>(first_row) + kv_len - q_len;
  const long long diag_last = static_cast<long long>(last_row) + kv_len - q_len;
  const long long lo = window_left >= 1 ? diag_first - window_left : 0;
  const long long first = lo < 0 ? 0 : lo;
  const long long last = diag_last < kv_len - 1 ? diag_last : kv_len - 1;
  return last >= first ? static_cast<int>(last - first + 1) : 0;
#else
  (void)q_len;
  (void)tile;
  (void)rows;
  (void)window_left;
  return kv_len;
#endif
}

// Bucket 0 holds the heaviest tiles.
__device__ __forceinline__ int work_bucket(int work) {
  if (work <= 0) return kBuckets - 1;
  const int octave = 31 - __clz(work);
  const int quarter = octave >= 2 ? (work >> (octave - 2)) & 3 : 0;
  return kBuckets - 1 - min(octave * 4 + quarter, kBuckets - 1);
}

}  // namespace plan
}  // namespace tsattn_dev

// Writes tiles[0 .. *num_tiles) heaviest first. `capacity` bounds the list (the host sizes it as
// ceil(q_tokens / rows) + batch, which no sanitized indptr can exceed).
extern "C" __global__ void __launch_bounds__(tsattn_dev::plan::kThreads)
    tsattn_plan_tiles(const __grid_constant__ TsattnPrefillParams params, TsattnTile* tiles, int* num_tiles,
                      int capacity) {
  using namespace tsattn_dev;
  __shared__ int counts[plan::kBuckets];
  __shared__ int cursor[plan::kBuckets];
  const int rows = plan::tile_rows(params);
  for (int i = threadIdx.x; i < plan::kBuckets; i += blockDim.x) counts[i] = 0;
  __syncthreads();

  // Pass 1: how many tiles fall in each work bucket.
  for (int b = threadIdx.x; b < params.batch; b += blockDim.x) {
    const RequestExtent r = request_extent(params, b);
    const int count = (r.q_len + rows - 1) / rows;
    for (int t = 0; t < count; ++t)
      atomicAdd(&counts[plan::work_bucket(plan::tile_work(r.q_len, r.kv_len, t, rows, params.window_left))], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int i = 0; i < plan::kBuckets; ++i) {
      cursor[i] = total;
      total += counts[i];
    }
    *num_tiles = min(total, capacity);
    if (params.work_counter != nullptr) {
      *params.work_counter = 0;  // the attention kernel's claims start at 0
      // In dynamic order the attention kernel reads the list's state word (plan/list_in_kernel.cuh):
      // this list is the one to use. The kernel launches after this one ends.
      *plan::list_state(params) = plan::kListReady;
    }
  }
  __syncthreads();

  // Pass 2: every tile into its bucket's next slot.
  for (int b = threadIdx.x; b < params.batch; b += blockDim.x) {
    const RequestExtent r = request_extent(params, b);
    const int count = (r.q_len + rows - 1) / rows;
    for (int t = 0; t < count; ++t) {
      const int slot =
          atomicAdd(&cursor[plan::work_bucket(plan::tile_work(r.q_len, r.kv_len, t, rows, params.window_left))], 1);
      if (slot < capacity) tiles[slot] = TsattnTile{b, t};
    }
  }
}

#endif  // TSATTN_PLAN_DEVICE_PLAN_CUH
