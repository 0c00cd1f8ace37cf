// Checked<T>: exact results while they fit, overflow remembered through later steps, and value() of an
// overflowed result raising instead of returning a wrapped number.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "common/checked_int.hpp"

namespace {

using tsattn::Checked;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST_SUITE("common/checked_int") {
  TEST_CASE("results that fit are exact") {
    const Checked<int64_t> n = Checked<int64_t>(3) * 4 + 5;
    CHECK_FALSE(n.overflowed());
    CHECK(n.value() == 17);
    CHECK((Checked<int64_t>(kMax - 1) + 1).value() == kMax);
    CHECK((Checked<int64_t>(int64_t{1} << 31) * (int64_t{1} << 31)).value() == int64_t{1} << 62);
    CHECK((Checked<uintptr_t>(~uintptr_t{0} - 16) + uintptr_t{16}).value() == ~uintptr_t{0});
  }

  TEST_CASE("a product of 2^64 overflows instead of wrapping to 0") {
    Checked<int64_t> n = 1;
    for (int i = 0; i < 4; ++i) n = n * (int64_t{1} << 16);
    CHECK(n.overflowed());
    CHECK((Checked<int64_t>(int64_t{1} << 62) * 2).overflowed());
    CHECK((Checked<int64_t>(kMax) + 1).overflowed());
    CHECK((Checked<uintptr_t>(~uintptr_t{0} - 15) + uintptr_t{16}).overflowed());
  }

  TEST_CASE("an overflow is remembered through later steps") {
    const Checked<int64_t> wrapped = Checked<int64_t>(kMax) + 1;
    CHECK((wrapped * 0).overflowed());
    CHECK((Checked<int64_t>(0) + wrapped).overflowed());
  }

  TEST_CASE("value() of an overflowed result raises") {
    const Checked<int64_t> n = Checked<int64_t>(kMax) * 2;
    CHECK_THROWS_AS(n.value(), tsattn::Error);
    try {
      (void)n.value();
    } catch (const tsattn::Error& e) {
      CHECK(e.kind() == tsattn::ErrorKind::runtime);
    }
  }
}

}  // namespace
