#include "api/dtype.hpp"

#include <fmt/format.h>

namespace tsattn {

namespace {

struct DTypeInfo {
  int32_t code;
  const char* name;
  int size;
};

constexpr DTypeInfo kDTypes[] = {
    {TSATTN_DTYPE_UNSET, "unset", 0},
    {TSATTN_DTYPE_FLOAT16, "float16", 2},
    {TSATTN_DTYPE_BFLOAT16, "bfloat16", 2},
    {TSATTN_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", 1},
    {TSATTN_DTYPE_FLOAT32, "float32", 4},
    {TSATTN_DTYPE_FLOAT64, "float64", 8},
    {TSATTN_DTYPE_INT32, "int32", 4},
    {TSATTN_DTYPE_INT64, "int64", 8},
    {TSATTN_DTYPE_INT16, "int16", 2},
    {TSATTN_DTYPE_INT8, "int8", 1},
    {TSATTN_DTYPE_UINT8, "uint8", 1},
    {TSATTN_DTYPE_BOOL, "bool", 1},
    {TSATTN_DTYPE_FLOAT8_E5M2, "float8_e5m2", 1},
    {TSATTN_DTYPE_OTHER, "an unsupported dtype", 0},
};

const DTypeInfo* find(int32_t code) {
  for (const DTypeInfo& info : kDTypes)
    if (info.code == code) return &info;
  return nullptr;
}

}  // namespace

std::string dtype_name(int32_t dtype) {
  const DTypeInfo* info = find(dtype);
  return info ? info->name : fmt::format("dtype({})", dtype);
}

int dtype_size(int32_t dtype) {
  const DTypeInfo* info = find(dtype);
  return info ? info->size : 0;
}

bool is_attention_dtype(int32_t dtype) {
  return dtype == TSATTN_DTYPE_FLOAT16 || dtype == TSATTN_DTYPE_BFLOAT16 || dtype == TSATTN_DTYPE_FLOAT8_E4M3FN;
}

}  // namespace tsattn
