#include "codegen/manifest.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "codegen/embedded_files.hpp"
#include "codegen/spec_table.hpp"

namespace tsattn {

namespace {

const std::set<std::string> kEntryKeys{"family", "head_dim", "input_dtype", "output_dtype", "mask",
                                       "layout", "lse",      "short_keys",  "paged_kv",     "exclude"};

// One axis of an entry: the values given (a scalar or a list), each validated, or the family's.
template <class T>
std::vector<T> read_axis(const nlohmann::json& entry, const std::string& path, const char* key,
                         std::span<const T> supported, auto parse_value, auto print_value) {
  if (!entry.contains(key)) return {supported.begin(), supported.end()};
  const nlohmann::json& axis = entry.at(key);
  const nlohmann::json list = axis.is_array() ? axis : nlohmann::json::array({axis});
  if (list.empty()) raise(ErrorKind::value, "{}.{}: the list is empty", path, key);
  std::vector<std::string> supported_text;
  for (const T& value : supported) supported_text.push_back(print_value(value));
  std::vector<T> values;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = axis.is_array() ? fmt::format("{}.{}[{}]", path, key, i) : fmt::format("{}.{}", path, key);
    const std::optional<T> value = parse_value(list[i]);
    if (!value || std::find(supported.begin(), supported.end(), *value) == supported.end())
      raise(ErrorKind::value, "{}: {} is not supported (supported: {})", at, list[i].dump(),
            fmt::join(supported_text, ", "));
    values.push_back(*value);
  }
  return values;
}

std::optional<int> parse_head_dim(const nlohmann::json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  return v.get<int>();
}

std::optional<bool> parse_boolean(const nlohmann::json& v) {
  if (!v.is_boolean()) return std::nullopt;
  return v.get<bool>();
}

const char* boolean_text(bool value) { return value ? "true" : "false"; }

template <auto Parse>
auto parse_text() {
  return [](const nlohmann::json& v) -> decltype(Parse(std::string_view{})) {
    if (!v.is_string()) return std::nullopt;
    return Parse(v.get<std::string>());
  };
}

// Whether spec matches every field of one exclude object (fields name the same axes).
bool matches(const KernelSpec& spec, const nlohmann::json& exclude, const std::string& path) {
  for (const auto& [key, value] : exclude.items()) {
    if (key == "head_dim") {
      if (!value.is_number_integer()) raise(ErrorKind::value, "{}.head_dim: {} is not an integer", path, value.dump());
      if (value.get<int>() != spec.head_dim) return false;
      continue;
    }
    if (key == "lse" || key == "short_keys" || key == "paged_kv") {
      if (!value.is_boolean()) raise(ErrorKind::value, "{}.{}: {} is not a boolean", path, key, value.dump());
      const bool actual = key == "lse" ? spec.lse : key == "short_keys" ? spec.short_keys : spec.paged_kv;
      if (value.get<bool>() != actual) return false;
      continue;
    }
    if (!value.is_string()) raise(ErrorKind::value, "{}.{}: {} is not a string", path, key, value.dump());
    const std::string text = value.get<std::string>();
    std::string actual;
    if (key == "input_dtype")
      actual = short_dtype_name(spec.input_dtype);
    else if (key == "output_dtype")
      actual = short_dtype_name(spec.output_dtype);
    else if (key == "mask")
      actual = mask_variant_name(spec.mask);
    else if (key == "layout")
      actual = layout_name(spec.layout);
    else if (key == "arch")
      actual = arch_name(spec.arch);
    else
      raise(ErrorKind::value,
            "{}: unknown key \"{}\" (allowed: head_dim, input_dtype, output_dtype, mask, layout, lse, short_keys, "
            "paged_kv, arch)",
            path, key);
    if (text != actual) return false;
  }
  return true;
}

}  // namespace

std::vector<Arch> parse_arch_list(const std::string& text) {
  std::vector<Arch> archs;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (item.empty()) continue;
    const std::optional<Arch> arch = parse_arch(item);
    if (!arch)
      raise(ErrorKind::value, "--arch: {} is not a supported target (supported: sm_80, sm_90a, sm_100, sm_120)", item);
    if (std::find(archs.begin(), archs.end(), *arch) == archs.end()) archs.push_back(*arch);
  }
  if (archs.empty()) raise(ErrorKind::value, "--arch: no target given (e.g. --arch sm_90a)");
  return archs;
}

