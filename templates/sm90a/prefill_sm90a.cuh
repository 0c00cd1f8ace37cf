// sm90a/prefill_sm90a.cuh - the Hopper prefill kernel (FlashAttention-3 recipe): TMA loads into
// mbarrier rings, wgmma for both GEMMs, warp specialization with setmaxnreg, S(t) and PV(t-1)
// issued together (16-bit), two-level PV accumulation (e4m3).
//
// One CTA = 3 warpgroups and one (query tile of BLOCK_M = 128 rows, query head) work item at a
// time, persistent over the scheduler's list (common/work_items.cuh):
//   warpgroup 0  producer. One elected lane of warp 0 issues every TMA load: Q (boxes of 128
//                bytes x 128 rows; dense 16-bit D128: into one of two buffers, see kOutputInQ),
//                then each key tile's K and V (boxes of 128 bytes x BLOCK_N)
//                into a 2-stage ring; e4m3 V is V^T from a workspace (128 keys x D boxes, see
//                kE4m3Inputs). In CTA pairs it loads half of each K/V tile's slabs, multicast
//                into both CTAs. One lane of warp 1 is the scheduler of kDynamicOrder kernels
//                (16-bit, but the 128-key dense fixed-layout ones): it hands out the work items
//                (ItemWalk). The other warps do nothing (they leave, or in CTA pairs wait at the
//                final cluster barrier). 40 or 24 registers.
//   warpgroups 1, 2  consumers of rows 0-63 / 64-127. Per key tile: S = Q K^T (SS wgmma,
//                m64 n BLOCK_N, k-steps of 32 bytes), mask, online softmax in registers, P in the
//                input dtype straight into the A registers of O += P V (RS wgmma, m64 n D; V
//                MN-major, e4m3 V^T K-major), pipelined so that S(t) and PV(t-1) go to the tensor
//                cores together (run_key_tiles_overlapped; e4m3 runs them in order and sums P V
//                per key tile in fp32, kTwoLevel; dense e4m3 D128 consumers take turns at the
//                tensor cores, kPingPong). 232 or 240 registers: O is D/2 fp32 per
//                thread. At the item's end each warp normalizes its 16 rows and stores them
//                (D128 16-bit outputs through shared memory: kStagedOutput).
// Math (docs/contract.md) as the sm80 family: s = q.k in fp32, p = exp2(s * scale_log2 - m), running max
// m and sum l per row, out = O * output_scale / l; a row that sees no key writes exactly 0. Kernels
// generated with TSATTN_LSE 1 also write each row's log-sum-exp (common/lse.cuh); the others have
// no lse code.
//
// The kernel's rooms: config.cuh (its settings, from kernel_traits.h), barriers.cuh (how warps
// wait), tile_scheduler.cuh (which work, in what order), producer.cuh (TMA loads), softmax.cuh,
// mainloop.cuh (a consumer's key-tile loop), epilogue.cuh (writing O, merging split parts), and
// this file: the consumers' item loop, the warp roles and the entry points.
#ifndef TSATTN_SM90A_PREFILL_SM90A_CUH
#define TSATTN_SM90A_PREFILL_SM90A_CUH

#include "sm90a/config.cuh"
#include "sm90a/epilogue.cuh"
#include "sm90a/mainloop.cuh"
#include "sm90a/producer.cuh"
#if TSATTN_LSE
#include "common/lse.cuh"
#endif

