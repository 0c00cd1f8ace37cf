// kernel_spec.hpp - what makes one compiled kernel different from another.
//
// A KernelSpec holds only what changes the generated code. Lengths, window size, scales and
// pointers are run-time arguments (TsattnPrefillParams) and never part of a spec, so one
// compiled kernel serves every problem of its kind.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <optional>
#include <string>

#include "api/problem.hpp"

namespace tsattn {

// Kernel families (docs/architecture.md, "The kernels"): the portable FlashAttention-2 style family and
// the Hopper TMA + wgmma family.
enum class KernelFamily : uint8_t { sm80, sm90a };

// Targets a cubin is built for. A cubin runs on every GPU of its major version at or above
// its minor, so sm_80 serves all of Ampere and Ada; Hopper needs the arch-specific sm_90a for
// wgmma and setmaxnreg.
enum class Arch : uint8_t { sm_80, sm_90a, sm_100, sm_120 };

// The attention variant: causal with a left window is its own code path.
enum class MaskVariant : uint8_t { dense, causal, causal_window, variable_window };

struct KernelSpec {
  KernelFamily family = KernelFamily::sm80;
  Arch arch = Arch::sm_90a;
  MaskVariant mask = MaskVariant::dense;
  int head_dim = 128;
  tsattn_dtype input_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype output_dtype = TSATTN_DTYPE_BFLOAT16;
  Layout layout = Layout::fixed;
  // Whether the kernel writes the log-sum-exp output (TsattnPrefillParams::lse). Only such kernels
  // have lse code: a run-time branch in the epilogue alone changed ptxas's register allocation of
  // the whole kernel. A call runs the lse kernel exactly when it passes an lse output.
  bool lse = false;
  // The variant for short key ranges: 128-key tiles where the kernel otherwise takes 160 (sm90a,
  // D128, dense, 16-bit inputs; has_short_keys_variant() in spec_table.hpp). The padding of a
  // request's last key tile is a large share of a short request's keys (plan/short_keys.hpp).
  bool short_keys = false;
  // The variant that reads K and V from page pools through the page tables (TsattnPageTable in
  // prefill_params.h) instead of packed tensors: sm90a, packed layout, D128, 16-bit inputs, 128-key
  // tiles (has_paged_kv_variant() in spec_table.hpp). Paged calls run it where it exists; elsewhere
  // they gather the pages into packed K and V first.
  bool paged_kv = false;

  bool operator==(const KernelSpec&) const = default;
  // A dense number for in-memory tables (no string building on the hot path).
  uint32_t id() const;
};

const char* family_name(KernelFamily family);      // "sm80", "sm90a"
const char* arch_name(Arch arch);                  // "sm_80", "sm_90a", ...
const char* mask_variant_name(MaskVariant mask);   // "dense", "causal", "causal_win", "varwin"
const char* short_dtype_name(tsattn_dtype dtype);  // "f16", "bf16", "e4m3"
const char* layout_name(Layout layout);            // "fixed", "packed"

std::optional<KernelFamily> parse_family(std::string_view text);
std::optional<Arch> parse_arch(std::string_view text);
std::optional<MaskVariant> parse_mask_variant(std::string_view text);
std::optional<tsattn_dtype> parse_short_dtype(std::string_view text);
std::optional<Layout> parse_layout(std::string_view text);

// The readable canonical name, e.g. "prefill.sm80.sm_90a.d128.bf16_bf16.causal_win.packed",
// "...causal.packed.paged" for the paged variant, "...dense.packed.short_keys" for the short-key
// variant and "...causal_win.packed.lse" for the kernel that writes lse (each suffix only when its
// axis is true, in the order ".paged", ".short_keys", ".lse", so the kernels without them keep
// their names): used in logs, errors, cache metadata and (with '.' -> '_') as the kernel symbol.
std::string canonical_name(const KernelSpec& spec);
std::string kernel_symbol(const KernelSpec& spec);

// The cubin target for a compute capability major version, or nullopt when tsattn has no target for it.
std::optional<Arch> arch_for_compute_capability(int major);

// The spec a validated problem needs from a family on an arch; `lse`: the kernel that writes the
// log-sum-exp output (a call's choice: whether it passes one). short_keys and paged_kv stay false:
// the caller sets them where the table has the variant and the call wants it (api/kernel_choice.cpp).
KernelSpec spec_for_problem(const Problem& p, KernelFamily family, Arch arch, bool lse);

}  // namespace tsattn
