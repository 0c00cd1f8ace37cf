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

// The Hopper family needs wgmma and setmaxnreg, which exist only in the arch-specific sm_90a
// target (an sm_90a cubin runs on compute capability 9.0 only). Its q, k and v arrive through TMA
// descriptors (plan/tensor_maps.hpp); e4m3 inputs read V^T, written by a transpose kernel in the
// same module (transposes_v below), because 8-bit wgmma reads its B operand only K-major.
constexpr std::array kSm90aArchs{Arch::sm_90a};

constexpr std::array<FamilyAxes, 2> kFamilies{{
    {KernelFamily::sm80, kSm80Archs, kHeadDims, kAllDtypes, kAllDtypes, kAllMasks, kAllLayouts},
    {KernelFamily::sm90a, kSm90aArchs, kHeadDims, kAllDtypes, kAllDtypes, kAllMasks, kAllLayouts},
}};

// The first row that matches a spec gives its tile, so specific rows come before general ones.
struct TileRow {
  KernelFamily family;
  int head_dim;
  std::optional<Arch> arch;          // nullopt: every arch
  std::optional<MaskVariant> mask;   // nullopt: every mask
  std::optional<tsattn_dtype> input;  // nullopt: every input dtype
  TileConfig tile;
};

// sm80 tiles (registers and spills measured with ptxas for sm_80 and sm_90a;
// templates/sm80/config.cuh has the shared-memory layout). 8 warps of 16 query rows each.
// D128: 128 x 64 (100 KB of shared memory) fits every GPU from sm_80 on; 4 warps of 32 rows
// spill ~56 bytes. Hopper has 227 KB, so there 128 x 128 (160 KB, <= 236 registers) halves the
// key-loop barriers. D256: 128 x 32 (132 KB) fits A100 and Hopper; on Hopper 128 x 64 (198 KB,
// <= 252 registers, no spills) halves the key steps.
//
// sm90a tiles (templates/sm90a/prefill_sm90a.cuh): 12 warps = one producer warpgroup (TMA into
// 2-stage K/V rings) and two consumer warpgroups of 64 query rows each (m64 wgmmas), so BLOCK_M is
// 128. BLOCK_N is the N of the QK^T wgmma and the K of the PV wgmma. D128 takes 128 keys per step:
// S is 64 fp32 registers per consumer thread next to O's 64. D256 takes 64 keys, 80 for dense and
// causal masks: O alone is 128 registers per thread, and Q (64 KB) plus two stages of K and V
// (2 x 2 x 40 KB at 80 keys) take 224 of the 227 KB; 128 keys would need 320 KB. 80 measured
// +5-13% over 64 for dense and causal (docs/PERF.md, sm90a v5); windows keep 64 (not measured at
// 80; at D128 longer steps lost 7% on a 1K window: more of each band-edge tile is masked).
// Dense D128 takes 160 keys per step (FA3 takes 176 there): a dense tile has no diagonal, so
// longer steps only amortize the per-step softmax and barrier work; with 240 consumer registers
// S (80) + P (40) + O (64) fit, 176 spilled.
// e4m3 D128 takes 192 keys per step: the GEMMs take half the tensor time of 16-bit ones while the
// softmax does the same exp work per key, so the per-step overhead (barriers, O rescale, row
// maxima) is spread over more keys (variable windows, whose producer needs 40 registers, spilled
// at 192 and keep 128). Dense takes 256 since v15's serial two-level loop fits it: e4m3 D128 dense
// S8K +3.4%, S2K +5.3% on the H200 (docs/PERF.md, sm90a v15). D256 takes 128 (S 64 + P 16 + O 128
// registers), variable windows 64 (their row ranges beside the two-level PV chunks spilled 24
// bytes at 128).
// V^T is loaded in 128-key slabs (the swizzle span), the last one whole.
constexpr auto kAnyMask = std::nullopt;
constexpr auto kAnyInput = std::nullopt;
constexpr std::array<TileRow, 14> kTiles{{
    {KernelFamily::sm80, 128, Arch::sm_90a, kAnyMask, kAnyInput, {128, 128, 8}},
    {KernelFamily::sm80, 128, std::nullopt, kAnyMask, kAnyInput, {128, 64, 8}},
    {KernelFamily::sm80, 256, Arch::sm_90a, kAnyMask, kAnyInput, {128, 64, 8}},
    {KernelFamily::sm80, 256, std::nullopt, kAnyMask, kAnyInput, {128, 32, 8}},
    {KernelFamily::sm90a, 128, std::nullopt, MaskVariant::variable_window, TSATTN_DTYPE_FLOAT8_E4M3FN, {128, 128, 12}},
    {KernelFamily::sm90a, 128, std::nullopt, MaskVariant::dense, TSATTN_DTYPE_FLOAT8_E4M3FN, {128, 256, 12}},
    {KernelFamily::sm90a, 128, std::nullopt, kAnyMask, TSATTN_DTYPE_FLOAT8_E4M3FN, {128, 192, 12}},
    {KernelFamily::sm90a, 256, std::nullopt, MaskVariant::variable_window, TSATTN_DTYPE_FLOAT8_E4M3FN, {128, 64, 12}},
    {KernelFamily::sm90a, 256, std::nullopt, kAnyMask, TSATTN_DTYPE_FLOAT8_E4M3FN, {128, 128, 12}},
    {KernelFamily::sm90a, 128, std::nullopt, MaskVariant::dense, kAnyInput, {128, 160, 12}},
    {KernelFamily::sm90a, 128, std::nullopt, kAnyMask, kAnyInput, {128, 128, 12}},
    {KernelFamily::sm90a, 256, std::nullopt, MaskVariant::dense, kAnyInput, {128, 80, 12}},
    {KernelFamily::sm90a, 256, std::nullopt, MaskVariant::causal, kAnyInput, {128, 80, 12}},
    {KernelFamily::sm90a, 256, std::nullopt, kAnyMask, kAnyInput, {128, 64, 12}},
}};