namespace tsattn_dev {
namespace sm90a {

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// Dense rows all see the same keys, so the warp's bounds for the mask decision need no reduction.
// 16-bit D128 kernels skip it; e4m3 dense kernels keep it (without it ptxas spilled their key
// loop), and so do D256 ones (no faster without it; docs/decisions.md).
#if TSATTN_MASK == TSATTN_MASK_CODE_DENSE
constexpr bool kSameKeysForAllRows = !kE4m3Inputs && kHeadDim == 128;
#else
constexpr bool kSameKeysForAllRows = false;
#endif

template <u32 kCtas>
__device__ __forceinline__ void consume(const TsattnPrefillParams& params, const TsattnTensorMaps& maps, u32 smem,
                                        u32 bars, int consumer) {
  const int t = threadIdx.x % 128;  // thread within the warpgroup
  const int lane = t % 32, warp = t / 32, g = lane / 4, c = lane % 4;
  const int row_in_tile = 64 * consumer + 16 * warp + g;  // this thread's first row (second: + 8)
  u32 q_uses = 0, kv_uses = 0;
  ItemWalk<kCtas, false> walk(params);
  WorkItem item;
  if (kPingPong && consumer == 1) pass_turn(consumer);
  while (walk.next(params, smem, bars, item)) {
    const KeyTiles tiles = walk.key_tiles(params, item, lane);
    RowState rows;
    int warp_full_from = -0x7FFFFFFF - 1, warp_full_to = 0x7FFFFFFF;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = item.q_tile * kBlockM + row_in_tile + 8 * h;
      const bool valid = i < item.extent.q_len;
      rows.range[h] = valid ? row_key_range(params, item.extent, item.request, i) : KeyRange{kEmptyLo, kEmptyHi};
      rows.m[h] = neg_inf();
      rows.l[h] = 0.0f;
      // Rows at or past q_len are never written: they take no part in the mask decision.
      if (!kSameKeysForAllRows && valid) {
        warp_full_from = max(warp_full_from, rows.range[h].lo);
        warp_full_to = min(warp_full_to, rows.range[h].hi);
      }
    }
    if constexpr (kSameKeysForAllRows) {
      const KeyRange all_keys = row_key_range(params, item.extent, item.request, 0);
      warp_full_from = all_keys.lo;
      warp_full_to = all_keys.hi;
    } else {
      warp_full_from = warp_max(warp_full_from);
      warp_full_to = warp_min(warp_full_to);
    }

    float o[kOAccum];
#pragma unroll
    for (int i = 0; i < kOAccum; ++i) o[i] = 0.0f;

    const u32 qb = q_uses % kQBuffers, q_buffer = smem + kQOffset + qb * kQBytes;
    bool staged = false;
    if (tiles.num_tiles > 0) {
      wait_phase(bars + 8 * (kQFull + qb), (q_uses / kQBuffers) & 1);
      // e4m3 V^T is K-major; 16-bit V is MN-major, its 64-wide head-dim slabs kKvSlabBytes apart.
      const u64 v_desc = kE4m3Inputs ? smem_desc_sw128_kmajor(smem + kVOffset)
                                     : smem_desc_sw128_mnmajor(smem + kVOffset, kKvSlabBytes);
      const u64 q_desc = smem_desc_sw128_kmajor(q_buffer + 64 * consumer * 128);
      const u64 k_desc = smem_desc_sw128_kmajor(smem + kKOffset);
      const KeyLoop loop{params, item,   tiles,          smem,         bars, q_desc,  bars + 8 * (kQEmpty + qb),
                         k_desc, v_desc, warp_full_from, warp_full_to, c,    consumer};
      if constexpr (kOverlapSoftmax)
        run_key_tiles_overlapped<kCtas>(loop, rows, o, kv_uses);
      else
        run_key_tiles_serial<kCtas>(loop, rows, o, kv_uses);
      ++q_uses;
      staged = kStagedOutput;
    }
    bool writes = true;
    if constexpr (kSplitTail) {
      // A part of a split slot: its tiles are not all of the slot's (every dense item walks all
      // keys). Only the tiles stay live over the key loop: keeping the piece there spilled.
      if (params.split_slots > 0 && tiles.num_tiles > 0 &&
          (tiles.first_key != 0 || static_cast<u32>(tiles.num_tiles) != split_steps(params)))
        writes = merge_split_parts<kCtas>(params, tiles.first_key != 0, o, rows, t + 128 * consumer);
    }
    if (writes) {
#if TSATTN_LSE
      // The rows' log-sum-exp before write_output, not inside or after it: there ptxas scheduled
      // the lse kernels' key loop apart from their twins' (docs/decisions.md, lse).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = item.q_tile * kBlockM + row_in_tile + 8 * h;
        write_row_lse(params, rows.m[h], rows.l[h], item.request, row, item.extent.q_len, item.extent.q_begin + row,
                      item.head, c);
      }
#endif
      write_output(params, maps, item, o, rows, row_in_tile, c, staged, kOutputInQ ? q_buffer : smem + kOOffset);
    }
    if (kOutputInQ && staged) mbarrier_arrive(bars + 8 * (kQEmpty + qb));  // O read back: Q's buffer is free
  }
  if (kPingPong && consumer == 0) take_turn(consumer);  // consumer 1's last pass
  // Shared memory must outlive the stores that read it.
  if constexpr (kTmaOutput) {
    if (lane == 0) tma_store_wait<0, true>();
  }
}

template <u32 kCtas>
__device__ __forceinline__ void run_prefill(const TsattnPrefillParams& params, const TsattnTensorMaps& maps) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_addr_u32(smem_raw);
  const u32 smem = (raw + 1023u) & ~1023u;  // kSmemBytes has the slack
  const u32 bars = smem + kBarrierOffset;
  if (threadIdx.x == 0) {
    prefetch_tensormap(maps.q);
    prefetch_tensormap(maps.k);
    prefetch_tensormap(maps.v);
    if constexpr (kTmaOutput) prefetch_tensormap(maps.o);
    for (int b = 0; b < kQBuffers; ++b) {
      mbarrier_init(bars + 8 * (kQFull + b), 1);
      mbarrier_init(bars + 8 * (kQEmpty + b), kConsumerThreads);
    }
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(bars + 8 * (kKFull + s), 1);
      mbarrier_init(bars + 8 * (kKEmpty + s), kKvEmptyArrivals<kCtas>);
      mbarrier_init(bars + 8 * (kVFull + s), 1);
      mbarrier_init(bars + 8 * (kVEmpty + s), kKvEmptyArrivals<kCtas>);
    }
    if constexpr (kDynamicOrder) {
      for (u32 r = 0; r < kSlotRing; ++r) {
        mbarrier_init(bars + 8 * (kSlotFull + r), 1);
        mbarrier_init(bars + 8 * (kSlotEmpty + r), kSlotEmptyArrivals<kCtas>);
      }
      mbarrier_init(bars + 8 * kSlotRequest, 1);
    }
    fence_mbarrier_init();
  }
