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
//                into both CTAs. One lane of warp 1 is the scheduler of 16-bit kernels: it hands
//                out the work items (kDynamicOrder, ItemWalk). The other warps do nothing (they
//                leave, or in CTA pairs wait at the final cluster barrier). 40 or 24 registers.
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
// m and sum l per row, out = O * output_scale / l; a row that sees no key writes exactly 0.
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
//
// Which keys a tile visits: the union of its rows' ranges (common/mask.cuh), computed by every
// warp on its own from the params (no barrier; key_tiles_of); the element mask runs only on key
// tiles where some row of the warp does not see every key.
//
// Packed layout: Q/K/V boxes past a request's end hold the next request's rows (the tensor maps
// span the whole packed tensor). Their scores are masked to -inf, so p = 0 there; but 0 * inf is
// NaN, so the V rows (e4m3: V^T columns) past kv_len of a tile that crosses the request's end
// are zeroed in shared memory before the PV GEMM (non-finite values in one request must not reach
// another).
#ifndef TSATTN_SM90A_PREFILL_SM90A_CUH
#define TSATTN_SM90A_PREFILL_SM90A_CUH

#include "common/mask.cuh"
#include "common/prelude.cuh"
#include "common/request.cuh"
#include "common/split_tail.cuh"
#include "common/work_items.cuh"
#include "prefill_params.h"
#include "sm90a/tma.cuh"
#include "sm90a/wgmma.cuh"

#if !defined(TSATTN_KERNEL_NAME) || !defined(TSATTN_HEAD_DIM) || !defined(TSATTN_INPUT_DTYPE) ||     \
    !defined(TSATTN_OUTPUT_DTYPE) || !defined(TSATTN_BLOCK_M) || !defined(TSATTN_BLOCK_N) || \
    !defined(TSATTN_NUM_WARPS) || !defined(TSATTN_STAGED_OUTPUT) || !defined(TSATTN_TMA_OUTPUT)
#error "the generated source must define TSATTN_KERNEL_NAME, TSATTN_HEAD_DIM, TSATTN_{INPUT,OUTPUT}_DTYPE, TSATTN_BLOCK_{M,N}, TSATTN_NUM_WARPS, TSATTN_{STAGED,TMA}_OUTPUT"
#endif

static_assert(TSATTN_PARAMS_VERSION == 6, "sm90a kernel written against TsattnPrefillParams v6");

