// prefill_plan.hpp - a plan (tsattn_prefill_plan; docs/contract.md, "Plan once, run every
// layer"): its settings checked once, its kernels chosen and loaded once (the one without the
// log-sum-exp output and its twin with it: whether a run passes lse is known only per run; and
// likewise the short-key variants where the spec has them, taken by the run's lengths), one
// device workspace sized for every run of either kernel within its capacities
// (plan/plan_capacity.hpp) and pinned staging for host indptrs. A run reads its tensors, fills the
// kernel's parameters and launches: it compiles nothing, allocates no device or pinned memory,
// never waits for the device, and builds no string unless it fails.
//
// A plan is used by one thread at a time, and its runs must be ordered on the device (they share
// the workspace): one stream, or streams ordered by events.
#pragma once

#include <tsattn/tsattn.hpp>

#include <cuda.h>

#include <array>
#include <cstdint>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include "api/kernel_choice.hpp"
#include "api/plan_arguments.hpp"
#include "jit/driver/device_buffer.hpp"
#include "jit/driver/staging_ring.hpp"
#include "plan/plan_capacity.hpp"

namespace tsattn {

struct RunArguments {
  RunViews views;
  bool validate = true;
  void* stream = nullptr;
};

// Uploads of host indptrs a run may queue before the host waits for the oldest (StagingRing).
constexpr int kIndptrStagingSlots = 16;

class PrefillPlan {
 public:
  // Checks the options, loads both kernels (compiling them if needed) and allocates the workspace
  // in the device's current context (the primary one when the thread has none on that device).
  // `page_size` (paged plans only): the attention of a paged plan, which takes the paged variants
  // where reads_pages_directly says so for its pages (reads_pages() then says so, and every run's
  // problem carries its pools and tables in Problem::paged).
  explicit PrefillPlan(const tsattn_prefill_plan_options* options, std::optional<int64_t> page_size = std::nullopt);
  // Frees the workspace and the staging in the plan's context (cuMemFree waits for the device).
  ~PrefillPlan();
  PrefillPlan(const PrefillPlan&) = delete;
  PrefillPlan& operator=(const PrefillPlan&) = delete;

  // Queues one run on args.stream. Returns the kernel's canonical name (it lives as long as the
  // process), or nullptr when the run had nothing to launch.
  const char* run(const RunArguments& args);

  // The attention half of run() for a problem already built against settings() (checked or
  // clamped), with query rows and, in the packed layout, its indptrs in device memory: what a paged
  // plan runs over its gathered keys. kv_indptr: the packed keys' indptr values when the host has
  // them (the short-key choice reads them), else empty. The plan's context must be current.
  // Returns as run().
  const char* launch(Problem& p, std::span<const int32_t> kv_indptr, CUstream stream);

  const PlanSettings& settings() const { return settings_; }
  // Whether the plan's kernels read K and V from page pools (a paged plan on a family with paged variants).
  bool reads_pages() const { return settings_.base.paged.has_value(); }
  CUcontext context() const { return context_; }
  int multiprocessors() const { return multiprocessors_; }
  // Error(value) when `stream` belongs to another context than the plan's.
  void check_stream(CUstream stream) const;

 private:
  // A knob's value when the plan was made, or the error reading it gave (raised only if asked).
  struct KnobValue {
    std::string value;
    std::optional<Error> error;
  };
  std::string knob(Knob knob) const;
  // Host indptrs of a packed run into the workspace's copies (skipped when they are the values
  // uploaded last); points p at the copies.
  void upload_indptrs(const RunViews& views, Problem& p, CUstream stream);
  // A kernel of the plan: its choice (TMA maps rewritten per run), the loaded module, its facts.
  struct PlanKernel {
    KernelChoice choice;
    const driver::LoadedKernel* kernel = nullptr;
    KernelFacts facts;
  };
  void encode_maps(const Problem& p, PlanKernel& kernel, KernelFacts& facts);

  PlanSettings settings_;
  CUcontext context_ = nullptr;
  int multiprocessors_ = 0;
  // kernels_[short_keys][lse]: [0][0] the settings' kernel, [0][1] its twin that writes lse, and
  // where the spec has a short-key variant (has_short_keys_variant) [1][*] the variant's. A run
  // takes the lse twin exactly when it passes an lse output and the variant exactly when
  // wants_short_keys says so for its lengths, as the one-shot call would. TSATTN_SHORT_KEYS=on
  // or off leaves the kernels of the other width unloaded (null), and never taken.
  std::array<std::array<PlanKernel, 2>, 2> kernels_;
  bool short_keys_variant_ = false;
  std::string short_keys_mode_;  // TSATTN_SHORT_KEYS when the plan was made (with a variant only)
  KnobValue work_order_, split_tail_, cta_pairs_;
  KnobReader knobs_;
  PlanWorkspace layout_;
  driver::DeviceBuffer workspace_;
  std::optional<driver::StagingRing> staging_;
  std::vector<int32_t> uploaded_;  // [qo | kv] values of the last upload, capacity batch + 1 each
  int64_t uploaded_entries_ = -1;  // B + 1 of the last upload; -1: none
  TensorMapCache map_cache_;
};

}  // namespace tsattn
