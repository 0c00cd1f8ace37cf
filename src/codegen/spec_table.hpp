// spec_table.hpp - the one table of truth: which kernels exist and how each is tiled.
//
// Dispatch, source generation, the AOT manifests and the tests all derive from this table.
// Adding a head dim, dtype or family starts here.
#pragma once

#include <span>
#include <vector>

#include "codegen/kernel_spec.hpp"

namespace tsattn {

// CTA tile of a kernel: BLOCK_M query rows against BLOCK_N keys per step, NUM_WARPS warps.
struct TileConfig {
  int block_m;
  int block_n;
  int num_warps;
};

struct FamilyAxes {
  KernelFamily family;
  std::span<const Arch> archs;
  std::span<const int> head_dims;
  std::span<const tsattn_dtype> input_dtypes;
  std::span<const tsattn_dtype> output_dtypes;
  std::span<const MaskVariant> masks;
  std::span<const Layout> layouts;
};

// The families this build can generate, with their axes.
std::span<const FamilyAxes> kernel_families();

// Whether the table has this spec (every axis value listed for its family).
bool is_supported(const KernelSpec& spec);

// Every spec of a family for one arch (the Cartesian product of its axes).
std::vector<KernelSpec> all_specs(KernelFamily family, Arch arch);

// The tile of a supported spec.
TileConfig tile_config(const KernelSpec& spec);

// How the kernel writes out. sm90a D128 kernels with 16-bit outputs stage each consumer warp's
// 16 x 128 block of O in shared memory (stmatrix) and store it as 16-byte row chunks: fewer, wider
// global stores at each item's end (docs/PERF.md, sm90a v13). Every other kernel stores element
// pairs from registers (D256 has no shared memory left for the staging; e4m3 outputs are 8-bit).
bool stages_output(const KernelSpec& spec);

// Whether a staging kernel hands each warp's block of O to TMA stores (maps.o, prefill_params.h)
// instead of storing the chunks itself: 16-bit inputs, masks other than dense (docs/PERF.md, sm90a
// v18). Dense 16-bit kernels stage O in their Q buffer, which the stores would hold from the
// producer (measured slower); e4m3-input kernels keep their own stores (any change around their
// loop moves its ptxas schedule, v14).
bool stores_output_by_tma(const KernelSpec& spec);

// Bytes one store of out writes (16 when staged, else two output elements): out's address and
// strides must be multiples of it (plan/tensor_maps.cpp).
int output_store_bytes(const KernelSpec& spec);

// Whether the spec's module also has tsattn_transpose_v, which must write V^T into a workspace
// before the attention kernel runs (sm90a with e4m3 inputs; prefill_params.h says the layout).
bool transposes_v(const KernelSpec& spec);

}  // namespace tsattn
