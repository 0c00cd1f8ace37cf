// common/request.cuh - where request b's rows live, read safely from TsattnPrefillParams.
//
// Packed layout: the indptrs are device memory that may never have been validated (graph
// capture plans on the device), so every value read is clamped to [0, tokens] and an end below
// its begin is an empty request. Every token index a kernel forms is then begin + t with
// t < len <= tokens - begin: inside the tensor whatever the indptr says.
#ifndef TSATTN_COMMON_REQUEST_CUH
#define TSATTN_COMMON_REQUEST_CUH

#include "common/prelude.cuh"
#include "prefill_params.h"

#ifndef TSATTN_PACKED
#error "TSATTN_PACKED must be defined (0 fixed layout, 1 packed ragged layout)"
#endif

namespace tsattn_dev {

struct RequestExtent {
  int q_begin;   // token offset of row 0 (0 in the fixed layout)
  int q_len;     // rows i in [0, q_len)
  int kv_begin;  // token offset of key 0
  int kv_len;    // keys j in [0, kv_len)
};

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) { return min(max(v, lo), hi); }

// indptr[b] made safe: clamped to [0, tokens].
__device__ __forceinline__ int sanitized_offset(const int* indptr, int b, int tokens) {
  return clamp_int(indptr[b], 0, tokens);
}

// A [begin, end) pair from an indptr, made safe: both clamped to [0, tokens], empty if inverted.
__device__ __forceinline__ void sanitized_range(const int* indptr, int b, int tokens, int& begin, int& len) {
  const int first = sanitized_offset(indptr, b, tokens);
  const int last = sanitized_offset(indptr, b + 1, tokens);
  begin = first;
  len = last > first ? last - first : 0;
}

__device__ __forceinline__ RequestExtent request_extent(const TsattnPrefillParams& p, int b) {
  RequestExtent r;
#if TSATTN_PACKED
  sanitized_range(p.qo_indptr, b, max(p.q_tokens, 0), r.q_begin, r.q_len);
  sanitized_range(p.kv_indptr, b, max(p.kv_tokens, 0), r.kv_begin, r.kv_len);
#else
  r.q_begin = 0;
  r.q_len = max(p.q_tokens, 0);
  r.kv_begin = 0;
  r.kv_len = max(p.kv_tokens, 0);
#endif
  return r;
}

// Element offset (in elements) of (b, token, head, 0) for a tensor with the given strides; token
// is already the absolute token index (request begin + row). 64-bit throughout.
__device__ __forceinline__ i64 token_offset(i64 batch_stride, i64 token_stride, i64 head_stride, int b, int token,
                                            int head) {
  return static_cast<i64>(b) * batch_stride + static_cast<i64>(token) * token_stride +
         static_cast<i64>(head) * head_stride;
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_REQUEST_CUH
