#include "api/prefill_plan.hpp"

#include <algorithm>
#include <future>
#include <limits>
#include <span>
#include <vector>

#include "api/launch.hpp"
#include "common/error.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/kernel_cache.hpp"
#include "plan/kernel_params.hpp"
#include "plan/short_keys.hpp"

namespace tsattn {

PrefillPlan::PrefillPlan(const tsattn_prefill_plan_options* options, std::optional<int64_t> page_size)
    : settings_(check_plan_options(options)) {
  const Problem& base = settings_.base;
  const Capacity& capacity = settings_.capacity;
  driver::ContextScope scope(nullptr, base.device_id);
  context_ = scope.context();
  const driver::DeviceInfo& device = scope.device();
  multiprocessors_ = device.multiprocessors;
  // Only the fact counts for the spec: each run brings its pools and tables.
  if (page_size && reads_pages_directly(device, device_arch(device), base.input_dtype, base.head_dim, *page_size))
    settings_.base.paged.emplace();
  // The choices of the one-shot call for the same settings, without and with lse (base holds the
  // largest shape; the spec depends on none of it), and for a spec with a short-key variant the
  // variant's too: which of them a run takes depends on its lse output and its lengths.
  // TSATTN_SHORT_KEYS is read now, as the launch knobs below: =on or =off leaves one width out.
  // Whether TMA can read the tensors is known only per run.
  const Arch arch = device_arch(device);
  // Paged kernels come in one width (choose_spec): a paged plan has no second.
  short_keys_variant_ = !base.paged && has_short_keys_variant(choose_spec(base, device, arch, false).spec);
  if (short_keys_variant_) short_keys_mode_ = knob_string(Knob::short_keys);
  const bool widths[2] = {!short_keys_variant_ || short_keys_mode_ != "on",
                          short_keys_variant_ && short_keys_mode_ != "off"};
  std::vector<PlanKernel*> used;
  for (bool short_keys : {false, true})
    for (bool lse : {false, true})
      if (widths[short_keys]) {
        kernels_[short_keys][lse].choice = choose_spec(base, device, arch, lse, short_keys);
        used.push_back(&kernels_[short_keys][lse]);
      }
  // Every kernel loads now, so that a run never compiles; all but the first are found or compiled
  // on other threads meanwhile.
  std::vector<std::future<void>> others;
  for (size_t i = 1; i < used.size(); ++i)
    others.push_back(
        std::async(std::launch::async, [spec = used[i]->choice.spec] { jit::KernelCache::process().get(spec); }));
  for (size_t i = 0; i < used.size(); ++i) {
    if (i > 0) others[i - 1].get();  // rethrows its compile error
    PlanKernel& k = *used[i];
    k.kernel = &load_kernel(context_, k.choice);
    if (base.layout == Layout::packed && k.kernel->planner == nullptr)
      raise(ErrorKind::runtime, "kernel {} has no device planner for packed runs", k.kernel->name);
    k.facts = kernel_facts(*k.kernel, k.choice);
    if (k.kernel->narrow_walk && max_items_bound(capacity, k.facts.block_m) >= std::numeric_limits<int32_t>::max())
      raise(ErrorKind::value, "the plan's capacities allow {} work items, more than kernel {} can number (2^31)",
            max_items_bound(capacity, k.facts.block_m), k.kernel->name);
  }

  // Knobs are read once: a run parses nothing.
  const auto snapshot = [](Knob which) {
    try {
      return KnobValue{knob_string(which), std::nullopt};
    } catch (const Error& e) {
      return KnobValue{{}, e};
    }
  };
  work_order_ = snapshot(Knob::work_order);
  split_tail_ = snapshot(Knob::split_tail);
  cta_pairs_ = snapshot(Knob::cta_pairs);
  knobs_ = [this](Knob which) { return knob(which); };

  // The lse twins share their traits, so their bounds agree but for what the driver reports
  // (occupancy, resident pairs); a short-key variant's key tiles differ too. The largest launch
  // region covers the runs of every kernel (the regions after it have the same sizes for all).
  for (size_t i = 0; i < used.size(); ++i) {
    const PlanWorkspace layout =
        plan_workspace(capacity, used[i]->facts, multiprocessors_, transposes_v(used[i]->choice.spec));
    if (i == 0 || layout.launch.bytes > layout_.launch.bytes) layout_ = layout;
  }
  workspace_ = driver::DeviceBuffer(layout_.bytes);
  workspace_.fill_bytes(0);  // the dynamic order's work counter starts at zero
  if (base.layout == Layout::packed) {
    staging_.emplace(layout_.indptrs.bytes, kIndptrStagingSlots);
    uploaded_.assign(static_cast<size_t>(2 * (capacity.batch + 1)), 0);
  }
}

PrefillPlan::~PrefillPlan() {
  try {
    const driver::CurrentContext current(context_);
    staging_.reset();
    workspace_ = driver::DeviceBuffer();
  } catch (...) {
    // No driver left (process teardown): nothing to free through it.
  }
}

std::string PrefillPlan::knob(Knob which) const {
  const KnobValue* value = which == Knob::work_order   ? &work_order_
                           : which == Knob::split_tail ? &split_tail_
                           : which == Knob::cta_pairs  ? &cta_pairs_
                                                       : nullptr;
  if (value == nullptr) return knob_string(which);
  if (value->error) throw *value->error;
  return value->value;
}

void PrefillPlan::check_stream(CUstream stream) const {
  if (stream == nullptr) return;  // the legacy default stream of the plan's context (made current)
  CUcontext owner = nullptr;
  driver::check(driver::api().cuStreamGetCtx(stream, &owner), "cuStreamGetCtx (is the stream valid?)");
  if (owner != context_)
    raise(ErrorKind::value,
          "the stream belongs to another CUDA context than the plan (made for cuda:{}); a plan runs on streams "
          "of its own context",
          settings_.base.device_id);
}

void PrefillPlan::upload_indptrs(const RunViews& views, Problem& p, CUstream stream) {
  if (stream_is_capturing(stream)) raise_host_indptrs_under_capture();
  const int64_t entries = p.batch + 1;  // clamped to the capacity
  const auto capacity = static_cast<size_t>(settings_.capacity.batch + 1);
  const auto read = [&](const tsattn_tensor_view& view, int32_t* copy, bool& changed) {
    const auto* data = static_cast<const int32_t*>(view.data);
    const int64_t stride = view.strides ? view.strides[0] : 1;
    for (int64_t i = 0; i < entries; ++i) {
      const int32_t value = data[i * stride];
      changed |= copy[i] != value;
      copy[i] = value;
    }
  };
  bool changed = entries != uploaded_entries_;
  uploaded_entries_ = -1;  // until the upload below is queued
  read(*views.qo_indptr, uploaded_.data(), changed);
  read(*views.kv_indptr, uploaded_.data() + capacity, changed);
  const CUdeviceptr copies = workspace_.address() + layout_.indptrs.offset;
  if (changed) {
    // Values the device copies already hold need no upload: later runs in stream order see them.
    const size_t bytes = (capacity + static_cast<size_t>(entries)) * sizeof(int32_t);
    std::copy_n(uploaded_.data(), capacity + static_cast<size_t>(entries), static_cast<int32_t*>(staging_->acquire()));
    staging_->upload(copies, bytes, stream);
  }
  uploaded_entries_ = entries;
  p.qo_indptr = reinterpret_cast<const int32_t*>(copies);
  p.kv_indptr = reinterpret_cast<const int32_t*>(copies + capacity * sizeof(int32_t));
}

void PrefillPlan::encode_maps(const Problem& p, PlanKernel& kernel, KernelFacts& facts) {
  const TensorMapPlanOrReason planned = plan_tensor_maps(p, map_shape(kernel.choice));
  if (!planned.plan)
    raise(ErrorKind::value,
          "kernel {} cannot read these tensors through TMA: {}; the one-shot call would run them on the sm80 family",
          kernel.kernel->name, planned.reason);
  TensorMapsOrReason maps = encode_tensor_maps(*planned.plan, map_cache_);
  if (!maps.ok()) raise(ErrorKind::runtime, "kernel {}: {}", kernel.kernel->name, maps.reason);
  kernel.choice.maps = maps.maps;
  kernel.choice.transposed_v = maps.transposed_v;
  facts.transposed_v_keys = maps.transposed_v ? maps.transposed_v->keys : 0;
}

const char* PrefillPlan::run(const RunArguments& args) {
  const auto stream = static_cast<CUstream>(args.stream);
  const driver::CurrentContext current(context_);
  check_stream(stream);
  Problem p = args.validate ? checked_run_problem(settings_, args.views, args.stream)
                            : unchecked_run_problem(settings_, args.views, args.stream);
  if (p.batch == 0 || p.q_tokens == 0) return nullptr;  // no query rows: nothing to write
  // Host kv_indptr values (as uploaded) give the lengths the short-key choice reads; GPU ones none.
  std::span<const int32_t> kv_indptr;
  if (p.layout == Layout::packed) {
    if (p.indptr_on_host) {
      upload_indptrs(args.views, p, stream);
      kv_indptr = {uploaded_.data() + settings_.capacity.batch + 1, static_cast<size_t>(p.batch + 1)};
    }
    p.indptr_on_host = false;  // runs always plan their tile list on the device
  }
  return launch(p, kv_indptr, stream);
}

const char* PrefillPlan::launch(Problem& p, std::span<const int32_t> kv_indptr, CUstream stream) {
  const bool short_keys = short_keys_variant_ && wants_short_keys(p, kv_indptr, short_keys_mode_);
  PlanKernel& kernel = kernels_[short_keys ? 1 : 0][p.lse.data != nullptr ? 1 : 0];
  KernelFacts facts = kernel.facts;
  if (kernel.choice.spec.family == KernelFamily::sm90a) encode_maps(p, kernel, facts);
  // The one-shot call's plan for this shape: the same order, chunks and split tail, so the same bits.
  const LaunchPlan plan = plan_launch(p, facts, multiprocessors_, knobs_);
  if (!plan.launches) return nullptr;
  if (plan.workspace.bytes > layout_.launch.bytes)
    raise(ErrorKind::runtime, "internal error: a run needs {} workspace bytes but the plan holds {}",
          plan.workspace.bytes, layout_.launch.bytes);
  TsattnPrefillParams params = make_kernel_params(p);
  LaunchMemory memory;
  memory.workspace = workspace_.address();
  memory.work_counter_zero = true;  // zeroed at creation, and every launch leaves it zero
  memory.list_state_zero = true;    // likewise
  if (layout_.transposed_v.present()) memory.transposed_v = workspace_.address() + layout_.transposed_v.offset;
  queue_launches(plan, *kernel.kernel, kernel.choice, params, memory, stream);
  return kernel.kernel->name.c_str();
}

}  // namespace tsattn
