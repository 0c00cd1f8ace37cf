// problem.hpp - one normalized batch_prefill call: what every later stage (codegen, plan,
// launch, the CPU oracle) reads. Built only by validate_arguments(), so every Problem
// already satisfies docs/contract.md; later stages never re-check arguments.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace tsattn {

enum class Layout { fixed, packed };
enum class MaskMode { dense, causal, variable_window };

// Where the attention tensors must live: on a CUDA device for the library call, in host
// memory for the CPU oracle (which reads through the same Problem).
enum class Residency { cuda, host };

// q, k, v or out seen as [batch][token][head][d] with d contiguous. Element (b, t, h, d) of
// request b is at data + b*batch_stride + (token_offset(b) + t)*token_stride + h*head_stride + d.
struct TokenTensor {
  void* data = nullptr;
  int64_t batch_stride = 0;  // elements; 0 in the packed layout
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// variable-window bounds seen as [batch][row]: element (b, i) is at
// data + b*batch_stride + (q_token_offset(b) + i)*row_stride.
struct RowIndexTensor {
  const int32_t* data = nullptr;
  int64_t batch_stride = 0;  // 0 in the packed layout
  int64_t row_stride = 0;
};

// The keys and values of a paged call whose kernel reads the pages itself (KernelSpec::paged_kv):
// each pool seen as [page][slot][head][d] (batch_stride: the page stride, token_stride: the slot
// stride), and the page tables in device memory. A plan's base problem holds an empty one: only
// the fact decides its kernels, and each run brings its pools and tables.
struct PagedKeys {
  TokenTensor k, v;
  int64_t num_pages = 0;  // 0: no request has keys (plan/tensor_maps.cpp maps such a pool anyway)
  int64_t page_size = 0;
  const int32_t* page_indptr = nullptr;   // [batch + 1]
  const int32_t* page_indices = nullptr;  // [entries]
  int64_t entries = 0;
};

struct Problem {
  Layout layout = Layout::fixed;
  int64_t batch = 0;
  // Fixed layout: Sq and Sk of every request. Packed layout: total_q and total_k.
  int64_t q_tokens = 0;
  int64_t kv_tokens = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  tsattn_dtype input_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype output_dtype = TSATTN_DTYPE_BFLOAT16;

  TokenTensor q, k, v, out;
  // The log-sum-exp output, fp32 [batch][token][head] (head_stride of its own); data null: none.
  TokenTensor lse;

  MaskMode mask = MaskMode::dense;
  int64_t window_left = -1;                   // -1: no window; W >= 1 only with the causal mask
  RowIndexTensor window_starts, window_ends;  // variable_window only

  float sm_scale = 0.0f;
  float output_scale = 1.0f;

  // Paged calls on a paged kernel: where the keys are. k and v then describe no memory the kernel
  // reads, and kv_indptr holds the keys' prefix sums as the page scan wrote them.
  std::optional<PagedKeys> paged;

  // Packed layout: the caller's indptrs (device or host pointers).
  const int32_t* qo_indptr = nullptr;
  const int32_t* kv_indptr = nullptr;
  bool indptr_on_host = false;
  // Packed layout with host indptrs: copies of their values (B+1 entries, validated).
  std::vector<int32_t> qo_indptr_host, kv_indptr_host;

  Residency residency = Residency::cuda;
  int device_id = 0;
  void* stream = nullptr;

  // Whether per-request lengths can be read on the host (fixed layout, or host indptrs).
  bool lengths_on_host() const { return layout == Layout::fixed || indptr_on_host; }
  // Per-request extents; only when lengths_on_host().
  int64_t q_len(int64_t b) const;
  int64_t kv_len(int64_t b) const;
  int64_t q_token_offset(int64_t b) const;
  int64_t kv_token_offset(int64_t b) const;

  // Element (b, i) of window_starts or window_ends; host-resident bounds only.
  int32_t window_bound(const RowIndexTensor& bounds, int64_t b, int64_t i) const;

  int group_size() const { return num_qo_heads / num_kv_heads; }
  // Number of (query row, key) pairs the mask lets through, over all requests; heads not
  // counted. Variable windows read their bounds, so they need host-resident bounds.
  int64_t visible_pairs() const;
};

// Keys visible to query row i of a request with q_len rows and kv_len keys under a causal
// mask with an optional left window: [first, last], empty when first > last.
struct KeyRange {
  int64_t first;
  int64_t last;
  bool empty() const { return first > last; }
  int64_t size() const { return empty() ? 0 : last - first + 1; }
};
KeyRange causal_key_range(int64_t i, int64_t q_len, int64_t kv_len, int64_t window_left);
// The clamped variable-window range of one row (bounds as given by the caller).
KeyRange variable_key_range(int64_t start, int64_t end, int64_t kv_len);

}  // namespace tsattn
