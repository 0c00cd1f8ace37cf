// tsattn.hpp - a thin C++ layer over the C ABI in tsattn.h.
//
// Failures become tsattn::Error exceptions that carry the contract's error kind. q, k, v, out and
// the indptrs stay caller-owned; the only device memory the layer owns is a PrefillPlan's workspace.
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

// What a PrefillPlan fixes (tsattn_prefill_plan_options): the capacities, heads, head dim and
// dtypes must be set; the rest has the Python defaults.
struct PlanOptions {
  int32_t device = 0;
  bool packed = false;
  int64_t batch_size = 0;
  int64_t max_seq_len_q = 0;
  int64_t max_kv_len = 0;
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  tsattn_dtype q_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype kv_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype out_dtype = TSATTN_DTYPE_UNSET;  // default: q_dtype
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  std::optional<double> sm_scale;  // default 1/sqrt(head_dim)
  double output_scale = 1.0;
};

struct RunOptions {
  const Tensor* variable_window_token_starts = nullptr;
  const Tensor* variable_window_token_ends = nullptr;
  const Tensor* lse = nullptr;  // float32 q.shape[:-1]: the rows' log-sum-exp, or null
  bool validate = true;
  void* stream = nullptr;
};

// Plan once, run every layer (docs/contract.md): plan() makes a tsattn_prefill_plan (the kernel
// loaded, the workspace allocated), run() only launches. Owns the plan; one thread at a time, and
// its runs must be ordered on the device (one stream, or streams ordered by events).
class BatchPrefillTSWrapper {
 public:
  BatchPrefillTSWrapper() = default;
  explicit BatchPrefillTSWrapper(const PlanOptions& options) { plan(options); }
  ~BatchPrefillTSWrapper() { tsattn_prefill_plan_destroy(plan_); }
  BatchPrefillTSWrapper(BatchPrefillTSWrapper&& other) noexcept : plan_(std::exchange(other.plan_, nullptr)) {}
  BatchPrefillTSWrapper& operator=(BatchPrefillTSWrapper&& other) noexcept {
    if (this != &other) {
      tsattn_prefill_plan_destroy(plan_);
      plan_ = std::exchange(other.plan_, nullptr);
    }
    return *this;
  }
  BatchPrefillTSWrapper(const BatchPrefillTSWrapper&) = delete;
  BatchPrefillTSWrapper& operator=(const BatchPrefillTSWrapper&) = delete;

  // Replaces the current plan (if any) by a new one; on failure the wrapper holds no plan.
  void plan(const PlanOptions& options) {
    tsattn_prefill_plan_destroy(std::exchange(plan_, nullptr));
    tsattn_prefill_plan_options c;
    tsattn_prefill_plan_options_init(&c);
    c.device_id = options.device;
    c.layout = options.packed ? TSATTN_LAYOUT_PACKED : TSATTN_LAYOUT_FIXED;
    c.batch_size = options.batch_size;
    c.max_seq_len_q = options.max_seq_len_q;
    c.max_kv_len = options.max_kv_len;
    c.num_qo_heads = options.num_qo_heads;
    c.num_kv_heads = options.num_kv_heads;
    c.head_dim = options.head_dim;
    c.q_dtype = options.q_dtype;
    c.kv_dtype = options.kv_dtype;
    c.out_dtype = options.out_dtype;
    c.mask_type = options.mask;
    c.window_left = options.window_left;
    c.has_sm_scale = options.sm_scale.has_value();
    c.sm_scale = options.sm_scale.value_or(0.0);
    c.output_scale = options.output_scale;
    check(tsattn_prefill_plan_create(&c, &plan_));
  }

  // out = attention(q, k, v) with the plan's settings; packed plans take both indptrs. Throws
  // Error(value) when there is no plan.
  void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const RunOptions& options = {},
           const Tensor* qo_indptr = nullptr, const Tensor* kv_indptr = nullptr) const {
    const tsattn_tensor_view qv = q.view(), kview = k.view(), vv = v.view(), ov = out.view();
    std::optional<tsattn_tensor_view> qo, kvp, starts, ends, lse;
    if (qo_indptr) qo = qo_indptr->view();
    if (kv_indptr) kvp = kv_indptr->view();
    if (options.variable_window_token_starts) starts = options.variable_window_token_starts->view();
    if (options.variable_window_token_ends) ends = options.variable_window_token_ends->view();
    if (options.lse) lse = options.lse->view();
    tsattn_prefill_run_options c;
    tsattn_prefill_run_options_init(&c);
    c.variable_window_token_starts = starts ? &*starts : nullptr;
    c.variable_window_token_ends = ends ? &*ends : nullptr;
    c.lse = lse ? &*lse : nullptr;
    c.validate = options.validate ? 1 : 0;
    c.stream = options.stream;
    check(tsattn_prefill_plan_run(plan_, &qv, &kview, &vv, qo ? &*qo : nullptr, kvp ? &*kvp : nullptr, &c, &ov));
  }

  bool planned() const noexcept { return plan_ != nullptr; }
  // The C handle, for callers that keep their own views and options (tsattn_prefill_plan_run).
  tsattn_prefill_plan* handle() const noexcept { return plan_; }

 private:
  tsattn_prefill_plan* plan_ = nullptr;
};

