// gpu.hpp - what GPU tests need: a skip line where there is no GPU, device buffers, a stream.
//
// GPU tests are real tests that run on the H200; on machines without a CUDA device they print
// "skipped: no CUDA device" (ctest reports them as skipped) and return.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "jit/driver/device_buffer.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn::test {

// Empty when a CUDA device is usable, else why not. Makes device 0's primary context current
// on the calling thread.
std::string gpu_unavailable_reason();

#define TSATTN_REQUIRE_GPU()                                                        \
  do {                                                                              \
    const std::string tsattn_why_no_gpu = ::tsattn::test::gpu_unavailable_reason(); \
    if (!tsattn_why_no_gpu.empty()) {                                               \
      MESSAGE("skipped: no CUDA device (" << tsattn_why_no_gpu << ")");             \
      return;                                                                       \
    }                                                                               \
  } while (false)

using driver::DeviceBuffer;

// A non-default stream, destroyed with the object.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

void synchronize_device();

}  // namespace tsattn::test
