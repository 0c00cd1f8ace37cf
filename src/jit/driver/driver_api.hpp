// driver_api.hpp - the CUDA Driver API, opened at run time with dlopen.
//
// libtsattn never links libcuda: every binary starts on a machine without a GPU and
// reports a clear RuntimeError there when device work is asked for. Entry points are bound by
// their exact ABI symbols (driver_api.cpp says why).
#pragma once

#include <cuda.h>

#include <string>

namespace tsattn::driver {

// Every driver entry point tsattn uses, by its CUDA name (member names equal the functions).
// clang-format off
#define TSATTN_DRIVER_FUNCTIONS(X) \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName) \
  X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxPushCurrent) \
  X(cuCtxPopCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuStreamGetCtx) \
  X(cuStreamIsCapturing) X(cuStreamSynchronize) X(cuStreamCreate) X(cuStreamDestroy) \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuLaunchKernelEx) X(cuOccupancyMaxActiveClusters) \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) \
  X(cuMemcpyDtoHAsync) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemAllocHost) X(cuMemFreeHost) \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime) \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) \
  X(cuGraphDestroy) X(cuGraphExecDestroy) X(cuMemFreeAsync) \
  X(cuMemPoolCreate) X(cuMemPoolSetAttribute) X(cuMemAllocFromPoolAsync) \
  X(cuTensorMapEncodeTiled)
// clang-format on

struct Api {
#define TSATTN_DECLARE_DRIVER_FUNCTION(name) decltype(&::name) name = nullptr;
  TSATTN_DRIVER_FUNCTIONS(TSATTN_DECLARE_DRIVER_FUNCTION)
#undef TSATTN_DECLARE_DRIVER_FUNCTION
};

// The loaded and initialised driver. Loading happens once per process; if it failed,
// every call throws Error(runtime) saying why (no libcuda, cuInit failed, ...).
const Api& api();

// Empty when the driver loaded and initialised, else the reason it did not.
const std::string& unavailable_reason();

// Throws Error(runtime) "<what>: <CUDA_ERROR_NAME> (<description>)" unless result is CUDA_SUCCESS.
void check(CUresult result, const std::string& what);
// The same for a fixed text: no string is built unless the call failed (launch paths call it often).
inline void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) check(result, std::string(what));
}

}  // namespace tsattn::driver
