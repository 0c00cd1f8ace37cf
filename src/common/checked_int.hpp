// checked_int.hpp - integer arithmetic that records overflow instead of wrapping (signed overflow is
// undefined behaviour in C++). The argument checks derive every size, offset and byte span of a
// caller's view through it, so a view whose sizes overflow is rejected instead of read as a small one.
#pragma once

#include <type_traits>

#include "common/error.hpp"

namespace tsattn {

template <class T>
class Checked {
  static_assert(std::is_integral_v<T>);

 public:
  Checked(T value = 0) : value_(value) {}  // implicit, so that plain operands mix in

  friend Checked operator+(Checked a, Checked b) {
    Checked r;
    r.overflowed_ = a.overflowed_ || b.overflowed_ || __builtin_add_overflow(a.value_, b.value_, &r.value_);
    return r;
  }
  friend Checked operator*(Checked a, Checked b) {
    Checked r;
    r.overflowed_ = a.overflowed_ || b.overflowed_ || __builtin_mul_overflow(a.value_, b.value_, &r.value_);
    return r;
  }

  // Whether some step's exact result did not fit in T.
  bool overflowed() const { return overflowed_; }

  // The exact result. Where a caller's input can overflow, test overflowed() first and report it;
  // elsewhere an overflow breaks an invariant, and this raises instead of returning a wrapped value.
  T value() const {
    if (overflowed_) raise(ErrorKind::runtime, "internal error: integer overflow in a size computation");
    return value_;
  }

 private:
  T value_ = 0;
  bool overflowed_ = false;
};

}  // namespace tsattn
