// dtype.hpp - names and sizes of the dtypes a caller can hand over, spelled as torch spells them.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <string>

namespace tsattn {

// "float16", "bfloat16", "float8_e4m3fn", ... ; unknown codes print as "dtype(<code>)".
std::string dtype_name(int32_t dtype);

// Bytes per element; 0 for codes without a fixed size (UNSET, OTHER, unknown).
int dtype_size(int32_t dtype);

// float16, bfloat16 or float8_e4m3fn: the dtypes attention reads and writes.
bool is_attention_dtype(int32_t dtype);

}  // namespace tsattn
