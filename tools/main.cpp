// main.cpp - the tsattn command line. Subcommands: env (more arrive with the JIT and
// deployment work: precompile, warm, cache, run, bench).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <tsattn/tsattn.hpp>

#include "tools/env_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tsattn: JIT-compiled, task-scheduled prefill attention for NVIDIA GPUs"};
  app.set_version_flag("--version", fmt::format("tsattn {} (C ABI {})", tsattn::version(), tsattn_abi_version()));
  app.require_subcommand(0, 1);

  CLI::App* env = app.add_subcommand("env", "Show the library version, the CUDA driver and the GPUs it sees");

  CLI11_PARSE(app, argc, argv);
  if (env->parsed()) return tsattn::tools::run_env();
  fmt::print("{}\n", app.help());
  return 0;
}
