// paged/gather_params.h - the host/device ABI of the page gather (batch_prefill_with_paged_kv_cache,
// docs/paged_kv.md): the key-count scan and the copy of each request's pages into packed K and V.
//
// Included by host C++ (src/plan/gather_launch.cpp) and embedded into every gather module's source
// (NVRTC, no include directories), so it uses plain C types only. Both kernels take it by value as
// a __grid_constant__ parameter.
// Bump TSATTN_GATHER_PARAMS_VERSION with any change to these structs: its text is part of every
// cache key.
#ifndef TSATTN_PAGED_GATHER_PARAMS_H
#define TSATTN_PAGED_GATHER_PARAMS_H

#define TSATTN_GATHER_PARAMS_VERSION 1
#define TSATTN_GATHER_THREADS 256     // threads per CTA, both kernels
#define TSATTN_GATHER_CHUNK_BYTES 16  // one access: a head row (D elements) is a whole number of them

// One page pool (k_cache or v_cache). Byte (page, slot, head, c) of a head row is at
// data + page * page_stride + slot * slot_stride + head * head_stride + c: the layout (HND, NHD)
// only decides which tensor axis each stride comes from. Strides are in bytes, multiples of 16
// (or never multiplied by a non-zero index: an axis of extent 1).
struct TsattnPagePool {
  const void* data;
  long long page_stride;
  long long slot_stride;
  long long head_stride;
};

struct TsattnGatherParams {
  // The page tables in device memory: the caller's, or copies of host-resident ones. Values are
  // never trusted: every read is clamped (gather_pages.cuh).
  const int* paged_kv_indptr;         // [batch + 1]
  const int* paged_kv_indices;        // [num_entries]
  const int* paged_kv_last_page_len;  // [batch]
  int batch;
  int num_entries;  // entries of paged_kv_indices that may be read
  int num_pages;    // pages in each pool; page ids are clamped to [0, num_pages - 1]
  int page_size;
  int max_kv_len;  // keys of one request at most (a plan's capacity); more are cut off
  int key_rows;    // rows of k_out and v_out: the packed keys of all requests at most

  // The scan's output and the copy's input: request b's keys are packed rows
  // kv_indptr[b] .. kv_indptr[b + 1] - 1, non-decreasing, at most key_rows.
  int* kv_indptr;  // [batch + 1]

  TsattnPagePool k_pool, v_pool;
  int num_kv_heads;
  int row_chunks;  // 16-byte chunks per head row: D * element bytes / 16
  // Packed [key_rows, num_kv_heads, D] compact, 16-byte aligned.
  void* k_out;
  void* v_out;
};

#endif  // TSATTN_PAGED_GATHER_PARAMS_H