namespace tsattn_dev {
namespace sm90a {

constexpr int kHeadDim = TSATTN_HEAD_DIM;
constexpr int kInputDtype = TSATTN_INPUT_DTYPE;
constexpr int kOutputDtype = TSATTN_OUTPUT_DTYPE;
constexpr int kBlockM = TSATTN_BLOCK_M;
constexpr int kBlockN = TSATTN_BLOCK_N;
constexpr int kThreads = TSATTN_NUM_WARPS * 32;
constexpr int kConsumerThreads = 256;

static_assert(kHeadDim == 128 || kHeadDim == 256, "head dim 128 or 256");
static_assert(kInputDtype >= kFloat16 && kInputDtype <= kE4m3, "input dtype code 0, 1 or 2");
static_assert(kOutputDtype >= kFloat16 && kOutputDtype <= kE4m3, "output dtype code 0, 1 or 2");
static_assert(kBlockM == 128 && kThreads == 384, "one producer and two consumer warpgroups of 64 rows");
// e4m3 inputs: 8-bit wgmmas (k32) read both operands K-major, so O += P V reads V^T, written by
// tsattn_transpose_v (sm90a/transpose_v.cuh) and loaded in slabs of 128 keys x D rows.
constexpr bool kE4m3Inputs = kInputDtype == kE4m3;
// e4m3 kernels walk one tile per chunk (common/work_items.cuh): the chunk arithmetic before the
// key loop made ptxas schedule the e4m3 D128 loop differently, 8% slower (docs/PERF.md v11), and
// with half the K/V bytes their L2 traffic gained nothing from chunks (measured).
constexpr bool kChunkedOrder = !kE4m3Inputs;
static_assert(kE4m3Inputs ? (kBlockN == 64 || kBlockN == 128 || kBlockN == 192 || kBlockN == 256)
                          : (kBlockN == 64 || kBlockN == 80 || kBlockN == 128 || kBlockN == 160 || kBlockN == 256),
              "BLOCK_N is a wgmma N that sm90a/wgmma.cuh instantiates (e4m3: whole 32-key V^T groups)");

// Two-level accumulation (e4m3 inputs). An 8-bit wgmma does not accumulate in full fp32: each
// product is aligned to the accumulator and cut to about 13 bits below its leading bit, so an O
// that collects the products of every key tile loses the small ones once it is large, i.e. for
// values of one sign over long sequences (on the H200, v = 1 everywhere at dense S16K gave 0.54
// instead of 1; docs/PERF.md, sm90a v15). So PV accumulates one key tile at a time, from zero, in
// a working accumulator (all of D at D128; at D256, where a second O of 128 registers does not
// fit, kPvChunkN columns at a time), and an FFMA adds it into O (o = o * alpha + w, which also
// applies the rescale): the error stays that of BLOCK_N products. The working accumulator needs
// room beside S, P and O in the overlapped loop (D128 at 128 keys spilled 172 bytes at 232
// registers), so e4m3 kernels run the serial loop, where it takes S's registers.
constexpr bool kTwoLevel = kE4m3Inputs;

// Software pipeline inside a warpgroup: S(t) and PV(t-1) are issued together (the softmax of S(t)
// runs after both retired: see run_key_tiles_overlapped). That keeps S, the P operand and O live
// at once in the source, and ptxas allocates for it. D128 fits in
// 232 registers. D256 (O alone is 128) needs 240, which leaves the producer 24: enough for the
// closed-form key ranges of dense and causal masks, not for the variable-window reduction (ptxas
// spilled ~150 bytes), so D256 variable windows run the two GEMMs of a step one after the other.
// e4m3 kernels run serially too (kTwoLevel).
constexpr bool kOverlapSoftmax = !kE4m3Inputs && (kHeadDim <= 128 || TSATTN_MASK != 2);

// Register budgets (setmaxnreg). The launch gives 168 per thread (__launch_bounds__(384, 1));
// 128 * 40 + 256 * 232 = 128 * 24 + 256 * 240 = 64512 = 384 * 168, so the consumers' increase
// can always be granted. 240 goes to D256 and to dense D128's 160-key steps (S 80 + P 40 + O 64).
constexpr bool kWideConsumers = (kHeadDim == 256 || kBlockN > 128) && kOverlapSoftmax;
constexpr int kProducerRegisters = kWideConsumers ? 24 : 40;
constexpr int kConsumerRegisters = kWideConsumers ? 240 : 232;
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= 384 * 168, "the CTA's launch registers");

// Shared memory (from a 1024-byte aligned base; every slab is 1024-aligned for the 128B swizzle).
// A slab row is 128 bytes: 64 16-bit or 128 e4m3 elements of the head dim.
constexpr int kSlabElements = 128 / dtype_bytes(kInputDtype);
constexpr int kSlabs = kHeadDim / kSlabElements;  // slabs per Q or K row
constexpr int kMmaK = 32 / dtype_bytes(kInputDtype);  // wgmma K: 16, or 32 for e4m3 (32 bytes either way)
constexpr u32 kQSlabBytes = kBlockM * 128;
constexpr u32 kQBytes = kSlabs * kQSlabBytes;
constexpr u32 kKvSlabBytes = kBlockN * 128;
// V^T (e4m3): slab s holds keys 128s .. 128s + 127 of all D rows, loaded as one 128-key box (the
// swizzle span). A BLOCK_N that is not a multiple of 128 loads the last slab whole and the PV GEMM
// reads only its first BLOCK_N % 128 keys.
constexpr int kVtSlabs = (kBlockN + 127) / 128;
constexpr u32 kVtSlabBytes = kHeadDim * 128;
// Bytes of one stage of the K ring and of the V ring (also each stage's TMA transaction count).
constexpr u32 kKStageBytes = kSlabs * kKvSlabBytes;
constexpr u32 kVStageBytes = kE4m3Inputs ? kVtSlabs * kVtSlabBytes : kKStageBytes;
constexpr int kStages = 2;
// CTA pairs: the module's second kernel, TSATTN_KERNEL_NAME_pairs, is launched in clusters of 2
// whose CTAs read the same K/V tiles: query heads 2k and 2k+1 of one query tile (even GQA groups),
// or query tiles 2q and 2q+1 of one head (MHA and odd groups; slot_item below); each producer
// loads half of every K/V tile's slabs and multicasts them into both CTAs. That halves the L2 -> shared memory traffic, and on a GPU
// held at its power limit the energy saved raises the clock (docs/PERF.md, sm90a v7). Both kernels
// are this file's code, templated on kCtas (CTAs per cluster: 1 or 2). 16-bit tiles split by slab
// (2 or 4 per K/V row); e4m3 (one K slab at D128, V^T in 128-key slabs) has no pairs kernel.
constexpr bool kPairable = !kE4m3Inputs && kSlabs % 2 == 0;
// Output staging (TSATTN_STAGED_OUTPUT, codegen/spec_table.cpp decides: D128 with a 16-bit
// output): each consumer warp's 16 rows x 256 bytes of O, written with stmatrix and read back
// as 16-byte row chunks for the global stores (write_output_staged). D256 has no room for it.
// The buffer has a 16-bit D128 Q tile's layout: two slabs of 128 rows x 128 bytes, a warp's rows
// where its Q rows are. Dense masks with 16-bit inputs (kOutputInQ) stage O in the item's own Q
// buffer, free once the warpgroup's last S GEMM retired; the 32 KB that saves hold a second Q
// buffer, so the producer loads the next item's Q while this item still runs instead of after its
// last S GEMM. Dense items are all alike, so every CTA reaches an item's end at the same time and
// waited for Q there: dense S2K / S4K / S8K +3.3% / +3.5% / +1.8% on the H200. Causal kernels
// measured 0.5-1.7% slower with it (their CTAs drift apart; docs/PERF.md, sm90a v14), so they keep
// one Q buffer, and so do e4m3 inputs (16 KB Q tiles: O has a buffer of its own).
constexpr bool kStagedOutput = TSATTN_STAGED_OUTPUT;
static_assert(!kStagedOutput || (kHeadDim == 128 && dtype_bytes(kOutputDtype) == 2),
              "staged output: 16-bit rows of 128 elements (32 KB for the 8 consumer warps)");
constexpr bool kOutputInQ = kStagedOutput && !kE4m3Inputs && TSATTN_MASK == 0;
constexpr u32 kOSlabBytes = kBlockM * 128;
constexpr u32 kOBytes = 2 * kOSlabBytes;
static_assert(!kOutputInQ || kOBytes == kQBytes, "O takes the place of a 16-bit D128 Q tile");
constexpr int kQBuffers = kOutputInQ ? 2 : 1;
// TMA output (TSATTN_TMA_OUTPUT, codegen/spec_table.cpp decides: staged kernels with 16-bit
// inputs and an O buffer of their own, i.e. not kOutputInQ): a warp hands its 16 staged rows to
// two TMA stores (maps.o, box {64, 1, 16, 1}, one per 128-byte slab: the staging layout is TMA's
// 128-byte swizzle) and goes on, where it loaded them back and stored them itself (8 loads and 8
// stores of 16 bytes per thread). Causal S2K-S8K and ragged batches +1-1.5% on the H200; dense
// kernels, which would have to keep their Q buffer from the producer until the stores read it,
// measured 0.4-2% slower at S4K-S8K (docs/PERF.md, sm90a v18). The warp's next staging waits
// until the stores read the buffer (cp.async.bulk.wait_group.read by the lane that issued them).
// Packed layouts: a warp whose rows cross the request's end stores them itself (the map's rows
// past it are the next request's).
constexpr bool kTmaOutput = TSATTN_TMA_OUTPUT;
static_assert(!kTmaOutput || (kStagedOutput && !kE4m3Inputs && !kOutputInQ),
              "TMA output stores staged 16-bit-input tiles from an O buffer of their own");
constexpr u32 kQOffset = 0;
constexpr u32 kKOffset = kQOffset + kQBuffers * kQBytes;
constexpr u32 kVOffset = kKOffset + kStages * kKStageBytes;
constexpr u32 kOOffset = kVOffset + kStages * kVStageBytes;  // e4m3 inputs: O's own buffer
constexpr u32 kBarrierOffset = kOOffset + (kStagedOutput && !kOutputInQ ? kOBytes : 0);
// Dynamic order (params.work_counter; the host sets it where items differ in cost): a scheduler
// warp claims each slot and hands it to the producer and consumers (and in a CTA pair to the peer
// CTA) through a ring of kSlotRing entries in shared memory (ItemWalk below). 16-bit kernels only:
// any change around the e4m3 loop moves its ptxas schedule by ~8% (docs/PERF.md v14), so e4m3
// kernels keep the static walk.
constexpr bool kDynamicOrder = !kE4m3Inputs;
constexpr u32 kSlotRing = 2;
// Split tail (params.split_slots; prefill_params.h; common/split_tail.cuh): 16-bit dense D128
// kernels of the fixed layout, whose items all cost the same, so that the static walk's last round
// leaves walkers idle unless the slots are a multiple of the walkers (dense S8K: 1024 slots on 66
// CTA pairs, 15.5 rounds, so 3% of the call is idle SMs; an unlucky S2112 ran 23% slower than S2K,
// cuDNN alike). The last round and the one before it go out by key tiles instead. Causal and
// packed kernels claim dynamically, and e4m3 kernels keep their code (kDynamicOrder). D256 dense
// kernels do not split: with the 8-byte ring entries alone ptxas scheduled their CTA-pairs kernel's
// key loop differently, 8-15% slower at S4K-S8K with the split off (docs/PERF.md, sm90a v17).
constexpr bool kSplitTail = !kE4m3Inputs && TSATTN_MASK == 0 && !TSATTN_PACKED && kHeadDim == 128;
// Barriers: q_full[2], q_empty[2] (the second pair unused with one Q buffer), k_full[2],
// k_empty[2], v_full[2], v_empty[2]; with kDynamicOrder slot_full[2], slot_empty[2], slot_request.
constexpr u32 kQFull = 0, kQEmpty = 2, kKFull = 4, kKEmpty = 6, kVFull = 8, kVEmpty = 10;
constexpr u32 kSlotFull = 12, kSlotEmpty = 14, kSlotRequest = 16;
constexpr u32 kNumBarriers = kDynamicOrder ? 17 : 12;
// A slot; with kSplitTail also its key tiles (schedule: kWholeSlot, kNoPiece, or first | count << 16).
constexpr u32 kSlotEntryBytes = kSplitTail ? 8 : 4;
constexpr u32 kSlotRingOffset = kBarrierOffset + 8 * kNumBarriers;
constexpr u32 kSmemBytes = 1024 + kSlotRingOffset + (kDynamicOrder ? kSlotEntryBytes * kSlotRing : 0);
static_assert(kSmemBytes <= 232448, "fits the 227 KB a Hopper CTA may use");

constexpr int kSAccum = kBlockN / 2;   // S accumulators per thread (m64 x BLOCK_N)
constexpr int kOAccum = kHeadDim / 2;  // O accumulators per thread (m64 x D)
// Columns of the two-level working accumulator (kTwoLevel): all of D128, a quarter of D256.
constexpr int kPvChunkN = kHeadDim == 128 ? 128 : 64;
constexpr int kPSteps = kBlockN / kMmaK;  // k-steps of the PV GEMM

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

// Ping-pong (FA3: the consumer warpgroups take turns issuing their GEMMs, so one's softmax runs
// under the other's) is gone: it cost bf16 D128 3-12% (docs/PERF.md, sm90a v5 and v6), and e4m3
// D128, which gained ~3% from it, now runs the serial loop (kTwoLevel).

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// The key tiles a work item visits: [first_key, first_key + num_tiles * BLOCK_N), the union of
// the visible ranges of the tile's rows below q_len (every warp gets the same answer, with no
// barrier).
struct KeyTiles {
  int first_key;
  int num_tiles;
};

__device__ __forceinline__ KeyTiles tiles_covering(int lo, int hi) {
  if (lo > hi) return {0, 0};
  const int first = (lo / kBlockN) * kBlockN;
  return {first, (hi - first) / kBlockN + 1};
}

// The key tiles of rows row0 .. row0 + kRows - 1 below q_len (kRows: BLOCK_M, or a tile pair's
// 2 x BLOCK_M, whose two CTAs walk the union of their tiles' ranges).
template <int kRows>
__device__ __forceinline__ KeyTiles key_tiles_of(const TsattnPrefillParams& p, const WorkItem& item, int row0,
                                                 int lane) {
  const RequestExtent& req = item.extent;
  const int last_row = min(row0 + kRows, req.q_len) - 1;  // >= row0: the caller checked row0 < q_len
#if TSATTN_MASK == 2
  // Per-row bounds from memory: a warp reduction (lane l takes rows l, l + 32, ...).
  int lo = kEmptyLo, hi = kEmptyHi;
#pragma unroll
  for (int r = lane; r < kRows; r += 32) {
    if (row0 + r <= last_row) {
      const KeyRange range = row_key_range(p, req, item.request, row0 + r);
      lo = min(lo, range.lo);
      hi = max(hi, range.hi);
    }
  }
  return tiles_covering(warp_min(lo), warp_max(hi));
#else
  // Dense, causal and causal window ranges (common/mask.cuh) have both ends non-decreasing in the
  // row, so the union is [lo of the first row that sees a key, hi of the last row]; closed form
  // keeps the producer inside its small register budget.
  (void)lane;
  const KeyRange last = row_key_range(p, req, item.request, last_row);
  if (last.lo > last.hi) return {0, 0};  // the last row sees nothing, so no row does
#if TSATTN_MASK == 1
  // Causal: row i sees a key iff i + kv_len - q_len >= 0.
  const int first_row = max(row0, req.q_len - req.kv_len);
#else
  const int first_row = row0;
#endif
  return tiles_covering(row_key_range(p, req, item.request, first_row).lo, last.hi);
#endif
}

// Work slots. One CTA per item (kCtas 1): slot = item. CTA pairs (kCtas 2) walk slots side by
// side, so their K/V rings fill and drain in step, in one of two ways (params.pair_tiles):
//   along heads (0): slot s is items 2s and 2s + 1, and cluster rank r takes item 2s + r: query
//     heads 2k and 2k + 1 of one tile (item_order.cuh keeps them adjacent; the host pairs this way
//     only even GQA groups, so both heads read one kv head);
//   along query tiles (1): the list's tiles are 2 x BLOCK_M rows (the host plans them so); slot s
//     is item s and rank r takes BLOCK_M-row tile 2q + r of its tile q. Both CTAs walk the key
//     tiles of all 2 x BLOCK_M rows, so they read the same K/V (MHA and odd groups; each CTA masks
//     the keys its own rows do not see, and a CTA whose tile lies past q_len computes rows that
//     are never written).
// Pairs along query tiles only for dense and plain causal masks, where the pair's union costs at
// most one key tile: a window would walk one more at its far end, and a variable window's union is
// unknown (also, the 2 x BLOCK_M-row range reduction spilled in the 24-register producer).
constexpr bool kTilePairable = kPairable && TSATTN_MASK != 2 && !TSATTN_WINDOW;

template <u32 kCtas>
__device__ __forceinline__ bool pairs_along_tiles(const TsattnPrefillParams& p) {
  if constexpr (kCtas == 2 && kTilePairable)
    return p.pair_tiles != 0;
  else
    return false;
}

template <u32 kCtas>
__device__ __forceinline__ WorkList slot_list(const TsattnPrefillParams& p) {
  return pairs_along_tiles<kCtas>(p) ? work_list<2 * kBlockM>(p) : work_list<kBlockM>(p);
}

struct SlotWalk {
  i64 first, end, step;
};

template <u32 kCtas>
__device__ __forceinline__ SlotWalk slot_walk(const TsattnPrefillParams& p, const WorkList& list) {
  const i64 items_per_slot = kCtas == 2 && !pairs_along_tiles<kCtas>(p) ? 2 : 1;
  return {static_cast<i64>(blockIdx.x / kCtas), list.items / items_per_slot, static_cast<i64>(gridDim.x / kCtas)};
}

// The item of cluster rank `rank` in slot `slot`, as that CTA's own BLOCK_M-row tile (item.q_tile
// counts BLOCK_M rows). False when the slot gives it nothing. kNarrow: see work_item.
template <u32 kCtas, bool kNarrow = false>
__device__ __forceinline__ bool slot_item(const TsattnPrefillParams& p, const WorkList& list, i64 slot, u32 rank,
                                          WorkItem& item) {
  if constexpr (kCtas == 1) {
    return work_item<kBlockM, kChunkedOrder, kNarrow>(p, list, slot, item);
  } else if (pairs_along_tiles<kCtas>(p)) {
    if (!work_item<2 * kBlockM, kChunkedOrder, kNarrow>(p, list, slot, item)) return false;
    item.q_tile = 2 * item.q_tile + static_cast<int>(rank);
    return true;
  } else {
    return work_item<kBlockM, kChunkedOrder, kNarrow>(p, list, 2 * slot + rank, item);
  }
}

// The key tiles the CTA walks for its item: its tile's, or in a pair along query tiles those of
// both tiles of the pair (q_tile with its lowest bit cleared is the pair's first).
template <u32 kCtas>
__device__ __forceinline__ KeyTiles slot_key_tiles(const TsattnPrefillParams& p, const WorkItem& item, int lane) {
  if (pairs_along_tiles<kCtas>(p)) return key_tiles_of<2 * kBlockM>(p, item, (item.q_tile & ~1) * kBlockM, lane);
  return key_tiles_of<kBlockM>(p, item, item.q_tile * kBlockM, lane);
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

// The batch coordinate of a request in the rank-4 maps {d, head, token, batch}: the packed
// layout has one batch entry (tokens are absolute there).
__device__ __forceinline__ int batch_coord(const WorkItem& item) { return TSATTN_PACKED ? 0 : item.request; }

// Waits for a barrier phase. A wait that lasts kWaitTrapNs means a broken protocol, not a slow
// tile (one takes microseconds): trap, so the call fails with an error instead of hanging the GPU.
constexpr u64 kWaitTrapNs = 10000000000ull;

__device__ __forceinline__ void wait_phase(u32 bar, u32 parity) {
  if (!mbarrier_wait_parity_bounded(bar, parity, kWaitTrapNs)) __trap();
}

// ---------------------------------------------------------------------------------------------
// The walk over the work list. Static order: every warp takes slots first, first + step, ... and
// decodes their items itself. Dynamic order (kDynamicOrder): warp 1, idle otherwise, is the
// scheduler. It claims each slot (atomicAdd on params.work_counter; without a counter, the static
// walk) and publishes it through a ring in shared memory, where the producer and consumer warps
// read it and decode its item; its last entry, kNoSlot, says the list is done. In a CTA pair rank
// 0's scheduler writes each entry into both CTAs' rings, rank 1's with st.async, whose bytes
// complete rank 1's barrier the way a TMA load does (a plain remote store would need cluster-scope
// acquire waits, which made ptxas serialize the consumers' wgmmas, C7512). The k-th entry of a
// CTA's life is ring entry r = k % kSlotRing:
//   slot_full[r]   1 arrival: the scheduler's (in a pair, rank 0's, on both CTAs' barriers; on
//                  rank 1's with the entry's bytes as transactions).
//   slot_empty[r]  one arrival per reading warp: the producer and 8 consumer warps; in a pair
//                  those of both CTAs (18), all on rank 0's barrier.
//   slot_request   1 arrival: the claiming CTA's producer, when it wants its next entry (it has
//                  issued every load of its current item). The scheduler claims entry k only after
//                  the k-th request: claimed earlier, a slot would wait behind the CTA's current
//                  item while another CTA went idle (measured: causal S2K lost 17% with claims
//                  as soon as the ring had room). The static walk does not wait for requests.
// A reader's lane 0 arrives after a shuffle of the value its warp loaded, so every load of the
// entry has completed before the scheduler may rewrite it. Slots, and the index arithmetic of the
// readers' decode (work_item's kNarrow, which keeps the 24-register producer free of spills), are
// 32-bit: the host launches these kernels only for lists of fewer than 2^31 items
// (api/execute.cpp).
template <u32 kCtas>
constexpr u32 kSlotEmptyArrivals = kCtas * (1 + kConsumerThreads / 32);
constexpr u32 kNoSlot = 0xFFFFFFFFu;

template <u32 kCtas>
__device__ __forceinline__ bool claims_slots() {
  return kCtas == 1 || cluster_ctarank() == 0;
}

// Split tail (kSplitTail; common/split_tail.cuh): the scheduler decodes each piece and publishes
// its key tiles with its slot (kSlotEntryBytes), so the readers do no divisions (decoding in the
// 24-register producer spilled). A part of a cut slot writes what it has to split_partials and the
// later of the two parts merges them (merge_split_parts).
constexpr u32 kWholeSlot = 0xFFFFFFFFu, kNoPiece = 0;  // the entry's second word: else first | count << 16
static_assert(kMaxSplitSteps < (1u << 15), "a piece's first tile and count fit 16 bits each");

// Key tiles per slot of a split tail (dense, fixed layout: every slot walks all keys).
__device__ __forceinline__ u32 split_steps(const TsattnPrefillParams& p) {
  return (static_cast<u32>(max(p.kv_tokens, 0)) + kBlockN - 1) / kBlockN;
}

// The whole-slot rounds of this launch's static walk before its split tail; 0xFFFFFFFF when it has
// none (also when the host's split_slots do not fit the launch, which the host never sends).
template <u32 kCtas>
__device__ __forceinline__ u32 whole_slot_rounds(const TsattnPrefillParams& p, i64 end) {
  if constexpr (kSplitTail) {
    const u32 walkers = gridDim.x / kCtas, slots = static_cast<u32>(end), tail = static_cast<u32>(max(p.split_slots, 0));
    if (p.work_counter == nullptr && split_tail_walkable(slots, tail, walkers, split_steps(p)))
      return (slots - tail) / walkers;
  } else {
    (void)p;
    (void)end;
  }
  return 0xFFFFFFFFu;
}

template <u32 kCtas>
__device__ __forceinline__ void schedule(const TsattnPrefillParams& params, u32 smem, u32 bars) {
  const i64 end = slot_walk<kCtas>(params, slot_list<kCtas>(params)).end;
  const u32 rounds = whole_slot_rounds<kCtas>(params, end);
  for (u32 k = 0;; ++k) {
    const u32 r = k % kSlotRing, entry = smem + kSlotRingOffset + kSlotEntryBytes * r;
    if (params.work_counter != nullptr) wait_phase(bars + 8 * kSlotRequest, k & 1);
    wait_phase(bars + 8 * (kSlotEmpty + r), ((k / kSlotRing) & 1) ^ 1);
    i64 claimed = -1;
    u32 tiles = kWholeSlot;  // kSplitTail: the entry's second word
    if (params.work_counter != nullptr) {
      const i64 counted = static_cast<i64>(atomicAdd(params.work_counter, 1ull));
      if (counted < end) claimed = counted;
    } else if (kSplitTail && k >= rounds) {
      // Tail piece k - rounds of this walker; one it does not have goes out as kNoPiece, skipped.
      TailPiece piece;
      if (k - rounds < kPiecesPerWalker) {
        claimed = 0;
        tiles = kNoPiece;
        if (tail_piece(static_cast<u32>(end), static_cast<u32>(params.split_slots), gridDim.x / kCtas,
                       split_steps(params), blockIdx.x / kCtas, k - rounds, piece)) {
          claimed = piece.slot;
          tiles = piece.whole ? kWholeSlot : piece.first | piece.count << 16;
        }
      }
    } else {
      // The static walk's k-th slot is recomputed each time (no registers to hold it).
      const i64 slot = static_cast<i64>(blockIdx.x / kCtas) + static_cast<i64>(k) * (gridDim.x / kCtas);
      if (slot < end) claimed = slot;
    }
    const u32 slot = claimed >= 0 ? static_cast<u32>(claimed) : kNoSlot;
    if constexpr (kSplitTail) st_shared_u32(entry + 4, tiles);
    st_shared_u32(entry, slot);
    mbarrier_arrive(bars + 8 * (kSlotFull + r));
    if constexpr (kCtas == 2) {
      mbarrier_arrive_expect_tx_cluster(bars + 8 * (kSlotFull + r), 1, kSlotEntryBytes);
      if constexpr (kSplitTail) st_async_cluster_u32(entry + 4, 1, tiles, bars + 8 * (kSlotFull + r));
      st_async_cluster_u32(entry, 1, slot, bars + 8 * (kSlotFull + r));
    }
    if (slot == kNoSlot) return;
  }
}

// A reading warp's k-th slot (kNoSlot: the list is done); with kSplitTail its key tiles into
// `tiles` (the entry's second word).
template <u32 kCtas>
__device__ __forceinline__ u32 read_slot(u32 smem, u32 bars, u32 k, u32& tiles) {
  const u32 r = k % kSlotRing, parity = (k / kSlotRing) & 1;
  wait_phase(bars + 8 * (kSlotFull + r), parity);
  const u32 entry = smem + kSlotRingOffset + kSlotEntryBytes * r;
  const u32 slot = __shfl_sync(0xffffffffu, ld_shared_u32(entry), 0);
  if constexpr (kSplitTail) tiles = __shfl_sync(0xffffffffu, ld_shared_u32(entry + 4), 0);
  if (threadIdx.x % 32 == 0) {
    // In a pair both ranks take one path (rank 0 arrives through its own cluster address): the
    // producer has no registers for two.
    if constexpr (kCtas == 1)
      mbarrier_arrive(bars + 8 * (kSlotEmpty + r));
    else
      mbarrier_arrive_cluster(bars + 8 * (kSlotEmpty + r), 0);
  }
  return slot;
}

// A warp's walk over this CTA's work items, in the kernel's order:
//   ItemWalk<kCtas, kProducer> walk(params); while (walk.next(params, smem, bars, item)) ...
// kProducer: the producer warp's walk, which requests each entry before reading it.
template <u32 kCtas, bool kProducer>
struct ItemWalk {
  WorkList list;
  SlotWalk slots;
  i64 slot;   // static order: the next slot to decode
  u32 taken;  // dynamic order: ring entries read so far
  u32 tiles;  // kSplitTail: the current item's key tiles (the ring entry's second word)

  __device__ __forceinline__ explicit ItemWalk(const TsattnPrefillParams& p) : taken(0), tiles(kWholeSlot) {
    list = slot_list<kCtas>(p);
    if constexpr (!kDynamicOrder) {
      slots = slot_walk<kCtas>(p, list);
      slot = slots.first;
    }
  }

  // The current item's key tiles (slot_key_tiles, cut to the piece's).
  __device__ __forceinline__ KeyTiles key_tiles(const TsattnPrefillParams& p, const WorkItem& item, int lane) const {
    KeyTiles walked = slot_key_tiles<kCtas>(p, item, lane);
    if (kSplitTail && tiles != kWholeSlot) {
      walked.first_key += static_cast<int>(tiles & 0xFFFFu) * kBlockN;
      walked.num_tiles = static_cast<int>(tiles >> 16);
    }
    return walked;
  }

  // The next item into `item`; false once the list is done.
  __device__ __forceinline__ bool next(const TsattnPrefillParams& p, u32 smem, u32 bars, WorkItem& item) {
    const u32 rank = kCtas == 1 ? 0 : cluster_ctarank();
    if constexpr (kDynamicOrder) {
      for (;;) {
        if (kProducer && claims_slots<kCtas>() && threadIdx.x % 32 == 0) mbarrier_arrive(bars + 8 * kSlotRequest);
        const u32 claimed = read_slot<kCtas>(smem, bars, taken++, tiles);
        if (claimed == kNoSlot) return false;
        if (kSplitTail && tiles == kNoPiece) continue;
        if (slot_item<kCtas, true>(p, list, claimed, rank, item)) return true;
      }
    } else {
      for (; slot < slots.end; slot += slots.step)
        if (slot_item<kCtas>(p, list, slot, rank, item)) {
          slot += slots.step;
          return true;
        }
      return false;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Producer: one elected lane of warp 0.

// Claims `stage` of the ring whose full/empty barriers start at index full0/empty0: waits until
// the consumers released it (producer parity) and announces the stage's bytes on its full
// barrier, whose address it returns for the loads.
__device__ __forceinline__ u32 claim_stage(u32 bars, u32 full0, u32 empty0, u32 stage, u32 empty_parity,
                                           u32 bytes) {
  wait_phase(bars + 8 * (empty0 + stage), empty_parity);
  mbarrier_arrive_expect_tx(bars + 8 * (full0 + stage), bytes);
  return bars + 8 * (full0 + stage);
}

// One K (or 16-bit V) tile, keys token .. token + BLOCK_N - 1 of a {d, head, token, batch} map:
// D / kSlabElements boxes of kSlabElements x BLOCK_N. In a CTA pair this CTA loads the slabs s
// with s % 2 == its rank, into both CTAs.
template <u32 kCtas>
__device__ __forceinline__ void load_kv_tile(const TsattnTmaDescriptor& map, u32 dst, u32 full_bar, int kv_head,
                                             int token, int batch) {
#pragma unroll
  for (int s = 0; s < kSlabs; ++s) {
    if constexpr (kCtas == 1)
      tma_load_4d(dst + s * kKvSlabBytes, map, full_bar, kSlabElements * s, kv_head, token, batch);
    else if (s % 2 == static_cast<int>(cluster_ctarank()))
      tma_load_4d_multicast(dst + s * kKvSlabBytes, map, full_bar, kSlabElements * s, kv_head, token, batch, 0x3);
  }
}

// One V^T tile (e4m3), columns column .. column + BLOCK_N - 1 of the {key, d, head, batch} map:
// kVtSlabs boxes of 128 keys x D rows (the last may reach past the tile; those keys go unused).
__device__ __forceinline__ void load_vt_tile(const TsattnTmaDescriptor& map, u32 dst, u32 full_bar, int kv_head,
                                             int column, int batch) {
#pragma unroll
  for (int s = 0; s < kVtSlabs; ++s) tma_load_4d(dst + s * kVtSlabBytes, map, full_bar, column + 128 * s, 0, kv_head, batch);
}

// The V^T column of key 0 of the item's request (prefill_params.h).
__device__ __forceinline__ int vt_first_column(const WorkItem& item) {
#if TSATTN_PACKED
  return TSATTN_VT_PACKED_START(item.extent.kv_begin, item.request);
#else
  (void)item;
  return 0;
#endif
}

template <u32 kCtas>
__device__ __forceinline__ void produce(const TsattnPrefillParams& params, const TsattnTensorMaps& maps, u32 smem,
                                        u32 bars) {
  const int lane = threadIdx.x % 32;
  const bool leader = elect_one_sync();
  const int group_size = params.group_size > 0 ? params.group_size : 1;
  u32 q_uses = 0, kv_uses = 0;
  ItemWalk<kCtas, true> walk(params);
  WorkItem item;
  while (walk.next(params, smem, bars, item)) {
    const KeyTiles tiles = walk.key_tiles(params, item, lane);
    if (tiles.num_tiles == 0) continue;  // the consumers write zeros without Q or K/V
    if (leader) {
      const int batch = batch_coord(item);
      const int q_token = item.extent.q_begin + item.q_tile * kBlockM;
      const u32 qb = q_uses % kQBuffers, q_full = bars + 8 * (kQFull + qb);
      wait_phase(bars + 8 * (kQEmpty + qb), ((q_uses / kQBuffers) & 1) ^ 1);
      mbarrier_arrive_expect_tx(q_full, kQBytes);
#pragma unroll
      for (int s = 0; s < kSlabs; ++s)
        tma_load_4d(smem + kQOffset + qb * kQBytes + s * kQSlabBytes, maps.q, q_full, kSlabElements * s, item.head,
                    q_token, batch);
      const int kv_head = item.head / group_size;
      for (int t = 0; t < tiles.num_tiles; ++t, ++kv_uses) {
        const u32 stage = kv_uses % kStages, parity = ((kv_uses / kStages) & 1) ^ 1;
        const int key = tiles.first_key + t * kBlockN;
        const u32 k_dst = smem + kKOffset + stage * kKStageBytes, v_dst = smem + kVOffset + stage * kVStageBytes;
        load_kv_tile<kCtas>(maps.k, k_dst, claim_stage(bars, kKFull, kKEmpty, stage, parity, kKStageBytes), kv_head,
                     item.extent.kv_begin + key, batch);
        const u32 v_full = claim_stage(bars, kVFull, kVEmpty, stage, parity, kVStageBytes);
        if constexpr (kE4m3Inputs)
          load_vt_tile(maps.v, v_dst, v_full, kv_head, vt_first_column(item) + key, batch);
        else
          load_kv_tile<kCtas>(maps.v, v_dst, v_full, kv_head, item.extent.kv_begin + key, batch);
      }
    } else {
      kv_uses += tiles.num_tiles;
    }
    ++q_uses;
    __syncwarp();  // the other lanes wait for the leader before the next item's shuffles
  }
}

// ---------------------------------------------------------------------------------------------
// Consumers.

// This thread's two rows within its warpgroup's 64: g and g + 8 of its warp's 16.
struct RowState {
  KeyRange range[2];
  float m[2];  // running max of raw scores
  float l[2];  // this thread's partial sum of p
};

// Sets scores of invisible keys to -inf. d[i] holds row g + 8 * ((i % 4) / 2), key
// n0 + 8 * (i / 4) + 2c + (i % 2).
__device__ __forceinline__ void apply_mask(float (&s)[kSAccum], const RowState& rows, int n0, int c) {
  const float ninf = neg_inf();
#pragma unroll
  for (int i = 0; i < kSAccum; ++i) {
    const int j = n0 + 8 * (i / 4) + 2 * c + (i % 2);
    if (!key_visible(rows.range[(i % 4) / 2], j)) s[i] = ninf;
  }
}

// Row maxima and row sums run as kChains independent chains per row, combined at the end: one
// chain of BLOCK_N / 4 dependent FMNMX or FADD instructions is latency-bound (ncu on the fp8 and
// bf16 D128 kernels: "wait", fixed-latency dependencies, was the largest stall reason).
constexpr int kChains = (kBlockN / 8) % 4 == 0 ? 4 : 2;
static_assert((kBlockN / 8) % kChains == 0, "BLOCK_N / 8 column pairs split evenly over the chains");

// The combination of kChains partial results, as a tree.
template <class Op>
__device__ __forceinline__ float combine_chains(const float (&part)[kChains], Op op) {
  if constexpr (kChains == 4)
    return op(op(part[0], part[1]), op(part[2], part[3]));
  else
    return op(part[0], part[1]);
}

// Lazy rescaling (FlashAttention-4's conditional rescaling), in the serial loop only: a row's
// running max m, and with it its O and l, moves only when the row sees a score more than
// 2^kRescaleLog2 above exp2's current offset; otherwise the stale m stays and p <= 2^8, within
// e4m3's and fp16's range (448, 65504) and far from fp32 overflow in O and l, which stay
// consistent because both use the same m. The serial loop rescales O between the softmax and the
// PV GEMM that waits for it, so skipping the D/2 multiplies there shortens every step: e4m3 D256
// dense S8K 1087-1165 -> 1254-1264 TFLOP/s, causal 1078 -> 1157 on the H200 (docs/PERF.md, sm90a
// v10; 16-bit D256 variable windows, the loop's other user, were not measured). In the overlapped
// loop the same change cost 6-8% (as in the v6 experiments), so it keeps the exact max. The
// price: a row's largest p is no longer exactly 1, so its e4m3 rounding shows (relative error
// 0.017 -> 0.021 at D256, within the contract's fp8 bound of 0.1).
constexpr float kRescaleLog2 = 8.0f;

// Online softmax of one key tile, first half: new running max, p = exp2(s * scale_log2 - m) in
// place, l updated. Returns true when this thread's O must be scaled by alpha (always without
// kLazy; with it, when some of its rows moved m), applied by rescale_output once the PV GEMM that
// is still accumulating into O has retired; a row that kept its m has alpha = 1. Fully masked
// rows so far (m = -inf) use offset 0, so p = exp2(-inf) = 0 and never exp2(-inf + inf) = NaN.
template <bool kLazy>
__device__ __forceinline__ bool softmax_step(float (&s)[kSAccum], RowState& rows, float scale_log2, float (&alpha)[2]) {
  const float ninf = neg_inf();
  float row_max[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Chains start from the tile's own scores (an fmaxf with -inf would not fold away: NaN rules).
    float part[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part[c] = fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
    part[0] = fmaxf(part[0], rows.m[h]);
#pragma unroll
    for (int j = kChains; j < kBlockN / 8; ++j)
      part[j % kChains] = fmaxf(part[j % kChains], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    row_max[h] = combine_chains(part, [](float a, float b) { return fmaxf(a, b); });
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // The four threads of a quad hold the same row.
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xFFFFFFFFu, row_max[h], 1));
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xFFFFFFFFu, row_max[h], 2));
  }
  bool rescale = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // m = -inf and a first visible key: +inf > threshold; still no key: NaN, false.
    const bool grow = !kLazy || (row_max[h] - rows.m[h]) * scale_log2 > kRescaleLog2;
    const float new_max = grow ? row_max[h] : rows.m[h];
    const float offset = new_max == ninf ? 0.0f : new_max * scale_log2;
    alpha[h] = grow ? fast_exp2(rows.m[h] * scale_log2 - offset) : 1.0f;
    rescale |= grow;
    rows.m[h] = new_max;
    float sum[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) sum[c] = 0.0f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = fast_exp2(fmaf(s[4 * j + 2 * h + e], scale_log2, -offset));
        s[4 * j + 2 * h + e] = pe;
        sum[j % kChains] += pe;
      }
    }
    rows.l[h] = rows.l[h] * alpha[h] + combine_chains(sum, [](float a, float b) { return a + b; });
  }
  return rescale;
}

