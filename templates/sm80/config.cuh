// sm80/config.cuh - the sm80 family's specialization: what the generated #defines pin, the
// derived tile shape, and the one place the shared-memory layout is computed.
//
// The generated translation unit defines TSATTN_HEAD_DIM, TSATTN_INPUT_DTYPE,
// TSATTN_OUTPUT_DTYPE (0 float16, 1 bfloat16, 2 float8_e4m3fn), TSATTN_MASK, TSATTN_WINDOW,
// TSATTN_PACKED, TSATTN_LSE, TSATTN_BLOCK_M, TSATTN_BLOCK_N and TSATTN_NUM_WARPS (src/codegen picks the
// tile from its table; the static_asserts below say which tiles this kernel can run). The host
// reads the resulting launch shape back from the module (tsattn_dynamic_smem_bytes,
// tsattn_threads_per_cta, tsattn_block_m), so nothing here is duplicated on the host.
#ifndef TSATTN_SM80_CONFIG_CUH
#define TSATTN_SM80_CONFIG_CUH

#include "common/prelude.cuh"

#if !defined(TSATTN_HEAD_DIM) || !defined(TSATTN_INPUT_DTYPE) || !defined(TSATTN_OUTPUT_DTYPE) || \
    !defined(TSATTN_LSE) || !defined(TSATTN_BLOCK_M) || !defined(TSATTN_BLOCK_N) || !defined(TSATTN_NUM_WARPS)
#error \
    "the generated source must define TSATTN_HEAD_DIM, TSATTN_{INPUT,OUTPUT}_DTYPE, TSATTN_LSE, TSATTN_BLOCK_{M,N}, TSATTN_NUM_WARPS"
#endif

