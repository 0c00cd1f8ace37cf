// c_api.cpp - the C boundary: converts arguments, runs the call, turns every exception
// into a status code and a thread-local message. Nothing throws past this file.
#include <tsattn/tsattn.h>
#include <tsattn/tsattn.hpp>

#include <algorithm>
#include <new>
#include <string>

#include "api/execute.hpp"
#include "api/merge_arguments.hpp"
#include "api/merge_execute.hpp"
#include "api/paged_execute.hpp"
#include "api/paged_prefill_plan.hpp"
#include "api/prefill_plan.hpp"
#include "api/validate.hpp"
#include "codegen/manifest.hpp"
#include "common/error.hpp"
#include "common/knobs.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/precompile.hpp"

namespace {

thread_local std::string last_error;
// The canonical name of the kernel the last batch_prefill on this thread launched. Points into the
// module table, whose entries live as long as the process, so setting it copies no string.
thread_local const char* last_kernel = "";

template <class Body>
tsattn_status guarded(Body&& body) noexcept {
  try {
    last_error.clear();
    body();
    return TSATTN_OK;
  } catch (const tsattn::Error& e) {
    last_error = e.what();
    return static_cast<tsattn_status>(e.kind());
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
  } catch (...) {
    last_error = "internal error: unknown exception";
  }
  return TSATTN_ERROR_RUNTIME;
}

}  // namespace

// The opaque handles of the C ABI.
struct tsattn_prefill_plan {
  tsattn::PrefillPlan plan;
};
struct tsattn_paged_prefill_plan {
  tsattn::PagedPrefillPlan plan;
};

