// env_command.hpp - `tsattn env`: what this machine offers tsattn and how tsattn is configured
// here: versions (library, NVRTC, driver), the GPUs and the arch tsattn compiles for on each, the
// cache layers and their writability, and every TSATTN_* variable (registered ones with their
// values, unknown ones flagged as likely typos).
#pragma once

#include <CLI/CLI.hpp>

namespace tsattn::tools {

struct EnvOptions {
  bool json = false;
};

void add_env_options(CLI::App& command, EnvOptions& options);

// Returns the process exit code: 0, also without a GPU (a missing driver is information, not a
// failure), and 3 when a TSATTN_* variable is malformed (the library would refuse it too).
int run_env(const EnvOptions& options);

}  // namespace tsattn::tools
