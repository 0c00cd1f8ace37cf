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

#include "jit/driver/driver_api.hpp"

namespace tsattn::test {

// Empty when a CUDA device is usable, else why not. Makes device 0's primary context current
// on the calling thread.
std::string gpu_unavailable_reason();

#define TSATTN_REQUIRE_GPU()                                              \
  do {                                                                    \
    const std::string tsattn_why_no_gpu = ::tsattn::test::gpu_unavailable_reason(); \
    if (!tsattn_why_no_gpu.empty()) {                                     \
      MESSAGE("skipped: no CUDA device (" << tsattn_why_no_gpu << ")");   \
      return;                                                             \
    }                                                                     \
  } while (false)

// Device memory of device 0, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address() const { return pointer_; }
  void* data() const { return reinterpret_cast<void*>(pointer_); }
  size_t size() const { return bytes_; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill_bytes(uint8_t value);

 private:
  CUdeviceptr pointer_ = 0;
  size_t bytes_ = 0;
};

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
