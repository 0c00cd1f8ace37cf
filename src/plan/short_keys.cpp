#include "plan/short_keys.hpp"

#include <algorithm>
#include <limits>

#include "sm90a/kernel_traits.h"

namespace tsattn {

namespace {

constexpr int block_n(int head_dim, int mask, bool short_keys) {
  return tsattn_dev::sm90a::block_n_for(
      {head_dim, tsattn_dev::kBfloat16, tsattn_dev::kBfloat16, mask, false, false, short_keys});
}
static_assert(block_n(128, tsattn_dev::kMaskDense, true) == key_tile_widths(128).short_keys &&
                  block_n(128, tsattn_dev::kMaskDense, false) == key_tile_widths(128).usual,
              "D128: the widths compared are the dense kernel's and its short-key variant's");
static_assert(block_n(256, tsattn_dev::kMaskDense, true) == key_tile_widths(256).short_keys &&
                  block_n(256, tsattn_dev::kMaskDense, false) == key_tile_widths(256).usual &&
                  block_n(256, tsattn_dev::kMaskCausal, true) == key_tile_widths(256).short_keys &&
                  block_n(256, tsattn_dev::kMaskCausal, false) == key_tile_widths(256).usual,
              "D256: the widths compared are the dense and causal kernels' and their short-key variants'");

}  // namespace

void PaddedKeyWork::add(int64_t kv_len) {
  kv_len = std::min<int64_t>(kv_len, std::numeric_limits<int32_t>::max());
  short_keys += static_cast<uint64_t>(padded_keys(kv_len, widths.short_keys));
  usual += static_cast<uint64_t>(padded_keys(kv_len, widths.usual));
}

// In integers: 100 x short < cost_percent x usual. A valid call has fewer than 2^31 keys in all.
bool PaddedKeyWork::short_keys_pay() const { return 100 * short_keys < widths.cost_percent * usual; }

bool short_keys_pay(const Problem& p, std::span<const int32_t> kv_indptr) {
  PaddedKeyWork work{key_tile_widths(p.head_dim)};
  if (p.layout == Layout::fixed) {
    work.add(p.kv_tokens);  // every request alike: one stands for all
  } else {
    if (kv_indptr.size() < 2) return false;  // GPU indptrs (or no request): lengths unknown
    for (size_t b = 0; b + 1 < kv_indptr.size(); ++b) work.add(int64_t{kv_indptr[b + 1]} - kv_indptr[b]);
  }
  return work.short_keys_pay();
}

bool wants_short_keys(const Problem& p, std::span<const int32_t> kv_indptr, std::string_view forced) {
  if (forced == "off") return false;
  if (forced == "on") return true;
  return short_keys_pay(p, kv_indptr);
}

}  // namespace tsattn
