#include "codegen/spec_table.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "sm90a/kernel_traits.h"

namespace tsattn {

namespace {

constexpr std::array kAllDtypes{TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN};
constexpr std::array kAllMasks{MaskVariant::dense, MaskVariant::causal, MaskVariant::causal_window,
                               MaskVariant::variable_window};
constexpr std::array kAllLayouts{Layout::fixed, Layout::packed};
constexpr std::array kHeadDims{128, 256};
constexpr std::array kBothLse{false, true};
constexpr std::array kUsualKeysOnly{false};
constexpr std::array kBothKeyWidths{false, true};
constexpr std::array kPackedKvOnly{false};
constexpr std::array kBothKvSources{false, true};

// The portable family runs on every arch tsattn targets: sm_80 cubins serve Ampere and Ada,
// and Hopper/Blackwell need their own cubins (SASS is not compatible across major versions).
constexpr std::array kSm80Archs{Arch::sm_80, Arch::sm_90a, Arch::sm_100, Arch::sm_120};

// The Hopper family needs wgmma and setmaxnreg, which exist only in the arch-specific sm_90a
// target (an sm_90a cubin runs on compute capability 9.0 only). Its q, k and v arrive through TMA
// descriptors (plan/tensor_maps.hpp); e4m3 inputs read V^T, written by a transpose kernel in the
// same module (transposes_v below), because 8-bit wgmma reads its B operand only K-major.
constexpr std::array kSm90aArchs{Arch::sm_90a};

constexpr std::array<FamilyAxes, 2> kFamilies{{
    {KernelFamily::sm80, kSm80Archs, kHeadDims, kAllDtypes, kAllDtypes, kAllMasks, kAllLayouts, kBothLse,
     kUsualKeysOnly, kPackedKvOnly},
    {KernelFamily::sm90a, kSm90aArchs, kHeadDims, kAllDtypes, kAllDtypes, kAllMasks, kAllLayouts, kBothLse,
     kBothKeyWidths, kBothKvSources},
}};

// sm80 tiles, by head dim and arch; the first row that matches a spec gives its tile (registers
// and spills measured with ptxas for sm_80 and sm_90a; templates/sm80/config.cuh has the
// shared-memory layout). 8 warps of 16 query rows each.
// D128: 128 x 64 (100 KB of shared memory) fits every GPU from sm_80 on; 4 warps of 32 rows
// spill ~56 bytes. Hopper has 227 KB, so there 128 x 128 (160 KB, <= 236 registers) halves the
// key-loop barriers. D256: 128 x 32 (132 KB) fits A100 and Hopper; on Hopper 128 x 64 (198 KB,
// <= 252 registers, no spills) halves the key steps.
struct Sm80TileRow {
  int head_dim;
  std::optional<Arch> arch;  // nullopt: every arch
  TileConfig tile;
};

constexpr std::array<Sm80TileRow, 4> kSm80Tiles{{
    {128, Arch::sm_90a, {128, 128, 8}},
    {128, std::nullopt, {128, 64, 8}},
    {256, Arch::sm_90a, {128, 64, 8}},
    {256, std::nullopt, {128, 32, 8}},
}};

// mma.sync tiles are 16 rows by 8 columns: every warp owns whole 16-row slices, and keys and
// head dims come in k-steps of 16.
constexpr bool sm80_tile_ok(const Sm80TileRow& row) {
  return row.tile.block_m % (16 * row.tile.num_warps) == 0 && row.tile.block_n % 16 == 0 && row.head_dim % 16 == 0;
}

constexpr bool sm80_tiles_are_consistent() {
  for (const FamilyAxes& axes : kFamilies) {
    if (axes.family != KernelFamily::sm80) continue;
    // Every (head dim, arch) of the family finds a row, and every row splits into whole fragments.
    for (int head_dim : axes.head_dims)
      for (Arch arch : axes.archs) {
        bool found = false;
        for (const Sm80TileRow& row : kSm80Tiles)
          found = found || (row.head_dim == head_dim && (!row.arch || *row.arch == arch));
        if (!found) return false;
      }
  }
  for (const Sm80TileRow& row : kSm80Tiles)
    if (!sm80_tile_ok(row)) return false;
  return true;
}
static_assert(sm80_tiles_are_consistent(), "every sm80 spec has a tile of whole mma.sync fragments");

// The short-key variants (has_short_keys_variant): 16-bit D128 dense (160-key tiles) and D256
// dense and plain causal (80-key tiles), whose last tile pads requests of a few hundred keys by up
// to a quarter of their key work (docs/decisions.md, short_keys).
constexpr bool short_keys_variant_exists(const KernelSpec& spec) {
  const bool mask = spec.head_dim == 128 ? spec.mask == MaskVariant::dense
                                         : spec.mask == MaskVariant::dense || spec.mask == MaskVariant::causal;
  return spec.family == KernelFamily::sm90a && mask && spec.input_dtype != TSATTN_DTYPE_FLOAT8_E4M3FN;
}

// The paged variants (has_paged_kv_variant): sm90a packed D128 kernels of 16-bit inputs and at
// most 128-key tiles (dense: the short-key variant). Their producer warp looks each page of a tile
// up (templates/sm90a/producer.cuh) with the 40 registers such kernels give it; the 24 of 160-key
// and D256 kernels spilled there. e4m3 V is read as V^T from a transposed copy. Paged calls of
// every other kind gather the pages first (docs/decisions.md, paged_kv).
constexpr bool paged_kv_variant_exists(const KernelSpec& spec) {
  return spec.family == KernelFamily::sm90a && spec.layout == Layout::packed && spec.head_dim == 128 &&
         spec.input_dtype != TSATTN_DTYPE_FLOAT8_E4M3FN && (spec.mask != MaskVariant::dense || spec.short_keys);
}

constexpr tsattn_dev::sm90a::SpecAxes sm90a_axes(const KernelSpec& spec) {
  return {spec.head_dim,
          kernel_dtype_code(spec.input_dtype),
          kernel_dtype_code(spec.output_dtype),
          kernel_mask_code(spec.mask),
          spec.mask == MaskVariant::causal_window,
          spec.layout == Layout::packed,
          spec.short_keys};
}

// wgmma: each consumer warpgroup (4 warps) issues m64 instructions, and the kernel has exactly one
// producer and two consumer warpgroups (setmaxnreg moves the producer's registers to them), so 128
// rows and 12 warps. BLOCK_N is wgmma's N for QK^T (a multiple of 8, at most 256) and its K for
// PV (k-steps of 16 for 16-bit inputs); TMA boxes have at most 256 rows too. The head dim is
// loaded as 64-element boxes (128 bytes: the 128-byte swizzle span), so it is a multiple of 64.
// e4m3 rows hold 128 elements, and V^T keys are permuted in groups of 32. Every setting fits the
// 227 KB of shared memory a Hopper CTA may use.
constexpr bool sm90a_traits_ok(const KernelSpec& spec) {
  const tsattn_dev::sm90a::Traits t = tsattn_dev::sm90a::traits_for(sm90a_axes(spec));
  const bool e4m3 = spec.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN;
  return t.block_m == 128 && t.num_warps == 12 && t.block_n % (e4m3 ? 32 : 16) == 0 && t.block_n <= 256 &&
         spec.head_dim % (e4m3 ? 128 : 64) == 0 && t.smem.bytes <= 232448;
}

// Every paged variant's producer has the 40 registers its page lookups were fitted to.
constexpr bool paged_variants_have_wide_producers() {
  for (tsattn_dtype input : kAllDtypes)
    for (MaskVariant mask : kAllMasks)
      for (int head_dim : kHeadDims)
        for (bool short_keys : kBothKeyWidths) {
          const KernelSpec spec{KernelFamily::sm90a, Arch::sm_90a, mask,       head_dim, input, input,
                                Layout::packed,      false,        short_keys, true};
          if (paged_kv_variant_exists(spec) && tsattn_dev::sm90a::traits_for(sm90a_axes(spec)).producer_registers != 40)
            return false;
        }
  return true;
}

constexpr bool sm90a_traits_are_consistent() {
  for (const FamilyAxes& axes : kFamilies) {
    if (axes.family != KernelFamily::sm90a) continue;
    for (int head_dim : axes.head_dims)
      for (tsattn_dtype input : axes.input_dtypes)
        for (tsattn_dtype output : axes.output_dtypes)
          for (MaskVariant mask : axes.masks)
            for (Layout layout : axes.layouts)
              for (bool short_keys : axes.short_keys) {
                const KernelSpec spec{KernelFamily::sm90a, Arch::sm_90a, mask, head_dim, input, output, layout, false,
                                      short_keys};
                if (short_keys && !short_keys_variant_exists(spec)) continue;
                if (!sm90a_traits_ok(spec)) return false;
              }
  }
  return true;
}
static_assert(sm90a_traits_are_consistent(), "every sm90a spec has a tile of whole wgmma fragments that fits");
static_assert(paged_variants_have_wide_producers(), "paged variants look pages up in a 40-register producer");

// The short-key variant is its kernel with narrower key tiles (D128 128 for 160, D256 64 for 80)
// and the settings that follow from the width alone: every other trait is its usual twin's.
constexpr bool short_keys_variants_differ_only_in_width() {
  struct Kind {
    int head_dim;
    MaskVariant mask;
  };
  for (const Kind kind : {Kind{128, MaskVariant::dense}, Kind{256, MaskVariant::dense}, Kind{256, MaskVariant::causal}})
    for (tsattn_dtype input : {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16})
      for (tsattn_dtype output : kAllDtypes)
        for (Layout layout : kAllLayouts) {
          const KernelSpec usual{KernelFamily::sm90a, Arch::sm_90a, kind.mask, kind.head_dim, input, output, layout};
          KernelSpec variant = usual;
          variant.short_keys = true;
          if (!short_keys_variant_exists(usual)) return false;
          const tsattn_dev::sm90a::Traits a = tsattn_dev::sm90a::traits_for(sm90a_axes(usual));
          const tsattn_dev::sm90a::Traits b = tsattn_dev::sm90a::traits_for(sm90a_axes(variant));
          const bool d128 = kind.head_dim == 128;
          if (a.block_n != (d128 ? 160 : 80) || b.block_n != (d128 ? 128 : 64)) return false;
          // D128 at 128 keys: S and P take 24 registers fewer, so the consumers keep 232 as at causal
          // D128. D256 consumers keep 240 (O alone is 128 registers).
          if (b.producer_registers != (d128 ? 40 : 24) || b.consumer_registers != (d128 ? 232 : 240)) return false;
          // So does the consumers' decode: 160-key dense D128 kernels keep hardware divisions.
          if (a.fast_decode != !d128 || !b.fast_decode) return false;
          // So does the walk: D128 dense fixed-layout variants walk in static turns without the ring,
          // and so without a split tail.
          const bool static_walk = d128 && kind.mask == MaskVariant::dense && layout == Layout::fixed;
          if (!a.dynamic_order || b.dynamic_order != !static_walk || !b.narrow_walk) return false;
          if (b.split_tail != (a.split_tail && !static_walk) ||
              b.split_partial_bytes != (static_walk ? 0 : a.split_partial_bytes))
            return false;
          if (a.block_m != b.block_m || a.num_warps != b.num_warps || a.stages != b.stages ||
              a.two_level != b.two_level || a.overlap_softmax != b.overlap_softmax || a.ping_pong != b.ping_pong ||
              a.pv_chunk_n != b.pv_chunk_n || a.pv_chunk_buffers != b.pv_chunk_buffers ||
              a.staged_output != b.staged_output || a.output_in_q != b.output_in_q || a.tma_output != b.tma_output ||
              a.quad_stores != b.quad_stores || a.output_store_bytes != b.output_store_bytes ||
              a.chunked_order != b.chunked_order || a.pairable != b.pairable || a.tile_pairable != b.tile_pairable)
            return false;
        }
  return true;
}
static_assert(short_keys_variants_differ_only_in_width(),
              "a short-key variant changes its kernel's key tile and what follows from it, nothing else");

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

bool has_short_keys_variant(const KernelSpec& spec) {
  const FamilyAxes* axes = axes_of(spec.family);
  return axes && contains(axes->short_keys, true) && short_keys_variant_exists(spec);
}

bool has_paged_kv_variant(const KernelSpec& spec) {
  const FamilyAxes* axes = axes_of(spec.family);
  return axes && contains(axes->paged_kv, true) && paged_kv_variant_exists(spec);
}

bool is_supported(const KernelSpec& spec) {
  const FamilyAxes* axes = axes_of(spec.family);
  return axes && contains(axes->archs, spec.arch) && contains(axes->head_dims, spec.head_dim) &&
         contains(axes->input_dtypes, spec.input_dtype) && contains(axes->output_dtypes, spec.output_dtype) &&
         contains(axes->masks, spec.mask) && contains(axes->layouts, spec.layout) && contains(axes->lse, spec.lse) &&
         contains(axes->short_keys, spec.short_keys) && (!spec.short_keys || has_short_keys_variant(spec)) &&
         contains(axes->paged_kv, spec.paged_kv) && (!spec.paged_kv || has_paged_kv_variant(spec));
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
            for (bool paged_kv : axes->paged_kv)
              for (bool short_keys : axes->short_keys)
                for (bool lse : axes->lse) {
                  const KernelSpec spec{family, arch, mask, head_dim, input, output, layout, lse, short_keys, paged_kv};
                  if (is_supported(spec)) specs.push_back(spec);
                }
  return specs;
}

TileConfig tile_config(const KernelSpec& spec) {
  if (spec.family == KernelFamily::sm90a) {
    const tsattn_dev::sm90a::Traits t = tsattn_dev::sm90a::traits_for(sm90a_axes(spec));
    return {t.block_m, t.block_n, t.num_warps};
  }
  for (const Sm80TileRow& row : kSm80Tiles)
    if (row.head_dim == spec.head_dim && (!row.arch || *row.arch == spec.arch)) return row.tile;
  return {0, 0, 0};
}

KernelTraits kernel_traits(const KernelSpec& spec) {
  KernelTraits traits;
  traits.tile = tile_config(spec);
  traits.output_store_bytes = spec.output_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN ? 2 : 4;  // an element pair
  if (spec.family != KernelFamily::sm90a) return traits;
  const tsattn_dev::sm90a::Traits t = tsattn_dev::sm90a::traits_for(sm90a_axes(spec));
  traits.staged_output = t.staged_output;
  traits.tma_output = t.tma_output;
  traits.output_store_bytes = t.output_store_bytes;
  traits.chunked_order = t.chunked_order;
  traits.dynamic_order = t.dynamic_order;
  traits.narrow_walk = t.narrow_walk;
  traits.split_partial_bytes = t.split_partial_bytes;
  traits.pairs = t.pairable;
  traits.pairs_along_tiles = t.tile_pairable;
  traits.dynamic_smem_bytes = static_cast<int>(t.smem.bytes);
  return traits;
}

bool stages_output(const KernelSpec& spec) { return kernel_traits(spec).staged_output; }

bool stores_output_by_tma(const KernelSpec& spec) { return kernel_traits(spec).tma_output; }

int output_store_bytes(const KernelSpec& spec) { return kernel_traits(spec).output_store_bytes; }

bool transposes_v(const KernelSpec& spec) {
  return spec.family == KernelFamily::sm90a && spec.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN;
}

}  // namespace tsattn
