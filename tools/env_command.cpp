#include "tools/env_command.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <tsattn/tsattn.hpp>

#include "jit/driver/driver_api.hpp"

namespace tsattn::tools {

int run_env() {
  fmt::print("tsattn        {} (C ABI {})\n", tsattn::version(), tsattn_abi_version());
  int nvrtc_major = 0, nvrtc_minor = 0;
  nvrtcVersion(&nvrtc_major, &nvrtc_minor);
  fmt::print("nvrtc         {}.{}\n", nvrtc_major, nvrtc_minor);

  const std::string& reason = driver::unavailable_reason();
  if (!reason.empty()) {
    fmt::print("cuda driver   unavailable: {}\n", reason);
    return 0;
  }
  const driver::Api& cu = driver::api();
  int driver_version = 0, count = 0;
  driver::check(cu.cuDriverGetVersion(&driver_version), "cuDriverGetVersion");
  driver::check(cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  fmt::print("cuda driver   {}.{}\n", driver_version / 1000, driver_version % 1000 / 10);
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    driver::check(cu.cuDeviceGet(&device, i), "cuDeviceGet");
    char name[256] = {};
    int major = 0, minor = 0, sms = 0;
    driver::check(cu.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName");
    driver::check(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cuDeviceGetAttribute");
    driver::check(cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cuDeviceGetAttribute");
    driver::check(cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute");
    fmt::print("cuda:{}        {} (sm_{}{}, {} SMs)\n", i, name, major, minor, sms);
  }
  return 0;
}

}  // namespace tsattn::tools
