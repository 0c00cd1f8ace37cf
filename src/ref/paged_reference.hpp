// paged_reference.hpp - the CPU oracle of batch_prefill_with_paged_kv_cache (docs/paged_kv.md).
//
// The pages are gathered, request by request and in table order, into packed [total_k, Hkv, D]
// host arrays of the cache's dtype (bytes copied, so nothing is rounded), with kv_indptr the
// prefix sums of the requests' key counts. Attention over those packed keys is exactly the paged
// call, so reference_prefill and write_output (reference.hpp) compute and encode it unchanged.
#pragma once

#include <tsattn/tsattn.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "api/paged_kv.hpp"
#include "api/problem.hpp"
#include "ref/reference.hpp"

namespace tsattn::ref {

// One paged call with every tensor in host memory. options: mask dense or causal, window_left,
// sm_scale, output_scale, out_dtype as for batch_prefill; no variable windows and no lse.
struct PagedArguments {
  const tsattn_tensor_view* q = nullptr;  // [total_q, Hq, D]
  const tsattn_tensor_view* k_cache = nullptr;
  const tsattn_tensor_view* v_cache = nullptr;
  const tsattn_tensor_view* qo_indptr = nullptr;
  const tsattn_tensor_view* paged_kv_indptr = nullptr;
  const tsattn_tensor_view* paged_kv_indices = nullptr;
  const tsattn_tensor_view* paged_kv_last_page_len = nullptr;
  int64_t page_size = 32;
  PageLayout kv_layout = PageLayout::hnd;
  const tsattn_prefill_options* options = nullptr;  // nullptr: the defaults
  const tsattn_tensor_view* out = nullptr;          // [total_q, Hq, D]
};

// A paged call made into a packed batch_prefill Problem over gathered copies of its keys and
// values. Checks the pools and tables (check_page_pools, check_paged_kv_tables), q against the
// pools' heads and head dim, and then every batch_prefill rule through validate_arguments; raises
// tsattn::Error as they do. Holds the copies the Problem points into, so it does not move.
class GatheredPagedProblem {
 public:
  explicit GatheredPagedProblem(const PagedArguments& args);
  GatheredPagedProblem(const GatheredPagedProblem&) = delete;
  GatheredPagedProblem& operator=(const GatheredPagedProblem&) = delete;

  // Packed layout, host residency: q and out the caller's, k and v the gathered copies.
  const Problem& problem() const { return problem_; }
  const PagedKvLengths& lengths() const { return lengths_; }

 private:
  // 16-byte units, so that the copies are as aligned as validate_arguments asks.
  struct alignas(16) Chunk {
    std::byte bytes[16];
  };
  std::vector<Chunk> k_, v_;
  std::vector<int32_t> kv_indptr_;
  int64_t packed_shape_[3] = {};
  int64_t indptr_shape_[1] = {};
  PagedKvLengths lengths_;
  Problem problem_;
};

// The paged call's exact result: compact [total_q][Hq][D] as reference_prefill returns it.
std::vector<float> reference_paged_prefill(const PagedArguments& args, Accumulation acc = Accumulation::fp64);

}  // namespace tsattn::ref
