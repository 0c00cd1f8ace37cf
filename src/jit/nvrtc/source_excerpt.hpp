// source_excerpt.hpp - the generated source around each error NVRTC reports, so a failed compile
// can be read without re-running it (as jitify's compile-failure messages do).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tsattn::nvrtc {

struct SourceText {
  std::string_view name;  // as NVRTC names it in the log: the program name or an #include name
  std::string_view text;
};

// For every distinct "file(line): error ..." in log whose file is among files, the lines
// [line - context, line + context] of that file, numbered, with '>' marking the error line:
//   kernel.cu:4: error: expected a ";"
//        2 |   float x = 1.0f;
//   >    4 |   int y = undefined;
// Empty when no error names a known file.
std::string excerpt_errors(std::string_view log, std::span<const SourceText> files, int context = 3);

}  // namespace tsattn::nvrtc
