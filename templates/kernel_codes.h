// kernel_codes.h - the numbers a generated kernel source carries (TSATTN_INPUT_DTYPE,
// TSATTN_OUTPUT_DTYPE, TSATTN_MASK; the merge modules' TSATTN_MERGE_DTYPE) under one set of names for
// both sides: the generator (src/codegen) writes them, the templates read them. Plain C++, no CUDA
// headers.
#ifndef TSATTN_KERNEL_CODES_H
#define TSATTN_KERNEL_CODES_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TSATTN_HOST_DEVICE __host__ __device__
#else
#define TSATTN_HOST_DEVICE
#endif

// The codes as preprocessor numbers too, for the templates' #if branches.
#define TSATTN_DTYPE_CODE_FLOAT16 0
#define TSATTN_DTYPE_CODE_BFLOAT16 1
#define TSATTN_DTYPE_CODE_E4M3 2
#define TSATTN_DTYPE_CODE_FLOAT32 3  // merge modules only: attention reads and writes 8- and 16-bit types
#define TSATTN_MASK_CODE_DENSE 0
#define TSATTN_MASK_CODE_CAUSAL 1  // bottom-right causal, with TSATTN_WINDOW also a left window
#define TSATTN_MASK_CODE_VARIABLE_WINDOW 2

namespace tsattn_dev {

enum : int {
  kFloat16 = TSATTN_DTYPE_CODE_FLOAT16,
  kBfloat16 = TSATTN_DTYPE_CODE_BFLOAT16,
  kE4m3 = TSATTN_DTYPE_CODE_E4M3,
  kFloat32 = TSATTN_DTYPE_CODE_FLOAT32
};
enum : int {
  kMaskDense = TSATTN_MASK_CODE_DENSE,
  kMaskCausal = TSATTN_MASK_CODE_CAUSAL,
  kMaskVariableWindow = TSATTN_MASK_CODE_VARIABLE_WINDOW,
};

TSATTN_HOST_DEVICE constexpr int dtype_bytes(int dtype) { return dtype == kE4m3 ? 1 : (dtype == kFloat32 ? 4 : 2); }

}  // namespace tsattn_dev

#endif  // TSATTN_KERNEL_CODES_H