std::vector<KernelSpec> expand_manifest(const nlohmann::json& manifest, const std::vector<Arch>& archs,
                                        const std::string& source) {
  if (!manifest.is_object()) raise(ErrorKind::value, "{}: the manifest must be a JSON object", source);
  for (const auto& [key, value] : manifest.items())
    if (key != "schema" && key != "kernels" && key != "description" && key != "merge" && key != "gather_pages")
      raise(ErrorKind::value, "{}: unknown key \"{}\" (allowed: schema, description, kernels, merge, gather_pages)",
            source, key);
  if (!manifest.contains("schema") || manifest.at("schema") != kManifestSchema)
    raise(ErrorKind::value, "{}.schema: must be {} (got {})", source, kManifestSchema,
          manifest.contains("schema") ? manifest.at("schema").dump() : "nothing");
  if (!manifest.contains("kernels") || !manifest.at("kernels").is_array())
    raise(ErrorKind::value, "{}.kernels: must be a list of kernel entries", source);

  std::vector<KernelSpec> specs;
  std::set<uint32_t> seen;
  const nlohmann::json& kernels = manifest.at("kernels");
  for (size_t k = 0; k < kernels.size(); ++k) {
    const std::string path = fmt::format("{}.kernels[{}]", source, k);
    const nlohmann::json& entry = kernels[k];
    if (!entry.is_object()) raise(ErrorKind::value, "{}: must be an object", path);
    for (const auto& [key, value] : entry.items())
      if (!kEntryKeys.contains(key))
        raise(ErrorKind::value, "{}: unknown key \"{}\" (allowed: {})", path, key, fmt::join(kEntryKeys, ", "));
    if (!entry.contains("family") || !entry.at("family").is_string())
      raise(ErrorKind::value, "{}.family: required, a string such as \"sm80\"", path);
    const std::optional<KernelFamily> family = parse_family(entry.at("family").get<std::string>());
    const FamilyAxes* axes = nullptr;
    for (const FamilyAxes& candidate : kernel_families())
      if (family && candidate.family == *family) axes = &candidate;
    if (axes == nullptr)
      raise(ErrorKind::value, "{}.family: {} is not a kernel family of this build", path, entry.at("family").dump());

    const auto head_dims = read_axis<int>(entry, path, "head_dim", axes->head_dims, parse_head_dim,
                                          [](int d) { return std::to_string(d); });
    const auto inputs = read_axis<tsattn_dtype>(entry, path, "input_dtype", axes->input_dtypes,
                                                parse_text<parse_short_dtype>(), short_dtype_name);
    const auto outputs = read_axis<tsattn_dtype>(entry, path, "output_dtype", axes->output_dtypes,
                                                 parse_text<parse_short_dtype>(), short_dtype_name);
    const auto masks =
        read_axis<MaskVariant>(entry, path, "mask", axes->masks, parse_text<parse_mask_variant>(), mask_variant_name);
    const auto layouts =
        read_axis<Layout>(entry, path, "layout", axes->layouts, parse_text<parse_layout>(), layout_name);
    const auto lse_values = read_axis<bool>(entry, path, "lse", axes->lse, parse_boolean, boolean_text);
    const auto short_keys_values =
        read_axis<bool>(entry, path, "short_keys", axes->short_keys, parse_boolean, boolean_text);
    const auto paged_kv_values = read_axis<bool>(entry, path, "paged_kv", axes->paged_kv, parse_boolean, boolean_text);
    const nlohmann::json excludes = entry.value("exclude", nlohmann::json::array());
    if (!excludes.is_array()) raise(ErrorKind::value, "{}.exclude: must be a list of objects", path);
    for (size_t e = 0; e < excludes.size(); ++e)
      if (!excludes[e].is_object()) raise(ErrorKind::value, "{}.exclude[{}]: must be an object", path, e);

    for (Arch arch : archs) {
      if (std::find(axes->archs.begin(), axes->archs.end(), arch) == axes->archs.end()) continue;
      for (int head_dim : head_dims)
        for (tsattn_dtype input : inputs)
          for (tsattn_dtype output : outputs)
            for (MaskVariant mask : masks)
              for (Layout layout : layouts)
                for (bool paged_kv : paged_kv_values)
                  for (bool short_keys : short_keys_values)
                    for (bool lse : lse_values) {
                      const KernelSpec spec{*family, arch,   mask, head_dim,   input,
                                            output,  layout, lse,  short_keys, paged_kv};
                      // A spec without a short-key or paged variant has none to build.
                      if (short_keys && !has_short_keys_variant(spec)) continue;
                      if (paged_kv && !has_paged_kv_variant(spec)) continue;
                      bool excluded = false;
                      for (size_t e = 0; e < excludes.size() && !excluded; ++e)
                        excluded = matches(spec, excludes[e], fmt::format("{}.exclude[{}]", path, e));
                      if (!excluded && seen.insert(spec.id()).second) specs.push_back(spec);
                    }
    }
  }
  return specs;
}

