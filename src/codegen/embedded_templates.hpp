// embedded_templates.hpp - the device template files, compiled into the library by the build
// (cmake/embed_templates.cmake). Names are paths relative to templates/, exactly as the
// templates #include each other, so they serve directly as NVRTC in-memory headers.
#pragma once

#include <span>
#include <string_view>

namespace tsattn {

struct EmbeddedFile {
  std::string_view name;
  std::string_view text;
};

std::span<const EmbeddedFile> embedded_templates();

}  // namespace tsattn
