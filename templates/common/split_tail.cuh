// common/split_tail.cuh - the split tail of the static walk (prefill_params.h, split_slots): which
// slot and key tiles each walker takes once the list's last F slots are handed out by key tiles.
// Plain 32-bit integer code, __host__ too, so that a host unit test can walk it
// (tests/plan/test_split_tail.cpp) and the host's choice obeys the same rule (plan/split_tail.cpp).
//
// S slots of n key tiles each, W walkers (CTAs, or CTA pairs), F = split_slots with W <= F < 2 W
// and S - F a multiple of W: walker w first takes the slots w, w + W, ... below S - F (the whole-slot
// rounds), then key tiles [w F n / W, (w + 1) F n / W) of the last F slots' F x n, slot by slot.
// Every walker gets between n and 2 n tiles, so at most kPiecesPerWalker pieces, and a slot is cut
// at most once: into a first part (walker b - 1's last piece, from tile 0) and a second part
// (walker b's first piece, to tile n), where b is the boundary between the two walkers.
#ifndef TSATTN_COMMON_SPLIT_TAIL_CUH
#define TSATTN_COMMON_SPLIT_TAIL_CUH

#include "common/prelude.cuh"

namespace tsattn_dev {

constexpr u32 kPiecesPerWalker = 3;
// Bounds that keep w F n below 2^32 (F < 2 W): the arithmetic stays 32-bit, which the kernels'
// scheduler lane, in the 24-register producer warpgroup, can afford.
constexpr u32 kMaxSplitWalkers = 256;
constexpr u32 kMaxSplitSteps = 0xFFFFFFFFu / (2 * kMaxSplitWalkers * kMaxSplitWalkers);

// Whether a tail of `tail` slots can be walked as above.
__host__ __device__ inline bool split_tail_walkable(u32 slots, u32 tail, u32 walkers, u32 steps) {
  return walkers >= 1 && walkers <= kMaxSplitWalkers && steps >= 1 && steps <= kMaxSplitSteps && tail >= walkers &&
         tail < 2 * walkers && tail <= slots && (slots - tail) % walkers == 0;
}

// Piece `piece` (< kPiecesPerWalker) of walker `walker`'s tail: the slot (counted from 0 over the
// whole list) and its tiles [first, first + count). whole: all n of them. False when the walker's
// share ends before that piece.
struct TailPiece {
  u32 slot, first, count;
  bool whole;
};

__host__ __device__ inline bool tail_piece(u32 slots, u32 tail, u32 walkers, u32 steps, u32 walker, u32 piece,
                                           TailPiece& out) {
  const u32 tiles = tail * steps;
  const u32 from = walker * tiles / walkers, to = (walker + 1) * tiles / walkers;
  const u32 tail_slot = from / steps + piece, slot_first = tail_slot * steps;
  if (slot_first >= to) return false;
  const u32 lo = from > slot_first ? from - slot_first : 0;
  const u32 hi = (to < slot_first + steps ? to : slot_first + steps) - slot_first;
  out.slot = slots - tail + tail_slot;
  out.first = lo;
  out.count = hi - lo;
  out.whole = lo == 0 && hi == steps;
  return true;
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_SPLIT_TAIL_CUH
