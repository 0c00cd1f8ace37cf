// manifest.hpp - which kernels to build ahead of time, as JSON (cache/manifests/*.json, built in).
//
//   {"schema": 1,
//    "kernels": [{"family": "sm80", "head_dim": [128, 256], "input_dtype": ["bf16"],
//                 "output_dtype": ["bf16"], "mask": ["causal", "causal_win"], "layout": ["packed"],
//                 "lse": [false, true], "exclude": [{"head_dim": 256, "mask": "causal_win"}]}]}
//
// Each kernels[] entry is the Cartesian product of its axes; an axis left out means every value
// the table supports for that family ("lse": both, the kernel for calls without the log-sum-exp
// output and its twin for calls with it; "short_keys": sm90a both, the usual kernel and its
// variant for short key ranges, which only some specs have: has_short_keys_variant() in
// spec_table.hpp; specs without one are not built for true; "paged_kv" likewise, the kernel that
// reads packed K and V and its variant that reads page pools: has_paged_kv_variant()). "exclude" drops the combinations
// that match all fields of one of its objects. Values are validated against the table of truth (spec_table.hpp), with
// errors that name the JSON path ("kernels[1].head_dim[0]: 96 is not supported (supported: 128, 256)").
//
// An optional top-level "merge": ["f16", "bf16", "f32"] lists the v dtypes whose merge modules
// (codegen/merge_spec.hpp) to build for every arch; without it, none. An optional top-level
// "gather_pages": true builds the page gather module of paged KV caches (codegen/gather_spec.hpp)
// for every arch; without it (or false), none.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "codegen/gather_spec.hpp"
#include "codegen/kernel_spec.hpp"
#include "codegen/merge_spec.hpp"

namespace tsattn {

inline constexpr int kManifestSchema = 1;

// The deduplicated specs of a manifest for the given archs, in manifest order. Throws
// Error(value) with a path-qualified message (prefixed by `source`, e.g. the file name).
std::vector<KernelSpec> expand_manifest(const nlohmann::json& manifest, const std::vector<Arch>& archs,
                                        const std::string& source);

// Reads and expands a manifest: a built-in one by name ("default", "all", "llama3", "gemma": the
// files of cache/manifests/, compiled into the library), or a file by path (anything with a '/' or
// ending in .json). Error(value) for an unknown name or an unreadable or malformed file.
std::vector<KernelSpec> load_manifest(const std::string& name_or_path, const std::vector<Arch>& archs);

// The merge modules of a manifest's "merge" list for the given archs (none without one), deduplicated,
// archs outermost. Throws Error(value) with a path-qualified message, as expand_manifest.
std::vector<MergeSpec> expand_manifest_merges(const nlohmann::json& manifest, const std::vector<Arch>& archs,
                                              const std::string& source);

// The gather modules of a manifest's "gather_pages" flag for the given archs (none without it). Throws
// Error(value) with a path-qualified message for a value that is not a bool.
std::vector<GatherSpec> expand_manifest_gathers(const nlohmann::json& manifest, const std::vector<Arch>& archs,
                                                const std::string& source);

// Everything a manifest builds: its kernels (load_manifest), its merge and its gather modules.
struct ManifestModules {
  std::vector<KernelSpec> kernels;
  std::vector<MergeSpec> merges;
  std::vector<GatherSpec> gathers;
  size_t size() const { return kernels.size() + merges.size() + gathers.size(); }
};
ManifestModules load_manifest_modules(const std::string& name_or_path, const std::vector<Arch>& archs);

// The names load_manifest knows without a file, sorted.
std::vector<std::string> builtin_manifest_names();

// "sm_90a,sm_80" -> archs; Error(value) naming an unknown one.
std::vector<Arch> parse_arch_list(const std::string& text);

}  // namespace tsattn