__device__ __forceinline__ void rescale_output(float (&o)[kOAccum], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) o[4 * j + r] *= alpha[r / 2];
  }
}

// Operand descriptors are built once per item from addresses (q_desc, and stage 0's k_desc and
// v_desc in KeyLoop) and moved by byte offsets from there (smem_desc_advance). Rebuilding each
// k-step's descriptor from its address took 3 dependent integer instructions per wgmma: 65
// instructions between the e4m3 D128 GEMM issue's barriers, 32 after (+2% there; 16-bit
// unchanged; docs/PERF.md, sm90a v10).

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
    wgmma_rs<N, kE4m3>(w, a[kk], smem_desc_advance(v_desc, (kk / 4) * kVtSlabBytes + 32 * (kk % 4) + 128 * n0),
                       kk > 0);
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
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(addr));
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

// Staged output (kStagedOutput): the warp's 16 x 128 block of O goes to its rows of the O
// buffer with stmatrix (row r's 16-byte chunk k in slab k / 8 at chunk (k % 8) ^ (r % 8):
// conflict-free), then to global memory: through two TMA stores (kTmaOutput), or as 16-byte
// row chunks, two whole rows per instruction:
// 8 stores per thread that touch 4 cache lines each, where the pairs path issues 32 that touch
// 8 rows each (out rows lie a token stride apart). That is the item's end, where both consumers
// store at once before the next item starts: D128 +0.3-0.6% at S8K dense, causal +1.4%, ragged
// batches +3%, S1K-S2K up to +10% (docs/PERF.md, sm90a v13). Only the warp's own lanes touch its rows, so __syncwarp
// orders the writes before the reads, and the reads before the next item's writes. Those rows of
// a Q buffer (kOutputInQ) are the ones only this warp's S GEMMs read (an m64 wgmma's row r
// depends on A's row r alone), all retired by now; the last reads release the buffer for the
// item after next's Q. The host holds out to 16-byte alignment for these kernels
// (codegen/spec_table.hpp, output_store_bytes), which is also TMA's rule for out's map.
__device__ __forceinline__ void write_output_staged(const TsattnPrefillParams& params, const TsattnTensorMaps& maps,
                                                    const WorkItem& item, const float (&o)[kOAccum],
                                                    const float (&inv)[2], u32 o_buffer, int row_in_tile) {
  const int lane = threadIdx.x % 32;
  const int warp_row0 = row_in_tile - lane / 4;  // the warp's first row in the tile (a multiple of 8)
  if constexpr (kTmaOutput) {
    if (lane == 0) tma_store_wait<0, true>();  // the previous item's stores read this buffer
    __syncwarp();
  }
  // 16-byte chunk `chunk` (of 16) of the warp's row r.
  const auto chunk_addr = [&](int r, int chunk) {
    return o_buffer + (chunk / 8) * kOSlabBytes + (warp_row0 + r) * 128 + ((chunk % 8) ^ (r % 8)) * 16;
  };
  // stmatrix x4: matrices (h 0, group j), (h 1, j), (h 0, j + 1), (h 1, j + 1); lane t gives
  // row t % 8 of matrix t / 8.
  const int m = lane / 8, r = 8 * (m % 2) + lane % 8;
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; j += 2) {
    u32 v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int jj = j + q / 2, h = q % 2;
      v[q] = pack_pair<kOutputDtype>(o[4 * jj + 2 * h] * inv[h], o[4 * jj + 2 * h + 1] * inv[h]);
    }
    const u32 addr = chunk_addr(r, j + m / 2);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v[0]),
                 "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
  }
  if constexpr (kTmaOutput) {
    const int first_row = item.q_tile * kBlockM + warp_row0;
    if (!TSATTN_PACKED || first_row + 16 <= item.extent.q_len) {
      fence_proxy_async_shared();  // each lane's stmatrix before the stores read them
      __syncwarp();
      if (lane == 0) {
#pragma unroll
        for (int slab = 0; slab < 2; ++slab)
          tma_store_4d(maps.o, o_buffer + slab * kOSlabBytes + warp_row0 * 128, 64 * slab, item.head,
                       item.extent.q_begin + first_row, batch_coord(item));
        tma_store_commit();
      }
      return;
    }
  }
  __syncwarp();
  constexpr int kChunks = 16;  // 16-byte chunks per row
  constexpr int kRowsPerStore = 32 / kChunks;
