// kernel_source.hpp - KernelSpec -> the translation unit NVRTC compiles.
//
// The generated source is a handful of #defines that pin the spec, then one #include of the
// family's kernel; the template files themselves travel as NVRTC in-memory headers
// (embedded_templates()), so the source needs no include directories. Every family's source
// defines every axis: TSATTN_SHORT_KEYS is 0 for the sm80 family, which never reads it.
#pragma once

#include <string>

#include "codegen/kernel_spec.hpp"

namespace tsattn {

struct GeneratedSource {
  std::string name;    // canonical_name(spec)
  std::string symbol;  // the extern "C" kernel's name
  std::string text;
};

// Throws Error(not_implemented) for a spec the table does not list.
GeneratedSource generate_source(const KernelSpec& spec);

}  // namespace tsattn
