// compare.hpp - how close a kernel's output is to the oracle: docs/contract.md's tolerances and the check
// every GPU test and the demo apply: elementwise |a - e| <= atol + rtol*|e| against the exact
// (fp32/fp64) oracle, no element left unwritten, and ||a - e|| / ||e|| <= rel_norm plus the part
// of that ratio that rounding the oracle itself to the output dtype costs. That floor matters
// only for fp8 outputs whose values fall among e4m3's subnormals (|x| < 2^-6), where rounding
// alone moves the norm by ~10%: no implementation could do better there.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tsattn::ref {

struct Tolerance {
  double rtol, atol, rel_norm;
};

// docs/contract.md "Tolerances used by the tests", for the least precise of the input and output dtypes.
Tolerance tolerance_for(tsattn_dtype input, tsattn_dtype output);

struct Comparison {
  int64_t elements = 0;
  int64_t unwritten = 0;  // NaN: still the poison the test wrote, or a NaN result
  int64_t outside_tolerance = 0;
  double max_abs_error = 0;
  double rel_norm_error = 0;  // ||a - e|| / ||e|| (absolute when ||e|| == 0)
  double rounding_floor = 0;  // ||round(e) - e|| / ||e||: the oracle rounded to the output dtype
  std::string first_problem;  // "element 17 (row 0, head 0, d 17): got 0.1 want 0.2"
  bool passed() const { return unwritten == 0 && outside_tolerance == 0; }
};

// actual: compact [rows][heads][head_dim] elements of output_dtype; expected: the oracle's values
// in the same order (reference_prefill).
Comparison compare_output(tsattn_dtype output_dtype, const void* actual, const std::vector<float>& expected, int heads,
                          int head_dim, Tolerance tolerance);

}  // namespace tsattn::ref