#pragma unroll
  for (int i = 0; i < 16 / kRowsPerStore; ++i) {
    const int rr = kRowsPerStore * i + lane / kChunks, chunk = lane % kChunks;
    u32 w[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(chunk_addr(rr, chunk)));
    const int row = item.q_tile * kBlockM + warp_row0 + rr;
    if (row < item.extent.q_len) {
      char* const out_row = static_cast<char*>(params.out) +
                            token_offset(params.out_batch_stride, params.out_token_stride, params.out_head_stride,
                                         item.request, item.extent.q_begin + row, item.head) * 2;
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(out_row + 16 * chunk), "r"(w[0]), "r"(w[1]),
                   "r"(w[2]), "r"(w[3])
                   : "memory");
    }
  }
  __syncwarp();  // the next item's stmatrix waits for these reads
}

// Normalizes O and writes this thread's rows (below q_len): staged through o_buffer (above), or
// as pairs of the output dtype straight from the accumulators (without staging, and with
// kOutputInQ for an item without key tiles: its Q buffer may already be filling for a later item).
__device__ __forceinline__ void write_output(const TsattnPrefillParams& params, const TsattnTensorMaps& maps,
                                             const WorkItem& item, float (&o)[kOAccum], const RowState& rows,
                                             int row_in_tile, int c, bool staged, u32 o_buffer) {
  constexpr int kOutBytes = dtype_bytes(kOutputDtype);
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // The four threads of a quad hold the same row (all lanes shuffle; rows past q_len only
    // skip the stores below).
    float sum = rows.l[h];
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    // l == 0: the row saw no key (or every p underflowed): output 0, never 0/0.
    inv[h] = sum > 0.0f ? params.output_scale / sum : 0.0f;
  }
  if constexpr (kStagedOutput) {
    // e4m3 inputs: O's own buffer, free for every item (no second code path in the kernel: a
    // larger epilogue cost the e4m3 D128 loop 8% in ptxas's schedule; docs/PERF.md, sm90a v14).
    if (!kOutputInQ || staged) {
      write_output_staged(params, maps, item, o, inv, o_buffer, row_in_tile);
      return;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = item.q_tile * kBlockM + row_in_tile + 8 * h;
    if (row >= item.extent.q_len) continue;
    char* const out_row = static_cast<char*>(params.out) +
                          token_offset(params.out_batch_stride, params.out_token_stride, params.out_head_stride,
                                       item.request, item.extent.q_begin + row, item.head) * kOutBytes;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      const u32 v = pack_pair<kOutputDtype>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
      char* const dst = out_row + (8 * j + 2 * c) * kOutBytes;
      if constexpr (kOutBytes == 2)
        *reinterpret_cast<u32*>(dst) = v;
      else
        *reinterpret_cast<u16*>(dst) = static_cast<u16>(v);
    }
  }
}

