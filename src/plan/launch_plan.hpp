// launch_plan.hpp - everything one attention launch needs, as a value: the pair axis, the work
// list, the order, the walkers, the split tail, the workspace's regions, the grids and which
// launches run.
//
// plan_launch() reads the Problem and facts copied out of the loaded kernel; it makes no driver
// call, allocates no device memory, and its result depends on its arguments alone (knobs come
// through a reader), so every decision is unit-tested on the CPU (tests/plan/test_launch_plan.cpp).
// api/execute.cpp allocates the workspace, fills it and the parameters from the plan, and
// launches what it says. The choices themselves stay in their helpers (cta_pairs, host_plan,
// work_order, split_tail); this file composes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "api/problem.hpp"
#include "common/knobs.hpp"
#include "plan/cta_pairs.hpp"
#include "plan/work_order.hpp"
#include "prefill_params.h"

namespace tsattn {

// What the plan needs of the loaded kernel (driver::LoadedKernel) and of the kernel choice.
struct KernelFacts {
  int block_m = 0;
  int block_n = 0;              // the table's tile (sm90a); a split tail counts key tiles of it
  bool dynamic_order = false;   // the kernel can claim items from params.work_counter
  bool chunked_order = true;    // the kernel reads params.tiles_per_chunk
  int split_partial_bytes = 0;  // one part's buffer of a split slot; 0: no split tail
  int ctas_per_multiprocessor = 0;
  bool pairs = false;  // a pairs kernel, and a cluster of two fits on the device
  bool pairs_along_tiles = false;
  int max_active_pairs = 0;
  int64_t transposed_v_keys = 0;     // keys per V^T row when the kernel reads V^T (sm90a e4m3); 0: none
  int list_in_kernel_max_batch = 0;  // driver::LoadedKernel's: the kernel builds its packed list
};

// A TSATTN_* knob's value (knob_string in a call, a table in tests). The plan asks only for the
// knobs that steer a choice it makes, so an invalid value fails only the calls it would steer.
using KnobReader = std::function<std::string(Knob)>;

// Bytes [offset, offset + bytes) of the workspace; absent when bytes is 0.
struct Region {
  size_t offset = 0;
  size_t bytes = 0;
  bool present() const { return bytes > 0; }
};

// The call's one stream-ordered workspace. Every region starts at a 16-byte boundary (the list's
// state word 4 bytes after the tile count, the split partials at 256). By layout:
//   fixed: the work counter (kernels that can claim dynamically, unless the launch is in static
//     order without a split tail: then no workspace), then the split tail's counts and partials;
//   packed, host indptrs: tile count, the list's state word (4 bytes after the count, ready),
//     tiles, qo and kv indptr copies, work counter, all uploaded;
//   packed, GPU indptrs: tile count, the list's state word, work counter and room for max_tiles
//     tiles (the planner writes all of them, or the kernel itself: LaunchPlan::list_in_kernel).
struct WorkspaceLayout {
  size_t bytes = 0;         // 0: no workspace
  size_t upload_bytes = 0;  // [0, upload_bytes) is upload_image()
  Region tile_count, list_state, work_counter, tiles, qo_indptr, kv_indptr, split_counts, split_partials;
  // The fixed layout's dynamic order reads the counter: it must be zero at launch. Fresh memory
  // is cleared before the launch (cuMemsetD32Async); a plan's workspace is zeroed once, and every
  // launch leaves the counter at zero (prefill_params.h). The split counts are always cleared.
  bool clear_work_counter = false;
};

enum class TileList {
  implicit,        // fixed layout: the kernel enumerates the regular tile grid itself
  host_planned,    // packed, host indptrs: host_tiles, uploaded
  device_planned,  // packed, GPU indptrs: the device planner writes the list first
};

struct LaunchPlan {
  PairAxis pair_axis = PairAxis::none;
  int64_t tile_rows = 0;  // rows per tile of the list (2 x BLOCK_M for pairs along query tiles)
  TileList tile_list = TileList::implicit;
  std::vector<TsattnTile> host_tiles;  // host_planned: every tile, heaviest first
  int64_t max_tiles = 0;               // an upper bound on the tiles the kernel sees
  // (query tiles + requests) x query heads: what a dynamic-order kernel must number below 2^31.
  int64_t max_items = 0;
  int64_t items = 0;      // max_tiles x query heads; 0: nothing to launch
  bool launches = false;  // items > 0; nothing below is planned otherwise
  bool dynamic_order = false;
  ListWalkers walkers;      // the grid: CTA pairs (clusters of 2) when paired, else CTAs
  int64_t split_slots = 0;  // the last slots that go out by key tiles (params.split_slots); 0: none
  int64_t split_steps = 0;  // key tiles per slot, with a split tail
  int tiles_per_chunk = 1;
  WorkspaceLayout workspace;
  bool plans_on_device = false;  // the list is built on the device (max_tiles tiles at most)
  // ... by the attention kernel itself, no planner launch, where the list's state word is known
  // to be 0 (LaunchMemory::list_state_zero): dynamic order, a kernel that can, a small batch.
  bool list_in_kernel = false;
  unsigned transpose_ctas = 0;  // the V^T pre-pass: x CTAs of 128 threads by kv heads; 0: none

  bool paired() const { return pair_axis != PairAxis::none; }
  int64_t slots() const { return items / walkers.items_per_slot; }
};

LaunchPlan plan_launch(const Problem& p, const KernelFacts& kernel, int multiprocessors, const KnobReader& knob);

// The bytes [0, plan.workspace.upload_bytes) of a host-planned list's workspace: the tile count,
// the tiles, the indptr copies and a zero work counter, zeros between them.
std::vector<uint8_t> upload_image(const LaunchPlan& plan, const Problem& p);

// The parameters the plan decides, for a workspace at device address `workspace`: pair_tiles,
// tiles_per_chunk, split_slots and the workspace's pointers (num_tiles, tiles, the uploaded
// indptrs, work_counter in dynamic order, split_flags, split_partials). make_kernel_params() sets
// the rest.
void fill_launch_params(const LaunchPlan& plan, uint64_t workspace, TsattnPrefillParams& params);

}  // namespace tsattn
