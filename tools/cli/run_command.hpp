// run_command.hpp - `tsattn run`: the demo and README's main job.
//
// On a machine with a GPU: runs a realistic prefill problem (JIT-compiled on first use, or
// served from the cache), checks it against the CPU oracle, and reports where the kernel came
// from, the error and the time. Without a GPU: says so and precompiles the default manifest.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tsattn::tools {

struct RunOptions {
  std::string preset = "llama3-8b";
  int iterations = 20;
  std::string manifest = "default";  // built in; used without a GPU
  bool stats = false;                // print the process's cache counters after the first call
};

void add_run_options(CLI::App& command, RunOptions& options);
int run_demo(const RunOptions& options);

}  // namespace tsattn::tools