// What the key-tile loops of one work item need (all uniform over the warpgroup except c and
// the warp's mask bounds).
struct KeyLoop {
  const TsattnPrefillParams& params;
  const WorkItem& item;
  KeyTiles tiles;
  u32 smem, bars;
  u64 q_desc;          // this warpgroup's 64 rows of Q (slab 0)
  u32 q_empty;         // the Q buffer's empty barrier
  u64 k_desc, v_desc;  // stage 0 of the K and V rings (slab 0)
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
// alpha. D256 keeps two chunks in flight (P 16 + 2 x 32 + O 128 registers), so one is added while
// the next runs; its variable windows, whose row ranges need more registers, take one at a time
// (two spilled 148 bytes).
constexpr int kPvChunkBuffers = kHeadDim == 256 && TSATTN_MASK != 2 ? 2 : 1;

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
// last (consume). Dense e4m3 D128 only: S8K +4%, S2K +6% on the H200, where causal B4 S4K lost 4%
// and the D256 kernels spilled (docs/PERF.md, sm90a v18).
constexpr bool kPingPong = kE4m3Inputs && kHeadDim == 128 && TSATTN_MASK == 0;
static_assert(!kPingPong || (kTwoLevel && !kOverlapSoftmax), "turns are taken in the two-level serial loop");

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
// every item, and a first softmax has no PV GEMM of its own to run under (ncu: 0.36 of a loop
// iteration per item; docs/PERF.md, sm90a v9).
// In the source the softmax sits between the two waits, under PV(t-1); in the SASS it does not:
// ptxas moves a wgmma wait to the top of its basic block, here right after the S(t) wait, so the
// softmax runs once both GEMMs retired, while the other warpgroup's GEMMs hold the tensor cores
// (nvdisasm of 4 configurations; ncu on bf16 D128 dense: 12% of the warps' stall samples sit on
// that wait; docs/PERF.md, v6 experiments). Forcing it under the PV (a basic-block boundary before
// the wait, P packed and O rescaled at the top of the next step) moved the 16-bit cases by -5%
// (1K window) to +3% and cost e4m3 D128 3-4%: not kept. Why ptxas moves it: the softmax writes p
// over the S accumulators, and ptxas keeps ordinary code from writing wgmma accumulators while a
// wgmma runs. A softmax that only reads S and writes P into a second A buffer keeps the wait after
// it, but cost e4m3 D128 12% (128-key steps, the most that fit; docs/PERF.md, sm90a v10).
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

// Split tail: this part's O, row maxima and row sums go to its partial buffer (laid out by consumer
// thread: value e of thread t at e * 256 + t, so both parts of a slot, which run the same thread
// layout, line up value by value, and each warp's store is one 128-byte line); the later of the
// two parts, counted per consumer warp on split_flags, adds the other's into its own registers: O
// and l scaled by exp2((m_part - m) * scale_log2) for the larger m, as the online softmax does
// between key tiles. Returns whether this warp writes the output (the later part). Each thread
// fences its stores before its warp's count, and the counter reads the other part only after it
// (the "last block" pattern); __ldcg reads from L2, where the other SM's stores are.
constexpr int kPartialValues = kOAccum + 4;  // per consumer thread: O, then m[2] and l[2]
constexpr int kSplitPartialBytes = kPartialValues * kConsumerThreads * 4;

// second_part: the part holds the slot's later key tiles; it is then the first piece of this
// walker's tail, at boundary walker, and otherwise its last, at boundary walker + 1.
template <u32 kCtas>
__device__ __forceinline__ bool merge_split_parts(const TsattnPrefillParams& p, bool second_part,
                                                  float (&o)[kOAccum], RowState& rows, int consumer_thread) {
  const int part = second_part ? 1 : 0;
  const i64 boundary = blockIdx.x / kCtas + (second_part ? 0 : 1);
  const i64 cta = boundary * kCtas + (kCtas == 1 ? 0 : cluster_ctarank());
  float* const partials = p.split_partials + consumer_thread;
  float* const mine = partials + (2 * cta + part) * kPartialValues * kConsumerThreads;
  const float* const other = partials + (2 * cta + (part ^ 1)) * kPartialValues * kConsumerThreads;
#pragma unroll
  for (int i = 0; i < kOAccum; ++i) mine[i * kConsumerThreads] = o[i];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mine[(kOAccum + h) * kConsumerThreads] = rows.m[h];
    mine[(kOAccum + 2 + h) * kConsumerThreads] = rows.l[h];
  }
  __threadfence();
  __syncwarp();
  int earlier = 0;  // parts of these rows counted before this one
  if (consumer_thread % 32 == 0)
    earlier = atomicAdd(p.split_flags + cta * (kConsumerThreads / 32) + consumer_thread / 32, 1);
  if (__shfl_sync(0xFFFFFFFFu, earlier, 0) == 0) return false;
  __threadfence();
  float mine_scale[2], other_scale[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float other_m = __ldcg(other + (kOAccum + h) * kConsumerThreads);
    const float other_l = __ldcg(other + (kOAccum + 2 + h) * kConsumerThreads);
    const float m = fmaxf(rows.m[h], other_m);
    const float offset = m == neg_inf() ? 0.0f : m * p.scale_log2;  // no key in either part: both scales 0
    mine_scale[h] = fast_exp2(rows.m[h] * p.scale_log2 - offset);
    other_scale[h] = fast_exp2(other_m * p.scale_log2 - offset);
    rows.l[h] = rows.l[h] * mine_scale[h] + other_l * other_scale[h];
    rows.m[h] = m;
  }
#pragma unroll
  for (int i = 0; i < kOAccum; ++i)
    o[i] = o[i] * mine_scale[(i % 4) / 2] + __ldcg(other + i * kConsumerThreads) * other_scale[(i % 4) / 2];
  return true;
}

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
      if (valid) {
        warp_full_from = max(warp_full_from, rows.range[h].lo);
        warp_full_to = min(warp_full_to, rows.range[h].hi);
      }
    }
    warp_full_from = warp_max(warp_full_from);
    warp_full_to = warp_min(warp_full_to);

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
      const KeyLoop loop{params, item, tiles, smem, bars, q_desc, bars + 8 * (kQEmpty + qb), k_desc, v_desc,
                         warp_full_from, warp_full_to, c, consumer};
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
    if (writes)
      write_output(params, maps, item, o, rows, row_in_tile, c, staged, kOutputInQ ? q_buffer : smem + kOOffset);
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