namespace tsattn_dev {
namespace sm80 {

constexpr int kHeadDim = TSATTN_HEAD_DIM;
constexpr int kInputDtype = TSATTN_INPUT_DTYPE;
constexpr int kOutputDtype = TSATTN_OUTPUT_DTYPE;
constexpr int kBlockM = TSATTN_BLOCK_M;
constexpr int kBlockN = TSATTN_BLOCK_N;
constexpr int kWarps = TSATTN_NUM_WARPS;
constexpr int kThreads = kWarps * 32;

static_assert(kHeadDim == 128 || kHeadDim == 256, "head dim 128 or 256");
static_assert(kInputDtype >= kFloat16 && kInputDtype <= kE4m3, "input dtype code 0, 1 or 2");
static_assert(kOutputDtype >= kFloat16 && kOutputDtype <= kE4m3, "output dtype code 0, 1 or 2");

// Each warp owns kRowsPerWarp consecutive query rows as kMTiles mma tiles of 16 rows; all
// warps walk the same key tiles. More rows per warp reuse each K/V fragment read from shared
// memory for more MMAs, at the price of kMTiles * (D/2 + BLOCK_N/2) accumulator registers.
static_assert(kBlockM % (16 * kWarps) == 0, "every warp owns whole 16-row mma tiles");
constexpr int kRowsPerWarp = kBlockM / kWarps;
constexpr int kMTiles = kRowsPerWarp / 16;
static_assert(kMTiles >= 1 && kMTiles <= 2, "1 or 2 mma row tiles per warp (registers)");
static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 128, "key tile: multiples of 16");
static_assert(kWarps >= 1 && kWarps <= 16, "1..16 warps");
// Tiles the table in src/codegen should pick (checked: 0 spill bytes and 0 stack on sm_80 and
// sm_90a for all 9 dtype pairs x 4 masks x 2 layouts, and by the CPU emulation):
//   D128: 128 x 64, 8 warps (16 rows per warp): O is 64 and S 32 fp32 registers per thread;
//         ~175-210 registers, 99,584 B shared memory (fits even the 99 KB of sm_86/89/120).
//         FlashAttention-2's 128 x 64 with 4 warps (32 rows per warp) spills here (~56 B):
//         this kernel re-reads Q fragments from shared memory and keeps no Q in registers,
//         but the 2 x (64 + 32) accumulators plus addressing exceed 255 registers.
//   D256: 128 x 32, 8 warps: O alone is 128 registers per thread, so the key tile stays small
//         (S is 16); ~240-255 registers with no spills (about 200 are truly needed: it still
//         compiles spill-free at __maxnreg__(216)), 132,352 B shared memory (A100 and H100;
//         the 99 KB parts need 64 x 32 with 4 warps, 99,008 B). 128 x 64 x 8 also compiles
//         spill-free but needs 197,888 B (H100/H200 only).

// The MMA runs in f16 for float16 and e4m3 inputs (every e4m3 value is exact in f16, so e4m3
// tiles are widened to f16 in shared memory once per tile) and in bf16 for bfloat16 inputs.
constexpr bool kFp8Input = kInputDtype == kE4m3;
constexpr bool kBf16Mma = kInputDtype == kBfloat16;
constexpr int kInBytes = dtype_bytes(kInputDtype);
constexpr int kOutBytes = dtype_bytes(kOutputDtype);

// Shared-memory tiles hold 16-bit elements, one row of D per tile row (256 or 512 bytes), in
// 16-byte chunks. Chunk c of row r sits at chunk position c ^ (r % 8): the eight rows an
// ldmatrix phase reads hit eight different 16-byte bank groups, so ldmatrix is conflict-free
// without padding (row pitches are multiples of 128 bytes).
constexpr int kRowBytes = kHeadDim * 2;
constexpr int kRowChunks = kRowBytes / 16;
static_assert(kRowChunks % 8 == 0, "the XOR swizzle needs rows of at least 8 chunks");

__device__ __forceinline__ u32 swizzled_offset(int row, int chunk) {
  return static_cast<u32>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// Per-lane ldmatrix addressing. A lane reads chunk 2k + c0 (c0 = 0 or 1, fixed per lane) of
// its row at every k step, in rows that differ by multiples of 8 (so row % 8 is fixed too).
// With lane_base = tile + row * kRowBytes + ((c0 ^ (row % 8)) << 4) and a 128-byte aligned
// tile, that chunk sits at (lane_base ^ ((k % 4) << 5)) + 128 (k / 4): 2k + c0 is
// 8 (k / 4) + (2 (k % 4) | c0), the XOR flips only address bits 5-6 (bits 0-6 of lane_base are
// the swizzled chunk alone, as tile and row * kRowBytes have them clear), and k / 4 becomes an
// immediate. One register per operand instead of one per k step.
__device__ __forceinline__ u32 lane_offset(int row, int c0) {
  return static_cast<u32>(row * kRowBytes + ((c0 ^ (row & 7)) << 4));
}

__device__ __forceinline__ u32 fragment_address(u32 lane_base, int k) {
  return (lane_base ^ static_cast<u32>((k & 3) << 5)) + static_cast<u32>((k >> 2) << 7);
}

// ---------------------------------------------------------------------------------------------
// Shared-memory layout (byte offsets from the dynamic shared-memory base, all 128-aligned).
//   Q        [BLOCK_M][D] 16-bit, swizzled; reused per warp (its own rows) to stage O for
//            coalesced 16-byte stores in the epilogue.
//   K, V     [BLOCK_N][D] 16-bit, swizzled: 2 stages each (cp.async double buffering) for
//            16-bit inputs; 1 stage each for e4m3 inputs, whose double-buffered cp.async
//            landing zone is the raw byte tiles below (widened into K/V once a tile is in).
//   Kraw,Vraw [BLOCK_N][D] bytes, 2 stages each, e4m3 inputs only, unswizzled.
//   ranges   [BLOCK_M] x (lo, hi): each row's visible keys for the current work item (masking).
//   reduce   4 ints per warp: the CTA-wide key range of a work item (see prefill_sm80.cuh).
// The kernel rounds the dynamic shared-memory base up to 128 bytes itself (fragment_address
// needs 128-byte aligned tiles), hence the 128 bytes of slack in kSmemBytes.
constexpr int kQBytes = kBlockM * kRowBytes;
constexpr int kTileBytes = kBlockN * kRowBytes;
constexpr int kRawTileBytes = kBlockN * kHeadDim;
constexpr int kStages16 = kFp8Input ? 1 : 2;
constexpr int kRawStages = kFp8Input ? 2 : 0;

constexpr int kQOffset = 0;
constexpr int kKOffset = kQOffset + kQBytes;
constexpr int kVOffset = kKOffset + kStages16 * kTileBytes;
constexpr int kRawKOffset = kVOffset + kStages16 * kTileBytes;
constexpr int kRawVOffset = kRawKOffset + kRawStages * kRawTileBytes;
constexpr int kRangeOffset = kRawVOffset + kRawStages * kRawTileBytes;
constexpr int kReduceOffset = kRangeOffset + kBlockM * 8;
constexpr int kReduceBytes = kWarps * 4 * 4;
constexpr int kAlignSlack = 128;
constexpr int kSmemBytes = kReduceOffset + kReduceBytes + kAlignSlack;

static_assert(kQBytes % 128 == 0 && kTileBytes % 128 == 0 && kRawTileBytes % 128 == 0,
              "every region stays 128-byte aligned");
// 227 KB is the per-block opt-in maximum on H100/H200. A100 allows 163 KB and sm_86/89/120
// 99 KB: the host must compare this module's tsattn_dynamic_smem_bytes with the device's
// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN before launching.
static_assert(kSmemBytes <= 227 * 1024, "shared memory above the 227 KB per-block maximum");

// The O staging in the epilogue writes each warp's rows in the output dtype over its own Q rows.
static_assert(kHeadDim * kOutBytes <= kRowBytes, "an output row fits in a Q row");
constexpr int kOutRowChunks = kHeadDim * kOutBytes / 16;
static_assert(kOutRowChunks % 8 == 0, "output rows are whole swizzle groups of 8 chunks");

}  // namespace sm80
}  // namespace tsattn_dev

#endif  // TSATTN_SM80_CONFIG_CUH
