// cache_info.cpp - `tsattn cache info`: every layer the library would search, in order, with what
// it holds (entries, bytes, per arch) and, with --list, each entry.
#include <time.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include <tsattn/tsattn.hpp>

#include "tools/cli/byte_size.hpp"
#include "tools/cli/cache_command.hpp"
#include "tools/cli/cache_layers.hpp"
#include "tools/cli/exit_codes.hpp"

namespace tsattn::tools {

namespace {

struct Tally {
  size_t entries = 0;
  uint64_t bytes = 0;
  size_t unreadable = 0;  // header or metadata unreadable (verify also checks the payload digests)
  std::map<std::string, size_t> archs;
  std::vector<const jit::EntryInfo*> list;

  void add(const jit::EntryInfo& entry) {
    ++entries;
    bytes += entry.size;
    ++archs[entry.arch];
    if (!entry.problem.empty()) ++unreadable;
    list.push_back(&entry);
  }
  nlohmann::json json() const {
    return {{"entries", entries}, {"bytes", bytes}, {"unreadable", unreadable}, {"archs", archs}};
  }
  std::string line() const {
    std::string text = fmt::format("{} entries, {}", entries, format_bytes(bytes));
    if (!archs.empty()) {
      std::string per_arch;
      for (const auto& [arch, count] : archs)
        per_arch += fmt::format("{}{}: {}", per_arch.empty() ? "" : ", ", arch, count);
      text += fmt::format(" ({})", per_arch);
    }
    if (unreadable) text += fmt::format(", {} unreadable (`tsattn cache verify`)", unreadable);
    return text;
  }
};

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::string utc_text(std::chrono::system_clock::time_point t) {
  const time_t seconds = static_cast<time_t>(unix_seconds(t));
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  char text[32] = {};
  strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", &utc);
  return text;
}

nlohmann::json entry_json(const jit::EntryInfo& e) {
  nlohmann::json j{{"layer", jit::layer_kind_name(e.layer)}, {"name", e.name}, {"arch", e.arch}, {"bytes", e.size},
                   {"last_use_unix", unix_seconds(e.mtime)}, {"path", e.path}};
  if (e.layer == jit::LayerKind::read_only) j["read_only_index"] = e.read_only_index;
  if (!e.problem.empty()) j["problem"] = e.problem;
  return j;
}

void print_entries(const Tally& tally) {
  for (const jit::EntryInfo* e : tally.list) {
    // Read-only layers are never touched, so their mtime is when the entry was written.
    const char* stamp = e->layer == jit::LayerKind::read_only ? "written" : "last use";
    fmt::print("    {:<56} {:<7} {:>10}  {} {}{}\n", e->name.empty() ? "?" : e->name, e->arch, format_bytes(e->size),
               stamp, utc_text(e->mtime), e->problem.empty() ? "" : "  UNREADABLE: " + e->problem);
  }
}

}  // namespace

int run_cache_info(const CacheOptions& options) {
  CacheLayers layers;
  try {
    layers = resolve_cache_layers(options.dir);
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn cache info: {}\n", e.what());
    return kExitEnvironment;
  }
  const std::vector<jit::EntryInfo> entries = open_layers(layers)->list_entries();
  std::vector<Tally> read_only(layers.read_only.size());
  Tally writable;
  for (const jit::EntryInfo& e : entries)
    (e.layer == jit::LayerKind::read_only ? read_only.at(e.read_only_index) : writable).add(e);
  auto by_name = [](const jit::EntryInfo* a, const jit::EntryInfo* b) {
    return std::tie(a->name, a->arch) < std::tie(b->name, b->arch);
  };
  for (Tally& t : read_only) std::sort(t.list.begin(), t.list.end(), by_name);
  std::sort(writable.list.begin(), writable.list.end(), by_name);

  if (options.json) {
    nlohmann::json out = layers_json(layers);
    for (size_t i = 0; i < read_only.size(); ++i) out["read_only"][i].update(read_only[i].json());
    out["writable"].update(writable.json());
    if (options.list) {
      out["list"] = nlohmann::json::array();
      for (const Tally& t : read_only)
        for (const jit::EntryInfo* e : t.list) out["list"].push_back(entry_json(*e));
      for (const jit::EntryInfo* e : writable.list) out["list"].push_back(entry_json(*e));
    }
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }

  fmt::print("read-only layers (TSATTN_CACHE_RO_PATH), searched first, in order:{}\n",
             layers.read_only.empty() ? " none" : "");
  for (size_t i = 0; i < layers.read_only.size(); ++i) {
    fmt::print("  {}. {}: {}\n", i + 1, layers.read_only[i].path,
               layers.read_only[i].exists ? read_only[i].line() : "missing (skipped)");
    if (options.list) print_entries(read_only[i]);
  }
  if (layers.disabled) {
    fmt::print("writable layer: none ({})\n", layers.writable.detail);
    return kExitOk;
  }
  fmt::print("writable layer (TSATTN_CACHE_DIR{}): {} [{}]{}\n", options.dir.empty() ? "" : ", here --dir",
             layers.writable.path, layers.writable.state,
             layers.writable.detail.empty() ? "" : ": " + layers.writable.detail);
  if (layers.writable.state == "ready" || layers.writable.state == "write_failed") {
    fmt::print("  {}\n", writable.line());
    if (options.list) print_entries(writable);
  }
  return kExitOk;
}

}  // namespace tsattn::tools
