// tensor_checks.hpp - checks that hold for any tensor view, whatever its role: readable
// shape and strides, alignment, memory spans. The contract's role-specific rules are in validate.cpp.
#pragma once

#include <tsattn/tsattn.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "api/problem.hpp"
#include "common/error.hpp"

namespace tsattn {

constexpr int kMaxRank = 8;  // tsattn_tensor_view's limit

// A view's extents or strides, held inline: checking a call's tensors allocates nothing.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  void assign(const int64_t* first, const int64_t* last) {
    size_ = static_cast<size_t>(last - first);
    std::copy(first, last, values_.begin());
  }
  void resize(size_t n) { size_ = n; }
  size_t size() const { return size_; }
  int64_t& operator[](size_t i) { return values_[i]; }
  int64_t operator[](size_t i) const { return values_[i]; }
  const int64_t* data() const { return values_.data(); }
  const int64_t* begin() const { return values_.data(); }
  const int64_t* end() const { return values_.data() + size_; }
  friend bool operator==(const Dims& a, const Dims& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  std::array<int64_t, kMaxRank> values_{};
  size_t size_ = 0;
};

// A caller's view with its strides resolved (compact row-major when the caller gave none).
struct CheckedTensor {
  const char* name = "";
  const tsattn_tensor_view* view = nullptr;
  Dims shape;
  Dims strides;
  // Computed by inspect_tensor() without overflow, so sums and products bounded by them fit too.
  int64_t numel = 0;  // the product of the extents
  int64_t bytes = 0;  // (largest element offset + 1) * element size; 0 when empty

  int ndim() const { return static_cast<int>(shape.size()); }
  bool on_host() const;
  std::string shape_text() const;  // "[2, 128, 8, 128]"
  std::string strides_text() const;
  std::string device_text() const;  // "cuda:0", "cpu"
  // [first byte, one past the last byte] the view can address; {0, 0} when empty.
  struct Span {
    uintptr_t begin = 0, end = 0;
  };
  Span span() const;
};

// Structural checks: present, 0 <= ndim <= 8, shape given and non-negative, strides
// non-negative, data non-null when numel > 0; the element count, the largest element offset and
// the byte span fit in int64, and data + bytes in the address space.
CheckedTensor inspect_tensor(const tsattn_tensor_view* view, const char* name);

// The last dimension is contiguous; the base pointer and every other stride keep 16-byte
// alignment (what TMA and 16-byte vector loads need). Size-1 dimensions are exempt: their
// stride never multiplies a non-zero index.
void check_attention_strides(const CheckedTensor& t);

// No two distinct index tuples of t address the same element (out must not write twice).
void check_no_self_overlap(const CheckedTensor& t);

// out must not share a byte with an input.
void check_disjoint(const CheckedTensor& out, const CheckedTensor& input);

// Host memory for the CPU reference (Residency::host), else a CUDA tensor on cuda:device_id, the
// device of the tensor named `anchor` (every tensor of a call shares one device).
void check_residency(const CheckedTensor& t, Residency residency, int device_id, const char* anchor);

}  // namespace tsattn
