#include "api/merge_execute.hpp"

#include <cuda.h>

#include <memory>

#include "api/kernel_choice.hpp"
#include "common/log.hpp"
#include "jit/driver/device_context.hpp"
#include "jit/driver/driver_api.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/kernel_cache.hpp"
#include "plan/merge_launch.hpp"

namespace tsattn {

void execute_merge(const MergeProblem& p) {
  if (p.writes_nothing()) return;
  const auto stream = static_cast<CUstream>(p.stream);
  driver::ContextScope scope(stream, p.device_id);
  const MergeSpec spec{device_arch(scope.device()), p.dtype};
  const driver::LoadedFunction& kernel =
      driver::loaded_function(scope.context(), driver::FunctionModule::merge, spec.id(), [&] {
        std::shared_ptr<const jit::CompiledMerge> compiled = jit::KernelCache::process().get(spec);
        logf(LogLevel::info, "kernel {} comes from: {}", compiled->name, jit::kernel_origin_name(compiled->origin));
        // The kernel cache keeps every CompiledMerge alive, so the span stays valid.
        return driver::FunctionSource{compiled->name, compiled->symbol, compiled->cubin, TSATTN_MERGE_THREADS, {}};
      });
  MergeLaunch launch = plan_merge_launch(p, int64_t{scope.device().multiprocessors} * kernel.ctas_per_multiprocessor);
  void* arguments[] = {&launch.params};
  const CUresult result = driver::api().cuLaunchKernel(kernel.function, launch.ctas, 1, 1, TSATTN_MERGE_THREADS, 1, 1,
                                                       0, stream, arguments, nullptr);
  if (result != CUDA_SUCCESS) driver::check(result, fmt::format("launching {}", kernel.name));
}

}  // namespace tsattn
