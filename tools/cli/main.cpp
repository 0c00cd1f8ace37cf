// main.cpp - the tsattn command line: env, precompile, warm, cache info|verify|prune|clear, run.
// Exit codes are shared by every subcommand (exit_codes.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>

#include <tsattn/tsattn.hpp>

#include "common/log.hpp"
#include "tools/cli/cache_command.hpp"
#include "tools/cli/env_command.hpp"
#include "tools/cli/exit_codes.hpp"
#include "tools/cli/precompile_command.hpp"
#include "tools/cli/run_command.hpp"
#include "tools/cli/warm_command.hpp"

int main(int argc, char** argv) {
  using namespace tsattn::tools;
  CLI::App app{"tsattn: JIT-compiled, task-scheduled prefill attention for NVIDIA GPUs"};
  app.set_version_flag("--version", fmt::format("tsattn {} (C ABI {})", tsattn::version(), tsattn_abi_version()));
  app.require_subcommand(0, 1);

  EnvOptions env_options;
  CLI::App* env = app.add_subcommand("env", "Versions, GPUs and their arch, cache layers, TSATTN_* variables");
  add_env_options(*env, env_options);
  PrecompileOptions precompile_options;
  CLI::App* precompile = app.add_subcommand("precompile", "Compile a manifest's kernels ahead of time (no GPU needed)");
  add_precompile_options(*precompile, precompile_options);
  WarmOptions warm_options;
  CLI::App* warm =
      app.add_subcommand("warm", "On the serving machine: fill the user cache for this GPU and load every kernel");
  add_warm_options(*warm, warm_options);
  CacheOptions cache_options;
  const CacheCommand cache = add_cache_command(app, cache_options);
  RunOptions run_options;
  CLI::App* run = app.add_subcommand("run", "The demo: attention on the GPU checked against the CPU oracle, timed");
  add_run_options(*run, run_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (CLI11 reports --help and --version as exit 0).
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  // The library is silent unless asked; a command line should show its warnings (a refused cache
  // directory, a damaged entry, a spilling kernel) unless TSATTN_LOG_LEVEL says otherwise.
  if (const char* level = std::getenv("TSATTN_LOG_LEVEL"); level == nullptr || *level == '\0')
    tsattn::set_log_level(tsattn::LogLevel::warn);

  try {
    if (env->parsed()) return run_env(env_options);
    if (precompile->parsed()) return run_precompile(precompile_options);
    if (warm->parsed()) return run_warm(warm_options);
    if (cache.cache->parsed()) return run_cache(cache, cache_options);
    if (run->parsed()) return run_demo(run_options);
  } catch (const tsattn::Error& e) {
    fmt::print(stderr, "tsattn: {}: {}\n", tsattn::error_kind_name(e.kind()), e.what());
    return kExitFailed;
  }
  fmt::print("{}\n", app.help());
  return kExitOk;
}
