// merge/merge_params.h - the host/device ABI of the merge kernels (tsattn_merge_state and
// tsattn_merge_states; docs/contract.md, "Merging attention states").
//
// Included by host C++ (src/plan/merge_launch.cpp) and embedded into every merge module's source
// (NVRTC, no include directories), so it uses plain C types only. The kernel takes it by value as a
// __grid_constant__ parameter.
// Bump TSATTN_MERGE_PARAMS_VERSION with any change to these structs: its text is part of every
// cache key.
#ifndef TSATTN_MERGE_PARAMS_H
#define TSATTN_MERGE_PARAMS_H

#define TSATTN_MERGE_PARAMS_VERSION 1
// The item space's dims: v's dims without D (and, for merge_states, without the states axis).
// A view has at most 8 dims, so merge_state's [..., H, D] leaves at most 7.
#define TSATTN_MERGE_MAX_DIMS 7
#define TSATTN_MERGE_THREADS 256  // threads per CTA

// One tensor over the item space: the item with coordinates (c_0, ..., c_{ndim-1}) starts at
// element sum_k c_k * strides[k] of data (v tensors: then D contiguous elements; s tensors: one
// float). Strides are in elements.
struct TsattnMergeTensor {
  const void* data;
  long long strides[TSATTN_MERGE_MAX_DIMS];
};
struct TsattnMergeOutput {
  void* data;
  long long strides[TSATTN_MERGE_MAX_DIMS];
};

struct TsattnMergeParams {
  // The items (one query row and head each), innermost dim first: item i has c_0 = i % shape[0],
  // c_1 = (i / shape[0]) % shape[1], ... The host folds dims that every tensor steps through
  // alike, so a compact call has ndim = 1.
  int shape[TSATTN_MERGE_MAX_DIMS];
  int ndim;        // 1 .. TSATTN_MERGE_MAX_DIMS
  int items;       // the product of shape; the host refuses merges of 2^31 items or more
  int head_dim;    // D >= 0; D times the element size fits an int too
  int num_states;  // n >= 0
  // State 0 of an item is read from v_first and s_first, state i >= 1 from v_rest and s_rest plus
  // (i - 1) state strides: merge_state passes a and b, merge_states its one tensor twice (rest at
  // its state 1).
  TsattnMergeTensor v_first, s_first, v_rest, s_rest;
  long long v_state_stride, s_state_stride;
  TsattnMergeOutput v_out, s_out;  // s_out.data null: the merged lse is not written
  // Bytes of v each lane moves per access: 16, 8 or 4, or one element; the host picks the widest
  // that D, every v pointer and every v stride allow.
  int access_bytes;
  int lanes_per_item;  // a power of two <= 32: the lanes that share one item's D
};

#endif  // TSATTN_MERGE_PARAMS_H
