// short_keys.hpp - whether a call runs the short-key variant of its kernel (KernelSpec::short_keys):
// for the sm90a 16-bit D128 dense kernel, 128-key tiles instead of its usual 160; for the 16-bit
// D256 dense and plain causal kernels, 64 instead of 80.
//
// Each request's last key tile is padded to the tile's width, and the padding costs what real keys
// cost. At 256 or 512 keys, 160-key tiles walk 25% more key columns than there are keys, 128-key
// tiles none; but the wider tiles spread their per-step work over more keys and are cheaper per key,
// so long requests prefer them (H200, bf16, fixed layout: the 128-key D128 kernel took 0.85-0.89 of
// the time at B16 x S512, 0.86 at B32 x S256, 0.94-0.95 at B8 x S1K and 1.01 at B4 x S2K; the 64-key
// D256 kernel 0.92-0.93 at B32 x S256 and 1.01-1.09 from B8 x S1K on; docs/decisions.md,
// short_keys). The rule compares the padded key work per query row, summed over the requests, with
// the narrower tile's cost per key:
//
//     short keys  <=>  narrow * sum_b ceil(Sk_b / narrow)  <  cost * usual * sum_b ceil(Sk_b / usual)
//
// with (narrow, usual, cost) = (128, 160, 0.97) at D128 and (64, 80, 0.87) at D256. Lengths: the
// fixed layout's Sk for every request; the packed layout's host kv_indptr. GPU indptrs have no
// lengths on the host, so those calls keep the usual kernel (a plan's run does the same, so that it
// launches the one-shot call's kernel). Pure: no driver, no knobs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "api/problem.hpp"

namespace tsattn {

// The two widths a head dim's variant compares (templates/sm90a/kernel_traits.h, block_n_for;
// checked there), and the percentage of the usual kernel's per-key cost that the narrower tiles'
// padded key work must stay under: the narrower kernel costs 100 / cost_percent as much per key.
struct KeyTileWidths {
  int short_keys;
  int usual;
  uint64_t cost_percent;
};

constexpr KeyTileWidths key_tile_widths(int64_t head_dim) {
  return head_dim == 256 ? KeyTileWidths{64, 80, 87} : KeyTileWidths{128, 160, 97};
}

// Key columns a kernel of `block_n`-key tiles walks per query row of a request of kv_len keys
// (negative lengths count as none, and lengths are at most 2^31 - 1).
constexpr int64_t padded_keys(int64_t kv_len, int block_n) {
  return kv_len <= 0 ? 0 : (kv_len + block_n - 1) / block_n * block_n;
}
static_assert(padded_keys(512, 160) == 640 && padded_keys(512, 128) == 512 && padded_keys(0, 160) == 0);

// The padded key work of both widths, summed over requests (unsigned: the lengths of a run that
// was not validated may be anything, and then only the answer is meaningless).
struct PaddedKeyWork {
  KeyTileWidths widths = key_tile_widths(128);
  uint64_t short_keys = 0;  // with widths.short_keys
  uint64_t usual = 0;       // with widths.usual

  void add(int64_t kv_len);
  // short_keys < cost * usual
  bool short_keys_pay() const;
};

// Whether the short-key variant pays for p. `kv_indptr`: the packed layout's host kv_indptr values
// (B + 1), or empty when they live on the GPU (then false); the fixed layout ignores it.
bool short_keys_pay(const Problem& p, std::span<const int32_t> kv_indptr);

// The decision under TSATTN_SHORT_KEYS (`forced`): "on" always, "off" never, "auto" short_keys_pay.
// Only asked for a spec that has the variant (has_short_keys_variant, codegen/spec_table.hpp).
bool wants_short_keys(const Problem& p, std::span<const int32_t> kv_indptr, std::string_view forced);

}  // namespace tsattn
