// sm80/tile_io.cuh - moving Q/K/V tiles into shared memory and O out of it, for the whole CTA
// (loads) or one warp (the epilogue).
//
// A tile is kRows consecutive tokens of one head. `row0` is the tile's first row inside the
// request, `len` the request's row count, and `head_base` points at row 0 of the request for
// this head (base + b*batch_stride + token_begin*token_stride + head*head_stride). Rows at or past
// `len` are never read: cp.async gets source size 0 (zero fill) and synchronous loads store
// zeros, so tails of any size (1, 17, 127, 129, ...) are safe. Zero K rows give finite scores
// that the mask discards, and zero V rows contribute 0 * p, never NaN from stale shared memory.
#ifndef TSATTN_SM80_TILE_IO_CUH
#define TSATTN_SM80_TILE_IO_CUH

#include "common/mma_sm80.cuh"
#include "sm80/config.cuh"

namespace tsattn_dev {
namespace sm80 {

// Thread roles of a tile load: thread `tid` copies 16-byte chunk (tid % chunks per row) of rows
// tid / chunks-per-row + i * kRowsPerPass, so each thread keeps one source pointer per tensor
// and steps it by whole rows (few live registers while the previous tile is being computed).
template <int kElemBytes>
struct RowCopyShape {
  static constexpr int kChunksPerRow = kHeadDim * kElemBytes / 16;
  static_assert(kThreads % kChunksPerRow == 0, "a CTA copies whole rows per pass");
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
};

// The source pointer of this thread's chunk in row 0 of the request (head_base as defined at
// the top of this file).
template <int kElemBytes>
__device__ __forceinline__ const char* row_copy_source(const char* head_base, i64 row_stride_bytes) {
  using Shape = RowCopyShape<kElemBytes>;
  return head_base + static_cast<i64>(threadIdx.x / Shape::kChunksPerRow) * row_stride_bytes +
         (threadIdx.x % Shape::kChunksPerRow) * 16;
}

// kRows rows starting at request row row0 -> shared memory, asynchronously (the caller commits
// the group). 16-bit elements land in the swizzled layout, e4m3 bytes in a plain [kRows][D]
// staging tile. `source` is row_copy_source(...) of the same tensor; `fallback` is any valid
// address (never read: a zero-fill copy reads nothing).
template <int kRows, int kElemBytes>
__device__ __forceinline__ void load_rows_async(u32 smem, const char* source, const char* fallback,
                                                i64 row_stride_bytes, int row0, int len) {
  using Shape = RowCopyShape<kElemBytes>;
  static_assert(kRows % Shape::kRowsPerPass == 0, "a tile is whole passes");
  const int chunk = threadIdx.x % Shape::kChunksPerRow;
  const int row_t = threadIdx.x / Shape::kChunksPerRow;
  const char* src = source + static_cast<i64>(row0) * row_stride_bytes;
#pragma unroll
  for (int i = 0; i < kRows / Shape::kRowsPerPass; ++i) {
    const int r = row_t + i * Shape::kRowsPerPass;
    const bool valid = row0 + r < len;
    const u32 dst =
        kElemBytes == 2 ? swizzled_offset(r, chunk) : static_cast<u32>((r * Shape::kChunksPerRow + chunk) * 16);
    cp_async_16(smem + dst, valid ? src : fallback, valid);
    src += Shape::kRowsPerPass * row_stride_bytes;
  }
}

// Writes 16 e4m3 values (raw chunk `chunk` of row r) as f16 into the swizzled tile.
__device__ __forceinline__ void store_widened_chunk(u32 tile, int r, int chunk, const u32 (&raw)[4]) {
  u32 h[8];
  e4m3x16_to_f16x16(raw, h);
  st_shared_v4(tile + swizzled_offset(r, 2 * chunk), h[0], h[1], h[2], h[3]);
  st_shared_v4(tile + swizzled_offset(r, 2 * chunk + 1), h[4], h[5], h[6], h[7]);
}

// Raw e4m3 tile -> swizzled f16 tile (whole CTA; the caller synchronizes around it).
template <int kRows>
__device__ __forceinline__ void widen_tile8(u32 raw_tile, u32 tile) {
  constexpr int kRawRowChunks = kHeadDim / 16;
  constexpr int kChunks = kRows * kRawRowChunks;
#pragma unroll 2
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    u32 raw[4];
    ld_shared_v4(raw_tile + static_cast<u32>(c * 16), raw[0], raw[1], raw[2], raw[3]);
    store_widened_chunk(tile, c / kRawRowChunks, c % kRawRowChunks, raw);
  }
}

// e4m3 rows -> swizzled f16 tile through registers (used for Q: once per tile and head, so
// it needs no staging buffer). Visible to other threads after the caller's __syncthreads.
template <int kRows>
__device__ __forceinline__ void load_tile8_widen_sync(u32 tile, const char* head_base, i64 row_stride_bytes, int row0,
                                                      int len) {
  constexpr int kRawRowChunks = kHeadDim / 16;
  constexpr int kChunks = kRows * kRawRowChunks;
#pragma unroll 2
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    const int r = c / kRawRowChunks;
    const int chunk = c % kRawRowChunks;
    u32 raw[4] = {0u, 0u, 0u, 0u};
    if (row0 + r < len) ld_global_nc_v4(head_base + static_cast<i64>(row0 + r) * row_stride_bytes + chunk * 16, raw);
    store_widened_chunk(tile, r, chunk, raw);
  }
}

// Epilogue staging: element `col` of row `row` (CTA-tile row) of O, in the output dtype, inside
// the warp's own Q rows. Output rows are kOutRowChunks 16-byte chunks, swizzled like Q.
__device__ __forceinline__ u32 out_stage_offset(int row, int col) {
  const int byte = col * kOutBytes;
  return static_cast<u32>(row * kRowBytes + (((byte >> 4) ^ (row & 7)) << 4) + (byte & 15));
}

// One warp copies its staged rows [row_begin, row_begin + kRowsPerWarp) to global memory with
// 16-byte stores, skipping rows at or past `len` (tile_row0 is the CTA tile's first row).
__device__ __forceinline__ void store_out_rows(u32 q_smem, char* head_base, i64 row_stride_bytes, int tile_row0,
                                               int row_begin, int len, int lane) {
  constexpr int kChunks = kRowsPerWarp * kOutRowChunks;
#pragma unroll 4
  for (int c = lane; c < kChunks; c += 32) {
    const int row = row_begin + c / kOutRowChunks;
    const int chunk = c % kOutRowChunks;
    if (tile_row0 + row < len) {
      u32 a, b, d, e;
      ld_shared_v4(q_smem + static_cast<u32>(row * kRowBytes + ((chunk ^ (row & 7)) << 4)), a, b, d, e);
      st_global_v4(head_base + static_cast<i64>(tile_row0 + row) * row_stride_bytes + chunk * 16, a, b, d, e);
    }
  }
}

}  // namespace sm80
}  // namespace tsattn_dev

#endif  // TSATTN_SM80_TILE_IO_CUH
