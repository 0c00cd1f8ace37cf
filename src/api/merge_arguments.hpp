// merge_arguments.hpp - the rules of tsattn_merge_state and tsattn_merge_states (docs/contract.md,
// "Merging attention states"): C views in, a MergeProblem out.
//
// Like validate.hpp for attention, nothing here touches the driver or device memory, and later
// stages (plan/merge_launch, api/merge_execute) never re-check arguments. Errors are tsattn::Error
// with the contract's kind and a message naming the argument and the offending value.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>

#include "api/tensor_checks.hpp"

namespace tsattn {

// One tensor seen over the merge's items: one stride per item dim (MergeProblem::shape), in elements.
struct MergeOperand {
  const void* data = nullptr;
  Dims strides;
};

// One validated merge. Its items are (query row, head) pairs: v's dims without D (merge_states:
// and without the states axis). Item c (a coordinate tuple) has n states: state 0 at v_first and
// s_first, state i >= 1 at v_rest and s_rest plus (i - 1) state strides, each offset by
// sum_k c_k * strides[k]; v holds D contiguous elements there, s one float.
struct MergeProblem {
  tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16;  // of every v tensor (float16, bfloat16 or float32)
  int device_id = 0;
  void* stream = nullptr;
  Dims shape;  // the item dims, outermost first
  int64_t head_dim = 0;
  int64_t num_states = 0;
  MergeOperand v_first, s_first, v_rest, s_rest;
  int64_t v_state_stride = 0, s_state_stride = 0;
  MergeOperand out, s_out;  // s_out.data null: the merged lse is not written

  int64_t items() const;
  // Nothing to write: no items, or D = 0 and no s_out. Such a merge launches nothing.
  bool writes_nothing() const;
};

struct MergeStateArguments {
  const tsattn_tensor_view* v_a = nullptr;
  const tsattn_tensor_view* s_a = nullptr;
  const tsattn_tensor_view* v_b = nullptr;
  const tsattn_tensor_view* s_b = nullptr;
  const tsattn_tensor_view* out = nullptr;
  const tsattn_tensor_view* s_out = nullptr;  // optional
  void* stream = nullptr;
};

struct MergeStatesArguments {
  const tsattn_tensor_view* v = nullptr;
  const tsattn_tensor_view* s = nullptr;
  const tsattn_tensor_view* out = nullptr;
  const tsattn_tensor_view* s_out = nullptr;  // optional
  void* stream = nullptr;
};

// v_a, v_b, out [..., H, D]; s_a, s_b, s_out [..., H]; two states per item.
MergeProblem validate_merge_state(const MergeStateArguments& args);
// v [..., n, H, D], s [..., n, H]; out [..., H, D], s_out [..., H]; n states per item.
MergeProblem validate_merge_states(const MergeStatesArguments& args);

std::string supported_merge_dtypes();  // "float16, bfloat16, float32"

}  // namespace tsattn
