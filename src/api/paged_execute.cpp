#include "api/paged_execute.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "api/dtype.hpp"
#include "api/execute.hpp"
#include "api/kernel_choice.hpp"
#include "api/paged_gather.hpp"
#include "api/validate.hpp"
#include "common/checked_int.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/driver/workspace_pool.hpp"
#include "plan/tensor_maps.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

}  // namespace

const char* execute_paged(const PagedArguments& args) {
  check_paged_options(args.options);
  const PageLayout layout = page_layout(args.kv_layout);
  const PagedKv kv =
      inspect_paged_kv(args.views, args.page_size, layout, paged_mask(args.options), TableValues::checked);
  const auto stream = static_cast<CUstream>(args.options ? args.options->stream : nullptr);
  driver::ContextScope scope(stream, kv.device_id);
  check_host_tables_not_captured(kv, stream);

  // Host tables: their keys exactly. GPU tables: every entry of paged_kv_indices a full page, the
  // most they can name (the scan clamps the prefix sums there).
  const int64_t entries = kv.tables_on_host ? kv.host.paged_kv_indptr[kv.batch] : 0;
  const int64_t key_rows = kv.tables_on_host
                               ? kv.lengths.kv_indptr.back()
                               : std::min(kInt32Max, (Checked<int64_t>(kv.device.entries) * args.page_size).value());
  const PagePool& pool = kv.pools.k;
  // A paged kernel reads the pages itself: the workspace holds the tables, the scan's kv_indptr and
  // one stand-in row of K and V (GatheredViews), no copy of the keys.
  const bool direct = reads_pages_directly(scope.device(), device_arch(scope.device()), pool.dtype,
                                           static_cast<int>(pool.head_dim), args.page_size) &&
                      paged_keys_fit(kv.tables_on_host ? entries : kv.device.entries, args.page_size);
  const int64_t row_bytes = pool.num_kv_heads * pool.head_dim * dtype_size(pool.dtype);
  const GatherWorkspace w = gather_workspace({kv.batch, entries, direct ? 1 : key_rows, row_bytes});
  const driver::StreamBuffer workspace(w.bytes, stream, kv.device_id);
  const uint64_t base = workspace.get();

  const GatheredViews gathered(kv, w, base, key_rows, args.views.qo_indptr, !direct);
  const Arguments packed{args.views.q,         gathered.k(), gathered.v(),  gathered.qo_indptr(),
                         gathered.kv_indptr(), args.options, args.views.out};
  Problem p = validate_arguments(packed, Residency::cuda);
  if (p.batch == 0 || p.q_tokens == 0) return nullptr;  // no query rows: nothing to write

  const driver::LoadedFunction& gather = load_gather(scope.context(), device_arch(scope.device()));
  DeviceTables tables = kv.device;
  if (kv.tables_on_host) {
    // From pageable memory: the driver stages the bytes before the call returns.
    std::vector<int32_t> image;
    const size_t words = table_image(w, kv.host, kv.batch, entries, image);
    driver::check(
        driver::api().cuMemcpyHtoDAsync(base + w.qo_indptr.offset, image.data(), words * sizeof(int32_t), stream),
        "uploading the page tables");
    tables = uploaded_tables(w, base, kv.batch, entries);
  }
  const TsattnGatherParams params = gather_params(
      kv.pools, tables, {kInt32Max, key_rows, base + w.kv_indptr.offset, base + w.k.offset, base + w.v.offset});
  queue_gather(gather, params, direct ? 0 : key_rows, scope.device().multiprocessors, stream);
  if (direct) p.paged = paged_keys(kv.pools, tables);
  return execute(p, DeviceIndptrs::clamped);
}

}  // namespace tsattn
