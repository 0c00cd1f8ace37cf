// call_builder.hpp - a valid batch_prefill call that tests mutate one argument at a time.
//
// Attention tensors are fake CUDA views of real host memory (the validator never reads them);
// indptrs live in host memory unless a test moves them, so their values are checked.
#pragma once

#include <tsattn/tsattn.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "api/validate.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {

struct CallResult {
  tsattn_status status;
  std::string message;
};

struct CallBuilder {
  // Backing memory for every tensor a case may use.
  HostTensor q_mem, k_mem, v_mem, out_mem;
  Tensor q, k, v, out;
  std::optional<HostTensor> qo_mem, kv_mem, starts_mem, ends_mem;
  std::optional<Tensor> qo_indptr, kv_indptr, starts, ends;
  std::optional<HostTensor> lse_mem;
  std::optional<Tensor> lse;  // options.lse when set
  tsattn_prefill_options options{};
  bool pass_options = true;
  std::string_view null_argument;  // "q", "k", "v" or "out": passed as a null view

  // Fixed layout: q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D], all `dtype`, out like q.
  static CallBuilder fixed(int64_t batch = 2, int64_t sq = 16, int64_t sk = 32, int64_t hq = 8, int64_t hkv = 2,
                           int64_t d = 128, tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16) {
    CallBuilder c;
    c.allocate({batch, sq, hq, d}, {batch, sk, hkv, d}, dtype);
    return c;
  }

  // Packed layout with host indptrs built from per-request lengths.
  static CallBuilder packed(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens, int64_t hq = 8,
                            int64_t hkv = 2, int64_t d = 128, tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16) {
    std::vector<int32_t> qo{0}, kv{0};
    for (int32_t n : q_lens) qo.push_back(qo.back() + n);
    for (int32_t n : kv_lens) kv.push_back(kv.back() + n);
    CallBuilder c;
    c.allocate({qo.back(), hq, d}, {kv.back(), hkv, d}, dtype);
    c.set_indptrs(qo, kv);
    return c;
  }

  void allocate(std::vector<int64_t> q_shape, std::vector<int64_t> kv_shape, tsattn_dtype dtype) {
    q_mem = HostTensor(dtype, q_shape);
    k_mem = HostTensor(dtype, kv_shape);
    v_mem = HostTensor(dtype, kv_shape);
    out_mem = HostTensor(dtype, q_shape);
    q = q_mem.fake_cuda();
    k = k_mem.fake_cuda();
    v = v_mem.fake_cuda();
    out = out_mem.fake_cuda();
    tsattn_prefill_options_init(&options);
  }

  // Reallocates out with another dtype (same shape).
  void set_out_dtype(tsattn_dtype dtype) {
    out_mem = HostTensor(dtype, out.shape);
    out = out_mem.fake_cuda();
  }

  void set_indptrs(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv) {
    qo_mem = int32_tensor(qo);
    kv_mem = int32_tensor(kv);
    qo_indptr = qo_mem->tensor;
    kv_indptr = kv_mem->tensor;
  }

  // Variable-window bounds of the right shape for the layout, on q's (fake) device.
  void set_bounds(const std::vector<int32_t>& start_values, const std::vector<int32_t>& end_values) {
    std::vector<int64_t> shape =
        qo_indptr ? std::vector<int64_t>{q.shape[0]} : std::vector<int64_t>{q.shape[0], q.shape[1]};
    starts_mem = int32_tensor(start_values, shape);
    ends_mem = int32_tensor(end_values, shape);
    starts = starts_mem->fake_cuda();
    ends = ends_mem->fake_cuda();
    options.mask_type = TSATTN_MASK_VARIABLE_WINDOW;
  }

  // An lse output of `shape` (default q.shape[:-1]) and `dtype`, on q's (fake) device.
  void set_lse(tsattn_dtype dtype = TSATTN_DTYPE_FLOAT32, std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape.assign(q.shape.begin(), q.shape.end() - 1);
    lse_mem = HostTensor(dtype, shape);
    lse = lse_mem->fake_cuda();
  }

  // The C views of this call; they point into this builder, so keep it alive while used.
  struct Views {
    tsattn_tensor_view q, k, v, out, qo, kv, starts, ends, lse;
    tsattn_prefill_options options;
  };
  Views views() const {
    Views w{q.view(), k.view(), v.view(), out.view(), {}, {}, {}, {}, {}, options};
    if (qo_indptr) w.qo = qo_indptr->view();
    if (kv_indptr) w.kv = kv_indptr->view();
    if (starts) w.starts = starts->view();
    if (ends) w.ends = ends->view();
    if (lse) w.lse = lse->view();
    return w;
  }

  Arguments arguments(Views& w) const {
    w.options.variable_window_token_starts = starts ? &w.starts : nullptr;
    w.options.variable_window_token_ends = ends ? &w.ends : nullptr;
    w.options.lse = lse ? &w.lse : nullptr;
    auto unless_null = [&](const tsattn_tensor_view& view, const char* name) {
      return null_argument == name ? nullptr : &view;
    };
    return {unless_null(w.q, "q"),       unless_null(w.k, "k"),       unless_null(w.v, "v"),
            qo_indptr ? &w.qo : nullptr, kv_indptr ? &w.kv : nullptr, pass_options ? &w.options : nullptr,
            unless_null(w.out, "out")};
  }

  // Through the public C entry point, as a user would call it.
  CallResult call_c_api() const {
    Views w = views();
    const Arguments a = arguments(w);
    const tsattn_status status = tsattn_batch_prefill(a.q, a.k, a.v, a.qo_indptr, a.kv_indptr, a.options, a.out);
    return {status, tsattn_last_error_message()};
  }

  Problem validate() const {
    Views w = views();
    return validate_arguments(arguments(w), Residency::cuda);
  }
};

}  // namespace tsattn::test
