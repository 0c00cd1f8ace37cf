// exit_codes.hpp - what every tsattn subcommand's exit status means, so scripts and image
// builds can tell "some kernel failed" from "you called it wrong" from "this machine can't".
#pragma once

namespace tsattn::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // some kernel failed, or verify found damage
inline constexpr int kExitUsage = 2;        // bad arguments or manifest
inline constexpr int kExitEnvironment = 3;  // no GPU, no usable cache directory, ...

}  // namespace tsattn::tools
