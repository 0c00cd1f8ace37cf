// work_order.hpp - how many tiles of the list form one chunk of work items (prefill_params.h,
// "The scheduler's work"; templates/common/item_order.cuh is the order itself).
//
// Inside a chunk the items go kv head by kv head, so the CTAs that run at the same time share K/V
// and read it through L2: the larger the chunk, the fewer K/V streams come from memory at once.
// Across chunks the list stays heaviest first, which is what balances causal work between the
// persistent CTAs when they take items round-robin (or claim them: claims_dynamically below); a
// chunk mixes tiles of different weight. So:
// dense lists are one chunk (every tile of a request does the same work), windows one tile per
// chunk (their K/V spans are short, L2 already holds what neighbours share), and causal lists
// take the largest chunk whose round-robin walk a cost model predicts within 2% of the best.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "api/problem.hpp"
#include "prefill_params.h"

namespace tsattn {

// Who walks the item list: `slots` persistent CTAs (or CTA pairs), each taking `items_per_slot`
// consecutive items per step (2 for a pair: one item per CTA, run side by side).
struct ListWalkers {
  int64_t slots = 1;
  int items_per_slot = 1;
};

// The cost model: the busiest slot's work when the walkers take the items of this chunk size
// round-robin, each item costing its tile's cost (tile_costs in list order).
double predicted_makespan(const std::vector<double>& tile_costs, int heads, int group, int tiles_per_chunk,
                          ListWalkers walkers);

// The work of a call in key tiles of 128 per CTA (for claims_dynamically): its items' key tiles
// over `ctas` resident CTAs. host_tiles as for tiles_per_chunk; a packed list planned on the
// device is unknown here: infinity.
double key_tiles_per_cta(const Problem& p, int block_m, const std::vector<TsattnTile>* host_tiles, int64_t ctas);

// Whether the CTAs of an sm90a launch (of a kernel that can) claim their slots from a counter
// (prefill_params.h, work_counter) instead of taking them in static turns. The static turn gives
// a CTA every slots-th item, so with items of unequal cost some CTAs finish well before others; a
// claim goes to whichever CTA is free. Claims cost a wait at each item, which short calls do not
// win back (docs/decisions.md, kMinKeyTilesPerCta). So "auto" claims for packed requests (of different
// lengths), for plain causal D128 batches of two or more requests, and for every other call whose items
// differ in cost (every mask but dense) with at least kMinKeyTilesPerCta of work per CTA. `forced`
// is TSATTN_WORK_ORDER: "auto", "static" or "dynamic". The work (key_tiles_per_cta of block_m, host_tiles and ctas) is
// computed only when "auto" needs it.
constexpr double kMinKeyTilesPerCta = 256;
bool claims_dynamically(const Problem& p, std::string_view forced, int block_m,
                        const std::vector<TsattnTile>* host_tiles, int64_t ctas);

// Tiles per chunk: >= 1, and times num_qo_heads below 2^31. host_tiles is the host-planned list
// (packed layout with host indptrs), null for the fixed layout's implicit list and for lists the
// device plans (lengths unknown here); max_tiles bounds the list's length.
// `claims`: the launch claims its slots (claims_dynamically); causal lists are then one chunk, since
// the round-robin model does not describe claims, and one chunk keeps a request's tiles of one head
// close, so its K/V is read from memory once (short requests read it twice with chunks of 16).
int tiles_per_chunk(const Problem& p, int block_m, const std::vector<TsattnTile>* host_tiles, int64_t max_tiles,
                    ListWalkers walkers, bool claims);

}  // namespace tsattn
