// tensor_maps.hpp - the sm90a family's TMA descriptors for q, k, v and (for kernels that store
// their output through TMA) out (TsattnTensorMaps), or the reason a problem cannot have them.
//
// Two steps. plan_tensor_maps() holds the problem to TMA's rules and to the sm90a kernel's own
// (out written in aligned stores of out_store_bytes: codegen/spec_table.hpp) and lays out what
// cuTensorMapEncodeTiled will be given; it is pure (no driver), so the rules are unit-tested
// without a GPU. encode_tensor_maps() hands that layout to the driver. Neither throws for any
// problem: every failure is a human-readable reason, and api/execute.cpp then runs the problem on
// the sm80 family.
//
// Paged calls on a paged kernel (Problem::paged): k and v map the page pools as {d, head, slot,
// page} with boxes of one page (page_size rows): a paged kernel's 128-key tile is whole pages;
// maps.pages carries the tables (prefill_params.h, TsattnPageTable).
//
// e4m3 inputs: the kernel reads V^T from a per-call workspace (prefill_params.h), so v's map
// describes that workspace; its base is known only once the workspace exists, and
// encode_transposed_v_map() encodes it then.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>

#include "api/problem.hpp"
#include "prefill_params.h"

namespace tsattn {

// One rank-4 map of q, k, v or out, as cuTensorMapEncodeTiled takes it: {d, head, token, batch},
// for page pools {d, head, slot, page}, for V^T {key, d, kv head, batch}.
struct TensorMapGeometry {
  const char* tensor = "";  // "q", "k", "v", "out" or "v^T", for reasons
  void* base = nullptr;
  cuuint64_t dims[4] = {};     // elements, each >= 1
  cuuint64_t strides[3] = {};  // bytes between neighbours along dims 1..3 (dim 0 is contiguous)
  cuuint32_t box[4] = {};      // {128 / element bytes, 1, rows, 1}: rows = BLOCK_M for q, BLOCK_N
                               // for k and v (pools: page_size), a warp's 16 for
                               // out; V^T: {128, D, 1, 1}
};

// V^T of e4m3 inputs in its workspace (prefill_params.h): keys per row, the workspace's size, and
// the map with a null base.
struct TransposedV {
  int64_t keys = 0;  // a multiple of 32
  uint64_t bytes = 0;
  TensorMapGeometry map;
};

struct TensorMapPlan {
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  TensorMapGeometry q, k, v;             // v unused when transposed_v is set
  std::optional<TsattnPageTable> pages;  // paged calls: the tables, copied into maps.pages
  std::optional<TransposedV> transposed_v;
  std::optional<TensorMapGeometry> out;  // kernels that store out through TMA
  CUtensorMapDataType out_data_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
};

struct TensorMapPlanOrReason {
  std::optional<TensorMapPlan> plan;
  std::string reason;  // why not, when plan is empty
};

struct TensorMapsOrReason {
  TsattnTensorMaps maps{};
  std::string reason;  // empty: maps holds q, k, v (not yet when transposed_v is set), o if planned
                       // and the page tables of a paged call
  std::optional<TransposedV> transposed_v;
  bool ok() const { return reason.empty(); }
};

// How a kernel reads and writes, as far as its maps go: BLOCK_M, BLOCK_N, the bytes of one plain
// store of out (output_store_bytes of its spec), and whether it stores out through TMA
// (stores_output_by_tma), in boxes of kOutMapRows rows.
struct MapShape {
  int block_m = 0, block_n = 0;
  int out_store_bytes = 4;
  bool out_map = false;
};
constexpr int kOutMapRows = 16;  // one consumer warp's rows of O

// Paged kernels address key j of a request as the paged key first_entry * page_size + j in 32 bits
// (templates/sm90a/producer.cuh), with room for 2^31 keys past the last entry: tables of at most
// 2^31 / page_size entries. Larger tables are a reason (plan_tensor_maps); one-shot calls gather.
bool paged_keys_fit(int64_t entries, int64_t page_size);

// The maps of p for a kernel of that shape, or the first rule p breaks. No driver call.
TensorMapPlanOrReason plan_tensor_maps(const Problem& p, const MapShape& shape);

// cuTensorMapEncodeTiled for q, k, v and out; a non-success result becomes a reason naming the
// tensor and the CUresult. Needs the driver (a GPU is not needed to encode).
TensorMapsOrReason encode_tensor_maps(const TensorMapPlan& plan);

// The maps a plan's last run encoded, by role, so that its next run encodes only what changed (a
// plan mostly sees the same tensors again). A map is reused when its data type and geometry (base
// included) are the ones it was encoded from.
struct TensorMapCache {
  struct Entry {
    bool valid = false;
    CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    TensorMapGeometry geometry;
    TsattnTmaDescriptor map{};
  };
  Entry q, k, v, out;
};

// encode_tensor_maps() through the cache: the same maps, fewer driver calls.
TensorMapsOrReason encode_tensor_maps(const TensorMapPlan& plan, TensorMapCache& cache);

// Both steps. Builds no string when p is eligible.
TensorMapsOrReason make_tensor_maps(const Problem& p, const MapShape& shape);

// Encodes V^T's map for a workspace at `base` into `out`; throws Error(runtime) if the driver
// refuses (the geometry is the library's own, so that is a bug, not a property of the call).
void encode_transposed_v_map(const TransposedV& transposed, void* base, TsattnTmaDescriptor& out);

}  // namespace tsattn
