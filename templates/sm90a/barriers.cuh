// sm90a/barriers.cuh - how the kernel's warps wait for each other: mbarrier phases, the K/V
// stages' release, and the named barriers of the consumer warpgroups.
//
// Synchronisation (mbarriers in shared memory; "k-th use" counts from 0 over the CTA's life, the
// producer and both consumers walk the same (item, key tile) sequence, so their counters agree):
//   q_full[b]   1 arrival (producer's expect_tx) + Q's bytes. The k-th Q load goes to buffer
//               b = k % kQBuffers and completes that buffer's phase k / kQBuffers.
//   q_empty[b]  256 arrivals: every consumer thread, once its last S GEMM of the item retired, or
//               with O staged in the Q buffer (kOutputInQ), once it read O back from there.
//   k_full[s], v_full[s]   1 arrival + the tile's bytes.
//   k_empty[s], v_empty[s] 256 arrivals: every consumer thread after the wgmma reading the stage
//               retired (wgmma_wait), so TMA never overwrites operands in flight. In CTA pairs
//               16: lane 0 of each consumer warp of both CTAs (either producer's multicast writes
//               the stage in both).
//   slot_full[r], slot_empty[r], slot_request  the scheduler's ring of work items and the
//               producer's requests for the next one (16-bit kernels; ItemWalk).
// Waiters use parity (k & 1) for the k-th completion; a producer's k-th wait for an empty
// barrier uses (k & 1) ^ 1, which a fresh barrier passes at once.
#ifndef TSATTN_SM90A_BARRIERS_CUH
#define TSATTN_SM90A_BARRIERS_CUH

#include "sm90a/config.cuh"
#include "sm90a/tma.cuh"

namespace tsattn_dev {
namespace sm90a {

// Waits for a barrier phase. A wait that lasts kWaitTrapNs means a broken protocol, not a slow
// tile (one takes microseconds): trap, so the call fails with an error instead of hanging the GPU.
constexpr u64 kWaitTrapNs = 10000000000ull;

__device__ __forceinline__ void wait_phase(u32 bar, u32 parity) {
  if (!mbarrier_wait_parity_bounded(bar, parity, kWaitTrapNs)) __trap();
}

// Arrivals per phase of a K or V empty barrier, and the release of a stage once this thread's
// wgmma reading it retired: every consumer thread arrives; in a CTA pair, lane 0 of each consumer
// warp arrives on the barrier of both CTAs instead (both producers' multicasts write the stage).
template <u32 kCtas>
constexpr u32 kKvEmptyArrivals = kCtas == 1 ? kConsumerThreads : 2 * (kConsumerThreads / 32);

template <u32 kCtas>
__device__ __forceinline__ void release_kv_stage(u32 empty_bar) {
  if constexpr (kCtas == 1) {
    mbarrier_arrive(empty_bar);
  } else {
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
      mbarrier_arrive(empty_bar);
      mbarrier_arrive_cluster(empty_bar, cluster_ctarank() ^ 1);
    }
  }
}

// Named barriers (0 is __syncthreads): both consumer warpgroups (the packed-layout V guard), the
// consumers' turns at the tensor cores (kPingPong; 2 + consumer), and the stagger at each item's
// start (run_key_tiles_overlapped).
constexpr u32 kConsumerBarrier = 1;
constexpr u32 kTurnBarrier = 2;
constexpr u32 kStaggerBarrier = 4;

__device__ __forceinline__ void named_barrier_sync(u32 id, u32 threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(u32 id, u32 threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_BARRIERS_CUH
