// paged_gather.hpp - the gather stage of a paged call, between its checks and its attention: the
// gather module loaded, the scan and (for kernels that cannot read pages) the copy queued
// (plan/gather_launch.hpp says what), and the views through which the attention stage reads the
// keys as a packed batch_prefill call: the gathered copies, or for a paged kernel the pools
// themselves (paged_keys).
// Shared by the one-shot call (api/paged_execute.cpp) and plans (api/paged_prefill_plan.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "api/paged_arguments.hpp"
#include "codegen/kernel_spec.hpp"
#include "jit/driver/module_table.hpp"
#include "plan/gather_launch.hpp"

namespace tsattn {

// The gather module of `arch` in `context` (current), loaded (and compiled) on first use. The
// entry lives as long as the process.
const driver::LoadedFunction& load_gather(CUcontext context, Arch arch);

// Queues the scan, then the copy over at most `copy_rows` rows on `stream` (none for 0: a paged
// kernel needs only the scan's kv_indptr).
void queue_gather(const driver::LoadedFunction& gather, const TsattnGatherParams& params, int64_t copy_rows,
                  int multiprocessors, CUstream stream);

// The pools and device tables of a paged call as a paged kernel reads them (Problem::paged).
PagedKeys paged_keys(const PagePools& pools, const DeviceTables& tables);

// Host-resident tables while `stream` captures a graph: their upload would be baked into it.
void check_host_tables_not_captured(const PagedKv& kv, CUstream stream);

// The packed call the attention stage runs: k and v the gathered [key_rows, Hkv, D] arrays, kv_indptr
// the scan's output and qo_indptr in device memory (the caller's GPU table, or the workspace's copy
// of a host one), both with B + 1 entries, on the pools' device. For a paged kernel (`copied`
// false) nothing is gathered: k and v are the workspace's one row with token stride 0, standing
// for keys the kernel reads from the pools (their checks see memory the call owns). The views
// point into this object, so it does not move.
class GatheredViews {
 public:
  GatheredViews(const PagedKv& kv, const GatherWorkspace& w, uint64_t base, int64_t key_rows,
                const tsattn_tensor_view* qo_indptr, bool copied);
  GatheredViews(const GatheredViews&) = delete;
  GatheredViews& operator=(const GatheredViews&) = delete;

  const tsattn_tensor_view* k() const { return &k_; }
  const tsattn_tensor_view* v() const { return &v_; }
  const tsattn_tensor_view* qo_indptr() const { return qo_indptr_; }
  const tsattn_tensor_view* kv_indptr() const { return &kv_indptr_; }

 private:
  int64_t kv_shape_[3] = {};
  int64_t kv_strides_[3] = {};
  int64_t indptr_shape_[1] = {};
  tsattn_tensor_view k_{}, v_{}, qo_copy_{}, kv_indptr_{};
  const tsattn_tensor_view* qo_indptr_ = nullptr;
};

}  // namespace tsattn
