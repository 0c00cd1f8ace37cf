// oracle_comparison.hpp - how the CPU oracle's tests compare it with a naive fp64 attention.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
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

// One query row and head of the contract's math in double, with plain loops: the softmax of
// scale * dot(j) over the keys j < num_keys that visible(j) admits, then dst[d] += output_scale *
// sum_j p_j * value(j, d) for d < head_dim. A row that sees no key leaves dst as it was (0).
template <class Visible, class Dot, class Value>
void naive_attention_row(int64_t num_keys, int64_t head_dim, double scale, double output_scale, Visible visible,
                         Dot dot, Value value, double* dst) {
  std::vector<double> logits;
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < num_keys; ++j) {
    if (!visible(j)) continue;
    logits.push_back(scale * dot(j));
    keys.push_back(j);
  }
  if (keys.empty()) return;
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const double l : logits) sum += std::exp(l - max);
  for (size_t n = 0; n < keys.size(); ++n) {
    const double p = std::exp(logits[n] - max) / sum;
    for (int64_t d = 0; d < head_dim; ++d) dst[d] += output_scale * p * value(keys[n], d);
  }
}

}  // namespace tsattn::testing