// Launch shape, read by the host with cuModuleGetGlobal after loading the module.
extern "C" __device__ const int tsattn_dynamic_smem_bytes = tsattn_dev::sm90a::kSmemBytes;
extern "C" __device__ const int tsattn_threads_per_cta = tsattn_dev::sm90a::kThreads;
extern "C" __device__ const int tsattn_block_m = TSATTN_BLOCK_M;
// 1: the kernels decode the work list in chunks of params.tiles_per_chunk tiles; 0: one tile per
// chunk whatever the params say (kChunkedOrder), and the host then plans no chunks.
extern "C" __device__ const int tsattn_chunked_order = tsattn_dev::sm90a::kChunkedOrder ? 1 : 0;
// 1: the kernels claim slots from params.work_counter when it is set (kDynamicOrder).
extern "C" __device__ const int tsattn_dynamic_order = tsattn_dev::sm90a::kDynamicOrder ? 1 : 0;
// The bytes of one part's buffer in params.split_partials when the kernels can split their tail
// (kSplitTail), else 0.
extern "C" __device__ const int tsattn_split_partial_bytes =
    tsattn_dev::sm90a::kSplitTail ? tsattn_dev::sm90a::kSplitPartialBytes : 0;
// 2: the module also has TSATTN_KERNEL_NAME_pairs, for launches in clusters of 2 CTAs.
extern "C" __device__ const int tsattn_max_cluster_size = tsattn_dev::sm90a::kPairable ? 2 : 1;
// 1: that kernel also pairs along query tiles (params.pair_tiles; plan/cta_pairs.hpp).
extern "C" __device__ const int tsattn_pairs_along_tiles = tsattn_dev::sm90a::kTilePairable ? 1 : 0;

