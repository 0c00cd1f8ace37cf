#include "jit/driver/driver_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <tsattn/tsattn.hpp>

namespace tsattn::driver {

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Loaded {
  Api api;
  std::string failure;  // empty on success
};

template <class Fn>
bool resolve(GetProcAddress get_proc, const char* symbol, Fn& fn, std::string& failure) {
  void* pointer = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult result = get_proc(symbol, &pointer, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (result != CUDA_SUCCESS || pointer == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {
    failure = fmt::format("the CUDA driver has no usable {} (cuGetProcAddress result {}, status {}); a driver "
                          "for CUDA {}.{} or newer is needed",
                          symbol, static_cast<int>(result), static_cast<int>(status), CUDA_VERSION / 1000,
                          CUDA_VERSION % 1000 / 10);
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
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    loaded.failure = "the CUDA driver is too old: libcuda.so.1 has no cuGetProcAddress_v2";
    return loaded;
  }
  Api& a = loaded.api;
  std::string& f = loaded.failure;
#define TSATTN_RESOLVE_DRIVER_FUNCTION(name) \
  if (!resolve(get_proc, #name, a.name, f)) return loaded;
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
