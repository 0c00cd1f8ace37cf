// workspace_pool.hpp - the memory pool that one-shot calls take their stream-ordered workspaces
// from (api/execute.cpp).
//
// Allocations from it keep the semantics of cuMemAllocAsync: a buffer is usable in stream order,
// calls on different streams never share one, and under stream capture the allocation becomes a
// graph allocation node. Unlike the device's default pool, it keeps up to kKeptBytes of the memory
// freed into it: the default pool returns freed memory to the driver at every synchronization, so
// each later call mapped it again before its kernel could start. Workspaces are small (counters
// and tile lists); a large fp8 V^T beyond the threshold is still returned.
#pragma once

#include <cuda.h>

namespace tsattn::driver {

constexpr unsigned long long kKeptBytes = 64ull << 20;

// The pool of device `device_id`, created on first use and kept for the life of the process.
CUmemoryPool workspace_pool(int device_id);

}  // namespace tsattn::driver
