#include "jit/driver/module_table.hpp"

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include <tsattn/tsattn.hpp>

#include "jit/driver/driver_api.hpp"

namespace tsattn::driver {

namespace {

struct TableKey {
  CUcontext context;
  uint32_t key;
  bool operator==(const TableKey&) const = default;
};

struct TableKeyHash {
  size_t operator()(const TableKey& k) const noexcept {
    return std::hash<const void*>()(k.context) ^ (static_cast<size_t>(k.key) * 0x9E3779B97F4A7C15ull);
  }
};

std::shared_mutex table_mutex;
// Entries are never removed: modules live as long as their context (the process).
std::unordered_map<TableKey, std::unique_ptr<LoadedKernel>, TableKeyHash> table;
std::unordered_map<TableKey, std::unique_ptr<LoadedFunction>, TableKeyHash> function_table;
std::atomic<uint64_t> loads{0};

// The value of a module's `const int` global, found by cuModuleGetGlobal at `address`.
int read_int_global(CUdeviceptr address, size_t bytes, const char* global, const std::string& kernel) {
  int value = 0;
  if (bytes != sizeof(value))
    throw Error(ErrorKind::runtime, fmt::format("kernel {}: module global {} has {} bytes, expected {}", kernel, global,
                                                bytes, sizeof(value)));
  check(api().cuMemcpyDtoH(&value, address, sizeof(value)), fmt::format("kernel {}: reading {}", kernel, global));
  return value;
}

// A global every module of the library has.
int read_module_int(CUmodule module, const char* global, const std::string& kernel) {
  CUdeviceptr address = 0;
  size_t bytes = 0;
  check(api().cuModuleGetGlobal(&address, &bytes, module, global),
        fmt::format("kernel {}: module global {}", kernel, global));
  return read_int_global(address, bytes, global, kernel);
}

// The module's own value of a setting the host took from the kernel's traits: a cubin built from
// other templates than this library's would disagree, and must not run.
void confirm_setting(int in_module, int in_traits, const char* global, const std::string& kernel) {
  if (in_module != in_traits)
    throw Error(ErrorKind::runtime, fmt::format("kernel {}: module global {} is {}, but the kernel's traits say {} "
                                                "(a cubin from other templates?)",
                                                kernel, global, in_module, in_traits));
}

// Clusters of 2 CTAs that fit the GPU at once (a GPC holds whole clusters, so this can be less
// than half the multiprocessors); 0 when the driver says none.
int max_active_pairs(CUfunction function, const LoadedKernel& kernel) {
  const PairsLaunch launch(kernel, 1, nullptr);
  int clusters = 0;
  if (api().cuOccupancyMaxActiveClusters(&clusters, function, &launch.config) != CUDA_SUCCESS) return 0;
  return clusters;
}

std::unique_ptr<LoadedKernel> load(const ModuleSource& source) {
  const Api& cu = api();
  CUmodule module = nullptr;
  check(cu.cuModuleLoadData(&module, source.cubin.data()), fmt::format("kernel {}: cuModuleLoadData", source.name));
  auto kernel = std::make_unique<LoadedKernel>();
  kernel->name = source.name;
  try {
    // The symbol spells the whole spec, the lse axis included (a module of the other twin has no
    // such function), so the axis needs no module global of its own.
    check(cu.cuModuleGetFunction(&kernel->function, module, source.symbol.c_str()),
          fmt::format("kernel {}: cuModuleGetFunction({})", source.name, source.symbol));
    if (source.has_planner)
      check(cu.cuModuleGetFunction(&kernel->planner, module, "tsattn_plan_tiles"),
            fmt::format("kernel {}: cuModuleGetFunction(tsattn_plan_tiles)", source.name));
    if (source.has_v_transposer)
      check(cu.cuModuleGetFunction(&kernel->v_transposer, module, "tsattn_transpose_v"),
            fmt::format("kernel {}: cuModuleGetFunction(tsattn_transpose_v)", source.name));
    const KernelTraits& traits = source.traits;
    // The launch shape comes from the module; every setting from the traits, which the module's
    // globals confirm.
    kernel->dynamic_smem_bytes = read_module_int(module, "tsattn_dynamic_smem_bytes", source.name);
    kernel->threads_per_cta = read_module_int(module, "tsattn_threads_per_cta", source.name);
    if (traits.dynamic_smem_bytes > 0)
      confirm_setting(kernel->dynamic_smem_bytes, traits.dynamic_smem_bytes, "tsattn_dynamic_smem_bytes", source.name);
    confirm_setting(kernel->threads_per_cta, traits.tile.num_warps * 32, "tsattn_threads_per_cta", source.name);
    kernel->block_m = traits.tile.block_m;
    kernel->chunked_order = traits.chunked_order;
    kernel->dynamic_order = traits.dynamic_order;
    kernel->narrow_walk = traits.narrow_walk;
    kernel->split_partial_bytes = traits.split_partial_bytes;
    confirm_setting(read_module_int(module, "tsattn_block_m", source.name), kernel->block_m, "tsattn_block_m",
                    source.name);
    confirm_setting(read_module_int(module, "tsattn_chunked_order", source.name), kernel->chunked_order ? 1 : 0,
                    "tsattn_chunked_order", source.name);
    // sm80 modules define these too (they neither claim dynamically, split, nor pair): a probe for
    // a missing global would be a failed driver call, which compute-sanitizer reports.
    confirm_setting(read_module_int(module, "tsattn_dynamic_order", source.name), kernel->dynamic_order ? 1 : 0,
                    "tsattn_dynamic_order", source.name);
    confirm_setting(read_module_int(module, "tsattn_split_partial_bytes", source.name), kernel->split_partial_bytes,
                    "tsattn_split_partial_bytes", source.name);
    confirm_setting(read_module_int(module, "tsattn_max_cluster_size", source.name), traits.pairs ? 2 : 1,
                    "tsattn_max_cluster_size", source.name);
    confirm_setting(read_module_int(module, "tsattn_pairs_along_tiles", source.name), traits.pairs_along_tiles ? 1 : 0,
                    "tsattn_pairs_along_tiles", source.name);
    kernel->list_in_kernel_max_batch = read_module_int(module, "tsattn_list_in_kernel_max_batch", source.name);
    // Kernels above 48 KB of dynamic shared memory must opt in explicitly.
    check(
        cu.cuFuncSetAttribute(kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              kernel->dynamic_smem_bytes),
        fmt::format("kernel {}: allowing {} bytes of dynamic shared memory", source.name, kernel->dynamic_smem_bytes));
    check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&kernel->ctas_per_multiprocessor, kernel->function,
                                                         kernel->threads_per_cta,
                                                         static_cast<size_t>(kernel->dynamic_smem_bytes)),
          fmt::format("kernel {}: occupancy", source.name));
    if (traits.pairs) {
      const std::string pairs_symbol = source.symbol + "_pairs";
      check(cu.cuModuleGetFunction(&kernel->pairs_function, module, pairs_symbol.c_str()),
            fmt::format("kernel {}: cuModuleGetFunction({})", source.name, pairs_symbol));
      check(cu.cuFuncSetAttribute(kernel->pairs_function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  kernel->dynamic_smem_bytes),
            fmt::format("kernel {}: allowing {} bytes of dynamic shared memory ({})", source.name,
                        kernel->dynamic_smem_bytes, pairs_symbol));
      kernel->max_active_pairs = max_active_pairs(kernel->pairs_function, *kernel);
      kernel->pairs_along_tiles = traits.pairs_along_tiles;
    }
    if (kernel->ctas_per_multiprocessor < 1)
      throw Error(ErrorKind::runtime, fmt::format("kernel {} cannot run on this GPU: {} threads with {} bytes of "
                                                  "shared memory fit no CTA on a multiprocessor",
                                                  source.name, kernel->threads_per_cta, kernel->dynamic_smem_bytes));
  } catch (...) {
    cu.cuModuleUnload(module);
    throw;
  }
  ++loads;
  return kernel;
}

}  // namespace