// A paged KV cache (docs/paged_kv.md): the two page pools, the tables that name each request's pages
// (int32, all on the host or all on the GPU) and how the pools are laid out.
struct PagedKvCache {
  const Tensor& k_cache;
  const Tensor& v_cache;
  const Tensor& paged_kv_indptr;
  const Tensor& paged_kv_indices;
  const Tensor& paged_kv_last_page_len;
  int64_t page_size = 32;
  tsattn_kv_layout kv_layout = TSATTN_KV_LAYOUT_HND;
};

// out = attention(q, the paged keys and values); q and out packed [total_q, Hq, D] with qo_indptr.
// options as for batch_prefill, without variable windows.
inline void batch_prefill_with_paged_kv_cache(const Tensor& q, const PagedKvCache& cache, const Tensor& qo_indptr,
                                              const Tensor& out, const PrefillOptions& options = {}) {
  const tsattn_tensor_view qv = q.view(), kc = cache.k_cache.view(), vc = cache.v_cache.view(), qo = qo_indptr.view(),
                           indptr = cache.paged_kv_indptr.view(), indices = cache.paged_kv_indices.view(),
                           last = cache.paged_kv_last_page_len.view(), ov = out.view();
  std::optional<tsattn_tensor_view> starts, ends, lse;
  if (options.variable_window_token_starts) starts = options.variable_window_token_starts->view();
  if (options.variable_window_token_ends) ends = options.variable_window_token_ends->view();
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
  check(tsattn_batch_prefill_with_paged_kv_cache(&qv, &kc, &vc, &qo, &indptr, &indices, &last, cache.page_size,
                                                 cache.kv_layout, &c, &ov));
}

// What a BatchPrefillPagedTSWrapper's plan fixes (tsattn_paged_prefill_plan_options): PlanOptions'
// fields (q packed) and the pages' size and layout.
struct PagedPlanOptions {
  int32_t device = 0;
  int64_t batch_size = 0;
  int64_t max_seq_len_q = 0;
  int64_t max_kv_len = 0;
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  tsattn_dtype q_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype kv_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype out_dtype = TSATTN_DTYPE_UNSET;  // default: q_dtype
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  std::optional<double> sm_scale;  // default 1/sqrt(head_dim)
  double output_scale = 1.0;
  int64_t page_size = 32;
  tsattn_kv_layout kv_layout = TSATTN_KV_LAYOUT_HND;
};

// Plan once, run every layer, over a paged KV cache: BatchPrefillTSWrapper's rules
// (tsattn_paged_prefill_plan). RunOptions' variable-window bounds must be null.
class BatchPrefillPagedTSWrapper {
 public:
  BatchPrefillPagedTSWrapper() = default;
  explicit BatchPrefillPagedTSWrapper(const PagedPlanOptions& options) { plan(options); }
  ~BatchPrefillPagedTSWrapper() { tsattn_paged_prefill_plan_destroy(plan_); }
  BatchPrefillPagedTSWrapper(BatchPrefillPagedTSWrapper&& other) noexcept
      : plan_(std::exchange(other.plan_, nullptr)) {}
  BatchPrefillPagedTSWrapper& operator=(BatchPrefillPagedTSWrapper&& other) noexcept {
    if (this != &other) {
      tsattn_paged_prefill_plan_destroy(plan_);
      plan_ = std::exchange(other.plan_, nullptr);
    }
    return *this;
  }
  BatchPrefillPagedTSWrapper(const BatchPrefillPagedTSWrapper&) = delete;
  BatchPrefillPagedTSWrapper& operator=(const BatchPrefillPagedTSWrapper&) = delete;