std::vector<std::string> builtin_manifest_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& file : embedded_manifests()) {
    std::string_view name = file.name;
    name.remove_suffix(std::string_view(".json").size());
    names.emplace_back(name);
  }
  return names;
}

std::vector<MergeSpec> expand_manifest_merges(const nlohmann::json& manifest, const std::vector<Arch>& archs,
                                              const std::string& source) {
  if (!manifest.is_object() || !manifest.contains("merge")) return {};
  const nlohmann::json& axis = manifest.at("merge");
  const std::string path = source + ".merge";
  const nlohmann::json list = axis.is_array() ? axis : nlohmann::json::array({axis});
  if (list.empty()) raise(ErrorKind::value, "{}: the list is empty (leave \"merge\" out for no merge modules)", path);
  std::vector<std::string> supported;
  for (tsattn_dtype dtype : merge_dtypes()) supported.emplace_back(merge_dtype_name(dtype));
  std::vector<tsattn_dtype> dtypes;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::optional<tsattn_dtype> dtype =
        list[i].is_string() ? parse_merge_dtype(list[i].get<std::string>()) : std::nullopt;
    if (!dtype)
      raise(ErrorKind::value, "{}: {} is not supported (supported: {})",
            axis.is_array() ? fmt::format("{}[{}]", path, i) : path, list[i].dump(), fmt::join(supported, ", "));
    if (std::find(dtypes.begin(), dtypes.end(), *dtype) == dtypes.end()) dtypes.push_back(*dtype);
  }
  std::vector<MergeSpec> specs;
  for (Arch arch : archs)
    for (tsattn_dtype dtype : dtypes) specs.push_back({arch, dtype});
  return specs;
}

std::vector<GatherSpec> expand_manifest_gathers(const nlohmann::json& manifest, const std::vector<Arch>& archs,
                                                const std::string& source) {
  if (!manifest.is_object() || !manifest.contains("gather_pages")) return {};
  const nlohmann::json& flag = manifest.at("gather_pages");
  if (!flag.is_boolean())
    raise(ErrorKind::value, "{}.gather_pages: {} is not a bool (true builds the page gather module)", source,
          flag.dump());
  return flag.get<bool>() ? gather_specs(archs) : std::vector<GatherSpec>{};
}

namespace {

nlohmann::json read_manifest(const std::string& name_or_path) {
  const bool is_name = name_or_path.find('/') == std::string::npos && !name_or_path.ends_with(".json");
  std::string text;
  if (is_name) {
    const auto files = embedded_manifests();
    const auto found = std::find_if(files.begin(), files.end(),
                                    [&](const EmbeddedFile& f) { return f.name == name_or_path + ".json"; });
    if (found == files.end()) {
      raise(ErrorKind::value,
            "{}: no built-in manifest has this name (built in: {}); a manifest file's path "
            "contains a '/' or ends in .json",
            name_or_path, fmt::join(builtin_manifest_names(), ", "));
    }
    text = found->text;
  } else {
    std::ifstream file(name_or_path);
    if (!file) raise(ErrorKind::value, "{}: cannot be read", name_or_path);
    text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    raise(ErrorKind::value, "{}: not valid JSON ({})", name_or_path, e.what());
  }
  return manifest;
}

}  // namespace

std::vector<KernelSpec> load_manifest(const std::string& name_or_path, const std::vector<Arch>& archs) {
  return expand_manifest(read_manifest(name_or_path), archs, name_or_path);
}

ManifestModules load_manifest_modules(const std::string& name_or_path, const std::vector<Arch>& archs) {
  const nlohmann::json manifest = read_manifest(name_or_path);
  return {expand_manifest(manifest, archs, name_or_path), expand_manifest_merges(manifest, archs, name_or_path),
          expand_manifest_gathers(manifest, archs, name_or_path)};
}

}  // namespace tsattn
