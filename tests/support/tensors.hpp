// tensors.hpp - test tensors: a tsattn::Tensor plus the bytes behind it.
//
// HostTensor owns real host memory (for the CPU oracle). For argument checking on machines
// without a GPU, fake_cuda() turns any tensor into a CUDA-tagged view of 256-byte aligned
// host memory that the validator must never read.
#pragma once

#include <tsattn/tsattn.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

#include "api/dtype.hpp"

namespace tsattn::test {

inline std::vector<int64_t> compact_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

// A tensor with its own storage. Storage is 256-byte aligned so that views keep the 16-byte
// alignment the contract asks for; extra_elements pads the end for strided views into it.
struct HostTensor {
  Tensor tensor;
  std::unique_ptr<std::byte[], FreeDeleter> storage;
  size_t bytes = 0;

  HostTensor() = default;
  HostTensor(tsattn_dtype dtype, std::vector<int64_t> shape, int64_t extra_elements = 0) {
    const int64_t elements =
        std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()) + extra_elements;
    bytes = static_cast<size_t>(elements) * static_cast<size_t>(dtype_size(dtype));
    const size_t rounded = (bytes + 255) / 256 * 256 + 256;
    storage.reset(static_cast<std::byte*>(std::aligned_alloc(256, rounded)));
    tensor.data = storage.get();
    tensor.dtype = dtype;
    tensor.device_type = TSATTN_DEVICE_CPU;
    tensor.shape = std::move(shape);
  }

  template <class T>
  T* as() {
    return reinterpret_cast<T*>(storage.get());
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(storage.get());
  }

  // The same memory seen as a CUDA tensor (for argument checking only).
  Tensor fake_cuda(int32_t device_id = 0) const {
    Tensor t = tensor;
    t.device_type = TSATTN_DEVICE_CUDA;
    t.device_id = device_id;
    return t;
  }
};

// An int32 host tensor holding the given values (indptrs, window bounds).
inline HostTensor int32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  HostTensor t(TSATTN_DTYPE_INT32, std::move(shape));
  std::copy(values.begin(), values.end(), t.as<int32_t>());
  return t;
}

}  // namespace tsattn::test
