#include "api/paged_gather.hpp"

#include <fmt/format.h>

#include <memory>

#include "api/launch.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/kernel_cache.hpp"

namespace tsattn {

const driver::LoadedFunction& load_gather(CUcontext context, Arch arch) {
  const GatherSpec spec{arch};
  return driver::loaded_function(context, driver::FunctionModule::gather, spec.id(), [&] {
    std::shared_ptr<const jit::CompiledGather> compiled = jit::KernelCache::process().get(spec);
    logf(LogLevel::info, "kernel {} comes from: {}", compiled->name, jit::kernel_origin_name(compiled->origin));
    // The kernel cache keeps every CompiledGather alive, so the span stays valid.
    return jit::function_source(*compiled);
  });
}

void queue_gather(const driver::LoadedFunction& gather, const TsattnGatherParams& params, int64_t copy_rows,
                  int multiprocessors, CUstream stream) {
  const driver::Api& cu = driver::api();
  void* arguments[] = {const_cast<TsattnGatherParams*>(&params)};
  CUresult result =
      cu.cuLaunchKernel(gather.prologue, 1, 1, 1, TSATTN_GATHER_THREADS, 1, 1, 0, stream, arguments, nullptr);
  if (result != CUDA_SUCCESS) driver::check(result, fmt::format("launching the scan of {}", gather.name));
  const unsigned ctas = gather_ctas(copy_rows, int64_t{multiprocessors} * gather.ctas_per_multiprocessor);
  if (ctas == 0) return;
  result = cu.cuLaunchKernel(gather.function, ctas, 1, 1, TSATTN_GATHER_THREADS, 1, 1, 0, stream, arguments, nullptr);
  if (result != CUDA_SUCCESS) driver::check(result, fmt::format("launching {}", gather.name));
}

PagedKeys paged_keys(const PagePools& pools, const DeviceTables& tables) {
  const auto pool_tensor = [](const PagePool& pool) {
    return TokenTensor{pool.data, pool.page_stride, pool.slot_stride, pool.head_stride};
  };
  PagedKeys keys;
  keys.k = pool_tensor(pools.k);
  keys.v = pool_tensor(pools.v);
  keys.num_pages = pools.k.num_pages;
  keys.page_size = pools.k.page_size;
  keys.page_indptr = tables.paged_kv_indptr;
  keys.page_indices = tables.paged_kv_indices;
  keys.entries = tables.entries;
  return keys;
}

void check_host_tables_not_captured(const PagedKv& kv, CUstream stream) {
  if (kv.tables_on_host && stream_is_capturing(stream))
    raise(ErrorKind::value,
          "the stream is capturing a CUDA graph but the page tables are on the host, so their values would be "
          "baked into the graph; pass them on the GPU to capture this call");
}

GatheredViews::GatheredViews(const PagedKv& kv, const GatherWorkspace& w, uint64_t base, int64_t key_rows,
                             const tsattn_tensor_view* qo_indptr, bool copied) {
  const PagePool& pool = kv.pools.k;
  kv_shape_[0] = key_rows;
  kv_shape_[1] = pool.num_kv_heads;
  kv_shape_[2] = pool.head_dim;
  kv_strides_[0] = copied ? pool.num_kv_heads * pool.head_dim : 0;
  kv_strides_[1] = pool.head_dim;
  kv_strides_[2] = 1;
  indptr_shape_[0] = kv.batch + 1;
  const auto at = [&](const Region& r) { return reinterpret_cast<void*>(base + r.offset); };
  k_ = {at(w.k), pool.dtype, TSATTN_DEVICE_CUDA, kv.device_id, 3, kv_shape_, kv_strides_};
  v_ = {at(w.v), pool.dtype, TSATTN_DEVICE_CUDA, kv.device_id, 3, kv_shape_, kv_strides_};
  kv_indptr_ = {at(w.kv_indptr), TSATTN_DTYPE_INT32, TSATTN_DEVICE_CUDA, kv.device_id, 1, indptr_shape_, nullptr};
  qo_copy_ = {at(w.qo_indptr), TSATTN_DTYPE_INT32, TSATTN_DEVICE_CUDA, kv.device_id, 1, indptr_shape_, nullptr};
  qo_indptr_ = kv.tables_on_host ? &qo_copy_ : qo_indptr;
}

}  // namespace tsattn