extern "C" {

TSATTN_API void tsattn_prefill_options_init(tsattn_prefill_options* options) {
  if (options == nullptr) return;
  *options = tsattn_prefill_options{};
  options->struct_size = sizeof(tsattn_prefill_options);
  options->mask_type = TSATTN_MASK_DENSE;
  options->window_left = -1;
  options->output_scale = 1.0;
  options->out_dtype = TSATTN_DTYPE_UNSET;
}

TSATTN_API tsattn_status tsattn_batch_prefill(const tsattn_tensor_view* q, const tsattn_tensor_view* k,
                                              const tsattn_tensor_view* v, const tsattn_tensor_view* qo_indptr,
                                              const tsattn_tensor_view* kv_indptr,
                                              const tsattn_prefill_options* options, const tsattn_tensor_view* out) {
  last_kernel = "";
  return guarded([&] {
    const tsattn::Arguments args{q, k, v, qo_indptr, kv_indptr, options, out};
    const char* launched = tsattn::execute(tsattn::validate_arguments(args, tsattn::Residency::cuda));
    if (launched != nullptr) last_kernel = launched;
  });
}

TSATTN_API void tsattn_prefill_plan_options_init(tsattn_prefill_plan_options* options) {
  if (options == nullptr) return;
  *options = tsattn_prefill_plan_options{};
  options->struct_size = sizeof(tsattn_prefill_plan_options);
  options->layout = TSATTN_LAYOUT_FIXED;
  options->q_dtype = TSATTN_DTYPE_BFLOAT16;
  options->kv_dtype = TSATTN_DTYPE_BFLOAT16;
  options->out_dtype = TSATTN_DTYPE_UNSET;
  options->mask_type = TSATTN_MASK_DENSE;
  options->window_left = -1;
  options->output_scale = 1.0;
}

TSATTN_API void tsattn_prefill_run_options_init(tsattn_prefill_run_options* options) {
  if (options == nullptr) return;
  *options = tsattn_prefill_run_options{};
  options->struct_size = sizeof(tsattn_prefill_run_options);
  options->validate = 1;
}

TSATTN_API tsattn_status tsattn_prefill_plan_create(const tsattn_prefill_plan_options* options,
                                                    tsattn_prefill_plan** plan) {
  if (plan != nullptr) *plan = nullptr;
  return guarded([&] {
    if (plan == nullptr) tsattn::raise(tsattn::ErrorKind::value, "plan is a null pointer");
    *plan = new tsattn_prefill_plan{tsattn::PrefillPlan(options)};
  });
}

TSATTN_API tsattn_status tsattn_prefill_plan_run(tsattn_prefill_plan* plan, const tsattn_tensor_view* q,
                                                 const tsattn_tensor_view* k, const tsattn_tensor_view* v,
                                                 const tsattn_tensor_view* qo_indptr,
                                                 const tsattn_tensor_view* kv_indptr,
                                                 const tsattn_prefill_run_options* options,
                                                 const tsattn_tensor_view* out) {
  last_kernel = "";
  return guarded([&] {
    tsattn::RunArguments args;
    args.views = {q, k, v, qo_indptr, kv_indptr, out, nullptr, nullptr};
    if (options != nullptr) {
      tsattn::check_struct_size(options->struct_size, sizeof(tsattn_prefill_run_options), "options",
                                "tsattn_prefill_run_options");
      args.views.starts = options->variable_window_token_starts;
      args.views.ends = options->variable_window_token_ends;
      args.views.lse = options->lse;
      args.validate = options->validate != 0;
      args.stream = options->stream;
    }
    if (plan == nullptr)
      tsattn::raise(tsattn::ErrorKind::value, "plan is a null pointer; make one with tsattn_prefill_plan_create()");
    const char* launched = plan->plan.run(args);
    if (launched != nullptr) last_kernel = launched;
  });
}

TSATTN_API void tsattn_prefill_plan_destroy(tsattn_prefill_plan* plan) { delete plan; }

TSATTN_API tsattn_status tsattn_batch_prefill_with_paged_kv_cache(
    const tsattn_tensor_view* q, const tsattn_tensor_view* k_cache, const tsattn_tensor_view* v_cache,
    const tsattn_tensor_view* qo_indptr, const tsattn_tensor_view* paged_kv_indptr,
    const tsattn_tensor_view* paged_kv_indices, const tsattn_tensor_view* paged_kv_last_page_len, int64_t page_size,
    int32_t kv_layout, const tsattn_prefill_options* options, const tsattn_tensor_view* out) {
  last_kernel = "";
  return guarded([&] {
    const tsattn::PagedViews views{q,
                                   k_cache,
                                   v_cache,
                                   qo_indptr,
                                   paged_kv_indptr,
                                   paged_kv_indices,
                                   paged_kv_last_page_len,
                                   out,
                                   options != nullptr ? options->lse : nullptr};
    const char* launched = tsattn::execute_paged({views, page_size, kv_layout, options});
    if (launched != nullptr) last_kernel = launched;
  });
}

TSATTN_API void tsattn_paged_prefill_plan_options_init(tsattn_paged_prefill_plan_options* options) {
  if (options == nullptr) return;
  *options = tsattn_paged_prefill_plan_options{};
  options->struct_size = sizeof(tsattn_paged_prefill_plan_options);
  options->q_dtype = TSATTN_DTYPE_BFLOAT16;
  options->kv_dtype = TSATTN_DTYPE_BFLOAT16;
  options->out_dtype = TSATTN_DTYPE_UNSET;
  options->mask_type = TSATTN_MASK_DENSE;
  options->window_left = -1;
  options->output_scale = 1.0;
  options->page_size = 32;
  options->kv_layout = TSATTN_KV_LAYOUT_HND;
}

TSATTN_API tsattn_status tsattn_paged_prefill_plan_create(const tsattn_paged_prefill_plan_options* options,
                                                          tsattn_paged_prefill_plan** plan) {
  if (plan != nullptr) *plan = nullptr;
  return guarded([&] {
    if (plan == nullptr) tsattn::raise(tsattn::ErrorKind::value, "plan is a null pointer");
    *plan = new tsattn_paged_prefill_plan{tsattn::PagedPrefillPlan(options)};
  });
}

TSATTN_API tsattn_status tsattn_paged_prefill_plan_run(
    tsattn_paged_prefill_plan* plan, const tsattn_tensor_view* q, const tsattn_tensor_view* k_cache,
    const tsattn_tensor_view* v_cache, const tsattn_tensor_view* qo_indptr, const tsattn_tensor_view* paged_kv_indptr,
    const tsattn_tensor_view* paged_kv_indices, const tsattn_tensor_view* paged_kv_last_page_len,
    const tsattn_prefill_run_options* options, const tsattn_tensor_view* out) {
  last_kernel = "";
  return guarded([&] {
    tsattn::PagedRunArguments args;
    args.views = {q,   k_cache, v_cache, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
                  out, nullptr};
    if (options != nullptr) {
      tsattn::check_struct_size(options->struct_size, sizeof(tsattn_prefill_run_options), "options",
                                "tsattn_prefill_run_options");
      if (options->variable_window_token_starts != nullptr || options->variable_window_token_ends != nullptr)
        tsattn::raise(tsattn::ErrorKind::value,
                      "variable_window_token_starts and _ends are not available with a paged KV cache");
      args.views.lse = options->lse;
      args.validate = options->validate != 0;
      args.stream = options->stream;
    }
    if (plan == nullptr)
      tsattn::raise(tsattn::ErrorKind::value,
                    "plan is a null pointer; make one with tsattn_paged_prefill_plan_create()");
    const char* launched = plan->plan.run(args);
    if (launched != nullptr) last_kernel = launched;
  });
}

TSATTN_API void tsattn_paged_prefill_plan_destroy(tsattn_paged_prefill_plan* plan) { delete plan; }

TSATTN_API tsattn_status tsattn_merge_state(const tsattn_tensor_view* v_a, const tsattn_tensor_view* s_a,
                                            const tsattn_tensor_view* v_b, const tsattn_tensor_view* s_b,
                                            const tsattn_tensor_view* out, const tsattn_tensor_view* s_out,
                                            void* stream) {
  return guarded([&] {
    tsattn::execute_merge(tsattn::validate_merge_state({v_a, s_a, v_b, s_b, out, s_out, stream}));
  });
}

TSATTN_API tsattn_status tsattn_merge_states(const tsattn_tensor_view* v, const tsattn_tensor_view* s,
                                             const tsattn_tensor_view* out, const tsattn_tensor_view* s_out,
                                             void* stream) {
  return guarded([&] { tsattn::execute_merge(tsattn::validate_merge_states({v, s, out, s_out, stream})); });
}

TSATTN_API tsattn_status tsattn_get_cache_stats(tsattn_cache_stats* stats) {
  return guarded([&] {
    if (stats == nullptr) tsattn::raise(tsattn::ErrorKind::value, "stats is a null pointer");
    if (stats->struct_size < sizeof(tsattn_cache_stats))
      tsattn::raise(tsattn::ErrorKind::value, "stats->struct_size={} is smaller than tsattn_cache_stats ({} bytes)",
                    stats->struct_size, sizeof(tsattn_cache_stats));
    const tsattn::jit::KernelCacheCounters c = tsattn::jit::KernelCache::process().counters();
    *stats = tsattn_cache_stats{sizeof(tsattn_cache_stats),
                                c.memory_hits,
                                c.memory_misses,
                                c.compiles,
                                c.compile_failures,
                                c.disk.lookups,
                                c.disk.read_only_hits,
                                c.disk.writable_hits,
                                c.disk.misses,
                                c.disk.damaged,
                                c.disk.writes,
                                c.disk.write_failures,
                                tsattn::driver::modules_loaded()};
  });
}

TSATTN_API tsattn_status tsattn_precompile(const char* manifest_path, const char* archs, const char* out_dir,
                                           int32_t jobs, int64_t* compiled, int64_t* cached, int64_t* failed) {
  return guarded([&] {
    if (manifest_path == nullptr) tsattn::raise(tsattn::ErrorKind::value, "manifest_path is a null pointer");
    if (archs == nullptr) tsattn::raise(tsattn::ErrorKind::value, "archs is a null pointer");
    const tsattn::ManifestModules modules =
        tsattn::load_manifest_modules(manifest_path, tsattn::parse_arch_list(archs));
    const std::string out = out_dir ? std::string(out_dir) : tsattn::knob_string(tsattn::Knob::cache_dir);
    const tsattn::jit::PrecompileSummary summary = tsattn::jit::precompile(modules, out, jobs, /*keep_going=*/true);
    if (compiled) *compiled = summary.compiled;
    if (cached) *cached = summary.cached;
    if (failed) *failed = summary.failed;
    if (summary.failed > 0) {
      const auto& first = *std::find_if(summary.events.begin(), summary.events.end(),
                                        [](const auto& e) { return e.status == "failed"; });
      tsattn::raise(tsattn::ErrorKind::runtime, "{} of {} kernels failed to compile; first: {}: {}", summary.failed,
                    modules.size(), first.name, first.error);
    }
  });
}

TSATTN_API const char* tsattn_last_error_message(void) { return last_error.c_str(); }

TSATTN_API const char* tsattn_last_kernel_name(void) { return last_kernel; }

TSATTN_API const char* tsattn_version_string(void) { return TSATTN_VERSION_STRING; }

TSATTN_API int32_t tsattn_abi_version(void) { return TSATTN_ABI_VERSION; }

}  // extern "C"
