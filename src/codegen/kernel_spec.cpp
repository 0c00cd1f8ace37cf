#include "codegen/kernel_spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace tsattn {

namespace {

// One spelling per enum value; parsing and printing both read these tables.
constexpr std::array<std::pair<KernelFamily, const char*>, 2> kFamilies{
    {{KernelFamily::sm80, "sm80"}, {KernelFamily::sm90a, "sm90a"}}};
constexpr std::array<std::pair<Arch, const char*>, 4> kArchs{
    {{Arch::sm_80, "sm_80"}, {Arch::sm_90a, "sm_90a"}, {Arch::sm_100, "sm_100"}, {Arch::sm_120, "sm_120"}}};
constexpr std::array<std::pair<MaskVariant, const char*>, 4> kMasks{{{MaskVariant::dense, "dense"},
                                                                     {MaskVariant::causal, "causal"},
                                                                     {MaskVariant::causal_window, "causal_win"},
                                                                     {MaskVariant::variable_window, "varwin"}}};
constexpr std::array<std::pair<tsattn_dtype, const char*>, 3> kDtypes{
    {{TSATTN_DTYPE_FLOAT16, "f16"}, {TSATTN_DTYPE_BFLOAT16, "bf16"}, {TSATTN_DTYPE_FLOAT8_E4M3FN, "e4m3"}}};
constexpr std::array<std::pair<Layout, const char*>, 2> kLayouts{
    {{Layout::fixed, "fixed"}, {Layout::packed, "packed"}}};

template <class Enum, size_t N>
const char* name_of(const std::array<std::pair<Enum, const char*>, N>& table, Enum value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";
}

template <class Enum, size_t N>
std::optional<Enum> parse(const std::array<std::pair<Enum, const char*>, N>& table, std::string_view text) {
  for (const auto& [v, name] : table)
    if (text == name) return v;
  return std::nullopt;
}

template <class Enum, size_t N>
uint32_t index_of(const std::array<std::pair<Enum, const char*>, N>& table, Enum value) {
  for (size_t i = 0; i < N; ++i)
    if (table[i].first == value) return static_cast<uint32_t>(i);
  return 0;
}

}  // namespace

const char* family_name(KernelFamily family) { return name_of(kFamilies, family); }
const char* arch_name(Arch arch) { return name_of(kArchs, arch); }
const char* mask_variant_name(MaskVariant mask) { return name_of(kMasks, mask); }
const char* short_dtype_name(tsattn_dtype dtype) { return name_of(kDtypes, dtype); }
const char* layout_name(Layout layout) { return name_of(kLayouts, layout); }

std::optional<KernelFamily> parse_family(std::string_view text) { return parse(kFamilies, text); }
std::optional<Arch> parse_arch(std::string_view text) { return parse(kArchs, text); }
std::optional<MaskVariant> parse_mask_variant(std::string_view text) { return parse(kMasks, text); }
std::optional<tsattn_dtype> parse_short_dtype(std::string_view text) { return parse(kDtypes, text); }
std::optional<Layout> parse_layout(std::string_view text) { return parse(kLayouts, text); }

uint32_t KernelSpec::id() const {
  // Mixed radix over every field; head_dim enters as D/128 (128 or 256 today, room for more).
  uint32_t id = index_of(kFamilies, family);
  id = id * 8 + index_of(kArchs, arch);
  id = id * 8 + index_of(kMasks, mask);
  id = id * 8 + static_cast<uint32_t>(head_dim / 64);
  id = id * 4 + index_of(kDtypes, input_dtype);
  id = id * 4 + index_of(kDtypes, output_dtype);
  id = id * 2 + index_of(kLayouts, layout);
  id = id * 2 + (lse ? 1 : 0);
  id = id * 2 + (short_keys ? 1 : 0);
  id = id * 2 + (paged_kv ? 1 : 0);
  return id;
}

std::string canonical_name(const KernelSpec& spec) {
  return fmt::format("prefill.{}.{}.d{}.{}_{}.{}.{}{}{}{}", family_name(spec.family), arch_name(spec.arch),
                     spec.head_dim, short_dtype_name(spec.input_dtype), short_dtype_name(spec.output_dtype),
                     mask_variant_name(spec.mask), layout_name(spec.layout), spec.paged_kv ? ".paged" : "",
                     spec.short_keys ? ".short_keys" : "", spec.lse ? ".lse" : "");
}

std::string kernel_symbol(const KernelSpec& spec) {
  std::string symbol = canonical_name(spec);
  std::replace(symbol.begin(), symbol.end(), '.', '_');
  return symbol;
}

std::optional<Arch> arch_for_compute_capability(int major) {
  switch (major) {
    case 8: return Arch::sm_80;
    case 9: return Arch::sm_90a;
    case 10: return Arch::sm_100;
    case 12: return Arch::sm_120;
    default: return std::nullopt;
  }
}

KernelSpec spec_for_problem(const Problem& p, KernelFamily family, Arch arch, bool lse) {
  KernelSpec spec;
  spec.family = family;
  spec.arch = arch;
  switch (p.mask) {
    case MaskMode::dense: spec.mask = MaskVariant::dense; break;
    case MaskMode::causal: spec.mask = p.window_left >= 1 ? MaskVariant::causal_window : MaskVariant::causal; break;
    case MaskMode::variable_window: spec.mask = MaskVariant::variable_window; break;
  }
  spec.head_dim = p.head_dim;
  spec.input_dtype = p.input_dtype;
  spec.output_dtype = p.output_dtype;
  spec.layout = p.layout;
  spec.lse = lse;
  return spec;
}

}  // namespace tsattn
