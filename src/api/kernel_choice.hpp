// kernel_choice.hpp - which kernel runs a problem, and its loaded module: the family (sm90a on
// compute capability 9.x, else sm80; TSATTN_KERNEL_FAMILY), the spec, the sm90a tile and TMA
// descriptors, and the fallback to sm80 when the table or TMA says no. Shared by the one-shot call
// (api/execute.cpp) and plans (api/prefill_plan.cpp).
#pragma once

#include <cuda.h>

#include <optional>

#include "api/problem.hpp"
#include "codegen/kernel_spec.hpp"
#include "codegen/spec_table.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/module_table.hpp"
#include "plan/launch_plan.hpp"
#include "plan/tensor_maps.hpp"

namespace tsattn {

// What runs a problem: its spec and, for the sm90a family, the spec's tile and TMA descriptors
// (for e4m3 inputs v's map is encoded once the V^T workspace exists).
struct KernelChoice {
  KernelSpec spec;
  TileConfig tile{};
  TsattnTensorMaps maps{};
  std::optional<TransposedV> transposed_v{};
};

// The cubin arch of the device; Error(not_implemented) for GPUs older than sm_80.
Arch device_arch(const driver::DeviceInfo& device);

// The family's spec for p without its maps; an sm90a spec the table lacks becomes the sm80 spec of
// the same problem (logged). Reads only what changes generated code (mask, head dim, dtypes,
// layout, whether p's keys are in pages: p.paged); `lse` picks the kernel that writes the
// log-sum-exp output, `short_keys` the variant for short key ranges where the spec has one
// (has_short_keys_variant; else it is ignored). A paged p takes the paged variant, and for the dense
// mask its short-key width (the one paged dense kernel); one without a paged variant is an
// Error(runtime): its caller should have gathered the pages (reads_pages_directly).
KernelChoice choose_spec(const Problem& p, const driver::DeviceInfo& device, Arch arch, bool lse,
                         bool short_keys = false);

// Whether paged calls of this input dtype, head dim and page size run a paged variant on `device`,
// which reads the pages itself: its family's table has them (has_paged_kv_variant), and
// TSATTN_PAGED_KV is "kernel", or "auto" with pages of at least kSmallestPagesReadInKernel keys.
// Otherwise the call gathers the pages into packed K and V and runs the packed kernel over them.
bool reads_pages_directly(const driver::DeviceInfo& device, Arch arch, tsattn_dtype input_dtype, int head_dim,
                          int64_t page_size);

// How an sm90a choice reads and writes, for plan_tensor_maps().
MapShape map_shape(const KernelChoice& choice);

// choose_spec for p's call (the lse kernel exactly when p has an lse output; the short-key variant
// where the spec has one and wants_short_keys (plan/short_keys.hpp) says so for p's lengths and
// TSATTN_SHORT_KEYS), then for sm90a p's TMA descriptors; a problem that cannot have them runs on
// sm80 (a paged p, whose keys no sm80 kernel can read, raises instead).
KernelChoice choose_kernel(const Problem& p, const driver::DeviceInfo& device, Arch arch);

// The module of choice.spec in `context` (current), loaded (and compiled) on first use. The entry
// lives as long as the process.
const driver::LoadedKernel& load_kernel(CUcontext context, const KernelChoice& choice);

// What plan_launch() needs of the loaded kernel and the choice.
KernelFacts kernel_facts(const driver::LoadedKernel& kernel, const KernelChoice& choice);

}  // namespace tsattn
