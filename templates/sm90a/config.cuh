// sm90a/config.cuh - the kernel's compile-time shape: the spec's axes from the generated source,
// every setting from traits_for() (sm90a/kernel_traits.h, which the host calls too), and the
// sizes, shared-memory offsets and barrier indices derived from them.
#ifndef TSATTN_SM90A_CONFIG_CUH
#define TSATTN_SM90A_CONFIG_CUH

#include "common/prelude.cuh"
#include "prefill_params.h"
#include "sm90a/kernel_traits.h"

#if !defined(TSATTN_KERNEL_NAME) || !defined(TSATTN_HEAD_DIM) || !defined(TSATTN_INPUT_DTYPE) ||                    \
    !defined(TSATTN_OUTPUT_DTYPE) || !defined(TSATTN_MASK) || !defined(TSATTN_WINDOW) || !defined(TSATTN_PACKED) || \
    !defined(TSATTN_LSE) || !defined(TSATTN_SHORT_KEYS) || !defined(TSATTN_PAGED_KV) || !defined(TSATTN_BLOCK_M) || \
    !defined(TSATTN_BLOCK_N) || !defined(TSATTN_NUM_WARPS)
#error \
    "the generated source must define TSATTN_KERNEL_NAME, TSATTN_HEAD_DIM, TSATTN_{INPUT,OUTPUT}_DTYPE, TSATTN_MASK, TSATTN_WINDOW, TSATTN_PACKED, TSATTN_LSE, TSATTN_SHORT_KEYS, TSATTN_PAGED_KV, TSATTN_BLOCK_{M,N}, TSATTN_NUM_WARPS"
#endif

static_assert(TSATTN_PARAMS_VERSION == 8, "sm90a kernel written against TsattnPrefillParams v8");

