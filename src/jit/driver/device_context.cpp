#include "jit/driver/device_context.hpp"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "jit/driver/driver_api.hpp"

namespace tsattn::driver {

namespace {

DeviceInfo query_device(int ordinal) {
  const Api& cu = api();
  int count = 0;
  check(cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    throw Error(ErrorKind::value,
                fmt::format("the tensors are on cuda:{} but this machine has {} CUDA device(s)", ordinal, count));
  CUdevice device = 0;
  check(cu.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  DeviceInfo info;
  info.ordinal = ordinal;
  auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    check(cu.cuDeviceGetAttribute(&value, which, device), "cuDeviceGetAttribute");
    return value;
  };
  info.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.max_shared_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  char name[256] = {};
  check(cu.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName");
  info.name = name;
  return info;
}

CUcontext primary_context(int ordinal) {
  // Retained once per device and never released: the primary context lives as long as the
  // process, as it does for the CUDA runtime and PyTorch.
  static std::mutex mutex;
  static std::vector<CUcontext> contexts;
  std::lock_guard lock(mutex);
  if (contexts.size() <= static_cast<size_t>(ordinal)) contexts.resize(static_cast<size_t>(ordinal) + 1);
  CUcontext& ctx = contexts[static_cast<size_t>(ordinal)];
  if (ctx == nullptr) {
    const Api& cu = api();
    CUdevice device = 0;
    check(cu.cuDeviceGet(&device, ordinal), "cuDeviceGet");
    check(cu.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  }
  return ctx;
}

}  // namespace

const DeviceInfo& device_info(int ordinal) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DeviceInfo>> cache;
  std::lock_guard lock(mutex);
  if (ordinal >= 0 && static_cast<size_t>(ordinal) < cache.size() && cache[static_cast<size_t>(ordinal)])
    return *cache[static_cast<size_t>(ordinal)];
  DeviceInfo info = query_device(ordinal);
  if (cache.size() <= static_cast<size_t>(ordinal)) cache.resize(static_cast<size_t>(ordinal) + 1);
  cache[static_cast<size_t>(ordinal)] = std::make_unique<DeviceInfo>(std::move(info));
  return *cache[static_cast<size_t>(ordinal)];
}

CurrentContext::CurrentContext(CUcontext context) {
  const Api& cu = api();
  CUcontext current = nullptr;
  check(cu.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (context == current) return;
  check(cu.cuCtxPushCurrent(context), "cuCtxPushCurrent");
  pushed_ = true;
}

CurrentContext::~CurrentContext() {
  if (pushed_) {
    CUcontext popped = nullptr;
    api().cuCtxPopCurrent(&popped);
  }
}

ContextScope::ContextScope(CUstream stream, int device_ordinal) : device_(device_info(device_ordinal)) {
  const Api& cu = api();
  if (stream != nullptr) {
    check(cu.cuStreamGetCtx(stream, &context_), "cuStreamGetCtx (is the stream valid?)");
  } else {
    check(cu.cuCtxGetCurrent(&context_), "cuCtxGetCurrent");
    if (context_ != nullptr) {
      CUdevice device = 0;
      check(cu.cuCtxGetDevice(&device), "cuCtxGetDevice");
      if (device != device_ordinal) context_ = nullptr;  // the thread works on another device
    }
    if (context_ == nullptr) context_ = primary_context(device_ordinal);
  }
  current_.emplace(context_);
  CUdevice device = 0;
  check(cu.cuCtxGetDevice(&device), "cuCtxGetDevice");
  if (device != device_ordinal)
    throw Error(ErrorKind::value, fmt::format("the stream belongs to cuda:{} but the tensors are on cuda:{}",
                                              static_cast<int>(device), device_ordinal));
}

ContextScope::~ContextScope() = default;

}  // namespace tsattn::driver
