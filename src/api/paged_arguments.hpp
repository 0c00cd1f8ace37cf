// paged_arguments.hpp - the argument rules of batch_prefill_with_paged_kv_cache (docs/paged_kv.md)
// that batch_prefill does not have: the options a paged call takes, q against the page pools, the
// pools, the page tables, and a paged plan's settings and capacities.
//
// Host-resident tables are held to every value rule (check_paged_kv_tables) before anything is
// queued; GPU-resident ones only to what reading them needs (dtype, rank, device, contiguity,
// entry counts): their values are clamped on the device (templates/paged/gather_pages.cuh). What
// remains of a call (q, out and lse as in the packed layout) is validate_arguments' and
// checked_run_problem's, over views of the gathered keys (api/paged_gather.hpp).
//
// Errors are tsattn::Error naming the argument and value. No driver here:
// tests/api/test_paged_arguments.cpp runs every rule without a GPU.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>

#include "api/paged_kv.hpp"
#include "api/problem.hpp"
#include "plan/gather_launch.hpp"
#include "plan/plan_capacity.hpp"

namespace tsattn {

// The tensors of one paged call or run.
struct PagedViews {
  const tsattn_tensor_view* q = nullptr;
  const tsattn_tensor_view* k_cache = nullptr;
  const tsattn_tensor_view* v_cache = nullptr;
  const tsattn_tensor_view* qo_indptr = nullptr;
  const tsattn_tensor_view* paged_kv_indptr = nullptr;
  const tsattn_tensor_view* paged_kv_indices = nullptr;
  const tsattn_tensor_view* paged_kv_last_page_len = nullptr;
  const tsattn_tensor_view* out = nullptr;
  const tsattn_tensor_view* lse = nullptr;  // the log-sum-exp output, or null
};

// Which rules hold the tables' values: all of them (one-shot calls, validated runs), or none
// (runs with validate = 0: the device clamps them).
enum class TableValues { checked, unchecked };

// A paged call's keys and values as the gather reads them.
struct PagedKv {
  PagePools pools;
  int device_id = 0;
  bool tables_on_host = false;
  int64_t batch = 0;    // B = qo_indptr.shape[0] - 1
  int64_t total_q = 0;  // q.shape[0]
  // Host-resident tables: the caller's arrays. With checked values, `lengths` holds each
  // request's Sk and their prefix sums.
  PagedKvTables host;
  PagedKvLengths lengths;
  // GPU-resident tables: the caller's device arrays (entries: paged_kv_indices.shape[0]).
  DeviceTables device;
};

// Rejects what a paged call cannot take: the variable_window mask and its bounds (after the options'
// struct_size rule). Null options are the defaults.
void check_paged_options(const tsattn_prefill_options* options);

// MaskMode of the options (dense for null options).
MaskMode paged_mask(const tsattn_prefill_options* options);

// q (3-D, one device with the pools, the pools' dtype, head dim and a multiple of their heads),
// the pools (check_page_pools), the tables (int32: TypeError otherwise; 1-D; all on the host or all
// on q's GPU, contiguous there; B + 1, B + 1 and B entries) and, with checked values, the host
// tables' values (check_paged_kv_tables, causal Sq <= Sk) and that out and lse overlap neither the
// pools nor the tables.
PagedKv inspect_paged_kv(const PagedViews& views, int64_t page_size, PageLayout layout, MaskMode mask,
                         TableValues values);

// "HND" (0) or "NHD" (1); another code is a ValueError.
PageLayout page_layout(int32_t kv_layout);

// A paged plan's settings: the packed plan of its attention, and its pages.
struct PagedPlanSettings {
  tsattn_prefill_plan_options attention;  // layout packed
  int64_t page_size = 32;
  PageLayout layout = PageLayout::hnd;
};

// The options' own rules (struct_size, page_size, kv_layout, no variable_window mask); the rest is
// check_plan_options', when the attention plan is made from them.
PagedPlanSettings check_paged_plan_options(const tsattn_paged_prefill_plan_options* options);

// A run against its plan: the pools' dtype, heads, head dim and device (what the gather buffer's
// layout depends on, so also for unchecked values) and, for checked values, B <= batch_size and, for
// host-resident tables, every request's Sq and Sk within max_seq_len_q and max_kv_len.
void check_paged_run(const PagedKv& kv, const Problem& plan_base, const Capacity& capacity, TableValues values);

// The pages a request of at most max_kv_len keys has at most, and so a run's table entries at most.
int64_t max_pages(int64_t max_kv_len, int64_t page_size);

}  // namespace tsattn
