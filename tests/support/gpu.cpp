#include "support/gpu.hpp"

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

Stream::Stream() { driver::check(cu().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }

Stream::~Stream() { cu().cuStreamDestroy(stream_); }

void Stream::synchronize() const { driver::check(cu().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

void synchronize_device() { driver::check(cu().cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed?)"); }

}  // namespace tsattn::test
