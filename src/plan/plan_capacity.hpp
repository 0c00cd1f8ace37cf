// plan_capacity.hpp - what a plan (api/prefill_plan.hpp) owns so that every run within its
// capacities fits: bounds on the launch workspace plan_launch() lays out for any such run, on V^T's
// buffer (e4m3 on sm90a) and on the plan's copies of host indptrs; and the clamp that keeps a run
// whose tensors were not checked (validate = false) within those bounds.
//
// The bounds are formulas of the capacities and the kernel's facts, not plan_launch() at the
// largest shape: tests/plan/test_plan_capacity.cpp checks them against plan_launch() over many
// shapes. Pure: no driver, no knobs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"
#include "plan/launch_plan.hpp"

namespace tsattn {

struct Capacity {
  Layout layout = Layout::fixed;
  MaskMode mask = MaskMode::dense;
  int64_t batch = 1;       // requests per run
  int64_t max_q_len = 1;   // queries per request
  int64_t max_kv_len = 1;  // keys per request
  int num_qo_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 128;

  // The largest Problem::q_tokens and kv_tokens of a run: Sq and Sk (fixed layout), total_q and
  // total_k (packed layout).
  int64_t q_tokens() const { return layout == Layout::fixed ? max_q_len : batch * max_q_len; }
  int64_t kv_tokens() const { return layout == Layout::fixed ? max_kv_len : batch * max_kv_len; }
};

// The plan's one device buffer: [launch | indptrs | transposed_v], each region 256-byte aligned.
struct PlanWorkspace {
  Region launch;        // any run's plan.workspace, at offset 0 (its regions' offsets are its own)
  Region indptrs;       // packed: qo_indptr then kv_indptr copies, batch + 1 int32 each
  Region transposed_v;  // e4m3 on sm90a (transposes_v): V^T of any run
  size_t bytes = 0;
};

// Bytes of plan_launch()'s workspace for any run within c (packed runs plan their list on the
// device) on a device of `multiprocessors`.
size_t launch_workspace_bound(const Capacity& c, const KernelFacts& kernel, int multiprocessors);

// Bytes of V^T (plan/tensor_maps.hpp, TransposedV) for any run within c.
uint64_t transposed_v_bound(const Capacity& c);

PlanWorkspace plan_workspace(const Capacity& c, const KernelFacts& kernel, int multiprocessors, bool transposes_v);

// Work items (query tiles + requests, x query heads) a run within c may number: what a dynamic-order
// kernel must keep below 2^31.
int64_t max_items_bound(const Capacity& c, int block_m);

// Shrinks p's batch and token counts to c's (a prefix of every tensor: never out of its bounds),
// so that its launch fits the bounds above.
void clamp_to_capacity(Problem& p, const Capacity& c);

}  // namespace tsattn
