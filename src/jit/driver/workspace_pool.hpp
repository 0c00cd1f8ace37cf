// workspace_pool.hpp - the memory pool that one-shot calls take their stream-ordered workspaces
// from (api/execute.cpp).
//
// Allocations from it keep the semantics of cuMemAllocAsync: a buffer is usable in stream order,
// calls on different streams never share one, and under stream capture the allocation becomes a
// graph allocation node. Unlike the device's default pool, it keeps up to kKeptBytes of the memory
// freed into it: the default pool returns freed memory to the driver at every synchronization, so
// each later call mapped it again before its kernel could start. Workspaces are mostly small
// (counters and tile lists); a large fp8 V^T or paged gather beyond the threshold is still returned.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace tsattn::driver {

constexpr unsigned long long kKeptBytes = 64ull << 20;

// The pool of device `device_id`, created on first use and kept for the life of the process.
CUmemoryPool workspace_pool(int device_id);

// Device memory for one call, allocated from workspace_pool() and freed in stream order (so
// concurrent calls on different streams never share it, and a captured call's buffer becomes part
// of the graph): free it only after every use is queued on `stream`.
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, CUstream stream, int device_id);
  ~StreamBuffer();
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  CUdeviceptr get() const { return pointer_; }

 private:
  CUdeviceptr pointer_ = 0;
  CUstream stream_;
};

}  // namespace tsattn::driver
