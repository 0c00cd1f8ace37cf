// merge_spec.hpp - the merge modules (tsattn_merge_state, tsattn_merge_states): one per cubin arch and
// v dtype, each holding one kernel that serves both calls (templates/merge/merge_state.cuh).
//
// Shapes, strides, the number of states and the access width are run-time parameters
// (TsattnMergeParams), so these few modules serve every merge. They go through the prefill kernels'
// kernel cache and disk layers under their own canonical names, "merge.<arch>.<dtype>".
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernel_source.hpp"
#include "codegen/kernel_spec.hpp"

namespace tsattn {

struct MergeSpec {
  Arch arch = Arch::sm_90a;
  tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16;  // of v (in and out); lse is always float32

  bool operator==(const MergeSpec&) const = default;
  // A dense number for in-memory tables; merge modules have tables of their own, so it may repeat
  // a KernelSpec's id.
  uint32_t id() const;
};

// The v dtypes a merge takes: float16, bfloat16, float32.
std::span<const tsattn_dtype> merge_dtypes();
bool is_supported(const MergeSpec& spec);

const char* merge_dtype_name(tsattn_dtype dtype);  // "f16", "bf16", "f32"
std::optional<tsattn_dtype> parse_merge_dtype(std::string_view text);

// "merge.sm_90a.bf16": logs, errors, cache metadata, manifests' "merge" lists; with '.' -> '_' the
// kernel symbol.
std::string canonical_name(const MergeSpec& spec);
std::string kernel_symbol(const MergeSpec& spec);

// Every merge module for one arch, in merge_dtypes() order.
std::vector<MergeSpec> all_merge_specs(Arch arch);

// Throws Error(not_implemented) for a dtype merge_dtypes() lacks.
GeneratedSource generate_source(const MergeSpec& spec);

}  // namespace tsattn
