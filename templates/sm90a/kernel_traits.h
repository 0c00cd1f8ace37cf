// sm90a/kernel_traits.h - every setting of an sm90a kernel, decided by one constexpr function.
//
// The host (src/codegen/spec_table.cpp: tiles, TMA maps, the launch, the checks of a loaded module)
// and the kernel (sm90a/config.cuh) both call traits_for() on the spec's axes, so they cannot
// disagree; the module's globals only confirm it (jit/driver/module_table.cpp). Plain C++ with
// no CUDA headers. docs/decisions.md has, for each switch, the measurements behind it and the
// alternatives tried.
#ifndef TSATTN_SM90A_KERNEL_TRAITS_H
#define TSATTN_SM90A_KERNEL_TRAITS_H

#include "kernel_codes.h"

namespace tsattn_dev {
namespace sm90a {

// What distinguishes one sm90a kernel's settings from another's (codes: kernel_codes.h). The lse
// output (TSATTN_LSE) is not among them: a kernel that writes it has its twin's every setting, so
// one plan's workspace serves both (src/api/prefill_plan.cpp).
struct SpecAxes {
  int head_dim;      // 128 or 256
  int input_dtype;   // kFloat16, kBfloat16, kE4m3
  int output_dtype;  // kFloat16, kBfloat16, kE4m3
  int mask;          // kMaskDense, kMaskCausal, kMaskVariableWindow
  bool window;       // causal with a left window
  bool packed;       // the packed ragged layout
  bool short_keys;   // the variant for short key ranges (TSATTN_SHORT_KEYS; 16-bit D128 dense, D256
                     // dense and plain causal)
};

// Shared memory, as byte offsets from a 1024-byte aligned base (every slab is 1024-aligned for the
// 128-byte swizzle). `bytes` is what the launch asks for: the layout plus the alignment slack.
struct SharedLayout {
  unsigned q;          // kQBuffers Q tiles
  unsigned k;          // the K ring: kStages stages
  unsigned v;          // the V ring (e4m3: V^T slabs)
  unsigned o;          // O's staging buffer when it has one of its own
  unsigned barriers;   // the mbarriers, 8 bytes each
  unsigned slot_ring;  // the scheduler's ring of work slots (dynamic order)
  unsigned bytes;
};

struct Traits {
  int block_m, block_n, num_warps;  // the CTA tile
  int stages;                       // K/V ring depth

  // The key loop.
  bool two_level;        // e4m3: PV summed per key tile in fp32, then added into O
  bool overlap_softmax;  // S(t) and PV(t-1) issued together; else each tile in order
  bool ping_pong;        // the consumer warpgroups take turns at the tensor cores
  int pv_chunk_n;        // columns of the two-level working accumulator
  int pv_chunk_buffers;  // two-level chunks in flight

  // Registers per thread after setmaxnreg.
  int producer_registers, consumer_registers;

  // The output.
  bool staged_output;      // O through shared memory (stmatrix), stored as 16-byte row chunks
  bool output_in_q;        // ... staged in the item's own Q buffer, which leaves room for two Q buffers
  bool tma_output;         // ... handed to TMA stores (maps.o)
  bool quad_stores;        // O from registers as 16-byte row chunks, exchanged within each quad
  int output_store_bytes;  // bytes of one store of out: out's address and strides are multiples of it

  // The order of the work.
  bool chunked_order;       // the list is decoded in chunks of params.tiles_per_chunk tiles
  bool dynamic_order;       // a scheduler warp hands out the slots through a ring, and claims them from
                            // params.work_counter when it is set
  bool narrow_walk;         // items are numbered in 32 bits (the host holds a launch below 2^31 items)
  bool split_tail;          // the static walk's last rounds go out by key tiles (params.split_slots)
  bool fast_decode;         // the 32-bit walk's consumers decode items with the launch's divisors
  int split_partial_bytes;  // one part's buffer in params.split_partials (0 without split_tail)

  // CTA pairs (the module's _pairs kernel, launched in clusters of 2).
  bool pairable;       // pairs along heads
  bool tile_pairable;  // pairs along query tiles too (params.pair_tiles)

