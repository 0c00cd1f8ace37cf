#include "codegen/spec_table.hpp"

#include <algorithm>
#include <array>
#include <optional>

namespace tsattn {

namespace {

constexpr std::array kAllDtypes{TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN};
constexpr std::array kAllMasks{MaskVariant::dense, MaskVariant::causal, MaskVariant::causal_window,
                               MaskVariant::variable_window};
constexpr std::array kAllLayouts{Layout::fixed, Layout::packed};
constexpr std::array kHeadDims{128, 256};

// The portable family runs on every arch tsattn targets: sm_80 cubins serve Ampere and Ada,
// and Hopper/Blackwell need their own cubins (SASS is not compatible across major versions).
constexpr std::array kSm80Archs{Arch::sm_80, Arch::sm_90a, Arch::sm_100, Arch::sm_120};

constexpr std::array<FamilyAxes, 1> kFamilies{{
    {KernelFamily::sm80, kSm80Archs, kHeadDims, kAllDtypes, kAllDtypes, kAllMasks, kAllLayouts},
}};

struct TileRow {
  KernelFamily family;
  int head_dim;
  std::optional<Arch> arch;  // nullopt: every arch without a row of its own
  TileConfig tile;
};

// sm80 tiles (registers and spills measured with ptxas for sm_80 and sm_90a;
// templates/sm80/config.cuh has the shared-memory layout). 8 warps of 16 query rows each.
// D128: 128 x 64 (100 KB of shared memory) fits every GPU from sm_80 on; 4 warps of 32 rows
// spill ~56 bytes. Hopper has 227 KB, so there 128 x 128 (160 KB, <= 236 registers) halves the
// key-loop barriers. D256: 128 x 32 (132 KB) fits A100 and Hopper; on Hopper 128 x 64 (198 KB,
// <= 252 registers, no spills) halves the key steps.
constexpr std::array<TileRow, 4> kTiles{{
    {KernelFamily::sm80, 128, Arch::sm_90a, {128, 128, 8}},
    {KernelFamily::sm80, 128, std::nullopt, {128, 64, 8}},
    {KernelFamily::sm80, 256, Arch::sm_90a, {128, 64, 8}},
    {KernelFamily::sm80, 256, std::nullopt, {128, 32, 8}},
}};

constexpr bool tiles_are_consistent() {
  for (const TileRow& row : kTiles) {
    // mma.sync tiles are 16 rows by 8 columns: every warp owns whole 16-row slices.
    if (row.tile.block_m % (16 * row.tile.num_warps) != 0) return false;
    if (row.tile.block_n % 16 != 0) return false;
    if (row.head_dim % 16 != 0) return false;
  }
  return true;
}
static_assert(tiles_are_consistent(), "every tile must split into whole mma.sync fragments per warp");

template <class T>
bool contains(std::span<const T> values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

const FamilyAxes* axes_of(KernelFamily family) {
  for (const FamilyAxes& axes : kFamilies)
    if (axes.family == family) return &axes;
  return nullptr;
}

}  // namespace

std::span<const FamilyAxes> kernel_families() { return kFamilies; }

bool is_supported(const KernelSpec& spec) {
  const FamilyAxes* axes = axes_of(spec.family);
  return axes && contains(axes->archs, spec.arch) && contains(axes->head_dims, spec.head_dim) &&
         contains(axes->input_dtypes, spec.input_dtype) && contains(axes->output_dtypes, spec.output_dtype) &&
         contains(axes->masks, spec.mask) && contains(axes->layouts, spec.layout);
}

std::vector<KernelSpec> all_specs(KernelFamily family, Arch arch) {
  std::vector<KernelSpec> specs;
  const FamilyAxes* axes = axes_of(family);
  if (axes == nullptr || !contains(axes->archs, arch)) return specs;
  for (int head_dim : axes->head_dims)
    for (tsattn_dtype input : axes->input_dtypes)
      for (tsattn_dtype output : axes->output_dtypes)
        for (MaskVariant mask : axes->masks)
          for (Layout layout : axes->layouts)
            specs.push_back({family, arch, mask, head_dim, input, output, layout});
  return specs;
}

TileConfig tile_config(const KernelSpec& spec) {
  for (const TileRow& row : kTiles)
    if (row.family == spec.family && row.head_dim == spec.head_dim && (!row.arch || *row.arch == spec.arch))
      return row.tile;
  return {0, 0, 0};
}

}  // namespace tsattn
