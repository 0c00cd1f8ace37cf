#include "api/execute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "common/error.hpp"
#include "codegen/spec_table.hpp"
#include "common/knobs.hpp"
#include "common/log.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/kernel_cache.hpp"
#include "plan/host_plan.hpp"
#include "plan/kernel_params.hpp"

namespace tsattn {

namespace {

KernelFamily choose_family(const driver::DeviceInfo& device) {
  const std::string forced = knob_string(Knob::kernel_family);
  if (forced != "auto") {
    const std::optional<KernelFamily> family = parse_family(forced);
    if (family) return *family;
  }
  // The Hopper family is the fast path on sm_90 once it exists in the table; the portable
  // family serves everything else.
  for (const FamilyAxes& axes : kernel_families())
    if (axes.family == KernelFamily::sm90a && device.cc_major == 9) return KernelFamily::sm90a;
  return KernelFamily::sm80;
}

// Device memory for one call, allocated and freed in stream order (so concurrent calls on
// different streams never share it, and a captured call's buffer becomes part of the graph).
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, CUstream stream) : stream_(stream) {
    driver::check(driver::api().cuMemAllocAsync(&pointer_, bytes, stream), "cuMemAllocAsync (tsattn workspace)");
  }
  ~StreamBuffer() { driver::api().cuMemFreeAsync(pointer_, stream_); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  CUdeviceptr get() const { return pointer_; }

 private:
  CUdeviceptr pointer_ = 0;
  CUstream stream_;
};

bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(driver::api().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Lays host data out back to back at 16-byte boundaries, for one upload.
class UploadImage {
 public:
  template <class T>
  size_t append(const T* data, size_t count) {
    const size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + sizeof(T) * count);
    std::memcpy(bytes_.data() + offset, data, sizeof(T) * count);
    return offset;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace

void execute(const Problem& p) {
  auto stream = static_cast<CUstream>(p.stream);
  driver::ContextScope scope(stream, p.device_id);
  const driver::DeviceInfo& device = driver::device_info(p.device_id);
  const std::optional<Arch> arch = arch_for_compute_capability(device.cc_major);
  if (!arch)
    raise(ErrorKind::not_implemented, "{} (compute capability {}.{}) is not supported; tsattn needs sm_80 or newer",
          device.name, device.cc_major, device.cc_minor);
  const KernelSpec spec = spec_for_problem(p, choose_family(device), *arch);

  const driver::LoadedKernel& kernel = driver::loaded_kernel(scope.context(), spec.id(), [&] {
    std::shared_ptr<const jit::CompiledKernel> compiled = jit::KernelCache::process().get(spec);
    logf(LogLevel::info, "kernel {} comes from: {}", compiled->name, jit::kernel_origin_name(compiled->origin));
    // The kernel cache keeps every CompiledKernel alive, so the span stays valid.
    return driver::ModuleSource{compiled->name, compiled->symbol, compiled->cubin};
  });

  TsattnPrefillParams params = make_kernel_params(p);
  if (!p.lengths_on_host())
    raise(ErrorKind::not_implemented, "packed layout with indptrs on the GPU needs the device planner, which {} "
          "does not have yet; pass qo_indptr and kv_indptr on the CPU", kernel.name);
  if (stream_is_capturing(stream))
    raise(ErrorKind::value, "the stream is capturing a CUDA graph, but this call must upload its plan from the "
          "host; pass qo_indptr and kv_indptr on the GPU to capture it");

  const std::vector<TsattnTask> tasks = plan_tasks_on_host(p, kernel.block_m);
  if (tasks.empty()) return;  // no query rows: nothing to write
  const int num_tasks = static_cast<int>(tasks.size());

  UploadImage image;
  const size_t count_offset = image.append(&num_tasks, 1);
  const size_t tasks_offset = image.append(tasks.data(), tasks.size());
  size_t qo_offset = 0, kv_offset = 0;
  if (p.layout == Layout::packed) {
    qo_offset = image.append(p.qo_indptr_host.data(), p.qo_indptr_host.size());
    kv_offset = image.append(p.kv_indptr_host.data(), p.kv_indptr_host.size());
  }
  const driver::Api& cu = driver::api();
  StreamBuffer workspace(image.bytes().size(), stream);
  // From pageable memory: the driver stages the bytes before returning, so `image` may go.
  driver::check(cu.cuMemcpyHtoDAsync(workspace.get(), image.bytes().data(), image.bytes().size(), stream),
                "uploading the task list");
  params.num_tasks = reinterpret_cast<const int*>(workspace.get() + count_offset);
  params.tasks = reinterpret_cast<const TsattnTask*>(workspace.get() + tasks_offset);
  if (p.layout == Layout::packed) {
    params.qo_indptr = reinterpret_cast<const int*>(workspace.get() + qo_offset);
    params.kv_indptr = reinterpret_cast<const int*>(workspace.get() + kv_offset);
  }

  const int resident = device.multiprocessors * kernel.ctas_per_multiprocessor;
  const unsigned grid = static_cast<unsigned>(std::min(num_tasks, resident));
  void* arguments[] = {&params};
  driver::check(cu.cuLaunchKernel(kernel.function, grid, 1, 1, static_cast<unsigned>(kernel.threads_per_cta), 1, 1,
                                  static_cast<unsigned>(kernel.dynamic_smem_bytes), stream, arguments, nullptr),
                fmt::format("launching {}", kernel.name));
}

}  // namespace tsattn
