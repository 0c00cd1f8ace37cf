// paged_prefill_plan.hpp - a plan for paged calls (tsattn_paged_prefill_plan; docs/paged_kv.md):
// the packed-layout plan of its attention (api/prefill_plan.hpp), the gather module, and one
// device workspace sized for its capacities (plan/gather_launch.hpp): the host tables' copies, the
// packed kv_indptr and the gathered K and V of batch_size * max_kv_len keys. A run checks its
// tensors (or only reads them), uploads host tables through pinned staging (skipped when they
// are the values uploaded last), queues the gather and then the attention over the gathered keys:
// it compiles nothing, allocates no device or pinned memory and never waits for the device.
//
// A plan is used by one thread at a time, and its runs must be ordered on the device (they share
// the workspace): one stream, or streams ordered by events.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "api/paged_arguments.hpp"
#include "api/prefill_plan.hpp"
#include "jit/driver/device_buffer.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/driver/staging_ring.hpp"
#include "plan/gather_launch.hpp"

namespace tsattn {

struct PagedRunArguments {
  PagedViews views;
  bool validate = true;
  void* stream = nullptr;
};

class PagedPrefillPlan {
 public:
  // Checks the options, makes the attention plan, loads the gather module and allocates the
  // workspace in the device's current context (the primary one when the thread has none on it).
  explicit PagedPrefillPlan(const tsattn_paged_prefill_plan_options* options);
  ~PagedPrefillPlan();
  PagedPrefillPlan(const PagedPrefillPlan&) = delete;
  PagedPrefillPlan& operator=(const PagedPrefillPlan&) = delete;

  // Queues one run on args.stream. Returns the attention kernel's canonical name, or nullptr when
  // the run had nothing to launch.
  const char* run(const PagedRunArguments& args);

 private:
  // Host tables into the workspace's copies (skipped when they are the words uploaded last);
  // returns where the gather reads them.
  DeviceTables upload_tables(const PagedKv& kv, int64_t batch, TableValues values, CUstream stream);

  PagedPlanSettings options_;
  PrefillPlan attention_;
  const driver::LoadedFunction* gather_ = nullptr;
  int64_t key_rows_ = 0;     // batch_size * max_kv_len
  int64_t max_entries_ = 0;  // batch_size * the pages of max_kv_len keys
  GatherWorkspace layout_;
  driver::DeviceBuffer workspace_;
  std::optional<driver::StagingRing> staging_;
  std::vector<int32_t> image_;     // the tables' words of this run, capacity reserved at creation
  std::vector<int32_t> uploaded_;  // the words of the last upload
  bool uploaded_valid_ = false;    // uploaded_ is what the device copies hold (in stream order)
};

}  // namespace tsattn
