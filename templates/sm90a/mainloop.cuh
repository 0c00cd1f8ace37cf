// sm90a/mainloop.cuh - a consumer warpgroup's loop over one item's key tiles: the S and PV
// wgmmas, the packed layout's V guard, and the two schedules (overlapped, serial with
// two-level PV and ping-pong turns).
//
// Packed layout: Q/K/V boxes past a request's end hold the next request's rows (the tensor maps
// span the whole packed tensor). Their scores are masked to -inf, so p = 0 there; but 0 * inf is
// NaN, so the V rows (e4m3: V^T columns) past kv_len of a tile that crosses the request's end
// are zeroed in shared memory before the PV GEMM (non-finite values in one request must not reach
// another).
#ifndef TSATTN_SM90A_MAINLOOP_CUH
#define TSATTN_SM90A_MAINLOOP_CUH

#include "sm90a/softmax.cuh"
#include "sm90a/tile_scheduler.cuh"
#include "sm90a/wgmma.cuh"

namespace tsattn_dev {
namespace sm90a {

// Operand descriptors are built once per item from addresses (q_desc, and stage 0's k_desc and
// v_desc in KeyLoop) and moved by byte offsets from there (smem_desc_advance): rebuilding each
// k-step's descriptor from its address takes 3 dependent integer instructions per wgmma.

// S = Q K^T for this warpgroup's 64 rows against one K stage (SS wgmma, D / kMmaK k-steps of 32
// bytes, 4 per slab), issued and committed as one wgmma group. q_desc, k_desc: slab 0 of each.
__device__ __forceinline__ void issue_scores(float (&s)[kSAccum], u64 q_desc, u64 k_desc) {
#pragma unroll
  for (int kk = 0; kk < kHeadDim / kMmaK; ++kk) {
    const u32 step = 32 * (kk % 4);
    wgmma_ss<kBlockN, kInputDtype>(s, smem_desc_advance(q_desc, (kk / 4) * kQSlabBytes + step),
                                   smem_desc_advance(k_desc, (kk / 4) * kKvSlabBytes + step), kk > 0);
  }
  wgmma_commit();
}

// O += P V for one V stage (16-bit: RS wgmma, kPSteps k-steps of 16 keys, V MN-major ([keys][d] as
// loaded), k-step kk 16 key rows (2048 bytes) further), issued and committed as one group.
__device__ __forceinline__ void issue_pv(float (&o)[kOAccum], const u32 (&a)[kPSteps][4], u64 v_desc) {
#pragma unroll
  for (int kk = 0; kk < kPSteps; ++kk)
    wgmma_rs<kHeadDim, kInputDtype>(o, a[kk], smem_desc_advance(v_desc, 2048u * kk), 1);
  wgmma_commit();
}

// e4m3 (two-level): w = P V^T's columns [n0, n0 + N) for one V^T stage, from zero (k32 step kk is
// 32 bytes further within its 128-key slab; column n is V^T row n, 128 bytes per row), issued and
// committed as one group.
template <int N>
__device__ __forceinline__ void issue_pv_e4m3(float (&w)[N / 2], const u32 (&a)[kPSteps][4], u64 v_desc, u32 n0) {
#pragma unroll
  for (int kk = 0; kk < kPSteps; ++kk)
    wgmma_rs<N, kE4m3>(w, a[kk], smem_desc_advance(v_desc, (kk / 4) * kVtSlabBytes + 32 * (kk % 4) + 128 * n0), kk > 0);
  wgmma_commit();
}

// The second level: o = o * alpha + w for the columns w holds (all of D128; columns
// [kPvChunkN q, kPvChunkN (q + 1)) for D256 chunk q, first = kPvChunkN / 2 * q accumulators on).
template <int kCount>
__device__ __forceinline__ void accumulate_output(float (&o)[kOAccum], const float (&w)[kCount],
                                                  const float (&alpha)[2], int first) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) o[first + i] = fmaf(o[first + i], alpha[(i % 4) / 2], w[i]);
}

// p (in s) rounded to the input dtype in the RS A layout. 16-bit: step kk is s[8kk .. 8kk+7]
// pairwise. e4m3: four per register, keys permuted (sm90a/wgmma.cuh, e4m3_a_operand). A template
// (kCount = kSAccum, kSteps = kPSteps) so that the other dtype's branch is never instantiated.
template <int kCount, int kSteps>
__device__ __forceinline__ void p_to_operand(const float (&s)[kCount], u32 (&a)[kSteps][4]) {
  if constexpr (kE4m3Inputs) {
    e4m3_a_operand<kSteps>(s, a);
  } else {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[kk][r] = pack_pair<kInputDtype>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }
  }
}

