// tsattn.hpp - a thin C++ layer over the C ABI in tsattn.h.
//
// Failures become tsattn::Error exceptions that carry the contract's error kind. The
// layer owns nothing on the device: q, k, v, out and the indptrs stay caller-owned.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tsattn {

enum class ErrorKind : int32_t {
  type = TSATTN_ERROR_TYPE,                        // Python TypeError
  value = TSATTN_ERROR_VALUE,                      // Python ValueError
  not_implemented = TSATTN_ERROR_NOT_IMPLEMENTED,  // Python NotImplementedError
  runtime = TSATTN_ERROR_RUNTIME,                  // Python RuntimeError
};

inline const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::type: return "TypeError";
    case ErrorKind::value: return "ValueError";
    case ErrorKind::not_implemented: return "NotImplementedError";
    case ErrorKind::runtime: return "RuntimeError";
  }
  return "Error";
}

// The one exception type of tsattn, inside the library and out of it.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

inline void check(tsattn_status status) {
  if (status != TSATTN_OK) throw Error(static_cast<ErrorKind>(status), tsattn_last_error_message());
}

// An owning description of a caller's tensor (the memory itself is not owned).
struct Tensor {
  void* data = nullptr;
  tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_device_type device_type = TSATTN_DEVICE_CUDA;
  int32_t device_id = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact row-major

  // The view points into this object: keep the Tensor alive while the view is used.
  tsattn_tensor_view view() const {
    return {data,
            dtype,
            device_type,
            device_id,
            static_cast<int32_t>(shape.size()),
            shape.data(),
            strides.empty() ? nullptr : strides.data()};
  }
};

struct PrefillOptions {
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  const Tensor* variable_window_token_starts = nullptr;
  const Tensor* variable_window_token_ends = nullptr;
  std::optional<double> sm_scale;  // default 1/sqrt(D)
  double output_scale = 1.0;
  tsattn_dtype out_dtype = TSATTN_DTYPE_UNSET;  // default: out's dtype
  void* stream = nullptr;
  const Tensor* lse = nullptr;  // float32 q.shape[:-1]: the rows' log-sum-exp (tsattn.h, options.lse)
};

// Packed layout when both indptrs are given, fixed layout when neither is.
inline void batch_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const PrefillOptions& options = {}, const Tensor* qo_indptr = nullptr,
                          const Tensor* kv_indptr = nullptr) {
  const tsattn_tensor_view qv = q.view(), kview = k.view(), vv = v.view(), ov = out.view();
  std::optional<tsattn_tensor_view> qo, kvp, starts, ends;
  if (qo_indptr) qo = qo_indptr->view();
  if (kv_indptr) kvp = kv_indptr->view();
  if (options.variable_window_token_starts) starts = options.variable_window_token_starts->view();
  if (options.variable_window_token_ends) ends = options.variable_window_token_ends->view();
  std::optional<tsattn_tensor_view> lse;
  if (options.lse) lse = options.lse->view();

  tsattn_prefill_options c;
  tsattn_prefill_options_init(&c);
  c.mask_type = options.mask;
  c.window_left = options.window_left;
  c.variable_window_token_starts = starts ? &*starts : nullptr;
  c.variable_window_token_ends = ends ? &*ends : nullptr;
  c.has_sm_scale = options.sm_scale.has_value();
  c.sm_scale = options.sm_scale.value_or(0.0);
  c.output_scale = options.output_scale;
  c.out_dtype = options.out_dtype;
  c.stream = options.stream;
  c.lse = lse ? &*lse : nullptr;
  check(tsattn_batch_prefill(&qv, &kview, &vv, qo ? &*qo : nullptr, kvp ? &*kvp : nullptr, &c, &ov));
}

inline std::string version() { return tsattn_version_string(); }

// The canonical name of the kernel the last batch_prefill on this thread launched ("" if that call
// launched none); see tsattn_last_kernel_name.
inline std::string last_kernel_name() { return tsattn_last_kernel_name(); }

}  // namespace tsattn
