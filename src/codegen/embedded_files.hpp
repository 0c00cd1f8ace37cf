// embedded_files.hpp - files compiled into the library by the build (cmake/embed_files.cmake), so
// a deployed libtsattn reads none of them from disk.
#pragma once

#include <span>
#include <string_view>

namespace tsattn {

struct EmbeddedFile {
  std::string_view name;
  std::string_view text;
};

// The device templates. Names are paths relative to templates/, exactly as the templates #include
// each other, so they serve directly as NVRTC in-memory headers.
std::span<const EmbeddedFile> embedded_templates();

// The shipped manifests of cache/manifests/, named "default.json", "all.json", ...
std::span<const EmbeddedFile> embedded_manifests();

}  // namespace tsattn
