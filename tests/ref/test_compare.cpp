// test_compare.cpp - the tolerance check every GPU test relies on must catch what it claims to.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "ref/compare.hpp"
#include "ref/float_formats.hpp"

namespace tsattn::test {
namespace {

std::vector<uint8_t> encode(tsattn_dtype dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i)
    ref::store_element(dtype, bytes.data(), static_cast<int64_t>(i), values[i]);
  return bytes;
}

TEST_SUITE("ref/compare") {
  TEST_CASE("exact results pass, and one wrong, unwritten or off-norm element fails") {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    std::vector<float> expected(4 * 2 * 128);
    for (float& x : expected) x = normal(rng);
    const ref::Tolerance tol = ref::tolerance_for(TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16);
    std::vector<uint8_t> actual = encode(TSATTN_DTYPE_BFLOAT16, expected);
    ref::Comparison c = ref::compare_output(TSATTN_DTYPE_BFLOAT16, actual.data(), expected, 2, 128, tol);
    CHECK(c.passed());
    CHECK(c.elements == 1024);

    std::vector<float> wrong = expected;
    wrong[300] += 0.5f;
    actual = encode(TSATTN_DTYPE_BFLOAT16, wrong);
    c = ref::compare_output(TSATTN_DTYPE_BFLOAT16, actual.data(), expected, 2, 128, tol);
    CHECK_FALSE(c.passed());
    CHECK(c.outside_tolerance == 1);
    CHECK(c.first_problem.find("element 300 (row 1, head 0, d 44)") == 0);

    actual = encode(TSATTN_DTYPE_BFLOAT16, expected);
    actual[2 * 17] = actual[2 * 17 + 1] = 0xFF;  // the NaN poison left in place
    c = ref::compare_output(TSATTN_DTYPE_BFLOAT16, actual.data(), expected, 2, 128, tol);
    CHECK(c.unwritten == 1);
    CHECK_FALSE(c.passed());

    // Every element within atol, but all biased the same way: the norm bound catches it.
    std::vector<float> biased = expected;
    for (float& x : biased) x += 0.009f;
    actual = encode(TSATTN_DTYPE_BFLOAT16, biased);
    c = ref::compare_output(TSATTN_DTYPE_BFLOAT16, actual.data(), expected, 2, 128, tol);
    CHECK(c.rel_norm_error > tol.rel_norm);
    CHECK_FALSE(c.passed());
  }

  TEST_CASE("fp8 outputs among e4m3 subnormals are judged against what e4m3 can represent") {
    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.006f);  // mostly below 2^-6
    std::vector<float> expected(2048);
    for (float& x : expected) x = normal(rng);
    const ref::Tolerance tol = ref::tolerance_for(TSATTN_DTYPE_FLOAT8_E4M3FN, TSATTN_DTYPE_FLOAT8_E4M3FN);
    std::vector<uint8_t> rounded(expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      ref::store_element(TSATTN_DTYPE_FLOAT8_E4M3FN, rounded.data(), static_cast<int64_t>(i), expected[i]);
    const ref::Comparison c = ref::compare_output(TSATTN_DTYPE_FLOAT8_E4M3FN, rounded.data(), expected, 1, 128, tol);
    CHECK(c.rounding_floor > 0.05);  // rounding alone costs this much here
    CHECK(c.passed());
    std::vector<uint8_t> zeros(expected.size(), 0);  // all zero: every element is within atol...
    const ref::Comparison z = ref::compare_output(TSATTN_DTYPE_FLOAT8_E4M3FN, zeros.data(), expected, 1, 128, tol);
    CHECK_FALSE(z.passed());  // ...but the norm error is 1, far above bound + floor
  }
}

}  // namespace
}  // namespace tsattn::test