// Zeroes rows [first_row, BLOCK_N) of a K/V stage (all slabs), by all consumer threads, and
// publishes the zeros to the async proxy (wgmma) for both consumer warpgroups.
__device__ __forceinline__ void zero_tile_rows(u32 tile, int first_row, int consumer_thread) {
  const int chunks = (kBlockN - first_row) * 8;  // 16-byte chunks per slab
  for (int c = consumer_thread; c < chunks * kSlabs; c += kConsumerThreads) {
    const int slab = c / chunks, rest = c % chunks;
    const u32 addr = tile + slab * kKvSlabBytes + (first_row + rest / 8) * 128 + (rest % 8) * 16;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
  }
  fence_proxy_async_shared();
  named_barrier_sync(kConsumerBarrier, kConsumerThreads);
}

// e4m3: zeroes the V^T columns of a stage whose keys are at or past `valid_keys` (0 <= valid_keys <
// BLOCK_N; columns hold keys permuted within 32-key groups), by all consumer threads, then
// publishes the zeros to the async proxy for both consumer warpgroups.
__device__ __forceinline__ void zero_vt_columns(u32 tile, int valid_keys, int consumer_thread) {
  const int first_chunk = (valid_keys / 32) * 2;  // 16-column chunks before it hold valid keys only
  const int chunks_per_row = kBlockN / 16 - first_chunk;
  for (int c = consumer_thread; c < kHeadDim * chunks_per_row; c += kConsumerThreads) {
    const int row = c / chunks_per_row, chunk = first_chunk + c % chunks_per_row;
    const u32 addr = tile + (chunk / 8) * kVtSlabBytes + sw128_offset_8bit(row, 16 * (chunk % 8));
    u32 w[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(addr));
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int slot = 16 * chunk + e;
      if ((slot & ~31) + e4m3_key_of_slot(slot & 31) >= valid_keys) w[e / 4] &= ~(0xFFu << (8 * (e % 4)));
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  }
  fence_proxy_async_shared();
  named_barrier_sync(kConsumerBarrier, kConsumerThreads);
}

// What the key-tile loops of one work item need (all uniform over the warpgroup except c and
// the warp's mask bounds).
struct KeyLoop {
  const TsattnPrefillParams& params;
  const WorkItem& item;
  KeyTiles tiles;
  u32 smem, bars;
  u64 q_desc;                        // this warpgroup's 64 rows of Q (slab 0)
  u32 q_empty;                       // the Q buffer's empty barrier
  u64 k_desc, v_desc;                // stage 0 of the K and V rings (slab 0)
  int warp_full_from, warp_full_to;  // keys every valid row of the warp sees
  int c;
  int consumer;  // 0 or 1
};

// The descriptors of stage `stage` of the K and V rings (slab 0).
__device__ __forceinline__ u64 k_stage(const KeyLoop& k, u32 stage) {
  return smem_desc_advance(k.k_desc, stage * kKStageBytes);
}

__device__ __forceinline__ u64 v_stage(const KeyLoop& k, u32 stage) {
  return smem_desc_advance(k.v_desc, stage * kVStageBytes);
}

template <bool kLazy>
__device__ __forceinline__ bool mask_and_softmax(const KeyLoop& k, float (&s)[kSAccum], RowState& rows, int n0,
                                                 float (&alpha)[2]) {
  if (!(k.warp_full_from <= n0 && n0 + kBlockN - 1 <= k.warp_full_to)) apply_mask(s, rows, n0, k.c);
  return softmax_step<kLazy>(s, rows, k.params.scale_log2, alpha);
}

// After the item's last S GEMM retired: Q is read for the last time. With kOutputInQ the buffer
// still holds this item's O until write_output read it back, and consume releases it then.
__device__ __forceinline__ void release_q_after_scores(const KeyLoop& k) {
  if constexpr (!kOutputInQ) mbarrier_arrive(k.q_empty);
}

// Waits for V stage `stage` of key tile n0 and, in the packed layout, zeroes its rows past the
// request's end (they belong to the next request).
__device__ __forceinline__ void wait_v_tile(const KeyLoop& k, u32 stage, u32 parity, int n0) {
  wait_phase(k.bars + 8 * (kVFull + stage), parity);
#if TSATTN_PACKED
  if (n0 + kBlockN > k.item.extent.kv_len) {
    const u32 tile = k.smem + kVOffset + stage * kVStageBytes;
    if constexpr (kE4m3Inputs)
      zero_vt_columns(tile, k.item.extent.kv_len - n0, threadIdx.x - 128);
    else
      zero_tile_rows(tile, k.item.extent.kv_len - n0, threadIdx.x - 128);
  }
#else
  (void)n0;
#endif
}