// mma.sync tiles are 16 rows by 8 columns: every warp owns whole 16-row slices, and keys and
// head dims come in k-steps of 16.
constexpr bool sm80_tile_ok(const TileRow& row) {
  return row.tile.block_m % (16 * row.tile.num_warps) == 0 && row.tile.block_n % 16 == 0 && row.head_dim % 16 == 0;
}

// wgmma: each consumer warpgroup (4 warps) issues m64 instructions, and the kernel has exactly one
// producer and two consumer warpgroups (setmaxnreg moves the producer's registers to them), so 128
// rows and 12 warps. BLOCK_N is wgmma's N for QK^T (a multiple of 8, at most 256) and its K for
// PV (k-steps of 16 for 16-bit inputs); TMA boxes have at most 256 rows too. The head dim is
// loaded as 64-element boxes (128 bytes: the 128-byte swizzle span), so it is a multiple of 64.
// e4m3 rows hold 128 elements, and V^T keys are permuted in groups of 32.
constexpr bool sm90a_tile_ok(const TileRow& row) {
  const bool e4m3 = row.input == TSATTN_DTYPE_FLOAT8_E4M3FN;
  return row.tile.block_m == 128 && row.tile.num_warps == 12 && row.tile.block_n % (e4m3 ? 32 : 16) == 0 &&
         row.tile.block_n <= 256 && row.head_dim % (e4m3 ? 128 : 64) == 0;
}

constexpr bool tiles_are_consistent() {
  for (const TileRow& row : kTiles) {
    const bool ok = row.family == KernelFamily::sm80 ? sm80_tile_ok(row) : sm90a_tile_ok(row);
    if (!ok) return false;
  }
  return true;
}
static_assert(tiles_are_consistent(), "every tile must split into whole mma.sync (sm80) or wgmma (sm90a) fragments");

// Every spec the table admits has a tile: each (family, head dim, arch) finds a row for every mask.
constexpr bool every_spec_has_a_tile() {
  for (const FamilyAxes& axes : kFamilies)
    for (int head_dim : axes.head_dims)
      for (Arch arch : axes.archs) {
        bool found = false;
        for (const TileRow& row : kTiles)
          found = found || (row.family == axes.family && row.head_dim == head_dim && (!row.arch || *row.arch == arch) &&
                            !row.mask && !row.input);
        if (!found) return false;
      }
  return true;
}
static_assert(every_spec_has_a_tile(), "a family lists a head dim or arch without a tile row");

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
    if (row.family == spec.family && row.head_dim == spec.head_dim && (!row.arch || *row.arch == spec.arch) &&
        (!row.mask || *row.mask == spec.mask) && (!row.input || *row.input == spec.input_dtype))
      return row.tile;
  return {0, 0, 0};
}

bool stages_output(const KernelSpec& spec) {
  const bool output_16bit = spec.output_dtype != TSATTN_DTYPE_FLOAT8_E4M3FN;
  return spec.family == KernelFamily::sm90a && spec.head_dim == 128 && output_16bit;
}

bool stores_output_by_tma(const KernelSpec& spec) {
  return stages_output(spec) && spec.input_dtype != TSATTN_DTYPE_FLOAT8_E4M3FN && spec.mask != MaskVariant::dense;
}

int output_store_bytes(const KernelSpec& spec) {
  if (stages_output(spec)) return 16;
  return spec.output_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN ? 2 : 4;
}

bool transposes_v(const KernelSpec& spec) {
  return spec.family == KernelFamily::sm90a && spec.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN;
}

}  // namespace tsattn