namespace tsattn_dev {
namespace sm90a {

constexpr Traits kTraits = traits_for({TSATTN_HEAD_DIM, TSATTN_INPUT_DTYPE, TSATTN_OUTPUT_DTYPE, TSATTN_MASK,
                                       TSATTN_WINDOW != 0, TSATTN_PACKED != 0, TSATTN_SHORT_KEYS != 0});

constexpr int kHeadDim = TSATTN_HEAD_DIM;
constexpr int kInputDtype = TSATTN_INPUT_DTYPE;
constexpr int kOutputDtype = TSATTN_OUTPUT_DTYPE;
constexpr int kMask = TSATTN_MASK;
constexpr int kBlockM = kTraits.block_m;
constexpr int kBlockN = kTraits.block_n;
constexpr int kThreads = kTraits.num_warps * 32;
constexpr int kConsumerThreads = 256;

static_assert(kHeadDim == 128 || kHeadDim == 256, "head dim 128 or 256");
static_assert(kInputDtype >= kFloat16 && kInputDtype <= kE4m3, "input dtype code 0, 1 or 2");
static_assert(kOutputDtype >= kFloat16 && kOutputDtype <= kE4m3, "output dtype code 0, 1 or 2");
static_assert(kBlockM == TSATTN_BLOCK_M && kBlockN == TSATTN_BLOCK_N && kThreads == TSATTN_NUM_WARPS * 32,
              "the generated tile is traits_for()'s");
static_assert(kBlockM == 128 && kThreads == 384, "one producer and two consumer warpgroups of 64 rows");
// e4m3 inputs: 8-bit wgmmas (k32) read both operands K-major, so O += P V reads V^T, written by
// tsattn_transpose_v (sm90a/transpose_v.cuh) and loaded in slabs of 128 keys x D rows.
constexpr bool kE4m3Inputs = kInputDtype == kE4m3;
static_assert(kE4m3Inputs ? (kBlockN == 64 || kBlockN == 128 || kBlockN == 192 || kBlockN == 256)
                          : (kBlockN == 64 || kBlockN == 80 || kBlockN == 128 || kBlockN == 160 || kBlockN == 256),
              "BLOCK_N is a wgmma N that sm90a/wgmma.cuh instantiates (e4m3: whole 32-key V^T groups)");

// The settings (kernel_traits.h says what each does and why).
constexpr bool kTwoLevel = kTraits.two_level;
constexpr bool kOverlapSoftmax = kTraits.overlap_softmax;
constexpr bool kPingPong = kTraits.ping_pong;
constexpr bool kStagedOutput = kTraits.staged_output;
constexpr bool kOutputInQ = kTraits.output_in_q;
constexpr bool kTmaOutput = kTraits.tma_output;
constexpr bool kQuadStores = kTraits.quad_stores;
constexpr bool kChunkedOrder = kTraits.chunked_order;
constexpr bool kDynamicOrder = kTraits.dynamic_order;
constexpr bool kSplitTail = kTraits.split_tail;
constexpr bool kNarrowWalk = kTraits.narrow_walk;
constexpr bool kFastDecode = kTraits.fast_decode;
constexpr bool kPairable = kTraits.pairable;
constexpr bool kTilePairable = kTraits.tile_pairable;
constexpr int kProducerRegisters = kTraits.producer_registers;
constexpr int kConsumerRegisters = kTraits.consumer_registers;
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= 384 * 168, "the CTA's launch registers");
static_assert(!kPingPong || (kTwoLevel && !kOverlapSoftmax), "turns are taken in the two-level serial loop");
static_assert(!kStagedOutput || (kHeadDim == 128 && dtype_bytes(kOutputDtype) == 2),
              "staged output: 16-bit rows of 128 elements (32 KB for the 8 consumer warps)");
static_assert(!kTmaOutput || (kStagedOutput && !kE4m3Inputs && !kOutputInQ),
              "TMA output stores staged 16-bit-input tiles from an O buffer of their own");
static_assert(!kQuadStores || (!kStagedOutput && dtype_bytes(kOutputDtype) == 2 && kHeadDim % 32 == 0),
              "quad stores: 16-bit outputs from registers, in blocks of 32 columns");
static_assert(!kPairable || !kE4m3Inputs, "pairs split 16-bit K/V tiles by slab");
// K and V read from page pools (TsattnPageTable): packed queries, 16-bit K and V tiles.
constexpr bool kPagedKv = TSATTN_PAGED_KV != 0;
static_assert(!kPagedKv || (TSATTN_PACKED != 0 && !kE4m3Inputs), "paged kernels: packed layout, 16-bit inputs");
// Paged K/V tiles load one box per page (TsattnPageTable): 128-key tiles are whole pages of every
// size (16 to 128), at most 8, one per lane of the producer warp.
static_assert(!kPagedKv || kBlockN == 128, "paged kernels take 128-key tiles");

// Tiles in shared memory. A slab row is 128 bytes (the swizzle span): 64 16-bit or 128 e4m3
// elements of the head dim; Q and K tiles are kSlabs slabs of their rows.
constexpr int kSlabElements = 128 / dtype_bytes(kInputDtype);
constexpr int kSlabs = kHeadDim / kSlabElements;      // slabs per Q or K row
constexpr int kMmaK = 32 / dtype_bytes(kInputDtype);  // wgmma K: 16, or 32 for e4m3 (32 bytes either way)
constexpr u32 kQSlabBytes = kBlockM * 128;
constexpr u32 kQBytes = kSlabs * kQSlabBytes;
constexpr u32 kKvSlabBytes = kBlockN * 128;
// V^T (e4m3): slab s holds keys 128s .. 128s + 127 of all D rows, loaded as one 128-key box. A
// BLOCK_N that is not a multiple of 128 loads the last slab whole and the PV GEMM reads only its
// first BLOCK_N % 128 keys.
constexpr int kVtSlabs = (kBlockN + 127) / 128;
constexpr u32 kVtSlabBytes = kHeadDim * 128;
// Bytes of one stage of the K ring and of the V ring (also each stage's TMA transaction count).
constexpr u32 kKStageBytes = kSlabs * kKvSlabBytes;
constexpr u32 kVStageBytes = kE4m3Inputs ? kVtSlabs * kVtSlabBytes : kKStageBytes;
constexpr int kStages = kTraits.stages;
// The staged O of the 8 consumer warps: a 16-bit D128 Q tile's layout (two slabs of 128 rows x 128
// bytes, a warp's rows where its Q rows are), in the Q buffer (kOutputInQ) or its own.
constexpr u32 kOSlabBytes = kBlockM * 128;
constexpr u32 kOBytes = 2 * kOSlabBytes;
static_assert(!kOutputInQ || kOBytes == kQBytes, "O takes the place of a 16-bit D128 Q tile");
constexpr int kQBuffers = kOutputInQ ? 2 : 1;
constexpr u32 kSlotRing = 2;  // entries of the scheduler's ring (kDynamicOrder)
// A ring entry: the slot; with kSplitTail also its key tiles.
constexpr u32 kSlotEntryBytes = kSplitTail ? 8 : 4;

// The shared-memory layout (kernel_traits.h computes it for the host as well).
constexpr u32 kQOffset = kTraits.smem.q;
constexpr u32 kKOffset = kTraits.smem.k;
constexpr u32 kVOffset = kTraits.smem.v;
constexpr u32 kOOffset = kTraits.smem.o;  // O's own buffer (unused with kOutputInQ)
constexpr u32 kBarrierOffset = kTraits.smem.barriers;
constexpr u32 kSlotRingOffset = kTraits.smem.slot_ring;
constexpr u32 kSmemBytes = kTraits.smem.bytes;
static_assert(kKOffset == kQOffset + kQBuffers * kQBytes && kVOffset == kKOffset + kStages * kKStageBytes &&
                  kOOffset == kVOffset + kStages * kVStageBytes &&
                  kBarrierOffset == kOOffset + (kStagedOutput && !kOutputInQ ? kOBytes : 0),
              "the tiles lie back to back, as the kernel's sizes say");
static_assert(kSmemBytes == 1024 + kSlotRingOffset + (kDynamicOrder ? kSlotEntryBytes * kSlotRing : 0),
              "the slot ring ends the layout; 1024 bytes of slack align its base");
static_assert(kSmemBytes <= 232448, "fits the 227 KB a Hopper CTA may use");

// mbarriers, by index (barriers.cuh names them): q_full[2], q_empty[2] (the second pair unused
// with one Q buffer), k_full[2], k_empty[2], v_full[2], v_empty[2]; with kDynamicOrder
// slot_full[2], slot_empty[2], slot_request.
constexpr u32 kQFull = 0, kQEmpty = 2, kKFull = 4, kKEmpty = 6, kVFull = 8, kVEmpty = 10;
constexpr u32 kSlotFull = 12, kSlotEmpty = 14, kSlotRequest = 16;
constexpr u32 kNumBarriers = kDynamicOrder ? 17 : 12;
static_assert(kSlotRingOffset == kBarrierOffset + 8 * kNumBarriers, "the barriers sit before the slot ring");

constexpr int kSAccum = kBlockN / 2;   // S accumulators per thread (m64 x BLOCK_N)
constexpr int kOAccum = kHeadDim / 2;  // O accumulators per thread (m64 x D)
// Columns of the two-level working accumulator (kTwoLevel), and chunks of it in flight.
constexpr int kPvChunkN = kTraits.pv_chunk_n;
constexpr int kPvChunkBuffers = kTraits.pv_chunk_buffers;
constexpr int kPSteps = kBlockN / kMmaK;  // k-steps of the PV GEMM

// Split tail: per consumer thread, O, then m[2] and l[2] (epilogue.cuh, merge_split_parts).
constexpr int kPartialValues = kOAccum + 4;
constexpr int kSplitPartialBytes = kPartialValues * kConsumerThreads * 4;
static_assert(kTraits.split_partial_bytes == (kSplitTail ? kSplitPartialBytes : 0), "one part's buffer");

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_CONFIG_CUH
