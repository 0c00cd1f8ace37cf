// tensor_maps.hpp - the sm90a family's TMA descriptors for q, k and v (TsattnTensorMaps), or the
// reason a problem cannot have them.
//
// Two steps. plan_tensor_maps() holds the problem to TMA's rules and to the sm90a kernel's own
// (16-bit inputs, out written as aligned element pairs) and lays out what cuTensorMapEncodeTiled
// will be given; it is pure (no driver), so the rules are unit-tested without a GPU.
// encode_tensor_maps() hands that layout to the driver. Neither throws for any problem: every
// failure is a human-readable reason, and api/execute.cpp then runs the problem on the sm80 family.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>

#include "api/problem.hpp"
#include "prefill_params.h"

namespace tsattn {

// One rank-4 map {d, head, token, batch} of q, k or v, as cuTensorMapEncodeTiled takes it.
struct TensorMapGeometry {
  const char* tensor = "";   // "q", "k" or "v", for reasons
  void* base = nullptr;
  cuuint64_t dims[4] = {};     // elements: head_dim, heads, tokens, batch; each >= 1
  cuuint64_t strides[3] = {};  // bytes between neighbours along dims 1..3 (dim 0 is contiguous)
  cuuint32_t box[4] = {};      // {64, 1, rows, 1}: rows = BLOCK_M for q, BLOCK_N for k and v
};

struct TensorMapPlan {
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  TensorMapGeometry q, k, v;
};

struct TensorMapPlanOrReason {
  std::optional<TensorMapPlan> plan;
  std::string reason;  // why not, when plan is empty
};

struct TensorMapsOrReason {
  TsattnTensorMaps maps{};
  std::string reason;  // empty: maps holds q, k and v
  bool ok() const { return reason.empty(); }
};

// The three maps of p for a kernel with BLOCK_M block_m and BLOCK_N block_n, or the first rule
// p breaks. No driver call.
TensorMapPlanOrReason plan_tensor_maps(const Problem& p, int block_m, int block_n);

// cuTensorMapEncodeTiled for q, k and v; a non-success result becomes a reason naming the tensor
// and the CUresult. Needs the driver (a GPU is not needed to encode).
TensorMapsOrReason encode_tensor_maps(const TensorMapPlan& plan);

// Both steps. Builds no string when p is eligible.
TensorMapsOrReason make_tensor_maps(const Problem& p, int block_m, int block_n);

}  // namespace tsattn
