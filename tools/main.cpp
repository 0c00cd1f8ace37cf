// main.cpp - the tsattn command line: env, precompile, run (warm, cache and bench arrive with
// the deployment work).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <tsattn/tsattn.hpp>

#include "tools/env_command.hpp"
#include "tools/precompile_command.hpp"
#include "tools/run_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tsattn: JIT-compiled, task-scheduled prefill attention for NVIDIA GPUs"};
  app.set_version_flag("--version", fmt::format("tsattn {} (C ABI {})", tsattn::version(), tsattn_abi_version()));
  app.require_subcommand(0, 1);

  CLI::App* env = app.add_subcommand("env", "Show the library version, the CUDA driver and the GPUs it sees");
  tsattn::tools::PrecompileOptions precompile_options;
  CLI::App* precompile = app.add_subcommand("precompile", "Compile a manifest's kernels ahead of time (no GPU needed)");
  tsattn::tools::add_precompile_options(*precompile, precompile_options);
  tsattn::tools::RunOptions run_options;
  CLI::App* run = app.add_subcommand("run", "The demo: attention on the GPU checked against the CPU oracle, timed");
  tsattn::tools::add_run_options(*run, run_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (CLI11 reports --help and --version as exit 0).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (env->parsed()) return tsattn::tools::run_env();
  if (precompile->parsed()) return tsattn::tools::run_precompile(precompile_options);
  try {
    if (run->parsed()) return tsattn::tools::run_demo(run_options);
  } catch (const tsattn::Error& e) {
    fmt::print(stderr, "tsattn run: {}: {}\n", tsattn::error_kind_name(e.kind()), e.what());
    return 1;
  }
  fmt::print("{}\n", app.help());
  return 0;
}