  SharedLayout smem;
};

// Keys per step (BLOCK_N), by the registers and shared memory each configuration has.
//   16-bit D128: 128 keys; dense 160 (no diagonal tile, so longer steps only spread the per-step
//     softmax and barrier work; S 80 + P 40 + O 64 registers fit in 240, 176 spilled). Its
//     short_keys variant takes 128: a request's last tile is padding up to its width, 25% of the
//     key work at 256 or 512 keys with 160 and none with 128, while 160 is ~2.5% cheaper per key
//     (src/plan/short_keys.hpp chooses per call).
//   16-bit D256: O alone is 128 registers, and Q plus two stages of K and V must fit 227 KB:
//     80 keys for dense and plain causal masks, 64 for windows (longer steps mask more of each
//     band-edge tile). The short_keys variant of dense and plain causal takes 64: 256 keys walk
//     320 columns with 80-key tiles, while 80 is cheaper per key from 512 keys on.
//   e4m3: the GEMMs take half the tensor time of 16-bit ones while the exponentials stay, so
//     longer steps spread the per-step work: D128 192, dense 256 (the serial two-level loop fits
//     it), variable windows 128 (their producer spilled at 192); D256 128, variable windows 64.
TSATTN_HOST_DEVICE constexpr int block_n_for(const SpecAxes& a) {
  const bool e4m3 = a.input_dtype == kE4m3;
  const bool variable = a.mask == kMaskVariableWindow;
  if (a.head_dim == 128) {
    if (e4m3) return variable ? 128 : a.mask == kMaskDense ? 256 : 192;
    return a.mask == kMaskDense && !a.short_keys ? 160 : 128;
  }
  if (e4m3) return variable ? 64 : 128;
  return (a.mask == kMaskDense || (a.mask == kMaskCausal && !a.window)) && !a.short_keys ? 80 : 64;
}

TSATTN_HOST_DEVICE constexpr Traits traits_for(const SpecAxes& a) {
  Traits t{};
  const bool e4m3 = a.input_dtype == kE4m3;
  t.block_m = 128;   // two consumer warpgroups of m64 wgmmas
  t.num_warps = 12;  // one producer and two consumer warpgroups
  t.block_n = block_n_for(a);
  t.stages = 2;

  // An 8-bit wgmma does not accumulate in full fp32 (each product is cut to about 13 bits below
  // the accumulator's leading bit), so e4m3 PV sums one key tile at a time from zero and an FFMA
  // adds it into O. The working accumulator takes S's registers in the serial loop.
  t.two_level = e4m3;
  // The overlapped loop keeps S, P and O live at once. D256 (O is 128 registers) needs 240 for
  // the consumers, which leaves the producer 24: too few for the variable-window range reduction.
  t.overlap_softmax = !e4m3 && (a.head_dim <= 128 || a.mask != kMaskVariableWindow);
  // Turns only pay where one step's exponentials hold the MUFU about as long as its GEMMs hold
  // the tensor cores, and only dense items run long enough in step: dense e4m3 D128.
  t.ping_pong = e4m3 && a.head_dim == 128 && a.mask == kMaskDense;
  t.pv_chunk_n = a.head_dim == 128 ? 128 : 64;
  // Two D256 chunks in flight add one while the next runs; variable windows spilled with two.
  t.pv_chunk_buffers = a.head_dim == 256 && a.mask != kMaskVariableWindow ? 2 : 1;

  // 384 threads launch with 168 registers each (__launch_bounds__(384, 1)); the producer gives
  // back what the consumers take: 128 x 40 + 256 x 232 = 128 x 24 + 256 x 240 = 384 x 168.
  const bool wide_consumers = (a.head_dim == 256 || t.block_n > 128) && t.overlap_softmax;
  t.producer_registers = wide_consumers ? 24 : 40;
  t.consumer_registers = wide_consumers ? 240 : 232;

  // Staging needs 32 KB of 16-bit rows of 128 elements: D128 with a 16-bit output (D256 has no
  // room left). Dense 16-bit items all end at once, so staging O in the Q buffer buys a second Q
  // buffer and the next item's Q loads early; other masks drift apart and keep one Q buffer.
  // TMA stores free the warp at the item's end; dense kernels would hold their Q buffer for
  // them, and e4m3 kernels keep their own stores.
  t.staged_output = a.head_dim == 128 && dtype_bytes(a.output_dtype) == 2;
  t.output_in_q = t.staged_output && !e4m3 && a.mask == kMaskDense;
  t.tma_output = t.staged_output && !e4m3 && a.mask != kMaskDense;
  // Unstaged 16-bit outputs (D256) go out as 16-byte chunks from registers after an exchange
  // within each quad (sm90a/epilogue.cuh, quad_transpose); e4m3-input kernels keep pair stores
  // (their key loop's schedule moves with any change to the item's end).
  t.quad_stores = !t.staged_output && !e4m3 && dtype_bytes(a.output_dtype) == 2;
  t.output_store_bytes = t.staged_output || t.quad_stores ? 16 : a.output_dtype == kE4m3 ? 2 : 4;

  // e4m3 kernels keep the simplest walk (one tile per chunk, static order, no split tail): any
  // code added around their key loop moved ptxas's schedule of it and cost more than it saved.
  t.chunked_order = !e4m3;
  // The 128-key dense kernels of the fixed layout walk their slots in static turns, which each warp
  // computes itself, and never split their tail: fixed dense calls never claim (every item costs
  // the same), and the ring's handshake sat at every item's start.
  const bool static_walk = !e4m3 && a.head_dim == 128 && a.mask == kMaskDense && a.short_keys && !a.packed;
  t.dynamic_order = !e4m3 && !static_walk;
  t.narrow_walk = t.dynamic_order || static_walk;
  // Dense fixed-layout items all cost the same, so the static walk's last round leaves walkers
  // idle unless the slots divide evenly; D256 kept its loop's schedule only without the split.
  t.split_tail = t.dynamic_order && a.mask == kMaskDense && !a.packed && a.head_dim == 128;
  // A consumer's decode opens each item with no GEMM of its own in flight, so it divides by the
  // launch's divisors made once (a multiply-high and a shift each) instead of hardware divisions;
  // the 160-key dense D128 kernels, whose items are long, measured slower with them and keep the
  // hardware ones (docs/decisions.md).
  t.fast_decode = t.narrow_walk && !(a.head_dim == 128 && t.block_n == 160);
  // Per consumer thread: O (D / 2 floats), then m[2] and l[2]; 256 consumer threads.
  t.split_partial_bytes = t.split_tail ? (a.head_dim / 2 + 4) * 256 * 4 : 0;

  // 16-bit D128 tiles split into 2 slabs of 128 bytes, one per CTA of a pair; an e4m3 K row is
  // one slab. D256 kernels run unpaired: their pairs, in static order, hung or left rows unwritten
  // under repeated calls (docs/decisions.md, `pairable`). Pairs along query tiles walk the union
  // of both tiles' key ranges, at most one extra key tile for dense and plain causal masks.
  const int slabs = a.head_dim * dtype_bytes(a.input_dtype) / 128;
  t.pairable = !e4m3 && a.head_dim == 128 && slabs % 2 == 0;
  t.tile_pairable = t.pairable && a.mask != kMaskVariableWindow && !a.window;

  // Shared memory: Q, the K and V rings, O's own buffer, the barriers (17 with the scheduler's
  // ring, else 12), the ring's entries (8 bytes with a split tail: slot and key tiles).
  const unsigned q_bytes = static_cast<unsigned>(slabs) * t.block_m * 128;
  const unsigned k_stage_bytes = static_cast<unsigned>(slabs) * t.block_n * 128;
  const unsigned v_stage_bytes =
      e4m3 ? static_cast<unsigned>((t.block_n + 127) / 128) * a.head_dim * 128 : k_stage_bytes;
  const unsigned o_bytes = 2u * t.block_m * 128;
  const unsigned barriers = t.dynamic_order ? 17 : 12;
  const unsigned slot_ring = 2;
  t.smem.q = 0;
  t.smem.k = t.smem.q + (t.output_in_q ? 2 : 1) * q_bytes;
  t.smem.v = t.smem.k + t.stages * k_stage_bytes;
  t.smem.o = t.smem.v + t.stages * v_stage_bytes;
  t.smem.barriers = t.smem.o + (t.staged_output && !t.output_in_q ? o_bytes : 0);
  t.smem.slot_ring = t.smem.barriers + 8 * barriers;
  t.smem.bytes = 1024 + t.smem.slot_ring + (t.dynamic_order ? (t.split_tail ? 8 : 4) * slot_ring : 0);
  return t;
}

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_KERNEL_TRAITS_H
