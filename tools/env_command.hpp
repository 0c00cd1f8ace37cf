// env_command.hpp - `tsattn env`: what this machine offers tsattn.
#pragma once

namespace tsattn::tools {

// Prints versions, the driver's state and the GPUs; returns the process exit code
// (0, also without a GPU: a missing driver is information, not a failure).
int run_env();

}  // namespace tsattn::tools
