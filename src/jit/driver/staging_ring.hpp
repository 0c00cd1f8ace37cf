// staging_ring.hpp - pinned host memory for asynchronous uploads that must not be overwritten
// while a copy may still read it: a ring of slots, each with an event recorded after the copy
// that reads it. A slot is reused once its event has completed; the host waits only when the
// device is `slots` uploads behind (the event is queried first, waited on only if not done).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

namespace tsattn::driver {

class StagingRing {
 public:
  // In the current context.
  StagingRing(size_t slot_bytes, int slots);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // The next slot (slot_bytes of pinned memory), free to write.
  void* acquire();
  // Queues a copy of the first `bytes` of the last acquired slot to dst on stream, then records the
  // slot's event.
  void upload(CUdeviceptr dst, size_t bytes, CUstream stream);

  int slots() const { return static_cast<int>(events_.size()); }

 private:
  size_t slot_bytes_ = 0;
  void* host_ = nullptr;
  std::vector<CUevent> events_;
  size_t current_ = 0;
};

}  // namespace tsattn::driver
