// sm90a/tile_scheduler.cuh - which work a CTA does and in what order: the key tiles of a work
// item, the slots of CTA pairs, and the walk over the work list (static order, or a scheduler
// warp handing out slots through a ring in shared memory, with the split tail's pieces).
//
// Which keys a tile visits: the union of its rows' ranges (common/mask.cuh), computed by every
// warp on its own from the params (no barrier; key_tiles_of); the element mask runs only on key
// tiles where some row of the warp does not see every key.
#ifndef TSATTN_SM90A_TILE_SCHEDULER_CUH
#define TSATTN_SM90A_TILE_SCHEDULER_CUH

#include "common/mask.cuh"
#include "common/request.cuh"
#include "common/split_tail.cuh"
#include "common/work_items.cuh"
#include "sm90a/barriers.cuh"
#if TSATTN_PACKED
#include "plan/list_in_kernel.cuh"
#endif

namespace tsattn_dev {
namespace sm90a {

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
#if TSATTN_MASK == TSATTN_MASK_CODE_VARIABLE_WINDOW
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
#if TSATTN_MASK == TSATTN_MASK_CODE_CAUSAL
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
// Pairs along query tiles (kTilePairable) only for dense and plain causal masks, where the pair's
// union costs at most one key tile: a window would walk one more at its far end, and a variable
// window's union is unknown (the 2 x BLOCK_M-row range reduction also spilled in the 24-register
// producer).

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

// How a walk decodes an item: with hardware divisions (WorkItems; kNarrow: see work_item), or
// with the launch's divisors made once (FastItems: the consumers of the 32-bit walk where
// kFastDecode, whose decode sits at each item's start; the producer has no registers to hold the
// divisors).
template <bool kNarrow>
struct WorkItems {
  __device__ __forceinline__ explicit WorkItems(const TsattnPrefillParams&, const WorkList&) {}
  template <int kRows>
  __device__ __forceinline__ bool at(const TsattnPrefillParams& p, const WorkList& list, i64 w, WorkItem& item) const {
    return work_item<kRows, kChunkedOrder, kNarrow>(p, list, w, item);
  }
};

struct FastItems {
  ItemDivisors divisors;
  FastDivisor batch;
  __device__ __forceinline__ explicit FastItems(const TsattnPrefillParams& p, const WorkList& list)
      : divisors(item_divisors(list.tiles, list.heads, list.group, list.tiles_per_chunk)),
        batch(fast_divisor(static_cast<u32>(max(p.batch, 1)))) {}
  template <int kRows>
  __device__ __forceinline__ bool at(const TsattnPrefillParams& p, const WorkList& list, i64 w, WorkItem& item) const {
    static_assert(kChunkedOrder, "the divisors are those of the chunked order");
    return work_item<kRows>(p, list, divisors, batch, static_cast<u32>(w), item);
  }
};

// The item of cluster rank `rank` in slot `slot`, as that CTA's own BLOCK_M-row tile (item.q_tile
// counts BLOCK_M rows). False when the slot gives it nothing.
template <u32 kCtas, class Items>
__device__ __forceinline__ bool slot_item(const TsattnPrefillParams& p, const WorkList& list, const Items& items,
                                          i64 slot, u32 rank, WorkItem& item) {
  if constexpr (kCtas == 1) {
    return items.template at<kBlockM>(p, list, slot, item);
  } else if (pairs_along_tiles<kCtas>(p)) {
    if (!items.template at<2 * kBlockM>(p, list, slot, item)) return false;
    item.q_tile = 2 * item.q_tile + static_cast<int>(rank);
    return true;
  } else {
    return items.template at<kBlockM>(p, list, 2 * slot + rank, item);
  }
}

// The key tiles the CTA walks for its item: its tile's, or in a pair along query tiles those of
// both tiles of the pair (q_tile with its lowest bit cleared is the pair's first).
template <u32 kCtas>
__device__ __forceinline__ KeyTiles slot_key_tiles(const TsattnPrefillParams& p, const WorkItem& item, int lane) {
  if (pairs_along_tiles<kCtas>(p)) return key_tiles_of<2 * kBlockM>(p, item, (item.q_tile & ~1) * kBlockM, lane);
  return key_tiles_of<kBlockM>(p, item, item.q_tile * kBlockM, lane);
}

// The batch coordinate of a request in the rank-4 maps {d, head, token, batch}: the packed
// layout has one batch entry (tokens are absolute there).
__device__ __forceinline__ int batch_coord(const WorkItem& item) { return TSATTN_PACKED ? 0 : item.request; }

// The walk over the work list. Static order: every warp takes slots first, first + step, ... and
// decodes their items itself. Dynamic order (kDynamicOrder): warp 1, idle otherwise, is the
// scheduler. It claims each slot (atomicAdd on params.work_counter; without a counter, the static
// walk) and publishes it through a ring in shared memory, where the producer and consumer warps
// read it and decode its item; its last entry, kNoSlot, says the list is done. Each walker stops
// after its first claim past the list, so a launch makes exactly end + walkers claims: the last
// one (it returns end + walkers - 1) sets the counter back to zero. In a CTA pair rank
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
//                  item while another CTA went idle. The static walk does not wait for requests.
// A reader's lane 0 loads the entry (in a pair with acquire semantics at cluster scope), shuffles it
// to its warp and arrives, so its load is ordered before the scheduler may rewrite the entry
// (read_slot). Slots, and the index arithmetic of the
// readers' decode (work_item's kNarrow, which keeps the 24-register producer free of spills), are
// 32-bit: the host launches these kernels only for lists of fewer than 2^31 items
// (api/execute.cpp).
template <u32 kCtas>
constexpr u32 kSlotEmptyArrivals = kCtas*(1 + kConsumerThreads / 32);
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
    const u32 walkers = gridDim.x / kCtas, slots = static_cast<u32>(end),
              tail = static_cast<u32>(max(p.split_slots, 0));
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
      if (counted < end)
        claimed = counted;
      else if (counted == end + static_cast<i64>(gridDim.x / kCtas) - 1) {
        atomicExch(params.work_counter, 0ull);  // the launch's last claim: the counter is zero for the next
#if TSATTN_PACKED
        // and the list is to be built again (plan/list_in_kernel.cuh): every CTA is past its wait.
        atomicExch(plan::list_state(params), plan::kListEmpty);
#endif
      }
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
  // Lane 0 alone reads the entry, then arrives, so its read comes before the scheduler's next write
  // of the entry (a shuffle does not order other lanes' reads before it in the memory model). Alone,
  // the arrival's CTA scope orders the read. In a pair, rank 0's scheduler writes rank 1's entry from
  // another SM, and ptxas sends the arrival without waiting for a plain load: the entry could be
  // overwritten before the load read it (the ranks then work on different items). So a pair reads
  // with acquire semantics at cluster scope, which makes the arrival wait for the value.
  const bool reader = threadIdx.x % 32 == 0;
  const auto read = [](u32 addr) {
    if constexpr (kCtas == 1)
      return ld_shared_u32(addr);
    else
      return ld_acquire_cluster_shared_u32(addr);
  };
  const u32 slot = __shfl_sync(0xffffffffu, reader ? read(entry) : 0u, 0);
  if constexpr (kSplitTail) tiles = __shfl_sync(0xffffffffu, reader ? read(entry + 4) : 0u, 0);
  if (reader) {
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
// kProducer: the producer warp's walk, which requests each entry before reading it. Without the
// ring (static order, !kDynamicOrder) every walking warp computes the same turns from the launch
// alone; such kernels never split their tail (the scheduler warp hands out a split tail's pieces).
template <u32 kCtas, bool kProducer>
struct ItemWalk {
  static_assert(kDynamicOrder || !kSplitTail, "a split tail's pieces come from the scheduler's ring");
  // The 32-bit walk's readers decode in 32 bits; its consumers with the launch's divisors
  // (kFastDecode).
  using Items = typename Select<kFastDecode && !kProducer, FastItems, WorkItems<kNarrowWalk>>::type;
  WorkList list;
  Items items;
  SlotWalk slots;
  i64 slot;   // static order: the next slot to decode
  u32 taken;  // dynamic order: ring entries read so far
  u32 tiles;  // kSplitTail: the current item's key tiles (the ring entry's second word)

  __device__ __forceinline__ explicit ItemWalk(const TsattnPrefillParams& p)
      : list(slot_list<kCtas>(p)), items(p, list), taken(0), tiles(kWholeSlot) {
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
        if (slot_item<kCtas>(p, list, items, claimed, rank, item)) return true;
      }
    } else {
      for (; slot < slots.end; slot += slots.step)
        if (slot_item<kCtas>(p, list, items, slot, rank, item)) {
          slot += slots.step;
          return true;
        }
      return false;
    }
  }
};

}  // namespace sm90a
}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_TILE_SCHEDULER_CUH
