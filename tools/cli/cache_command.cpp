#include "tools/cli/cache_command.hpp"

#include <fmt/format.h>

#include <memory>

#include <tsattn/tsattn.hpp>

#include "jit/cache/disk_cache.hpp"
#include "tools/cli/byte_size.hpp"
#include "tools/cli/cache_layers.hpp"
#include "tools/cli/exit_codes.hpp"

namespace tsattn::tools {

namespace {

void add_dir_option(CLI::App& command, CacheOptions& options) {
  command.add_option("--dir", options.dir, "Act on this cache directory instead of TSATTN_CACHE_DIR");
}

// The writable layer for verify, prune or clear. nullptr when there is nothing to act on, with
// *exit_code saying whether that is fine (a cache not created yet is empty) or an error.
std::unique_ptr<jit::DiskCache> open_writable(const CacheOptions& options, const char* command, int* exit_code) {
  CacheLayers layers;
  try {
    layers = resolve_cache_layers(options.dir);
  } catch (const Error& e) {
    fmt::print(stderr, "tsattn cache {}: {}\n", command, e.what());
    *exit_code = kExitEnvironment;
    return nullptr;
  }
  const WritableLayer& writable = layers.writable;
  if (layers.disabled) {
    fmt::print(stderr, "tsattn cache {}: {} (name a directory with --dir)\n", command, writable.detail);
    *exit_code = kExitEnvironment;
    return nullptr;
  }
  if (writable.state == "not_created") {
    fmt::print("{}: nothing to do, {} {}\n", command, writable.path, writable.detail);
    *exit_code = kExitOk;
    return nullptr;
  }
  if (writable.state != "ready") {
    fmt::print(stderr, "tsattn cache {}: cannot use {} ({}): {}\n", command, writable.path, writable.state,
               writable.detail);
    *exit_code = kExitEnvironment;
    return nullptr;
  }
  return std::make_unique<jit::DiskCache>(jit::DiskCacheConfig{{}, writable.path, true});
}

int run_verify(const CacheOptions& options) {
  int code = kExitOk;
  const std::unique_ptr<jit::DiskCache> cache = open_writable(options, "verify", &code);
  if (!cache) return code;
  const jit::VerifyReport report = cache->verify(options.remove);
  for (const jit::VerifyReport::Bad& bad : report.bad) fmt::print("damaged  {}: {}\n", bad.path, bad.reason);
  fmt::print("verify: {}: {} entries checked, {} damaged{}\n", *cache->config().writable_root, report.checked,
             report.bad.size(), options.remove ? fmt::format(", {} removed", report.removed) : "");
  if (!report.bad.empty() && !options.remove)
    fmt::print("  `tsattn cache verify --remove` deletes them; the library also skips (and deletes) them on use\n");
  return report.bad.empty() ? kExitOk : kExitFailed;
}

int run_prune(const CacheOptions& options) {
  int code = kExitOk;
  const std::unique_ptr<jit::DiskCache> cache = open_writable(options, "prune", &code);
  if (!cache) return code;
  const uint64_t cap = *parse_byte_size(options.max_bytes);  // the option's validator checked it
  const jit::PruneReport report = cache->prune(cap);
  fmt::print("prune: {}: {} entries ({}); removed {} least recently used, {} left (cap {})\n",
             *cache->config().writable_root, report.entries_before, format_bytes(report.bytes_before), report.removed,
             format_bytes(report.bytes_after), format_bytes(cap));
  return kExitOk;
}

int run_clear(const CacheOptions& options) {
  if (!options.yes) {
    fmt::print(stderr, "tsattn cache clear: this removes every kernel in the writable cache; pass --yes to do it\n");
    return kExitUsage;
  }
  int code = kExitOk;
  const std::unique_ptr<jit::DiskCache> cache = open_writable(options, "clear", &code);
  if (!cache) return code;
  const uint64_t removed = cache->clear();
  fmt::print("clear: {}: removed {} entries\n", *cache->config().writable_root, removed);
  return kExitOk;
}

}  // namespace

CacheCommand add_cache_command(CLI::App& app, CacheOptions& options) {
  CacheCommand c;
  c.cache = app.add_subcommand("cache", "Inspect and repair the on-disk kernel cache");
  c.cache->require_subcommand(1);

  c.info = c.cache->add_subcommand("info", "Show the cache layers, their state and what they hold");
  add_dir_option(*c.info, options);
  c.info->add_flag("--list", options.list, "Also list every entry (name, arch, size, last use)");
  c.info->add_flag("--json", options.json, "Print one JSON object");

  c.verify = c.cache->add_subcommand("verify", "Re-check every writable entry's header and digests");
  add_dir_option(*c.verify, options);
  c.verify->add_flag("--remove", options.remove, "Delete the damaged entries");

  c.prune = c.cache->add_subcommand("prune", "Evict least recently used writable entries down to a size");
  add_dir_option(*c.prune, options);
  const CLI::Validator byte_size(
      [](std::string& text) {
        return parse_byte_size(text) ? std::string() : "expected a byte count such as 500000000, 512M or 2G";
      },
      "SIZE");
  c.prune
      ->add_option("--max-bytes", options.max_bytes, "Largest total size to keep (suffixes K, M, G, T: powers of 1024)")
      ->required()
      ->check(byte_size);

  c.clear = c.cache->add_subcommand("clear", "Remove every writable entry");
  add_dir_option(*c.clear, options);
  c.clear->add_flag("--yes", options.yes, "Confirm");
  return c;
}

int run_cache(const CacheCommand& command, const CacheOptions& options) {
  if (command.info->parsed()) return run_cache_info(options);
  if (command.verify->parsed()) return run_verify(options);
  if (command.prune->parsed()) return run_prune(options);
  return run_clear(options);
}

}  // namespace tsattn::tools
