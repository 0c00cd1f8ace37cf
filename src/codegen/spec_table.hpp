// spec_table.hpp - the one table of truth: which kernels exist and how each is tiled.
//
// Dispatch, source generation, the AOT manifests and the tests all derive from this table.
// Adding a head dim, dtype or family starts here.
#pragma once

#include <span>
#include <vector>

#include "codegen/kernel_spec.hpp"
#include "kernel_codes.h"

namespace tsattn {

// CTA tile of a kernel: BLOCK_M query rows against BLOCK_N keys per step, NUM_WARPS warps.
struct TileConfig {
  int block_m;
  int block_n;
  int num_warps;

  bool operator==(const TileConfig&) const = default;
};

struct FamilyAxes {
  KernelFamily family;
  std::span<const Arch> archs;
  std::span<const int> head_dims;
  std::span<const tsattn_dtype> input_dtypes;
  std::span<const tsattn_dtype> output_dtypes;
  std::span<const MaskVariant> masks;
  std::span<const Layout> layouts;
  std::span<const bool> lse;  // kernels without and with the log-sum-exp output
  // Kernels of the usual key tiles and, where has_short_keys_variant() says so, their variants
  // for short key ranges (KernelSpec::short_keys).
  std::span<const bool> short_keys;
  // Kernels that read packed K and V and, where has_paged_kv_variant() says so, their variants
  // that read page pools (KernelSpec::paged_kv).
  std::span<const bool> paged_kv;
};

// The codes a generated source gives a spec's dtypes and mask (templates/kernel_codes.h).
constexpr int kernel_dtype_code(tsattn_dtype dtype) {
  switch (dtype) {
    case TSATTN_DTYPE_FLOAT16: return tsattn_dev::kFloat16;
    case TSATTN_DTYPE_BFLOAT16: return tsattn_dev::kBfloat16;
    default: return tsattn_dev::kE4m3;  // float8_e4m3fn; is_supported() admits nothing else
  }
}

constexpr int kernel_mask_code(MaskVariant mask) {
  switch (mask) {
    case MaskVariant::dense: return tsattn_dev::kMaskDense;
    case MaskVariant::causal:
    case MaskVariant::causal_window: return tsattn_dev::kMaskCausal;
    case MaskVariant::variable_window: return tsattn_dev::kMaskVariableWindow;
  }
  return tsattn_dev::kMaskDense;
}

// The families this build can generate, with their axes.
std::span<const FamilyAxes> kernel_families();

// Whether a spec (its short_keys axis aside) has a variant for short key ranges: the sm90a family
// with 16-bit inputs, D128 dense (160 keys per step, the variant 128) and D256 dense and plain
// causal (80, the variant 64; sm90a/kernel_traits.h, block_n_for). Every other kind keeps one width.
bool has_short_keys_variant(const KernelSpec& spec);

// Whether a spec (its paged_kv axis aside) has a variant that reads K and V from page pools: the
// sm90a family, the packed layout, D128, 16-bit inputs and at most 128-key tiles (dense kernels:
// their short-key variant). Paged calls of any mask on such a spec's family, layout, head dim and
// input dtype therefore read pages (reads_pages_directly, api/kernel_choice.hpp); all others gather
// them first.
bool has_paged_kv_variant(const KernelSpec& spec);

// Whether the table has this spec (every axis value listed for its family; short_keys only where
// has_short_keys_variant, paged_kv only where has_paged_kv_variant).
bool is_supported(const KernelSpec& spec);

// Every spec of a family for one arch (the Cartesian product of its axes, less the short-key and
// paged variants of specs that have none).
std::vector<KernelSpec> all_specs(KernelFamily family, Arch arch);

// The tile of a supported spec.
TileConfig tile_config(const KernelSpec& spec);

// What the host must know of a kernel beyond its tile, decided where the kernel's own settings are
// (sm90a: traits_for() in templates/sm90a/kernel_traits.h, which the kernel itself calls). A
// loaded module confirms these through its globals (jit/driver/module_table.cpp). The lse axis is
// not among traits_for()'s inputs: a kernel and its lse twin have the same traits, and so do a
// kernel and its paged variant (only the producer's loads differ). The short_keys
// axis is: the variant's tile is 128 keys wide, and what follows from that (registers, shared memory).
struct KernelTraits {
  TileConfig tile{};
  bool staged_output = false;      // O through shared memory (sm90a D128 with a 16-bit output)
  bool tma_output = false;         // ... then TMA stores (maps.o, prefill_params.h)
  int output_store_bytes = 4;      // one store of out: out's address and strides are multiples of it
  bool chunked_order = true;       // the kernel decodes the list in chunks of params.tiles_per_chunk
  bool dynamic_order = false;      // the kernel claims slots from params.work_counter when it is set
  bool narrow_walk = false;        // the kernel numbers its work items in 32 bits (fewer than 2^31)
  int split_partial_bytes = 0;     // one part's buffer in params.split_partials; 0: no split tail
  bool pairs = false;              // the module has <symbol>_pairs, for clusters of 2 CTAs
  bool pairs_along_tiles = false;  // ... which also pairs along query tiles (params.pair_tiles)
  int dynamic_smem_bytes = 0;      // 0: the module says (sm80 computes its layout in the kernel)

  bool operator==(const KernelTraits&) const = default;
};

KernelTraits kernel_traits(const KernelSpec& spec);

// Shorthands of kernel_traits(spec) for the TMA maps (plan/tensor_maps.hpp).
bool stages_output(const KernelSpec& spec);
bool stores_output_by_tma(const KernelSpec& spec);
int output_store_bytes(const KernelSpec& spec);

// Whether the spec's module also has tsattn_transpose_v, which must write V^T into a workspace
// before the attention kernel runs (sm90a with e4m3 inputs; prefill_params.h says the layout).
bool transposes_v(const KernelSpec& spec);

}  // namespace tsattn
