// device_buffer.hpp - device memory owned by a C++ object (a plan's workspace, the demo, the
// benchmarks, the tests). The one-shot call never allocates this way: it uses stream-ordered
// allocations.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace tsattn::driver {

// Memory in the current context, freed on destruction. Copies are synchronous.
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
  // Throws Error(value) when the range does not fit the buffer.
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill_bytes(uint8_t value);

 private:
  CUdeviceptr pointer_ = 0;
  size_t bytes_ = 0;
};

}  // namespace tsattn::driver
