#include "ref/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ref/float_formats.hpp"

namespace tsattn::ref {

Tolerance tolerance_for(tsattn_dtype input, tsattn_dtype output) {
  auto rank = [](tsattn_dtype d) { return d == TSATTN_DTYPE_FLOAT8_E4M3FN ? 2 : (d == TSATTN_DTYPE_BFLOAT16 ? 1 : 0); };
  switch (std::max(rank(input), rank(output))) {
    case 2: return {5e-2, 1.3e-1, 1e-1};
    case 1: return {2e-2, 1e-2, 2e-2};
    default: return {1e-2, 2e-3, 1e-2};
  }
}

Comparison compare_output(tsattn_dtype output_dtype, const void* actual, const std::vector<float>& expected, int heads,
                          int head_dim, Tolerance tolerance) {
  Comparison c;
  c.elements = static_cast<int64_t>(expected.size());
  auto where = [&](int64_t i) {
    return fmt::format("element {} (row {}, head {}, d {})", i, i / (int64_t{heads} * head_dim), i / head_dim % heads,
                       i % head_dim);
  };
  double diff_sq = 0, ref_sq = 0, rounding_sq = 0;
  for (int64_t i = 0; i < c.elements; ++i) {
    const double got = load_element(output_dtype, actual, i);
    const double want = expected[static_cast<size_t>(i)];
    uint8_t rounded[4];
    store_element(output_dtype, rounded, 0, static_cast<float>(want));
    const double representable = load_element(output_dtype, rounded, 0);
    rounding_sq += (representable - want) * (representable - want);
    if (std::isnan(got)) {
      if (c.unwritten++ == 0 && c.first_problem.empty()) c.first_problem = where(i) + " is NaN (unwritten?)";
      continue;
    }
    const double error = std::abs(got - want);
    diff_sq += error * error;
    ref_sq += want * want;
    c.max_abs_error = std::max(c.max_abs_error, error);
    if (error > tolerance.atol + tolerance.rtol * std::abs(want) && c.outside_tolerance++ == 0 &&
        c.first_problem.empty())
      c.first_problem = fmt::format("{}: got {} want {}", where(i), got, want);
  }
  c.rel_norm_error = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  c.rounding_floor = ref_sq > 0 ? std::sqrt(rounding_sq / ref_sq) : std::sqrt(rounding_sq);
  if (c.rel_norm_error > tolerance.rel_norm + c.rounding_floor && c.outside_tolerance == 0) {
    c.outside_tolerance = 1;
    c.first_problem = fmt::format("relative norm error {:.3g} > {:.3g} + {:.3g} (rounding to the output dtype)",
                                  c.rel_norm_error, tolerance.rel_norm, c.rounding_floor);
  }
  return c;
}

}  // namespace tsattn::ref
