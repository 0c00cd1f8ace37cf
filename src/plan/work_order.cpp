#include "plan/work_order.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "plan/host_plan.hpp"

namespace tsattn {
namespace {

constexpr int kCausalChunks[] = {1, 2, 4, 8, 16};  // the candidates, smallest first
constexpr int kLargestCausalChunk = 16;
// From this many items per slot on, round-robin evens out most of what a chunk of 16 tiles mixes
// and the L2 reuse is worth more, so nothing is simulated (docs/decisions.md, host scheduling
// constants).
constexpr double kWavesWithoutModel = 24;
constexpr double kTolerance = 1.02;  // a larger chunk may cost this much predicted balance
// A work item's cost in key tiles of 128: its tiles plus a fixed part (prologue, first softmax,
// last PV, output stores; docs/decisions.md).
constexpr double kKeyTile = 128, kItemOverhead = 1.5;

double item_cost(int64_t keys) { return std::ceil(static_cast<double>(keys) / kKeyTile) + kItemOverhead; }

std::vector<double> tile_costs(const Problem& p, int block_m, const std::vector<TsattnTile>* host_tiles) {
  std::vector<double> costs;
  if (host_tiles != nullptr) {
    costs.reserve(host_tiles->size());
    for (const TsattnTile& t : *host_tiles)
      costs.push_back(item_cost(tile_work(p, p.q_len(t.request), p.kv_len(t.request), t.q_tile, block_m)));
    return costs;
  }
  // The implicit list of the fixed layout: q_tile descending, then request (all the same size).
  const int64_t per_request = (p.q_tokens + block_m - 1) / block_m;
  costs.reserve(static_cast<size_t>(per_request * p.batch));
  for (int64_t q_tile = per_request - 1; q_tile >= 0; --q_tile) {
    const double cost = item_cost(tile_work(p, p.q_tokens, p.kv_tokens, q_tile, block_m));
    costs.insert(costs.end(), static_cast<size_t>(p.batch), cost);
  }
  return costs;
}

int best_causal_chunk(const std::vector<double>& costs, int heads, int group, ListWalkers walkers) {
  double best = std::numeric_limits<double>::infinity();
  double predicted[std::size(kCausalChunks)];
  for (size_t i = 0; i < std::size(kCausalChunks); ++i) {
    predicted[i] = predicted_makespan(costs, heads, group, kCausalChunks[i], walkers);
    best = std::min(best, predicted[i]);
  }
  for (size_t i = std::size(kCausalChunks); i-- > 0;)
    if (predicted[i] <= best * kTolerance) return kCausalChunks[i];
  return 1;
}

// Fixed-layout choices depend on a handful of integers: computed once per shape.
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int, int, int, int64_t, int>;

int memoized_fixed_chunk(const Problem& p, int block_m, ListWalkers walkers) {
  static std::mutex mutex;
  static std::map<ShapeKey, int> chosen;
  const ShapeKey key{p.batch,        p.q_tokens, p.kv_tokens,   p.num_qo_heads,
                     p.group_size(), block_m,    walkers.slots, walkers.items_per_slot};
  {
    const std::lock_guard lock(mutex);
    if (auto found = chosen.find(key); found != chosen.end()) return found->second;
  }
  const int chunk = best_causal_chunk(tile_costs(p, block_m, nullptr), p.num_qo_heads, p.group_size(), walkers);
  const std::lock_guard lock(mutex);
  if (chosen.size() >= 4096) chosen.clear();  // bounded: shapes seen by one process
  chosen.emplace(key, chunk);
  return chunk;
}

}  // namespace

double predicted_makespan(const std::vector<double>& tile_costs, int heads, int group, int tiles_per_chunk,
                          ListWalkers walkers) {
  std::vector<double> load(static_cast<size_t>(std::max<int64_t>(1, walkers.slots)), 0.0);
  const int64_t tiles = static_cast<int64_t>(tile_costs.size());
  const int per_slot = std::max(1, walkers.items_per_slot);
  size_t slot = 0;
  int taken = 0;  // items of the current slot's step taken so far
  // The walk of common/item_order.cuh: chunk, kv head, tile, query head of the group. A slot's
  // step costs its first item (a CTA pair runs its two items side by side).
  for (int64_t first = 0; first < tiles; first += tiles_per_chunk) {
    const int64_t end = std::min(tiles, first + tiles_per_chunk);
    for (int kv_head = 0; kv_head < heads / group; ++kv_head)
      for (int64_t t = first; t < end; ++t)
        for (int g = 0; g < group; ++g) {
          if (taken == 0) load[slot] += tile_costs[static_cast<size_t>(t)];
          if (++taken == per_slot) {
            taken = 0;
            if (++slot == load.size()) slot = 0;
          }
        }
  }
  return *std::max_element(load.begin(), load.end());
}

double key_tiles_per_cta(const Problem& p, int block_m, const std::vector<TsattnTile>* host_tiles, int64_t ctas) {
  if (p.layout == Layout::packed && host_tiles == nullptr) return std::numeric_limits<double>::infinity();
  double key_tiles = 0;
  if (host_tiles != nullptr) {
    for (const TsattnTile& t : *host_tiles)
      key_tiles += item_cost(tile_work(p, p.q_len(t.request), p.kv_len(t.request), t.q_tile, block_m)) - kItemOverhead;
  } else {
    for (int64_t q_tile = 0; q_tile * block_m < p.q_tokens; ++q_tile)
      key_tiles += item_cost(tile_work(p, p.q_tokens, p.kv_tokens, q_tile, block_m)) - kItemOverhead;
    key_tiles *= static_cast<double>(p.batch);
  }
  return key_tiles * p.num_qo_heads / static_cast<double>(std::max<int64_t>(1, ctas));
}

bool claims_dynamically(const Problem& p, std::string_view forced, int block_m,
                        const std::vector<TsattnTile>* host_tiles, int64_t ctas) {
  if (forced == "static") return false;
  if (forced == "dynamic") return true;
  if (p.layout == Layout::fixed && p.mask == MaskMode::dense) return false;  // uniform items
  // Where claims won at every size measured (docs/decisions.md, kMinKeyTilesPerCta): requests of
  // different lengths, and plain causal D128 batches of several requests.
  if (p.layout == Layout::packed) return true;
  if (p.mask == MaskMode::causal && p.window_left < 1 && p.batch >= 2 && p.head_dim == 128) return true;
  return key_tiles_per_cta(p, block_m, host_tiles, ctas) >= kMinKeyTilesPerCta;
}

int tiles_per_chunk(const Problem& p, int block_m, const std::vector<TsattnTile>* host_tiles, int64_t max_tiles,
                    ListWalkers walkers, bool claims) {
  const int64_t limit = std::numeric_limits<int32_t>::max() / std::max<int64_t>(1, p.num_qo_heads);
  const auto clamped = [&](int64_t wanted) { return static_cast<int>(std::clamp<int64_t>(wanted, 1, limit)); };
  if (p.mask == MaskMode::dense) return clamped(max_tiles);
  if (p.mask != MaskMode::causal || p.window_left >= 1) return 1;
  if (claims) return clamped(max_tiles);
  const double waves = static_cast<double>(max_tiles) * p.num_qo_heads /
                       (static_cast<double>(std::max<int64_t>(1, walkers.slots)) * std::max(1, walkers.items_per_slot));
  if (waves >= kWavesWithoutModel) return clamped(kLargestCausalChunk);
  if (host_tiles != nullptr)
    return clamped(best_causal_chunk(tile_costs(p, block_m, host_tiles), p.num_qo_heads, p.group_size(), walkers));
  if (p.layout == Layout::fixed) return clamped(memoized_fixed_chunk(p, block_m, walkers));
  return 1;  // a short list planned on the device: its tiles' work is not known here
}

}  // namespace tsattn
