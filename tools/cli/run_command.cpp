#include "tools/cli/run_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "api/dtype.hpp"
#include "api/validate.hpp"
#include "jit/driver/device_buffer.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "ref/compare.hpp"
#include "ref/random_inputs.hpp"
#include "ref/reference.hpp"
#include "tools/cli/precompile_command.hpp"

namespace tsattn::tools {

namespace {

struct Preset {
  const char* description;
  std::vector<int32_t> q_lens, kv_lens;  // one entry: fixed layout [1, S, H, D]; more: packed
  int hq, hkv, head_dim;
  tsattn_mask_type mask;
  int64_t window_left;
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> table = {
      {"llama3-8b",
       {"Llama-3 8B prefill: 4096 tokens, 32/8 heads, D128, bf16, causal",
        {4096},
        {4096},
        32,
        8,
        128,
        TSATTN_MASK_CAUSAL,
        -1}},
      {"gemma-window",
       {"Gemma-style sliding window: 4096 tokens, 16/8 heads, D256, bf16, causal window 1024",
        {4096},
        {4096},
        16,
        8,
        256,
        TSATTN_MASK_CAUSAL,
        1024}},
      {"ragged",
       {"ragged batch: 8 requests of 0..2048 tokens, 32/8 heads, D128, bf16, causal",
        {1000, 0, 2048, 17, 777, 129, 1500, 512},
        {1000, 0, 2048, 17, 1024, 129, 1600, 512},
        32,
        8,
        128,
        TSATTN_MASK_CAUSAL,
        -1}},
  };
  return table;
}

// A tensor in host memory (for the oracle) and its copy on the device (for tsattn).
struct Pair {
  std::vector<uint8_t> host;
  driver::DeviceBuffer device;
  Tensor host_view, device_view;

  Pair(tsattn_dtype dtype, std::vector<int64_t> shape) {
    const int64_t elements = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    host.resize(static_cast<size_t>(elements * dtype_size(dtype)));
    device = driver::DeviceBuffer(host.size());
    host_view = Tensor{host.data(), dtype, TSATTN_DEVICE_CPU, 0, shape, {}};
    device_view = Tensor{device.data(), dtype, TSATTN_DEVICE_CUDA, 0, std::move(shape), {}};
  }
};

tsattn_cache_stats cache_stats() {
  tsattn_cache_stats s{};
  s.struct_size = sizeof(s);
  check(tsattn_get_cache_stats(&s));
  return s;
}

std::string kernel_source(const tsattn_cache_stats& before, const tsattn_cache_stats& after) {
  if (after.compiles > before.compiles) return "compiled now by NVRTC (and written to the cache)";
  if (after.disk_read_only_hits > before.disk_read_only_hits) return "a read-only cache layer (TSATTN_CACHE_RO_PATH)";
  if (after.disk_writable_hits > before.disk_writable_hits) return "the user cache on disk";
  return "already loaded in this process";
}

// key=value, so a deployment check can grep for compiles=0.
void print_cache_stats(const tsattn_cache_stats& s) {
  fmt::print(
      "cache stats after the first call: compiles={} compile_failures={} memory_hits={} memory_misses={} "
      "disk_lookups={} disk_read_only_hits={} disk_writable_hits={} disk_misses={} disk_damaged={} "
      "disk_writes={} disk_write_failures={} modules_loaded={}\n",
      s.compiles, s.compile_failures, s.memory_hits, s.memory_misses, s.disk_lookups, s.disk_read_only_hits,
      s.disk_writable_hits, s.disk_misses, s.disk_damaged, s.disk_writes, s.disk_write_failures, s.modules_loaded);
}

int precompile_instead(const RunOptions& options, const std::string& why) {
  fmt::print("tsattn run: no GPU to run on ({}).\nPrecompiling {} for sm_90a into the user cache instead:\n", why,
             options.manifest);
  PrecompileOptions precompile;
  precompile.manifest = options.manifest;
  precompile.archs = "sm_90a";
  return run_precompile(precompile);
}

}  // namespace

void add_run_options(CLI::App& command, RunOptions& options) {
  std::vector<std::string> names;
  for (const auto& [name, preset] : presets()) names.push_back(name);
  command.add_option("--preset", options.preset, "Problem to run")->check(CLI::IsMember(names))->capture_default_str();
  command.add_option("--iterations", options.iterations, "Timed repetitions")->check(CLI::PositiveNumber);
  command.add_option("--manifest", options.manifest, "Manifest to precompile when there is no GPU")
      ->capture_default_str();
  command.add_flag("--stats", options.stats,
                   "Print the cache counters (tsattn_get_cache_stats) after the first call: compiles=0 shows that "
                   "no NVRTC compile happened");
}

int run_demo(const RunOptions& options) {
  const std::string& no_driver = driver::unavailable_reason();
  if (!no_driver.empty()) return precompile_instead(options, no_driver);
  int devices = 0;
  driver::check(driver::api().cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (devices == 0) return precompile_instead(options, "the driver reports no device");

  const Preset& preset = presets().at(options.preset);
  const bool packed = preset.q_lens.size() > 1;
  const int64_t total_q = std::accumulate(preset.q_lens.begin(), preset.q_lens.end(), int64_t{0});
  const int64_t total_k = std::accumulate(preset.kv_lens.begin(), preset.kv_lens.end(), int64_t{0});
  auto shape = [&](int64_t tokens, int heads) {
    return packed ? std::vector<int64_t>{tokens, heads, preset.head_dim}
                  : std::vector<int64_t>{1, tokens, heads, preset.head_dim};
  };
  const tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16;
  driver::ContextScope scope(nullptr, 0);
  const driver::DeviceInfo& device = scope.device();
  fmt::print("tsattn {} on {} (sm_{}{}, {} SMs)\n{}\n", version(), device.name, device.cc_major, device.cc_minor,
             device.multiprocessors, preset.description);

  Pair q(dtype, shape(total_q, preset.hq)), k(dtype, shape(total_k, preset.hkv)), v(dtype, shape(total_k, preset.hkv));
  Pair out(dtype, shape(total_q, preset.hq));
  std::mt19937_64 rng(std::random_device{}());
  for (Pair* p : {&q, &k, &v}) {
    ref::fill_normal(dtype, p->host.data(), static_cast<int64_t>(p->host.size()) / 2, ref::input_stddev(dtype), rng);
    p->device.upload(p->host.data(), p->host.size());
  }
  std::vector<int32_t> qo{0}, kv{0};
  for (size_t b = 0; b < preset.q_lens.size(); ++b) {
    qo.push_back(qo.back() + preset.q_lens[b]);
    kv.push_back(kv.back() + preset.kv_lens[b]);
  }
  const Tensor qo_t{qo.data(), TSATTN_DTYPE_INT32, TSATTN_DEVICE_CPU, 0, {static_cast<int64_t>(qo.size())}, {}};
  const Tensor kv_t{kv.data(), TSATTN_DTYPE_INT32, TSATTN_DEVICE_CPU, 0, {static_cast<int64_t>(kv.size())}, {}};
  PrefillOptions prefill;
  prefill.mask = preset.mask;
  prefill.window_left = preset.window_left;
  auto call = [&] {
    batch_prefill(q.device_view, k.device_view, v.device_view, out.device_view, prefill, packed ? &qo_t : nullptr,
                  packed ? &kv_t : nullptr);
  };

  // First call: includes finding (or compiling) and loading the kernel.
  out.device.fill_bytes(0xFF);  // NaN everywhere: every element must be written
  const tsattn_cache_stats before = cache_stats();
  const auto first_start = std::chrono::steady_clock::now();
  call();
  const double first_call_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_start).count();
  driver::check(driver::api().cuCtxSynchronize(), "the first call");
  const double first_done_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_start).count();
  const tsattn_cache_stats after = cache_stats();
  fmt::print(
      "kernel {} from: {}; first call returned after {:.2f} ms (host: find + load + launch), done after "
      "{:.2f} ms\n",
      last_kernel_name(), kernel_source(before, after), first_call_ms, first_done_ms);
  if (options.stats) print_cache_stats(after);

