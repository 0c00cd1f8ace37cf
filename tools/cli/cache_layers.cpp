#include "tools/cli/cache_layers.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/knobs.hpp"
#include "common/log.hpp"

namespace tsattn::tools {

namespace {

// The library explains a refused or unwritable cache root only in a warning; this collects the
// warnings said while it lives, so the CLI can show the reason next to the state.
class WarningCapture {
 public:
  WarningCapture() : previous_level_(log_level()) {
    if (previous_level_ < LogLevel::warn) set_log_level(LogLevel::warn);
    set_log_sink([this](LogLevel level, std::string_view message) {
      // The library prefixes its own name; here the message sits next to the path it is about.
      constexpr std::string_view prefix = "tsattn: ";
      if (level > LogLevel::warn) return;
      messages_.emplace_back(message.starts_with(prefix) ? message.substr(prefix.size()) : message);
    });
  }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  ~WarningCapture() {
    set_log_sink({});
    set_log_level(previous_level_);
  }
  std::string text() const {
    std::string joined;
    for (const std::string& m : messages_) joined += (joined.empty() ? "" : "; ") + m;
    return joined;
  }

 private:
  LogLevel previous_level_;
  std::vector<std::string> messages_;  // the CLI opens caches from one thread
};

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// What creating `root` on first use would run into: the nearest existing ancestor must be a
// writable directory.
std::string creation_outlook(const std::string& root) {
  std::filesystem::path ancestor(root);
  while (!ancestor.empty() && !exists(ancestor.string())) ancestor = ancestor.parent_path();
  const std::string dir = ancestor.empty() ? "." : ancestor.string();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return fmt::format("does not exist and cannot be created: {} is not a directory", dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fmt::format("does not exist and cannot be created: {} is not writable ({})", dir, std::strerror(errno));
  return "does not exist yet; created (mode 0700) on first use";
}

}  // namespace

CacheLayers resolve_cache_layers(const std::string& writable_override) {
  CacheLayers layers;
  const jit::DiskCacheConfig config = jit::DiskCache::config_from_environment();
  layers.disabled = writable_override.empty() && knob_bool(Knob::cache_disable);
  for (const std::string& root : config.read_only_roots) layers.read_only.push_back({root, exists(root)});
  if (layers.disabled) {
    layers.writable = {"", jit::writable_state_name(jit::WritableState::absent),
                       "TSATTN_CACHE_DISABLE is set: no disk cache, kernels stay in memory"};
    return layers;
  }
  WritableLayer& writable = layers.writable;
  writable.path = writable_override.empty() ? *config.writable_root : writable_override;
  if (!exists(writable.path)) {
    writable.state = "not_created";
    writable.detail = creation_outlook(writable.path);
    return layers;
  }
  WarningCapture warnings;
  const jit::DiskCache cache(jit::DiskCacheConfig{{}, writable.path, true});
  writable.state = jit::writable_state_name(cache.writable_state());
  writable.detail = warnings.text();
  if (cache.writable_state() == jit::WritableState::ready && ::access(writable.path.c_str(), W_OK | X_OK) != 0)
    writable.detail = fmt::format("readable but not writable by this user ({}): new kernels will stay in memory",
                                  std::strerror(errno));
  return layers;
}

nlohmann::json layers_json(const CacheLayers& layers) {
  nlohmann::json read_only = nlohmann::json::array();
  for (const ReadOnlyLayer& layer : layers.read_only)
    read_only.push_back({{"path", layer.path}, {"exists", layer.exists}});
  nlohmann::json writable{{"state", layers.writable.state}, {"detail", layers.writable.detail}};
  writable["path"] = layers.writable.path.empty() ? nlohmann::json() : nlohmann::json(layers.writable.path);
  return {{"disabled", layers.disabled}, {"read_only", read_only}, {"writable", writable}};
}

std::unique_ptr<jit::DiskCache> open_layers(const CacheLayers& layers) {
  jit::DiskCacheConfig config;
  for (const ReadOnlyLayer& layer : layers.read_only) config.read_only_roots.push_back(layer.path);
  const std::string& state = layers.writable.state;
  if (state == "ready" || state == "write_failed") config.writable_root = layers.writable.path;
  return std::make_unique<jit::DiskCache>(config);
}

}  // namespace tsattn::tools
