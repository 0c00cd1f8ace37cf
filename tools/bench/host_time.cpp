// host_time.cpp - tsattn_bench_host: the host time of one call, in C, for the one-shot call and
// for a plan's runs (docs/contract.md, "Plan once, run every layer"; the target is 3 us per run).
//
// Each variant is called in batches of --batch calls; the stream is synchronized between batches,
// outside the timed span, so the launch queue never fills and the time is the host's alone. The
// median over --batches batches is printed per call: wall time and the thread's CPU time.
//
// usage: build/tsattn_bench_host [--batches N] [--batch N] [--seq S] [--heads HQ HKV]
#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "jit/driver/device_buffer.hpp"
#include "jit/driver/driver_api.hpp"

namespace {

using tsattn::driver::DeviceBuffer;

struct Settings {
  int batches = 200;
  int batch = 50;
  int64_t seq = 256;
  int64_t requests = 2;
  int hq = 32, hkv = 8;
};

int64_t thread_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

struct Timing {
  double wall_us, cpu_us;
};

// Median per-call wall and CPU time of `call` over the batches.
Timing measure(const Settings& s, CUstream stream, const std::function<void(int)>& call) {
  const tsattn::driver::Api& cu = tsattn::driver::api();
  for (int i = 0; i < s.batch; ++i) call(i);  // warm-up: loads, caches, first-use paths
  tsattn::driver::check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<double> wall, cpu;
  for (int b = 0; b < s.batches; ++b) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t cpu_start = thread_ns();
    for (int i = 0; i < s.batch; ++i) call(i);
    const int64_t cpu_end = thread_ns();
    const auto end = std::chrono::steady_clock::now();
    wall.push_back(std::chrono::duration<double, std::micro>(end - start).count() / s.batch);
    cpu.push_back(static_cast<double>(cpu_end - cpu_start) / 1000.0 / s.batch);
    tsattn::driver::check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
  }
  const auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(wall), median(cpu)};
}

void check(tsattn_status status) {
  if (status != TSATTN_OK) throw tsattn::Error(static_cast<tsattn::ErrorKind>(status), tsattn_last_error_message());
}

// Empty kernels with a small and a large parameter block (a prefill launch passes its params and
// four TMA descriptors): the launch cost no library can go below.
constexpr const char* kEmptyKernels = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry empty_small(.param .u64 p) { ret; }
.visible .entry empty_large(.param .align 64 .b8 p[1536]) { ret; }
)";

// The host time of the driver calls a run is made of, each alone, so a run's time can be read
// as its driver calls plus the library's own work.
void driver_floor(const Settings& s, CUstream stream, CUdeviceptr scratch) {
  const tsattn::driver::Api& cu = tsattn::driver::api();
  CUmodule module = nullptr;
  tsattn::driver::check(cu.cuModuleLoadData(&module, kEmptyKernels), "cuModuleLoadData (empty kernels)");
  CUfunction small = nullptr, large = nullptr;
  tsattn::driver::check(cu.cuModuleGetFunction(&small, module, "empty_small"), "cuModuleGetFunction");
  tsattn::driver::check(cu.cuModuleGetFunction(&large, module, "empty_large"), "cuModuleGetFunction");
  alignas(64) unsigned char block[1536] = {};
  void* small_args[] = {&scratch};
  void* large_args[] = {block};
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2;
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = 132;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  CUcontext owner = nullptr;
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  CUtensorMap map{};
  const cuuint64_t dims[2] = {128, 4096};
  const cuuint64_t strides[1] = {256};
  const cuuint32_t box[2] = {64, 64}, element_strides[2] = {1, 1};
  struct Floor {
    const char* name;
    std::function<CUresult()> call;
  };
  const std::vector<Floor> floors = {
      {"cuLaunchKernel, 8-byte params",
       [&] { return cu.cuLaunchKernel(small, 132, 1, 1, 128, 1, 1, 0, stream, small_args, nullptr); }},
      {"cuLaunchKernel, 1536-byte params",
       [&] { return cu.cuLaunchKernel(large, 132, 1, 1, 128, 1, 1, 0, stream, large_args, nullptr); }},
      {"cuLaunchKernelEx, clusters of 2, 1536 bytes",
       [&] { return cu.cuLaunchKernelEx(&config, large, large_args, nullptr); }},
      {"cuMemsetD32Async, 8 bytes", [&] { return cu.cuMemsetD32Async(scratch, 0, 2, stream); }},
      {"cuStreamGetCtx", [&] { return cu.cuStreamGetCtx(stream, &owner); }},
      {"cuStreamIsCapturing", [&] { return cu.cuStreamIsCapturing(stream, &capturing); }},
      {"cuCtxGetCurrent", [&] { return cu.cuCtxGetCurrent(&owner); }},
      {"cuTensorMapEncodeTiled, 2-D bf16",
       [&] {
         return cu.cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, reinterpret_cast<void*>(scratch),
                                          dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
       }},
  };
  std::printf("\ndriver floor (each call alone)\n%-48s %12s %12s\n", "call", "wall us/call", "cpu us/call");
  for (const Floor& floor : floors) {
    const Timing t = measure(s, stream, [&](int) { tsattn::driver::check(floor.call(), floor.name); });
    std::printf("%-48s %12.2f %12.2f\n", floor.name, t.wall_us, t.cpu_us);
  }
  tsattn::driver::check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
  cu.cuModuleUnload(module);
}

