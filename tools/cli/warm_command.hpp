// warm_command.hpp - `tsattn warm`: on the serving machine, make the user cache (TSATTN_CACHE_DIR)
// hold every kernel a manifest lists for this machine's GPU, then load each one on the GPU to
// prove the driver accepts it. After a successful warm, a process on this machine finds every
// such kernel on disk: its first batch_prefill compiles nothing.
//
// Where each kernel comes from is reported: already in the user cache; the --from directory
// (written by `tsattn precompile`, copied in); a TSATTN_CACHE_RO_PATH layer (copied in too, so
// the user cache stands alone); or compiled here by NVRTC (refused under TSATTN_DISABLE_JIT).
// Exit codes: 0 every kernel warmed; 1 some kernel failed (find, compile, copy or load);
// 2 usage or manifest error; 3 environment (no GPU, no target for it, no writable user cache).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tsattn::tools {

struct WarmOptions {
  std::string manifest;
  std::string from;  // a cache layer written by `tsattn precompile --out`; empty: none
  int jobs = 0;      // parallel compiles for what is missing; 0: as precompile chooses
  bool json = false;
};

void add_warm_options(CLI::App& command, WarmOptions& options);
int run_warm(const WarmOptions& options);

}  // namespace tsattn::tools
