#include "jit/driver/workspace_pool.hpp"

#include <map>
#include <mutex>

#include "jit/driver/driver_api.hpp"

namespace tsattn::driver {

CUmemoryPool workspace_pool(int device_id) {
  static std::mutex mutex;
  static std::map<int, CUmemoryPool> pools;  // never destroyed: calls may use them until exit
  const std::lock_guard lock(mutex);
  auto it = pools.find(device_id);
  if (it != pools.end()) return it->second;
  const Api& cu = api();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device_id;
  CUmemoryPool pool = nullptr;
  check(cu.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate (tsattn workspace pool)");
  cuuint64_t keep = kKeptBytes;
  check(cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
        "cuMemPoolSetAttribute (release threshold)");
  return pools.emplace(device_id, pool).first->second;
}

StreamBuffer::StreamBuffer(size_t bytes, CUstream stream, int device_id) : stream_(stream) {
  check(api().cuMemAllocFromPoolAsync(&pointer_, bytes, workspace_pool(device_id), stream),
        "cuMemAllocFromPoolAsync (tsattn workspace)");
}

StreamBuffer::~StreamBuffer() { api().cuMemFreeAsync(pointer_, stream_); }

}  // namespace tsattn::driver
