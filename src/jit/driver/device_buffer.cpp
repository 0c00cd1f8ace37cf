#include "jit/driver/device_buffer.hpp"

#include <utility>

#include "common/error.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn::driver {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // A zero-byte buffer still gets a distinct, valid address (never dereferenced).
  check(api().cuMemAlloc(&pointer_, bytes == 0 ? 256 : bytes), "cuMemAlloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (pointer_) api().cuMemFree(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) api().cuMemFree(pointer_);
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_)
    raise(ErrorKind::value, "upload of {} bytes at {} exceeds a {}-byte buffer", bytes, offset, bytes_);
  if (bytes) check(api().cuMemcpyHtoD(pointer_ + offset, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_)
    raise(ErrorKind::value, "download of {} bytes at {} exceeds a {}-byte buffer", bytes, offset, bytes_);
  if (bytes) check(api().cuMemcpyDtoH(host, pointer_ + offset, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  if (bytes_ == 0) return;
  check(api().cuMemsetD8Async(pointer_, value, bytes_, nullptr), "cuMemsetD8Async");
  check(api().cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace tsattn::driver