#if TSATTN_PACKED
  // A packed list in dynamic order may still have to be built (plan/list_in_kernel.cuh); the
  // barrier below then holds every warp of the CTA until it is in memory.
  if (kDynamicOrder && threadIdx.x / 32 == 1 && params.work_counter != nullptr) plan::ensure_list(params);
#endif
  // CTA pairs: the peer's barriers must be initialised before the first multicast or remote arrival.
  if constexpr (kCtas == 1)
    __syncthreads();
  else
    cluster_sync();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x < 32)
      produce<kCtas>(params, maps, smem, bars);
    else if (kDynamicOrder && threadIdx.x == 32 && claims_slots<kCtas>())  // one lane of warp 1
      schedule<kCtas>(params, smem, bars);
  } else {
    setmaxnreg_inc<kConsumerRegisters>();
    consume<kCtas>(params, maps, smem, bars, warpgroup - 1);
  }
  // CTA pairs: no CTA may exit while its peer can still arrive on its barriers.
  if constexpr (kCtas == 2) cluster_sync();
}

}  // namespace sm90a
}  // namespace tsattn_dev

// The launch shape and the kernel's settings as compiled. The host decides the same settings with
// traits_for() and checks these against them after loading the module (jit/driver/module_table.cpp).
extern "C" __device__ const int tsattn_dynamic_smem_bytes = tsattn_dev::sm90a::kSmemBytes;
extern "C" __device__ const int tsattn_threads_per_cta = tsattn_dev::sm90a::kThreads;
extern "C" __device__ const int tsattn_block_m = tsattn_dev::sm90a::kBlockM;
extern "C" __device__ const int tsattn_chunked_order = tsattn_dev::sm90a::kChunkedOrder ? 1 : 0;
extern "C" __device__ const int tsattn_dynamic_order = tsattn_dev::sm90a::kDynamicOrder ? 1 : 0;
extern "C" __device__ const int tsattn_split_partial_bytes =
    tsattn_dev::sm90a::kSplitTail ? tsattn_dev::sm90a::kSplitPartialBytes : 0;
// 2: the module also has TSATTN_KERNEL_NAME_pairs, for launches in clusters of 2 CTAs.
extern "C" __device__ const int tsattn_max_cluster_size = tsattn_dev::sm90a::kPairable ? 2 : 1;
extern "C" __device__ const int tsattn_pairs_along_tiles = tsattn_dev::sm90a::kTilePairable ? 1 : 0;
// In dynamic order a packed kernel builds its tile list itself when the list's state word is 0
// (plan/list_in_kernel.cuh), for batches of at most this many requests; 0: never.
#if TSATTN_PACKED
extern "C" __device__ const int tsattn_list_in_kernel_max_batch =
    tsattn_dev::sm90a::kDynamicOrder ? tsattn_dev::plan::kMaxBatch : 0;
#else
extern "C" __device__ const int tsattn_list_in_kernel_max_batch = 0;
#endif

extern "C" __global__ void __launch_bounds__(384, 1)
    TSATTN_KERNEL_NAME(const __grid_constant__ TsattnPrefillParams params,
                       const __grid_constant__ TsattnTensorMaps maps) {
  tsattn_dev::sm90a::run_prefill<1>(params, maps);
}

#define TSATTN_SM90A_CONCAT_(a, b) a##b
#define TSATTN_SM90A_CONCAT(a, b) TSATTN_SM90A_CONCAT_(a, b)
#if TSATTN_INPUT_DTYPE != TSATTN_DTYPE_CODE_E4M3 && TSATTN_HEAD_DIM == 128
// The CTA-pairs kernel (kPairable: 16-bit D128 inputs). The host launches it only with a cluster
// dimension of 2 (cuLaunchKernelEx); launched without, every CTA would wait for a missing peer.
extern "C" __global__ void __launch_bounds__(384, 1)
    TSATTN_SM90A_CONCAT(TSATTN_KERNEL_NAME, _pairs)(const __grid_constant__ TsattnPrefillParams params,
                                                    const __grid_constant__ TsattnTensorMaps maps) {
  static_assert(tsattn_dev::sm90a::kPairable, "pairs: 16-bit D128 kernels");
  tsattn_dev::sm90a::run_prefill<2>(params, maps);
}
#endif

#endif  // TSATTN_SM90A_PREFILL_SM90A_CUH
