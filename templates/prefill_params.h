// prefill_params.h - the one host/device ABI of the prefill kernels.
//
// Included by host C++ (src/) and embedded into every generated kernel source (NVRTC, no
// include directories), so it uses plain C types only. The kernel takes it by value as a
// __grid_constant__ parameter.
// Bump TSATTN_PARAMS_VERSION with any change to these structs: it is serialized into every
// launch and its text is part of every cache key.
#ifndef TSATTN_PREFILL_PARAMS_H
#define TSATTN_PREFILL_PARAMS_H

#define TSATTN_PARAMS_VERSION 1

// One unit of work: query tile q_tile (rows q_tile*BLOCK_M ..) of request `request`, for query
// heads qo_head_begin .. qo_head_begin + qo_head_count - 1 (consecutive heads that share one kv
// head, so K/V tiles are reused from L1/L2).
struct TsattnTask {
  int request;
  int q_tile;
  int qo_head_begin;
  int qo_head_count;
};

struct TsattnPrefillParams {
  // Attention tensors as [batch][token][head][d], d contiguous. Strides are in elements.
  // Element (b, t, h, d) of request b: base + b*batch_stride + (token_offset(b) + t)*token_stride
  // + h*head_stride + d, where token_offset(b) is indptr[b] (packed layout) or 0 (fixed layout).
  const void* q;
  const void* k;
  const void* v;
  void* out;
  long long q_batch_stride, q_token_stride, q_head_stride;
  long long k_batch_stride, k_token_stride, k_head_stride;
  long long v_batch_stride, v_token_stride, v_head_stride;
  long long out_batch_stride, out_token_stride, out_head_stride;

  // Packed layout: int32 [batch+1] on the device. Values are clamped to [0, q_tokens] /
  // [0, kv_tokens] and made non-decreasing before use, so malformed indptrs passed under graph
  // capture (never validated on the host) cannot move any access out of bounds.
  const int* qo_indptr;
  const int* kv_indptr;
  // Fixed layout: Sq and Sk. Packed layout: total_q and total_k (the tensors' extents).
  int q_tokens;
  int kv_tokens;
  int batch;

  int num_qo_heads;
  int group_size;   // query heads per kv head: kv head = qo head / group_size
  int window_left;  // causal window specs only: >= 1, clamped by the host to kv_tokens

  // Variable-window specs only: int32 bounds, element (b, i) at
  // base + b*batch_stride + (qo_token_offset(b) + i)*row_stride. Inclusive; clamped to [0, Sk).
  const int* window_starts;
  const int* window_ends;
  long long starts_batch_stride, starts_row_stride;
  long long ends_batch_stride, ends_row_stride;

  float scale_log2;    // sm_scale * log2(e): scores go through exp2
  float output_scale;

  // The scheduler's task list (device memory), heaviest first. Persistent CTAs take tasks
  // blockIdx.x, blockIdx.x + gridDim.x, ... while the index is below *num_tasks.
  const TsattnTask* tasks;
  const int* num_tasks;
};

#endif  // TSATTN_PREFILL_PARAMS_H
