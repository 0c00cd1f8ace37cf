// sm90a/epilogue.cuh - the end of a work item: O normalized and written (through shared memory
// and TMA stores, or from registers), and the merge of a split slot's two parts.
#ifndef TSATTN_SM90A_EPILOGUE_CUH
#define TSATTN_SM90A_EPILOGUE_CUH

#include "sm90a/softmax.cuh"
#include "sm90a/tile_scheduler.cuh"

namespace tsattn_dev {
namespace sm90a {

// Staged output (kStagedOutput): the warp's 16 x 128 block of O goes to its rows of the O
// buffer with stmatrix (row r's 16-byte chunk k in slab k / 8 at chunk (k % 8) ^ (r % 8):
// conflict-free), then to global memory: through two TMA stores (kTmaOutput), or as 16-byte
// row chunks, two whole rows per instruction:
// 8 stores per thread that touch 4 cache lines each, where the pairs path issues 32 that touch
// 8 rows each (out rows lie a token stride apart). That is the item's end, where both consumers
// store at once before the next item starts. Only the warp's own lanes touch its rows, so __syncwarp
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
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
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
  // Lane l stores 16-byte chunk l % 16 of rows first_row, first_row + 2, ...: one row address,
  // then a step of two token strides per store (the rows of one request and head).
  constexpr int kChunks = 16;  // 16-byte chunks per row
  constexpr int kRowsPerStore = 32 / kChunks;
  const int chunk = lane % kChunks, first_row = item.q_tile * kBlockM + warp_row0 + lane / kChunks;
  const u64 first_address = reinterpret_cast<u64>(params.out) + 16 * chunk +
                            2 * token_offset(params.out_batch_stride, params.out_token_stride, params.out_head_stride,
                                             item.request, item.extent.q_begin + first_row, item.head);
  const u64 step = static_cast<u64>(2 * kRowsPerStore) * static_cast<u64>(params.out_token_stride);
#pragma unroll
  for (int i = 0; i < 16 / kRowsPerStore; ++i) {
    const int rr = kRowsPerStore * i + lane / kChunks;
    u32 w[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(chunk_addr(rr, chunk)));
    // Predicated rather than branched: rows at or past q_len are not written.
    asm volatile("{\n.reg .pred p;\nsetp.lt.s32 p, %5, %6;\n@p st.global.v4.u32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(
                     first_address + step * i),
                 "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(first_row + kRowsPerStore * i), "r"(item.extent.q_len)
                 : "memory");
  }
  __syncwarp();  // the next item's stmatrix waits for these reads
}

// Register stores as 16-byte chunks (kQuadStores). A quad's four threads hold one row: thread c
// word m of a 32-column block is the element pair at columns 8m + 2c, 8m + 2c + 1 of the block. Two
// exchanges (lanes xor 2, then xor 1) transpose that 4 x 4 matrix of words, so that thread c holds
// columns 8c .. 8c + 7: one 16-byte store, and a warp's store writes 8 rows x 64 bytes where pair
// stores write 8 rows x 16 (each store instruction costs the load/store unit a request per row, and
// a D256 item's 64 pair stores per thread held it busy for much of the item's end).
__device__ __forceinline__ void quad_transpose(u32 (&w)[4], int c) {
  const bool bit1 = (c & 2) != 0, bit0 = (c & 1) != 0;
  // After the first exchange x[i][b] is word (c & 2) | i of the thread with bit 1 = b (bit 0 = c's).
  u32 x[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const u32 keep = bit1 ? w[2 + i] : w[i];
    const u32 got = __shfl_xor_sync(0xFFFFFFFFu, bit1 ? w[i] : w[2 + i], 2);
    x[i][0] = bit1 ? got : keep;
    x[i][1] = bit1 ? keep : got;
  }
  // Then word c of every thread: the one with bit 1 = b and bit 0 = c's (kept) or the other (got).
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const u32 keep = bit0 ? x[1][b] : x[0][b];
    const u32 got = __shfl_xor_sync(0xFFFFFFFFu, bit0 ? x[0][b] : x[1][b], 1);
    w[2 * b] = bit0 ? got : keep;
    w[2 * b + 1] = bit0 ? keep : got;
  }
}

// Normalizes O and writes this thread's rows (below q_len): staged through o_buffer (above), or
// straight from the accumulators (without staging, and with kOutputInQ for an item without key
// tiles: its Q buffer may already be filling for a later item), as 16-byte chunks (kQuadStores) or
// pairs of the output dtype.
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
    // e4m3 inputs: O's own buffer, free for every item (one code path: a larger epilogue moves
    // ptxas's schedule of the e4m3 key loop).
    if (!kOutputInQ || staged) {
      write_output_staged(params, maps, item, o, inv, o_buffer, row_in_tile);
      return;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = item.q_tile * kBlockM + row_in_tile + 8 * h;
    if constexpr (kQuadStores) {
      // Every lane of the quad takes part in the exchanges; the row's bound only predicates the
      // stores.
      char* const out_row = static_cast<char*>(params.out) +
                            token_offset(params.out_batch_stride, params.out_token_stride, params.out_head_stride,
                                         item.request, item.extent.q_begin + row, item.head) *
                                kOutBytes +
                            16 * c;
#pragma unroll
      for (int k = 0; k < kHeadDim / 32; ++k) {
        u32 w[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int j = 4 * k + m;
          w[m] = pack_pair<kOutputDtype>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
        }
        quad_transpose(w, c);
        if (row < item.extent.q_len)
          asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(out_row + 64 * k), "r"(w[0]), "r"(w[1]),
                       "r"(w[2]), "r"(w[3])
                       : "memory");
      }
      continue;
    }
    if (row >= item.extent.q_len) continue;
    char* const out_row = static_cast<char*>(params.out) +
                          token_offset(params.out_batch_stride, params.out_token_stride, params.out_head_stride,
                                       item.request, item.extent.q_begin + row, item.head) *
                              kOutBytes;
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

// Split tail: this part's O, row maxima and row sums go to its partial buffer (laid out by consumer
// thread: value e of thread t at e * 256 + t, so both parts of a slot, which run the same thread
// layout, line up value by value, and each warp's store is one 128-byte line); the later of the
// two parts, counted per consumer warp on split_flags, adds the other's into its own registers: O
// and l scaled by exp2((m_part - m) * scale_log2) for the larger m, as the online softmax does
// between key tiles. Returns whether this warp writes the output (the later part). Each thread
// fences its stores before its warp's count, and the counter reads the other part only after it
// (the "last block" pattern); __ldcg reads from L2, where the other SM's stores are.

// second_part: the part holds the slot's later key tiles; it is then the first piece of this
// walker's tail, at boundary walker, and otherwise its last, at boundary walker + 1.
template <u32 kCtas>
__device__ __forceinline__ bool merge_split_parts(const TsattnPrefillParams& p, bool second_part, float (&o)[kOAccum],
                                                  RowState& rows, int consumer_thread) {
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

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_EPILOGUE_CUH
