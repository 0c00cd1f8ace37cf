// validate.hpp - every rule of docs/contract.md that needs no device: C arguments in, a normalized Problem out.
//
// Errors are thrown as tsattn::Error with the contract's kind and a message that names the
// argument and the offending value(s). Nothing here touches the driver or device memory:
// host-resident indptrs are read here; device-resident ones are read back by api/execute.cpp
// (check_launch_arguments, outside graph capture) and held to the same rules below.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
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

// residency == cuda: the library call (q, k, v, out, bounds on one CUDA device; indptrs on
// that device or on the host). residency == host: the CPU oracle (everything in host memory).
Problem validate_arguments(const Arguments& args, Residency residency);

// The value rules for indptrs that live on the GPU, once their values were read back (B+1 each):
// start 0, non-decreasing, end at the packed extents, and Sq <= Sk per request for the causal mask.
void check_device_indptr_values(const Problem& p, std::vector<int32_t> qo, std::vector<int32_t> kv);

}  // namespace tsattn