  // Replaces the current plan (if any) by a new one; on failure the wrapper holds no plan.
  void plan(const PagedPlanOptions& options) {
    tsattn_paged_prefill_plan_destroy(std::exchange(plan_, nullptr));
    tsattn_paged_prefill_plan_options c;
    tsattn_paged_prefill_plan_options_init(&c);
    c.device_id = options.device;
    c.batch_size = options.batch_size;
    c.max_seq_len_q = options.max_seq_len_q;
    c.max_kv_len = options.max_kv_len;
    c.num_qo_heads = options.num_qo_heads;
    c.num_kv_heads = options.num_kv_heads;
    c.head_dim = options.head_dim;
    c.q_dtype = options.q_dtype;
    c.kv_dtype = options.kv_dtype;
    c.out_dtype = options.out_dtype;
    c.mask_type = options.mask;
    c.window_left = options.window_left;
    c.has_sm_scale = options.sm_scale.has_value();
    c.sm_scale = options.sm_scale.value_or(0.0);
    c.output_scale = options.output_scale;
    c.page_size = options.page_size;
    c.kv_layout = options.kv_layout;
    check(tsattn_paged_prefill_plan_create(&c, &plan_));
  }

  // out = the paged attention with the plan's settings (cache.page_size and cache.kv_layout are the
  // plan's; the ones given are not read). Throws Error(value) when there is no plan.
  void run(const Tensor& q, const PagedKvCache& cache, const Tensor& qo_indptr, const Tensor& out,
           const RunOptions& options = {}) const {
    const tsattn_tensor_view qv = q.view(), kc = cache.k_cache.view(), vc = cache.v_cache.view(), qo = qo_indptr.view(),
                             indptr = cache.paged_kv_indptr.view(), indices = cache.paged_kv_indices.view(),
                             last = cache.paged_kv_last_page_len.view(), ov = out.view();
    std::optional<tsattn_tensor_view> starts, ends, lse;
    if (options.variable_window_token_starts) starts = options.variable_window_token_starts->view();
    if (options.variable_window_token_ends) ends = options.variable_window_token_ends->view();
    if (options.lse) lse = options.lse->view();
    tsattn_prefill_run_options c;
    tsattn_prefill_run_options_init(&c);
    c.variable_window_token_starts = starts ? &*starts : nullptr;
    c.variable_window_token_ends = ends ? &*ends : nullptr;
    c.lse = lse ? &*lse : nullptr;
    c.validate = options.validate ? 1 : 0;
    c.stream = options.stream;
    check(tsattn_paged_prefill_plan_run(plan_, &qv, &kc, &vc, &qo, &indptr, &indices, &last, &c, &ov));
  }

  bool planned() const noexcept { return plan_ != nullptr; }
  tsattn_paged_prefill_plan* handle() const noexcept { return plan_; }

 private:
  tsattn_paged_prefill_plan* plan_ = nullptr;
};

// Merging attention states through their log-sum-exp (tsattn_merge_state, tsattn_merge_states):
// out and, when given, s_out receive the merged state; the work is queued on `stream`.
inline void merge_state(const Tensor& v_a, const Tensor& s_a, const Tensor& v_b, const Tensor& s_b, const Tensor& out,
                        const Tensor* s_out = nullptr, void* stream = nullptr) {
  const tsattn_tensor_view va = v_a.view(), sa = s_a.view(), vb = v_b.view(), sb = s_b.view(), ov = out.view();
  std::optional<tsattn_tensor_view> so;
  if (s_out) so = s_out->view();
  check(tsattn_merge_state(&va, &sa, &vb, &sb, &ov, so ? &*so : nullptr, stream));
}

// v [..., n, H, D] and s [..., n, H] into out [..., H, D] and s_out [..., H].
inline void merge_states(const Tensor& v, const Tensor& s, const Tensor& out, const Tensor* s_out = nullptr,
                         void* stream = nullptr) {
  const tsattn_tensor_view vv = v.view(), sv = s.view(), ov = out.view();
  std::optional<tsattn_tensor_view> so;
  if (s_out) so = s_out->view();
  check(tsattn_merge_states(&vv, &sv, &ov, so ? &*so : nullptr, stream));
}

inline std::string version() { return tsattn_version_string(); }

// The canonical name of the kernel the last batch_prefill on this thread launched ("" if that call
// launched none); see tsattn_last_kernel_name.
inline std::string last_kernel_name() { return tsattn_last_kernel_name(); }

}  // namespace tsattn
