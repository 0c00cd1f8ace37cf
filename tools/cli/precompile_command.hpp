// precompile_command.hpp - `tsattn precompile`: build a manifest's kernels ahead of time.
//
// Needs no GPU. The output directory is a valid cache layer: point TSATTN_CACHE_RO_PATH at it
// (or `tsattn warm --from` it) on the serving machine. Exit codes: 0 all built, 1 some kernel
// failed, 2 usage or manifest error, 3 environment (output directory unusable).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tsattn::tools {

struct PrecompileOptions {
  std::string manifest;
  std::string archs = "sm_90a";
  std::string out;  // empty: the writable user cache (TSATTN_CACHE_DIR / XDG default)
  int jobs = 0;     // 0: TSATTN_COMPILE_THREADS or the hardware threads
  bool list = false;
  bool json = false;
  bool keep_going = false;
};

void add_precompile_options(CLI::App& command, PrecompileOptions& options);
int run_precompile(const PrecompileOptions& options);

}  // namespace tsattn::tools
