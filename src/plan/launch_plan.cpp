#include "plan/launch_plan.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "plan/host_plan.hpp"
#include "plan/split_tail.hpp"

namespace tsattn {
namespace {

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// Lays regions out one after another, each at a multiple of its alignment.
class RegionPacker {
 public:
  Region add(size_t bytes, size_t alignment = 16) {
    const size_t offset = (end_ + alignment - 1) / alignment * alignment;
    end_ = offset + bytes;
    return {offset, bytes};
  }
  size_t end() const { return end_; }

 private:
  size_t end_ = 0;
};

WorkspaceLayout workspace_layout(const Problem& p, const LaunchPlan& plan, const KernelFacts& kernel) {
  WorkspaceLayout w;
  RegionPacker packer;
  const auto indptr_bytes = static_cast<size_t>(p.batch + 1) * sizeof(int32_t);
  switch (plan.tile_list) {
    case TileList::implicit:
      // The counter comes first whenever the kernel can claim dynamically and the launch uses the
      // workspace at all, so in a plan's workspace those bytes hold only the counter, which the
      // launches leave at zero. A static launch without a split tail needs no workspace.
      if (kernel.dynamic_order && (plan.dynamic_order || plan.split_slots > 0))
        w.work_counter = packer.add(sizeof(unsigned long long));
      w.clear_work_counter = plan.dynamic_order;
      if (plan.split_slots > 0) {
        // Per boundary between walkers (< walkers) and CTA: a count per consumer warp (8), and a
        // buffer for each of the two parts of the slot cut there.
        const int64_t ctas = plan.walkers.slots * (plan.paired() ? 2 : 1);
        w.split_counts = packer.add(static_cast<size_t>(ctas * 8) * sizeof(int));
        w.split_partials =
            packer.add(static_cast<size_t>(ctas * 2) * static_cast<size_t>(kernel.split_partial_bytes), 256);
      }
      break;
    case TileList::host_planned:
      w.tile_count = packer.add(sizeof(int));
      w.list_state = packer.add(sizeof(int), alignof(int));
      w.tiles = packer.add(plan.host_tiles.size() * sizeof(TsattnTile));
      w.qo_indptr = packer.add(indptr_bytes);
      w.kv_indptr = packer.add(indptr_bytes);
      w.work_counter = packer.add(sizeof(unsigned long long));
      w.upload_bytes = packer.end();
      break;
    case TileList::device_planned:
      w.tile_count = packer.add(sizeof(int));
      w.list_state = packer.add(sizeof(int), alignof(int));
      w.work_counter = packer.add(sizeof(unsigned long long));
      w.tiles = packer.add(static_cast<size_t>(plan.max_tiles) * sizeof(TsattnTile));
      break;
  }
  w.bytes = packer.end();
  return w;
}

}  // namespace

LaunchPlan plan_launch(const Problem& p, const KernelFacts& kernel, int multiprocessors, const KnobReader& knob) {
  LaunchPlan plan;
  // CTA pairs decide the list's tile size: a pair along query tiles plans tiles of 2 x BLOCK_M
  // rows, one half per CTA.
  // TSATTN_CTA_PAIRS is read only where a pairs kernel makes it matter (calls read knobs each time).
  if (kernel.pairs)
    plan.pair_axis = choose_pair_axis(p, PairsKernel{true, kernel.pairs_along_tiles}, knob(Knob::cta_pairs));
  plan.tile_rows = list_tile_rows(plan.pair_axis, kernel.block_m);
  const int tile_rows = static_cast<int>(plan.tile_rows);
  const int64_t query_tiles = ceil_div(p.q_tokens, tile_rows);
  if (p.layout == Layout::fixed) {
    plan.max_tiles = p.batch * query_tiles;
  } else if (p.indptr_on_host) {
    plan.tile_list = TileList::host_planned;
    plan.host_tiles = plan_tiles_on_host(p, tile_rows);
    plan.max_tiles = static_cast<int64_t>(plan.host_tiles.size());
  } else {
    // A tile per tile_rows rows plus one partial tile per request bounds the list the planner
    // writes; sanitized requests never exceed it.
    plan.tile_list = TileList::device_planned;
    plan.max_tiles = std::min<int64_t>(query_tiles + p.batch, std::numeric_limits<int>::max());
  }
  plan.max_items = (query_tiles + p.batch) * p.num_qo_heads;
  plan.items = plan.max_tiles * p.num_qo_heads;
  plan.launches = plan.items > 0;

  const int64_t resident = int64_t{multiprocessors} * kernel.ctas_per_multiprocessor;
  const std::vector<TsattnTile>* host_tiles = plan.tile_list == TileList::host_planned ? &plan.host_tiles : nullptr;
  plan.dynamic_order =
      kernel.dynamic_order && claims_dynamically(p, knob(Knob::work_order), tile_rows, host_tiles, resident);
  if (!plan.launches) return plan;

  // Persistent walkers: as many as fit at once, never more than the work.
  if (plan.pair_axis == PairAxis::heads)
    plan.walkers = {std::min<int64_t>(plan.items / 2, kernel.max_active_pairs), 2};
  else if (plan.paired())
    plan.walkers = {std::min<int64_t>(plan.items, kernel.max_active_pairs), 1};
  else
    plan.walkers = {std::min(plan.items, resident), 1};

  if (p.layout == Layout::fixed && p.mask == MaskMode::dense && kernel.split_partial_bytes > 0 && !plan.dynamic_order) {
    plan.split_steps = ceil_div(p.kv_tokens, kernel.block_n);
    plan.split_slots = split_tail_slots(plan.slots(), plan.walkers.slots, plan.split_steps, knob(Knob::split_tail));
    if (plan.split_slots == 0) plan.split_steps = 0;
  }
  // Kernels that walk one tile per chunk (sm90a e4m3: kChunkedOrder) say so in tsattn_chunked_order.
  plan.tiles_per_chunk =
      kernel.chunked_order ? tiles_per_chunk(p, tile_rows, host_tiles, plan.max_tiles, plan.walkers, plan.dynamic_order)
                           : 1;

  plan.workspace = workspace_layout(p, plan, kernel);
  plan.plans_on_device = plan.tile_list == TileList::device_planned;
  plan.list_in_kernel = plan.plans_on_device && plan.dynamic_order && p.batch <= kernel.list_in_kernel_max_batch;
  if (kernel.transposed_v_keys > 0) {
    // One warp per 32-column group of a V^T row block; 4 warps per CTA, a few waves at most.
    const int64_t groups = kernel.transposed_v_keys / 32 * (p.layout == Layout::fixed ? p.batch : 1);
    const int64_t ctas = std::min<int64_t>((groups + 3) / 4, int64_t{multiprocessors} * 16);
    plan.transpose_ctas = static_cast<unsigned>(std::max<int64_t>(ctas, 1));
  }
  return plan;
}

std::vector<uint8_t> upload_image(const LaunchPlan& plan, const Problem& p) {
  const WorkspaceLayout& w = plan.workspace;
  std::vector<uint8_t> image(w.upload_bytes, 0);  // the work counter stays 0
  const auto put = [&](const Region& region, const void* data) {
    std::memcpy(image.data() + region.offset, data, region.bytes);
  };
  const int num_tiles = static_cast<int>(plan.host_tiles.size());
  put(w.tile_count, &num_tiles);
  const int ready = TSATTN_LIST_READY;  // the kernel builds nothing
  put(w.list_state, &ready);
  put(w.tiles, plan.host_tiles.data());
  put(w.qo_indptr, p.qo_indptr_host.data());
  put(w.kv_indptr, p.kv_indptr_host.data());
  return image;
}

void fill_launch_params(const LaunchPlan& plan, uint64_t workspace, TsattnPrefillParams& params) {
  const WorkspaceLayout& w = plan.workspace;
  const auto at = [&](const Region& region) {
    return region.present() ? reinterpret_cast<void*>(workspace + region.offset) : nullptr;
  };
  params.pair_tiles = plan.pair_axis == PairAxis::query_tiles ? 1 : 0;
  params.tiles_per_chunk = plan.tiles_per_chunk;
  if (w.tile_count.present()) {
    params.num_tiles = static_cast<const int*>(at(w.tile_count));
    params.tiles = static_cast<const TsattnTile*>(at(w.tiles));
  }
  if (w.qo_indptr.present()) {
    params.qo_indptr = static_cast<const int*>(at(w.qo_indptr));
    params.kv_indptr = static_cast<const int*>(at(w.kv_indptr));
  }
  if (plan.dynamic_order) params.work_counter = static_cast<unsigned long long*>(at(w.work_counter));
  if (plan.split_slots > 0) {
    params.split_slots = static_cast<int>(plan.split_slots);
    params.split_flags = static_cast<int*>(at(w.split_counts));
    params.split_partials = static_cast<float*>(at(w.split_partials));
  }
}

}  // namespace tsattn
