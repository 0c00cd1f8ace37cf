// cache_command.hpp - `tsattn cache info|verify|prune|clear`: inspect and repair the on-disk
// kernel cache.
//
// info shows every layer (read-only roots in search order, then the writable root and its
// state). verify, prune and clear act on the writable layer only: read-only layers belong to an
// image or to another user and are never changed. `--dir DIR` names the writable layer instead of
// TSATTN_CACHE_DIR (e.g. a precompiled directory before it is shipped). Exit codes: 0; 1 verify
// found damage (also when --remove removed it); 2 usage; 3 environment (no usable writable layer).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tsattn::tools {

struct CacheOptions {
  std::string dir;        // the writable layer to act on; empty: TSATTN_CACHE_DIR
  bool json = false;      // info
  bool list = false;      // info: every entry
  bool remove = false;    // verify: delete damaged entries
  std::string max_bytes;  // prune: the cap, "2G" style
  bool yes = false;       // clear: the confirmation
};

// The `cache` command and its subcommands, so main can tell which one was given.
struct CacheCommand {
  CLI::App* cache = nullptr;
  CLI::App* info = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* prune = nullptr;
  CLI::App* clear = nullptr;
};

CacheCommand add_cache_command(CLI::App& app, CacheOptions& options);
int run_cache(const CacheCommand& command, const CacheOptions& options);

// `tsattn cache info` (cache_info.cpp).
int run_cache_info(const CacheOptions& options);

}  // namespace tsattn::tools