// Two-level PV of the serial loop (kTwoLevel): PV in kPvChunkN-column chunks (D256: four), each
// into a working accumulator from zero and, once retired, added into O scaled by this tile's
// alpha. D256 keeps kPvChunkBuffers = 2 chunks in flight (P 16 + 2 x 32 + O 128 registers), so one
// is added while the next runs; its variable windows, whose row ranges need more registers, take
// one at a time.

template <int kChunkN>
__device__ __forceinline__ void accumulate_pv_chunks(float (&o)[kOAccum], const u32 (&a)[kPSteps][4], u64 v_desc,
                                                     const float (&alpha)[2]) {
  constexpr int kChunks = kHeadDim / kChunkN;
  float w[kPvChunkBuffers][kChunkN / 2];
  wgmma_fence();
  issue_pv_e4m3<kChunkN>(w[0], a, v_desc, 0);
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    if (kPvChunkBuffers == 2 && q + 1 < kChunks) {
      wgmma_fence();
      issue_pv_e4m3<kChunkN>(w[(q + 1) % kPvChunkBuffers], a, v_desc, kChunkN * (q + 1));
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    wgmma_fence_operands(w[q % kPvChunkBuffers]);
    accumulate_output(o, w[q % kPvChunkBuffers], alpha, kChunkN / 2 * q);
    if (kPvChunkBuffers == 1 && q + 1 < kChunks) {
      wgmma_fence();
      issue_pv_e4m3<kChunkN>(w[0], a, v_desc, kChunkN * (q + 1));
    }
  }
}

// Ping-pong (kPingPong): in the serial loop a warpgroup's GEMMs come in blocks, PV(t-1) then S(t),
// between its softmaxes. Left alone, the two consumers run in step: both GEMM blocks share the
// tensor cores, then both softmaxes share the MUFU unit, and each unit idles half the time (e4m3
// D128: a 256-key step's exponentials hold the MUFU about as long as its GEMMs hold the tensor
// cores). Turns make them alternate: a consumer issues a block only in its turn, and passes the
// turn once it issued S(t), so its softmax runs under the other's block. Each consumer takes and
// passes the turn n + 1 times per item of n key tiles (S(0), then PV(t-1) with S(t), then
// PV(n-1)); consumer 1 passes once before its first item and consumer 0 takes that pass after its
// last (consume).

__device__ __forceinline__ void take_turn(int consumer) {
  if constexpr (kPingPong) named_barrier_sync(kTurnBarrier + consumer, kConsumerThreads);
}

__device__ __forceinline__ void pass_turn(int consumer) {
  if constexpr (kPingPong) named_barrier_arrive(kTurnBarrier + 1 - consumer, kConsumerThreads);
}

// Without kOverlapSoftmax (D256 variable windows, e4m3): each key tile in order: S(t), softmax,
// PV(t).
template <u32 kCtas>
__device__ __forceinline__ void run_key_tiles_serial(const KeyLoop& k, RowState& rows, float (&o)[kOAccum],
                                                     u32& kv_uses) {
  for (int tile = 0; tile < k.tiles.num_tiles; ++tile, ++kv_uses) {
    const u32 stage = kv_uses % kStages, parity = (kv_uses / kStages) & 1;
    const int n0 = k.tiles.first_key + tile * kBlockN;
    float s[kSAccum];
    float alpha[2];
    wait_phase(k.bars + 8 * (kKFull + stage), parity);
    if (tile == 0) take_turn(k.consumer);
    wgmma_fence();
    issue_scores(s, k.q_desc, k_stage(k, stage));
    pass_turn(k.consumer);
    wgmma_wait<0>();
    wgmma_fence_operands(s);
    release_kv_stage<kCtas>(k.bars + 8 * (kKEmpty + stage));
    if (tile + 1 == k.tiles.num_tiles) release_q_after_scores(k);
    const bool grew = mask_and_softmax<true>(k, s, rows, n0, alpha);
    if (!kTwoLevel && grew) rescale_output(o, alpha);
    u32 a[kPSteps][4];
    p_to_operand(s, a);
    wait_v_tile(k, stage, parity, n0);
    take_turn(k.consumer);
    if constexpr (kTwoLevel) {
      accumulate_pv_chunks<kPvChunkN>(o, a, v_stage(k, stage), alpha);
      if (tile + 1 == k.tiles.num_tiles) pass_turn(k.consumer);
    } else {
      wgmma_fence();
      issue_pv(o, a, v_stage(k, stage));
      wgmma_wait<0>();
      wgmma_fence_operands(o);
    }
    release_kv_stage<kCtas>(k.bars + 8 * (kVEmpty + stage));
  }
}

