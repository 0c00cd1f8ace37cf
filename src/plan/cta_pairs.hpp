// cta_pairs.hpp - whether a launch runs in CTA pairs, and along which axis.
//
// The sm90a 16-bit modules carry a second kernel launched in clusters of 2 CTAs that share every
// K/V tile through TMA multicast, which halves the L2 -> shared memory traffic; on a GPU held at
// its power limit that energy is clock (docs/decisions.md, the `pairable` row). The two CTAs must read
// the same K/V tiles:
//   along heads: query heads 2k and 2k + 1 of one query tile, one kv head when the GQA group is
//     even;
//   along query tiles: BLOCK_M-row tiles 2q and 2q + 1 of one head (MHA and odd groups). Both walk
//     the union of the two tiles' key ranges: the same keys for a dense mask, one more key tile
//     for the first tile of a causal pair. The module says whether it pairs this way
//     (tsattn_pairs_along_tiles in templates/sm90a/prefill_sm90a.cuh: dense and plain causal
//     masks; a window would walk another key tile at its far end, per-row windows unknown unions).
#pragma once

#include <cstdint>
#include <string_view>

#include "api/problem.hpp"

namespace tsattn {

enum class PairAxis { none, heads, query_tiles };

// What the loaded module's pairs kernel can do (null pairs kernel, or no cluster of two fits on
// the device: neither).
struct PairsKernel {
  bool along_heads = false;
  bool along_query_tiles = false;
};

// `forced` is TSATTN_CTA_PAIRS: "on" pairs wherever the kernel can, "auto" too except where
// head_pairs_waste or query_tile_pairs_waste, "off" never.
PairAxis choose_pair_axis(const Problem& p, PairsKernel kernel, std::string_view forced = "auto");

// Query rows and keys per request: the fixed layout's Sq and Sk, the packed layout's means.
int64_t mean_query_rows(const Problem& p);
int64_t mean_keys(const Problem& p);

// Whether pairs along heads cost more than their shared K/V saves: for requests of at most
// kShortHeadPairRows query rows and keys on average (packed dense calls: kShortPackedRows), whose
// items of a few key tiles save few bytes, while every K/V stage of a pair waits for both CTAs
// to release it (docs/decisions.md). A chunk of a long prompt (few rows, many keys) keeps its
// pairs.
constexpr int64_t kShortHeadPairRows = 512;
bool head_pairs_waste(const Problem& p);

// Whether pairs along query tiles cost more than their shared K/V saves, by the mean query rows
// per request: a causal pair's first tile walks one key tile more, a large share of a short
// request's work, and a packed request's last pair half-fills more often the shorter it is
// (docs/decisions.md, kShortCausalRows). Single CTAs run those calls. Packed causal calls
// stop at a lower mean, which hides the long requests of a ragged batch, where pairs still pay;
// packed dense calls have a bound where fixed ones have none, since only theirs half-fill (the
// same bound leaves out their pairs along heads).
constexpr int64_t kShortCausalRows = 2048;
constexpr int64_t kShortPackedCausalRows = 1024;
constexpr int64_t kShortPackedRows = 1024;
bool query_tile_pairs_waste(const Problem& p);

// Rows per tile of the work list: a pair along query tiles plans tiles of both CTAs' rows.
int64_t list_tile_rows(PairAxis axis, int64_t block_m);

const char* pair_axis_name(PairAxis axis);  // "heads", "query tiles" ("none")

}  // namespace tsattn
