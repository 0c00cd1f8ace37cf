#include "plan/plan_capacity.hpp"

#include <algorithm>
#include <limits>

#include "prefill_params.h"

namespace tsattn {

namespace {

size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

}  // namespace

size_t launch_workspace_bound(const Capacity& c, const KernelFacts& kernel, int multiprocessors) {
  if (c.layout == Layout::packed) {
    // The device-planned list: tile count, work counter, then at most one tile per BLOCK_M rows
    // plus one partial tile per request (pairs along query tiles plan fewer, larger tiles).
    const int64_t tiles =
        std::min<int64_t>(ceil_div(c.q_tokens(), kernel.block_m) + c.batch, std::numeric_limits<int>::max());
    return 32 + static_cast<size_t>(tiles) * sizeof(TsattnTile);
  }
  size_t bytes = kernel.dynamic_order ? sizeof(unsigned long long) : 0;
  if (c.mask == MaskMode::dense && kernel.split_partial_bytes > 0) {
    // A split tail: per CTA of the walkers, 8 counts and two partial buffers. Walkers never exceed
    // the resident CTAs, or the resident clusters of two.
    const int64_t resident = int64_t{multiprocessors} * kernel.ctas_per_multiprocessor;
    const int64_t ctas = std::max(resident, kernel.pairs ? 2 * int64_t{kernel.max_active_pairs} : 0);
    // After the work counter when the kernel has one (it keeps its bytes: plan_launch), which
    // moves the 256-byte aligned partials by at most 256 bytes.
    const size_t counter = kernel.dynamic_order ? 256 : 0;
    const size_t split = counter + align_up(static_cast<size_t>(ctas) * 8 * sizeof(int), 256) +
                         static_cast<size_t>(ctas) * 2 * static_cast<size_t>(kernel.split_partial_bytes);
    bytes = std::max(bytes, split);
  }
  return bytes;
}

uint64_t transposed_v_bound(const Capacity& c) {
  const int64_t keys = std::max<int64_t>(
      c.layout == Layout::packed ? TSATTN_VT_PACKED_START(c.kv_tokens(), c.batch) : TSATTN_VT_FIXED_KEYS(c.kv_tokens()),
      32);
  const int64_t batch = c.layout == Layout::fixed ? c.batch : 1;
  return static_cast<uint64_t>(keys) * static_cast<uint64_t>(c.head_dim) * static_cast<uint64_t>(c.num_kv_heads) *
         static_cast<uint64_t>(batch);
}

PlanWorkspace plan_workspace(const Capacity& c, const KernelFacts& kernel, int multiprocessors, bool transposes_v) {
  PlanWorkspace w;
  w.launch = {0, launch_workspace_bound(c, kernel, multiprocessors)};
  size_t end = align_up(w.launch.bytes, 256);
  if (c.layout == Layout::packed) {
    w.indptrs = {end, 2 * static_cast<size_t>(c.batch + 1) * sizeof(int32_t)};
    end = align_up(end + w.indptrs.bytes, 256);
  }
  if (transposes_v) {
    w.transposed_v = {end, static_cast<size_t>(transposed_v_bound(c))};
    end = align_up(end + w.transposed_v.bytes, 256);
  }
  w.bytes = end;
  return w;
}

int64_t max_items_bound(const Capacity& c, int block_m) {
  return (ceil_div(c.q_tokens(), block_m) + c.batch) * c.num_qo_heads;
}

void clamp_to_capacity(Problem& p, const Capacity& c) {
  p.batch = std::min(p.batch, c.batch);
  p.q_tokens = std::min(p.q_tokens, c.q_tokens());
  p.kv_tokens = std::min(p.kv_tokens, c.kv_tokens());
}

}  // namespace tsattn
