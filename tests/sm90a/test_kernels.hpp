// test_kernels.hpp - the sm90a building blocks' test kernels (tests/sm90a/kernels/*.cuh),
// compiled into the test binary only (cmake/embed_files.cmake), never into the shipped library.
// Names are the file names: the kernels include each other and the templates by those names.
#pragma once

#include <span>

#include "codegen/embedded_files.hpp"

namespace tsattn {

std::span<const EmbeddedFile> embedded_sm90a_test_kernels();

}  // namespace tsattn
