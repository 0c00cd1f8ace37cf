// plan/list_in_kernel.cuh - the tile list of a packed call built by the attention kernel itself,
// so that a plan's run is one launch (sm90a kernels in dynamic order; prefill_params.h, "The
// list's state word").
//
// The int after *num_tiles is the list's state (prefill_params.h): empty, the list must still be
// built; building, one CTA is building it; ready, it is in memory. Before its CTA starts,
// warp 1 of every CTA takes the word from 0 to 1 with a compare-and-swap and, if it won, writes the
// list and sets 2; otherwise it waits for 2. The winner is running, so no CTA waits on one that
// has not started. The launch's last claim sets the word back to 0 (sm90a/tile_scheduler.cuh), so
// memory that stays with the launches (a plan's workspace, zeroed once) is ready for the next one;
// the device planner kernel and a host-planned list set 2 themselves, and the kernel builds nothing.
//
// The list is in level order: tile L of every request that has one, for L from the largest down,
// and the tiles of a level in request order. For causal requests whose queries are their last keys
// that is heaviest first; for others it puts the long requests' tiles first. One warp writes it,
// each lane holding the tile counts of up to kRequestsPerLane requests, so the host builds lists
// this way only for batches of at most kMaxBatch requests (plan/launch_plan.cpp); larger ones go
// to the device planner kernel.
#ifndef TSATTN_PLAN_LIST_IN_KERNEL_CUH
#define TSATTN_PLAN_LIST_IN_KERNEL_CUH

#include "common/prelude.cuh"
#include "common/request.cuh"
#include "prefill_params.h"

namespace tsattn_dev {
namespace plan {

constexpr int kListEmpty = TSATTN_LIST_EMPTY, kListBuilding = TSATTN_LIST_BUILDING, kListReady = TSATTN_LIST_READY;
constexpr int kRequestsPerLane = 4;
constexpr int kMaxBatch = 32 * kRequestsPerLane;  // the module's tsattn_list_in_kernel_max_batch

// Rows per tile of the list: BLOCK_M, or 2 x BLOCK_M for CTA pairs along query tiles.
__device__ __forceinline__ int tile_rows(const TsattnPrefillParams& p) {
  return p.pair_tiles ? 2 * TSATTN_BLOCK_M : TSATTN_BLOCK_M;
}

__device__ __forceinline__ int* list_state(const TsattnPrefillParams& p) { return const_cast<int*>(p.num_tiles) + 1; }

// The list's capacity as the host sizes it: a tile per tile_rows rows plus one partial tile per
// request, which no sanitized indptr can exceed.
// 32-bit unsigned: q_tokens + rows - 1 < 2^32, and the sum is clamped below 2^31 as on the host.
__device__ __forceinline__ int list_capacity(const TsattnPrefillParams& p) {
  const u32 rows = static_cast<u32>(tile_rows(p));
  const u32 tiles = (static_cast<u32>(max(p.q_tokens, 0)) + rows - 1) / rows;
  return static_cast<int>(min(tiles + static_cast<u32>(max(p.batch, 0)), 0x7FFFFFFFu));
}

// One converged warp writes tiles[0 .. *num_tiles) in level order (the file comment).
__device__ __forceinline__ void build_list_by_warp(const TsattnPrefillParams& p) {
  const int lane = threadIdx.x % 32;
  const int rows = tile_rows(p), batch = min(max(p.batch, 0), kMaxBatch), capacity = list_capacity(p);
  TsattnTile* tiles = const_cast<TsattnTile*>(p.tiles);
  int counts[kRequestsPerLane];  // request lane + 32 k has counts[k] tiles
  int levels = 0;
#pragma unroll
  for (int k = 0; k < kRequestsPerLane; ++k) {
    const int b = lane + 32 * k;
    counts[k] = b < batch ? (request_extent(p, b).q_len + rows - 1) / rows : 0;
    levels = max(levels, counts[k]);
  }
  levels = warp_max(levels);
  int written = 0;  // the same in every lane
#pragma unroll 1
  for (int level = levels - 1; level >= 0; --level) {
#pragma unroll
    for (int k = 0; k < kRequestsPerLane; ++k) {
      const bool has = counts[k] > level;
      const u32 ballot = __ballot_sync(0xFFFFFFFFu, has);
      const int slot = written + __popc(ballot & ((1u << lane) - 1u));
      if (has && slot < capacity) tiles[slot] = TsattnTile{lane + 32 * k, level};
      written += __popc(ballot);
    }
  }
  if (lane == 0) *const_cast<int*>(p.num_tiles) = min(written, capacity);
}

__device__ __forceinline__ int load_acquire_gpu(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void store_release_gpu(int* address, int value) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

// Called by one whole warp per CTA before the CTA's barrier: on return the list is in memory and
// visible to every thread of the CTA once they pass that barrier.
__device__ __forceinline__ void ensure_list(const TsattnPrefillParams& p) {
  int* state = list_state(p);
  int seen = kListReady;
  if (threadIdx.x % 32 == 0) {
    seen = load_acquire_gpu(state);
    if (seen == kListEmpty) seen = atomicCAS(state, kListEmpty, kListBuilding);
  }
  seen = __shfl_sync(0xFFFFFFFFu, seen, 0);
  if (seen == kListEmpty) {  // this warp took the word
    build_list_by_warp(p);
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
      __threadfence();  // every lane's tiles before the word
      store_release_gpu(state, kListReady);
    }
  } else if (seen != kListReady && threadIdx.x % 32 == 0) {
    while (load_acquire_gpu(state) != kListReady) __nanosleep(100);
  }
  __syncwarp();
}

}  // namespace plan
}  // namespace tsattn_dev

#endif  // TSATTN_PLAN_LIST_IN_KERNEL_CUH
