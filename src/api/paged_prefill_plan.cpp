#include "api/paged_prefill_plan.hpp"

#include <algorithm>

#include "api/dtype.hpp"
#include "api/kernel_choice.hpp"
#include "api/paged_gather.hpp"
#include "common/error.hpp"
#include "jit/driver/device_context.hpp"

namespace tsattn {

PagedPrefillPlan::PagedPrefillPlan(const tsattn_paged_prefill_plan_options* options)
    : options_(check_paged_plan_options(options)), attention_(&options_.attention, options_.page_size) {
  const Capacity& c = attention_.settings().capacity;
  const driver::CurrentContext current(attention_.context());
  gather_ = &load_gather(attention_.context(), device_arch(driver::device_info(attention_.settings().base.device_id)));
  key_rows_ = c.kv_tokens();  // check_plan_options bounded it by 2^31 - 1
  max_entries_ = c.batch * max_pages(c.max_kv_len, options_.page_size);
  const int64_t row_bytes = int64_t{c.num_kv_heads} * c.head_dim * dtype_size(attention_.settings().base.input_dtype);
  // Paged kernels read the pools: no copies of the keys, one stand-in row (GatheredViews).
  layout_ = gather_workspace({c.batch, max_entries_, attention_.reads_pages() ? 1 : key_rows_, row_bytes});
  workspace_ = driver::DeviceBuffer(layout_.bytes);
  const size_t table_bytes = layout_.indices.offset + layout_.indices.bytes;
  staging_.emplace(table_bytes, kIndptrStagingSlots);
  image_.reserve(table_bytes / sizeof(int32_t));
  uploaded_.reserve(table_bytes / sizeof(int32_t));
}

PagedPrefillPlan::~PagedPrefillPlan() {
  try {
    const driver::CurrentContext current(attention_.context());
    staging_.reset();
    workspace_ = driver::DeviceBuffer();
  } catch (...) {
    // No driver left (process teardown): nothing to free through it.
  }
}

DeviceTables PagedPrefillPlan::upload_tables(const PagedKv& kv, int64_t batch, TableValues values, CUstream stream) {
  // Checked tables name at most max_entries_ pages (every request within max_kv_len); unchecked
  // ones are cut to what the copies hold, and the scan clamps every entry to that.
  const int64_t named = kv.host.paged_kv_indptr[batch];
  const int64_t entries = values == TableValues::checked
                              ? named
                              : std::clamp<int64_t>(named, 0, std::min(kv.host.paged_kv_indices.size, max_entries_));
  const size_t words = table_image(layout_, kv.host, batch, entries, image_);
  const bool same = uploaded_valid_ && uploaded_.size() == words &&
                    std::equal(image_.begin(), image_.begin() + static_cast<std::ptrdiff_t>(words), uploaded_.begin());
  if (!same) {
    // Words the device copies already hold need no upload: later runs in stream order see them.
    uploaded_valid_ = false;  // until the upload below is queued
    std::copy_n(image_.begin(), words, static_cast<int32_t*>(staging_->acquire()));
    staging_->upload(workspace_.address() + layout_.qo_indptr.offset, words * sizeof(int32_t), stream);
    uploaded_.assign(image_.begin(), image_.begin() + static_cast<std::ptrdiff_t>(words));
    uploaded_valid_ = true;
  }
  return uploaded_tables(layout_, workspace_.address(), batch, entries);
}

const char* PagedPrefillPlan::run(const PagedRunArguments& args) {
  const auto stream = static_cast<CUstream>(args.stream);
  const driver::CurrentContext current(attention_.context());
  attention_.check_stream(stream);
  const PlanSettings& settings = attention_.settings();
  const TableValues values = args.validate ? TableValues::checked : TableValues::unchecked;
  const PagedKv kv = inspect_paged_kv(args.views, options_.page_size, options_.layout, settings.base.mask, values);
  check_paged_run(kv, settings.base, settings.capacity, values);
  check_host_tables_not_captured(kv, stream);

  const uint64_t base = workspace_.address();
  const bool direct = attention_.reads_pages();
  const GatheredViews gathered(kv, layout_, base, key_rows_, args.views.qo_indptr, !direct);
  const RunViews views{args.views.q,   gathered.k(), gathered.v(), gathered.qo_indptr(), gathered.kv_indptr(),
                       args.views.out, nullptr,      nullptr,      args.views.lse};
  Problem p = args.validate ? checked_run_problem(settings, views, args.stream)
                            : unchecked_run_problem(settings, views, args.stream);
  if (p.batch == 0 || p.q_tokens == 0) return nullptr;  // no query rows: nothing to write

  // p.batch is B clamped to the capacity: the gather covers exactly the requests the attention reads.
  DeviceTables tables = kv.device;
  tables.batch = p.batch;
  if (kv.tables_on_host) tables = upload_tables(kv, p.batch, values, stream);
  const TsattnGatherParams params =
      gather_params(kv.pools, tables,
                    {settings.capacity.max_kv_len, key_rows_, base + layout_.kv_indptr.offset, base + layout_.k.offset,
                     base + layout_.v.offset});
  queue_gather(*gather_, params, direct ? 0 : key_rows_, attention_.multiprocessors(), stream);
  if (direct) p.paged = paged_keys(kv.pools, tables);
  return attention_.launch(p, {}, stream);  // lengths stay on the device: the plan's capacities decide
}

}  // namespace tsattn
