// gather_spec.hpp - the page gather modules of batch_prefill_with_paged_kv_cache: one per cubin
// arch, each holding the key-count scan and the copy of pages into packed K and V
// (templates/paged/gather_pages.cuh).
//
// The copy moves bytes, so one module serves every dtype, head count, head dim, page size and
// layout: all of them are run-time parameters (TsattnGatherParams). The modules go through the
// prefill kernels' kernel cache and disk layers under their own canonical names,
// "gather_pages.<arch>".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_source.hpp"
#include "codegen/kernel_spec.hpp"

namespace tsattn {

struct GatherSpec {
  Arch arch = Arch::sm_90a;

  bool operator==(const GatherSpec&) const = default;
  // A dense number for in-memory tables; gather modules have tables of their own, so it may repeat
  // a KernelSpec's or a MergeSpec's id.
  uint32_t id() const;
};

bool is_supported(const GatherSpec& spec);

// "gather_pages.sm_90a": logs, errors, cache metadata; with '.' -> '_' the copy kernel's symbol.
std::string canonical_name(const GatherSpec& spec);
std::string kernel_symbol(const GatherSpec& spec);
// The scan kernel's symbol: kernel_symbol() + "_scan".
std::string scan_symbol(const GatherSpec& spec);

// The gather module of each arch, in the given order, without repeats.
std::vector<GatherSpec> gather_specs(const std::vector<Arch>& archs);

// Throws Error(not_implemented) for an arch tsattn does not build for.
GeneratedSource generate_source(const GatherSpec& spec);

}  // namespace tsattn
