// validate.hpp - every rule of docs/contract.md that needs no device: C arguments in, a normalized Problem out.
//
// Errors are thrown as tsattn::Error with the contract's kind and a message that names the
// argument and the offending value(s). Nothing here touches the driver or device memory:
// host-resident indptrs are read here; device-resident ones are read back by api/execute.cpp
// (check_launch_arguments, outside graph capture) and held to the same rules below.
#pragma once

#include <tsattn/tsattn.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/problem.hpp"

namespace tsattn {

struct Arguments {
  const tsattn_tensor_view* q = nullptr;
  const tsattn_tensor_view* k = nullptr;
  const tsattn_tensor_view* v = nullptr;
  const tsattn_tensor_view* qo_indptr = nullptr;
  const tsattn_tensor_view* kv_indptr = nullptr;
  const tsattn_prefill_options* options = nullptr;  // nullptr: defaults
  const tsattn_tensor_view* out = nullptr;
};

// The options' rules that need no tensor (mask code, window, scales, out_dtype), shared by
// tsattn_prefill_options and tsattn_prefill_plan_options.
struct ScalarOptions {
  int32_t mask_type = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  bool has_sm_scale = false;
  double sm_scale = 0.0;
  double output_scale = 1.0;
  int32_t out_dtype = TSATTN_DTYPE_UNSET;
};
struct CheckedOptions {
  MaskMode mask = MaskMode::dense;
  int64_t window_left = -1;
  std::optional<double> sm_scale;
  float output_scale = 1.0f;
  int32_t out_dtype = TSATTN_DTYPE_UNSET;
};
CheckedOptions check_scalar_options(const ScalarOptions& options);
// The sm_scale a Problem carries: the given one, else 1/sqrt(head_dim), as float32.
float resolve_sm_scale(const CheckedOptions& options, int head_dim);

// The struct_size rule of every options struct of the ABI: smaller than the library's is a
// ValueError (not initialised), larger a NotImplementedError (a newer caller). name is the
// argument ("options"), type the struct ("tsattn_prefill_options"; its init function is type_init).
void check_struct_size(size_t given, size_t known, const char* name, const char* type);

const char* mask_name(int32_t mask);  // "dense", "causal", "variable_window", "?"
std::string supported_dtypes();       // "float16, bfloat16, float8_e4m3fn"

// q, k, v or out (token_tensor) and variable-window bounds (row_index_tensor) as a Problem reads
// them, from their data and resolved strides (in the layout's rank: fixed 4 and 2, packed 3 and 1).
TokenTensor token_tensor(void* data, const int64_t* strides, Layout layout);
RowIndexTensor row_index_tensor(const void* data, const int64_t* strides, Layout layout);

// residency == cuda: the library call (q, k, v, out, bounds on one CUDA device; indptrs on
// that device or on the host). residency == host: the CPU oracle (everything in host memory).
Problem validate_arguments(const Arguments& args, Residency residency);

// The value rules for indptrs that live on the GPU, once their values were read back (B+1 each):
// start 0, non-decreasing, end at the packed extents, and Sq <= Sk per request for the causal mask.
void check_device_indptr_values(const Problem& p, std::vector<int32_t> qo, std::vector<int32_t> kv);

}  // namespace tsattn