// With kOverlapSoftmax: a software pipeline over key tiles. Step t issues S(t) = Q K(t)^T and
// O += P(t-1) V(t-1) together, then the softmax of S(t). The first tile has no PV before it; after
// the last, one PV is left. The two warpgroups are staggered at each item's start (consumer 1's
// first S GEMM waits for consumer 0's first softmax): the Q barrier brings them into step at
// every item, and a first softmax has no PV GEMM of its own to run under.
// In the source the softmax sits between the two waits, under PV(t-1); in the SASS it does not:
// ptxas moves a wgmma wait to the top of its basic block, here right after the S(t) wait, so the
// softmax runs once both GEMMs retired, while the other warpgroup's GEMMs hold the tensor cores.
// ptxas does so because the softmax writes p over the S accumulators, and it keeps ordinary code
// from writing wgmma accumulators while a wgmma runs (docs/decisions.md has the variants tried).
template <u32 kCtas>
__device__ __forceinline__ void run_key_tiles_overlapped(const KeyLoop& k, RowState& rows, float (&o)[kOAccum],
                                                         u32& kv_uses) {
  u32 a[kPSteps][4];  // P(t-1) as the PV GEMM's A operand
  float s[kSAccum];
  float alpha[2];
  u32 stage = kv_uses % kStages, parity = (kv_uses / kStages) & 1;
  wait_phase(k.bars + 8 * (kKFull + stage), parity);
  // Stagger: consumer 1 issues an item's first S GEMM once consumer 0's first softmax is done, so
  // that the two first softmaxes of an item, which have no PV GEMM to run under, each run under
  // the other warpgroup's GEMMs. Both consumers pass here once per item with key tiles (they walk
  // the same items and tiles), and consumer 0 cannot arrive for the next item before consumer 1
  // synced for this one: the next item's Q load waits for consumer 1's last S GEMM of this item
  // (q_empty).
  if (k.consumer == 1) named_barrier_sync(kStaggerBarrier, kConsumerThreads);
  wgmma_fence();
  issue_scores(s, k.q_desc, k_stage(k, stage));
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  release_kv_stage<kCtas>(k.bars + 8 * (kKEmpty + stage));
  if (k.tiles.num_tiles == 1) release_q_after_scores(k);
  mask_and_softmax<false>(k, s, rows, k.tiles.first_key, alpha);  // O is still 0: alpha has nothing to scale
  p_to_operand(s, a);
  if (k.consumer == 0) named_barrier_arrive(kStaggerBarrier, kConsumerThreads);

  for (int tile = 1; tile < k.tiles.num_tiles; ++tile) {
    const u32 prev_stage = stage, prev_parity = parity;
    const int n0 = k.tiles.first_key + tile * kBlockN;
    ++kv_uses;
    stage = kv_uses % kStages;
    parity = (kv_uses / kStages) & 1;
    wait_v_tile(k, prev_stage, prev_parity, n0 - kBlockN);
    wait_phase(k.bars + 8 * (kKFull + stage), parity);
    wgmma_fence();
    issue_scores(s, k.q_desc, k_stage(k, stage));
    issue_pv(o, a, v_stage(k, prev_stage));
    wgmma_wait<1>();  // S(t) retired; PV(t-1) may still run
    wgmma_fence_operands(s);
    release_kv_stage<kCtas>(k.bars + 8 * (kKEmpty + stage));
    if (tile + 1 == k.tiles.num_tiles) release_q_after_scores(k);
    mask_and_softmax<false>(k, s, rows, n0, alpha);
    wgmma_wait<0>();  // PV(t-1) retired: O may be rescaled and V(t-1) released
    wgmma_fence_operands(o);
    release_kv_stage<kCtas>(k.bars + 8 * (kVEmpty + prev_stage));
    rescale_output(o, alpha);
    p_to_operand(s, a);
  }

  wait_v_tile(k, stage, parity, k.tiles.first_key + (k.tiles.num_tiles - 1) * kBlockN);
  wgmma_fence();
  issue_pv(o, a, v_stage(k, stage));
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  release_kv_stage<kCtas>(k.bars + 8 * (kVEmpty + stage));
  ++kv_uses;
}

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_MAINLOOP_CUH