PairsLaunch::PairsLaunch(const LoadedKernel& kernel, unsigned clusters, CUstream stream) {
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2;
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  config.gridDimX = 2 * clusters;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = static_cast<unsigned>(kernel.threads_per_cta);
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(kernel.dynamic_smem_bytes);
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
}

const LoadedKernel& loaded_kernel(CUcontext context, uint32_t key, const std::function<ModuleSource()>& obtain) {
  const TableKey table_key{context, key};
  {
    std::shared_lock lock(table_mutex);
    auto it = table.find(table_key);
    if (it != table.end()) return *it->second;
  }
  const ModuleSource source = obtain();  // may compile: outside every lock
  std::unique_lock lock(table_mutex);
  auto it = table.find(table_key);
  if (it != table.end()) return *it->second;  // another thread loaded it meanwhile
  return *table.emplace(table_key, load(source)).first->second;
}

const LoadedFunction& loaded_function(CUcontext context, FunctionModule kind, uint32_t id,
                                      const std::function<FunctionSource()>& obtain) {
  const TableKey table_key{context, (static_cast<uint32_t>(kind) << 24) | id};
  {
    std::shared_lock lock(table_mutex);
    auto it = function_table.find(table_key);
    if (it != function_table.end()) return *it->second;
  }
  const FunctionSource source = obtain();  // may compile: outside every lock
  std::unique_lock lock(table_mutex);
  auto it = function_table.find(table_key);
  if (it != function_table.end()) return *it->second;
  const Api& cu = api();
  CUmodule module = nullptr;
  check(cu.cuModuleLoadData(&module, source.cubin.data()), fmt::format("kernel {}: cuModuleLoadData", source.name));
  auto loaded = std::make_unique<LoadedFunction>();
  loaded->name = source.name;
  try {
    check(cu.cuModuleGetFunction(&loaded->function, module, source.symbol.c_str()),
          fmt::format("kernel {}: cuModuleGetFunction({})", source.name, source.symbol));
    if (!source.prologue_symbol.empty())
      check(cu.cuModuleGetFunction(&loaded->prologue, module, source.prologue_symbol.c_str()),
            fmt::format("kernel {}: cuModuleGetFunction({})", source.name, source.prologue_symbol));
    check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&loaded->ctas_per_multiprocessor, loaded->function,
                                                         source.threads_per_cta, 0),
          fmt::format("kernel {}: occupancy", source.name));
  } catch (...) {
    cu.cuModuleUnload(module);
    throw;
  }
  ++loads;
  return *function_table.emplace(table_key, std::move(loaded)).first->second;
}

uint64_t modules_loaded() { return loads.load(); }

}  // namespace tsattn::driver