int run(const Settings& s) {
  const tsattn::driver::Api& cu = tsattn::driver::api();
  CUdevice device = 0;
  CUcontext context = nullptr;
  tsattn::driver::check(cu.cuDeviceGet(&device, 0), "cuDeviceGet");
  tsattn::driver::check(cu.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  tsattn::driver::check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUstream stream = nullptr;
  tsattn::driver::check(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // One causal problem, fixed [B, S, H, D] and packed [B*S, H, D] over the same memory; bf16.
  const int64_t b = s.requests, sq = s.seq, d = 128;
  DeviceBuffer q(static_cast<size_t>(b * sq * s.hq * d * 2)), k(static_cast<size_t>(b * sq * s.hkv * d * 2)),
      v(k.size()), out(q.size());
  q.fill_bytes(0x3c);
  k.fill_bytes(0x3c);
  v.fill_bytes(0x3c);
  const tsattn::Tensor fq{q.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b, sq, s.hq, d}, {}};
  const tsattn::Tensor fk{k.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b, sq, s.hkv, d}, {}};
  const tsattn::Tensor fv{v.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b, sq, s.hkv, d}, {}};
  const tsattn::Tensor fo{out.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b, sq, s.hq, d}, {}};
  const tsattn::Tensor pq{q.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b * sq, s.hq, d}, {}};
  const tsattn::Tensor pk{k.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b * sq, s.hkv, d}, {}};
  const tsattn::Tensor pv{v.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b * sq, s.hkv, d}, {}};
  const tsattn::Tensor po{out.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {b * sq, s.hq, d}, {}};
  // Host indptrs: even requests, and a second set with the same totals (an upload per run).
  std::vector<int32_t> even(static_cast<size_t>(b + 1)), shifted(even.size());
  for (int64_t i = 0; i <= b; ++i) even[static_cast<size_t>(i)] = static_cast<int32_t>(i * sq);
  shifted = even;
  if (b > 1) shifted[1] -= 1;
  DeviceBuffer gpu_indptr(even.size() * sizeof(int32_t));
  gpu_indptr.upload(even.data(), even.size() * sizeof(int32_t));
  const auto indptr = [&](void* data, tsattn_device_type where) {
    return tsattn::Tensor{data, TSATTN_DTYPE_INT32, where, 0, {b + 1}, {}};
  };
  const tsattn::Tensor host_even = indptr(even.data(), TSATTN_DEVICE_CPU);
  const tsattn::Tensor host_shifted = indptr(shifted.data(), TSATTN_DEVICE_CPU);
  const tsattn::Tensor gpu = indptr(gpu_indptr.data(), TSATTN_DEVICE_CUDA);

  // Views built once, as a caller that cares about host time keeps them.
  const tsattn_tensor_view vfq = fq.view(), vfk = fk.view(), vfv = fv.view(), vfo = fo.view(), vpq = pq.view(),
                           vpk = pk.view(), vpv = pv.view(), vpo = po.view(), veven = host_even.view(),
                           vshift = host_shifted.view(), vgpu = gpu.view();
  tsattn_prefill_options one_shot;
  tsattn_prefill_options_init(&one_shot);
  one_shot.mask_type = TSATTN_MASK_CAUSAL;
  one_shot.stream = stream;

  tsattn::PlanOptions plan;
  plan.batch_size = b;
  plan.max_seq_len_q = plan.max_kv_len = sq + 1;  // room for the shifted indptrs
  plan.num_qo_heads = s.hq;
  plan.num_kv_heads = s.hkv;
  plan.head_dim = static_cast<int32_t>(d);
  plan.mask = TSATTN_MASK_CAUSAL;
  const tsattn::BatchPrefillTSWrapper fixed(plan);
  plan.packed = true;
  const tsattn::BatchPrefillTSWrapper packed(plan);
  tsattn_prefill_run_options checked, unchecked;
  tsattn_prefill_run_options_init(&checked);
  checked.stream = stream;
  unchecked = checked;
  unchecked.validate = 0;

  struct Variant {
    const char* name;
    std::function<void(int)> call;
  };
  const std::vector<Variant> variants = {
      {"one-shot fixed causal",
       [&](int) { check(tsattn_batch_prefill(&vfq, &vfk, &vfv, nullptr, nullptr, &one_shot, &vfo)); }},
      {"one-shot packed, host indptrs",
       [&](int) { check(tsattn_batch_prefill(&vpq, &vpk, &vpv, &veven, &veven, &one_shot, &vpo)); }},
      {"one-shot packed, GPU indptrs (reads them back)",
       [&](int) { check(tsattn_batch_prefill(&vpq, &vpk, &vpv, &vgpu, &vgpu, &one_shot, &vpo)); }},
      {"run fixed",
       [&](int) {
         check(tsattn_prefill_plan_run(fixed.handle(), &vfq, &vfk, &vfv, nullptr, nullptr, &checked, &vfo));
       }},
      {"run fixed, validate=0",
       [&](int) {
         check(tsattn_prefill_plan_run(fixed.handle(), &vfq, &vfk, &vfv, nullptr, nullptr, &unchecked, &vfo));
       }},
      {"run packed, host indptrs (unchanged)",
       [&](int) { check(tsattn_prefill_plan_run(packed.handle(), &vpq, &vpk, &vpv, &veven, &veven, &checked, &vpo)); }},
      {"run packed, host indptrs (new each run)",
       [&](int i) {
         const tsattn_tensor_view* qo = i % 2 ? &vshift : &veven;
         check(tsattn_prefill_plan_run(packed.handle(), &vpq, &vpk, &vpv, qo, qo, &checked, &vpo));
       }},
      {"run packed, host indptrs, validate=0",
       [&](int) {
         check(tsattn_prefill_plan_run(packed.handle(), &vpq, &vpk, &vpv, &veven, &veven, &unchecked, &vpo));
       }},
      {"run packed, GPU indptrs",
       [&](int) { check(tsattn_prefill_plan_run(packed.handle(), &vpq, &vpk, &vpv, &vgpu, &vgpu, &checked, &vpo)); }},
      {"run packed, GPU indptrs, validate=0",
       [&](int) { check(tsattn_prefill_plan_run(packed.handle(), &vpq, &vpk, &vpv, &vgpu, &vgpu, &unchecked, &vpo)); }},
  };
  std::printf("tsattn_bench_host: B=%lld S=%lld Hq=%d Hkv=%d D=128 bf16 causal; %d batches of %d calls\n",
              static_cast<long long>(b), static_cast<long long>(sq), s.hq, s.hkv, s.batches, s.batch);
  std::printf("%-48s %12s %12s\n", "variant", "wall us/call", "cpu us/call");
  for (const Variant& variant : variants) {
    const Timing t = measure(s, stream, variant.call);
    std::printf("%-48s %12.2f %12.2f\n", variant.name, t.wall_us, t.cpu_us);
  }
  std::printf("kernel: %s\n", tsattn_last_kernel_name());
  driver_floor(s, stream, q.address());
  cu.cuStreamDestroy(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return std::stoll(argv[++i]);
    };
    if (arg == "--batches") {
      s.batches = static_cast<int>(next());
    } else if (arg == "--batch") {
      s.batch = static_cast<int>(next());
    } else if (arg == "--seq") {
      s.seq = next();
    } else if (arg == "--requests") {
      s.requests = next();
    } else if (arg == "--heads") {
      s.hq = static_cast<int>(next());
      s.hkv = static_cast<int>(next());
    } else {
      std::fprintf(stderr,
                   "usage: tsattn_bench_host [--batches N] [--batch N] [--seq S] [--requests B] [--heads HQ HKV]\n");
      return 2;
    }
  }
  if (!tsattn::driver::unavailable_reason().empty()) {
    std::fprintf(stderr, "tsattn_bench_host: no CUDA device (%s)\n", tsattn::driver::unavailable_reason().c_str());
    return 3;
  }
  try {
    return run(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tsattn_bench_host: %s\n", e.what());
    return 1;
  }
}
