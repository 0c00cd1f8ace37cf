// oracle_comparison.hpp - how the CPU oracle's tests compare it with a naive fp64 attention.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tsattn::testing {

struct OracleComparison {
  int64_t mismatches = 0;
  int64_t first_bad = -1;
  double relative_norm = 0;
};

// Elementwise |got - want| <= atol + rtol |want| (NaN never passes); where the naive oracle left
// an empty row, got must be exactly 0.
inline OracleComparison compare_with_naive(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                                           double atol) {
  REQUIRE(got.size() == want.size());
  OracleComparison c;
  double diff = 0, norm = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    const double g = got[n], w = want[n];
    const bool ok = w == 0.0 ? g == 0.0 : std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && c.mismatches++ == 0) c.first_bad = static_cast<int64_t>(n);
    diff += (g - w) * (g - w);
    norm += w * w;
  }
  c.relative_norm = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  return c;
}

}  // namespace tsattn::testing