  // Check against the CPU oracle.
  out.device.download(out.host.data(), out.host.size());
  const tsattn_tensor_view qv = q.host_view.view(), kvw = k.host_view.view(), vv = v.host_view.view(),
                           ov = out.host_view.view(), qov = qo_t.view(), kvv = kv_t.view();
  tsattn_prefill_options host_options;
  tsattn_prefill_options_init(&host_options);
  host_options.mask_type = preset.mask;
  host_options.window_left = preset.window_left;
  const Problem problem = validate_arguments(
      {&qv, &kvw, &vv, packed ? &qov : nullptr, packed ? &kvv : nullptr, &host_options, &ov}, Residency::host);
  const auto oracle_start = std::chrono::steady_clock::now();
  std::vector<float> expected = ref::reference_prefill(problem, ref::Accumulation::fp64);
  const double oracle_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - oracle_start).count();
  const ref::Comparison cmp = ref::compare_output(dtype, out.host.data(), expected, preset.hq, preset.head_dim,
                                                  ref::tolerance_for(dtype, dtype));
  fmt::print(
      "check vs CPU oracle (fp64, {:.1f} s): {} elements, max abs error {:.3g}, relative norm error {:.3g}: {}\n",
      oracle_s, cmp.elements, cmp.max_abs_error, cmp.rel_norm_error,
      cmp.passed() ? "PASS" : "FAIL (" + cmp.first_problem + ")");

  // Timing: CUDA events around each call, median.
  const driver::Api& cu = driver::api();
  CUevent start = nullptr, stop = nullptr;
  driver::check(cu.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  driver::check(cu.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  std::vector<float> times;
  for (int i = 0; i < options.iterations + 3; ++i) {
    driver::check(cu.cuEventRecord(start, nullptr), "cuEventRecord");
    call();
    driver::check(cu.cuEventRecord(stop, nullptr), "cuEventRecord");
    driver::check(cu.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    driver::check(cu.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    if (i >= 3) times.push_back(ms);  // the first three warm up clocks and caches
  }
  cu.cuEventDestroy(start);
  cu.cuEventDestroy(stop);
  std::sort(times.begin(), times.end());
  const double median_ms = times[times.size() / 2];

  // Host cost of a call whose kernel is loaded: the call itself only (it queues work and returns).
  std::vector<double> host_us;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (i % 50 == 49) driver::check(cu.cuCtxSynchronize(), "host-cost calls");  // keep the queue short
  }
  std::sort(host_us.begin(), host_us.end());
  fmt::print("host cost per call (kernel loaded): median {:.1f} us, p90 {:.1f} us over {} calls\n",
             host_us[host_us.size() / 2], host_us[host_us.size() * 9 / 10], host_us.size());
  const double flops = 4.0 * preset.hq * preset.head_dim * static_cast<double>(problem.visible_pairs());
  fmt::print("time: median {:.3f} ms over {} calls (min {:.3f}): {:.1f} TFLOP/s (4*Hq*D*visible pairs)\n", median_ms,
             times.size(), times.front(), flops / (median_ms * 1e-3) / 1e12);
  return cmp.passed() ? 0 : 1;
}

}  // namespace tsattn::tools
