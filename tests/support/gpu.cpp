#include "support/gpu.hpp"

#include <utility>

namespace tsattn::test {

namespace {

const driver::Api& cu() { return driver::api(); }

}  // namespace

std::string gpu_unavailable_reason() {
  if (!driver::unavailable_reason().empty()) return driver::unavailable_reason();
  int count = 0;
  if (cu().cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) return "the driver reports no device";
  // Tests allocate and copy outside tsattn calls: they work in device 0's primary context.
  static CUcontext context = [] {
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    driver::check(cu().cuDeviceGet(&device, 0), "cuDeviceGet");
    driver::check(cu().cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
    return ctx;
  }();
  driver::check(cu().cuCtxSetCurrent(context), "cuCtxSetCurrent");
  return "";
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // A zero-byte allocation still gets a distinct, valid address (never dereferenced).
  driver::check(cu().cuMemAlloc(&pointer_, bytes == 0 ? 256 : bytes), "cuMemAlloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (pointer_) cu().cuMemFree(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) cu().cuMemFree(pointer_);
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  REQUIRE(offset + bytes <= bytes_);
  if (bytes) driver::check(cu().cuMemcpyHtoD(pointer_ + offset, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  REQUIRE(offset + bytes <= bytes_);
  if (bytes) driver::check(cu().cuMemcpyDtoH(host, pointer_ + offset, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  if (bytes_) {
    driver::check(cu().cuMemsetD8Async(pointer_, value, bytes_, nullptr), "cuMemsetD8Async");
    synchronize_device();
  }
}

Stream::Stream() { driver::check(cu().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }

Stream::~Stream() { cu().cuStreamDestroy(stream_); }

void Stream::synchronize() const { driver::check(cu().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

void synchronize_device() { driver::check(cu().cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed?)"); }

}  // namespace tsattn::test
