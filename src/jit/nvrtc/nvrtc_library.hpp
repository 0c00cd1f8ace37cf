// nvrtc_library.hpp - NVRTC, opened at run time with dlopen when the first kernel is looked up
// (its version is part of the cache key).
//
// libtsattn links no NVRTC, so a wheel needs no CUDA toolkit: the compiler comes from the pip
// package nvidia-cuda-nvrtc (PyTorch's CUDA 13 wheels install it), a toolkit, or the system. Where
// none loads, only compiling fails: a process that finds every kernel in a cache layer runs without.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace tsattn::nvrtc {

// Every NVRTC entry point tsattn uses, by its C name (member names equal the functions).
// clang-format off
#define TSATTN_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion) \
  X(nvrtcGetErrorString) \
  X(nvrtcGetNumSupportedArchs) \
  X(nvrtcGetSupportedArchs) \
  X(nvrtcCreateProgram) \
  X(nvrtcDestroyProgram) \
  X(nvrtcCompileProgram) \
  X(nvrtcGetProgramLogSize) \
  X(nvrtcGetProgramLog) \
  X(nvrtcGetCUBINSize) \
  X(nvrtcGetCUBIN)
// clang-format on

struct NvrtcApi {
#define TSATTN_DECLARE_NVRTC_FUNCTION(name) decltype(&::name) name = nullptr;
  TSATTN_NVRTC_FUNCTIONS(TSATTN_DECLARE_NVRTC_FUNCTION)
#undef TSATTN_DECLARE_NVRTC_FUNCTION
};

// Where a candidate comes from. An explicit path that fails ends the search: a user's choice never
// falls back to another copy.
enum class NvrtcOrigin { explicit_path, already_loaded, pip_package, cuda_home, toolkit, system };
const char* origin_text(NvrtcOrigin origin);  // "TSATTN_NVRTC_LIBRARY", "pip package nvidia-cuda-nvrtc", ...

// One place NVRTC may be, in search order.
struct NvrtcCandidate {
  NvrtcOrigin origin;
  std::string path;  // a file path, or the bare soname for already_loaded and system
};

// What the search depends on, so that tests can run it on made-up layouts.
struct NvrtcSearchInputs {
  std::string explicit_path;  // TSATTN_NVRTC_LIBRARY
  std::string self_path;      // the file holding this code: libtsattn.so, or the tsattn executable
  std::string cuda_home;      // $CUDA_HOME
};

// The inputs of this process: the environment and the location of this code (dladdr).
NvrtcSearchInputs process_search_inputs();

// The search order: TSATTN_NVRTC_LIBRARY; an NVRTC 13 already loaded in the process; the pip package
// beside the installed tsattn package (<site-packages>/nvidia/cu13/lib, two folders above this
// file); the toolkit ($CUDA_HOME, /usr/local/cuda); the system's library path.
std::vector<NvrtcCandidate> nvrtc_candidates(const NvrtcSearchInputs& inputs);

struct NvrtcLoad {
  NvrtcApi api;
  std::string path;  // the file loaded ("" when the search failed)
  NvrtcOrigin origin = NvrtcOrigin::system;
  std::string failure;  // empty on success: else every place searched and why it failed, and what to do
};

// Runs the search. A candidate in a folder gets that folder's libnvrtc-builtins loaded first:
// libnvrtc opens it by name while compiling, and the loader's path need not hold that folder.
NvrtcLoad load_nvrtc(const NvrtcSearchInputs& inputs);

// The process's NVRTC, searched for once; throws Error(runtime) with the search report when none
// loads.
const NvrtcApi& nvrtc_api();
const NvrtcLoad& nvrtc_load();

// True when an NVRTC is loaded or can be; loads it.
bool nvrtc_available();

// The CUDA version the library was built against ("13.0"): the NVRTC version cache keys assume
// when no NVRTC can be loaded.
std::string built_cuda_version();

}  // namespace tsattn::nvrtc