extern "C" __global__ void __launch_bounds__(384, 1)
    TSATTN_KERNEL_NAME(const __grid_constant__ TsattnPrefillParams params,
                       const __grid_constant__ TsattnTensorMaps maps) {
  tsattn_dev::sm90a::run_prefill<1>(params, maps);
}

#define TSATTN_SM90A_CONCAT_(a, b) a##b
#define TSATTN_SM90A_CONCAT(a, b) TSATTN_SM90A_CONCAT_(a, b)
#if TSATTN_INPUT_DTYPE != 2
// The CTA-pairs kernel (kPairable: 16-bit inputs). The host launches it only with a cluster
// dimension of 2 (cuLaunchKernelEx); launched without, every CTA would wait for a missing peer.
extern "C" __global__ void __launch_bounds__(384, 1)
    TSATTN_SM90A_CONCAT(TSATTN_KERNEL_NAME, _pairs)(const __grid_constant__ TsattnPrefillParams params,
                                                     const __grid_constant__ TsattnTensorMaps maps) {
  static_assert(tsattn_dev::sm90a::kPairable, "pairs split 16-bit K/V tiles by slab");
  tsattn_dev::sm90a::run_prefill<2>(params, maps);
}
#endif

#endif  // TSATTN_SM90A_PREFILL_SM90A_CUH
