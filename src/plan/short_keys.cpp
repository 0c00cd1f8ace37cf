#include "plan/short_keys.hpp"

#include <algorithm>
#include <limits>

#include "sm90a/kernel_traits.h"

namespace tsattn {

namespace {

constexpr int block_n(bool short_keys) {
  return tsattn_dev::sm90a::block_n_for(
      {128, tsattn_dev::kBfloat16, tsattn_dev::kBfloat16, tsattn_dev::kMaskDense, false, false, short_keys});
}
static_assert(block_n(true) == kShortKeysBlockN && block_n(false) == kUsualKeysBlockN,
              "the widths compared are the dense D128 kernel's and its short-key variant's");

}  // namespace

void PaddedKeyWork::add(int64_t kv_len) {
  kv_len = std::min<int64_t>(kv_len, std::numeric_limits<int32_t>::max());
  short_keys += static_cast<uint64_t>(padded_keys(kv_len, kShortKeysBlockN));
  usual += static_cast<uint64_t>(padded_keys(kv_len, kUsualKeysBlockN));
}

// In integers: 100 x short < 97 x usual. A valid call has fewer than 2^31 keys in all.
bool PaddedKeyWork::short_keys_pay() const { return 100 * short_keys < kShortKeysCostPercent * usual; }

bool short_keys_pay(const Problem& p, std::span<const int32_t> kv_indptr) {
  PaddedKeyWork work;
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
