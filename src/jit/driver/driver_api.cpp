#include "jit/driver/driver_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <tsattn/tsattn.hpp>

namespace tsattn::driver {

namespace {

struct Loaded {
  Api api;
  std::string failure;  // empty on success
};

// Each entry point is bound by its exact ABI symbol, the name cuda.h maps the function to
// (cuMemAlloc -> cuMemAlloc_v2, ...): the one whose prototype Api's member was declared with,
// just as linking against libcuda would bind it. cuGetProcAddress(name, CUDA_VERSION) is not
// used because it returns the newest variant of a name, whose prototype can differ (with CUDA
// 13.0 headers, "cuCtxGetDevice" gives the two-argument cuCtxGetDevice_v2).
#define TSATTN_SYMBOL_TEXT(name) #name
#define TSATTN_ABI_SYMBOL(name) TSATTN_SYMBOL_TEXT(name)

template <class Fn>
bool resolve(void* handle, const char* symbol, Fn& fn, std::string& failure) {
  void* pointer = dlsym(handle, symbol);
  if (pointer == nullptr) {
    failure = fmt::format("the CUDA driver has no {}; a driver for CUDA {}.{} or newer is needed", symbol,
                          CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return false;
  }
  fn = reinterpret_cast<Fn>(pointer);
  return true;
}

Loaded load() {
  Loaded loaded;
  // The handle is intentionally never closed: driver entry points live as long as the process.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    loaded.failure = fmt::format("no CUDA driver: libcuda.so.1 could not be loaded ({})", why ? why : "unknown");
    return loaded;
  }
  Api& a = loaded.api;
  std::string& f = loaded.failure;
#define TSATTN_RESOLVE_DRIVER_FUNCTION(name) \
  if (!resolve(handle, TSATTN_ABI_SYMBOL(name), a.name, f)) return loaded;
  TSATTN_DRIVER_FUNCTIONS(TSATTN_RESOLVE_DRIVER_FUNCTION)
#undef TSATTN_RESOLVE_DRIVER_FUNCTION
  const CUresult init = a.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    a.cuGetErrorName(init, &name);
    loaded.failure = fmt::format("no usable CUDA device: cuInit failed with {}", name ? name : "an unknown error");
  }
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.failure.empty()) throw Error(ErrorKind::runtime, l.failure);
  return l.api;
}

const std::string& unavailable_reason() { return loaded().failure; }

void check(CUresult result, const std::string& what) {
  if (result == CUDA_SUCCESS) return;
  const Api& a = api();
  const char* name = nullptr;
  const char* description = nullptr;
  a.cuGetErrorName(result, &name);
  a.cuGetErrorString(result, &description);
  throw Error(ErrorKind::runtime, fmt::format("{}: {} ({})", what, name ? name : "unknown CUDA error",
                                              description ? description : "no description"));
}

}  // namespace tsattn::driver
