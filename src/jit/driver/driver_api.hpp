// driver_api.hpp - the CUDA Driver API, opened at run time with dlopen.
//
// libtsattn never links libcuda: every binary starts on a machine without a GPU and
// reports a clear RuntimeError there when device work is asked for. Entry points are
// resolved through cuGetProcAddress at the CUDA version this library was built against.
#pragma once

#include <cuda.h>

#include <string>

namespace tsattn::driver {

struct Api {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDeviceGetName) device_get_name = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
};

// The loaded and initialised driver. Loading happens once per process; if it failed,
// every call throws Error(runtime) saying why (no libcuda, cuInit failed, ...).
const Api& api();

// Empty when the driver loaded and initialised, else the reason it did not.
const std::string& unavailable_reason();

// Throws Error(runtime) "<what>: <CUDA_ERROR_NAME> (<description>)" unless result is CUDA_SUCCESS.
void check(CUresult result, const std::string& what);

}  // namespace tsattn::driver
