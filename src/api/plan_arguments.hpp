// plan_arguments.hpp - the argument rules of plans (docs/contract.md, "Plan once, run every
// layer"): the plan options, checked once at creation, and each run's tensors, either checked
// against the plan as the one-shot call checks them plus the capacities (validate), or only read
// (no validation: structure that the reads themselves depend on, nothing else).
//
// Errors are tsattn::Error with the contract's kinds and messages naming the argument and value.
// No driver here: tests/api/test_plan_arguments.cpp runs every rule without a GPU.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>

#include "api/problem.hpp"
#include "api/validate.hpp"
#include "plan/plan_capacity.hpp"

namespace tsattn {

// What a plan fixes, checked.
struct PlanSettings {
  Capacity capacity;      // layout, mask, capacities, heads, head dim
  ScalarOptions scalars;  // as given (out_dtype resolved): a checked run applies them as the one-shot call would
  // Every Problem field that no run changes: layout, heads, head dim, dtypes, mask, window, scales,
  // device. A run adds its tensors, lengths and stream.
  Problem base;
};

PlanSettings check_plan_options(const tsattn_prefill_plan_options* options);

// One run's tensors (views may be null where the contract allows it).
struct RunViews {
  const tsattn_tensor_view* q = nullptr;
  const tsattn_tensor_view* k = nullptr;
  const tsattn_tensor_view* v = nullptr;
  const tsattn_tensor_view* qo_indptr = nullptr;
  const tsattn_tensor_view* kv_indptr = nullptr;
  const tsattn_tensor_view* out = nullptr;
  const tsattn_tensor_view* starts = nullptr;  // variable-window bounds
  const tsattn_tensor_view* ends = nullptr;
  const tsattn_tensor_view* lse = nullptr;  // the log-sum-exp output, or null
};

// Every rule of the one-shot call (validate_arguments) and, against the plan, the layout, dtypes,
// heads, head dim, device and capacities (host indptr values per request included).
Problem checked_run_problem(const PlanSettings& plan, const RunViews& views, void* stream);

// The run as given, with only what reading it needs: present views of the plan's ranks, dtypes,
// heads and head dim, out shaped like q, v like k, bounds like q's rows. Lengths are then clamped
// to the capacities (clamp_to_capacity); indptr values are never read here.
Problem unchecked_run_problem(const PlanSettings& plan, const RunViews& views, void* stream);

}  // namespace tsattn
