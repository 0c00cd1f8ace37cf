#include "jit/driver/staging_ring.hpp"

#include "jit/driver/driver_api.hpp"

namespace tsattn::driver {

StagingRing::StagingRing(size_t slot_bytes, int slots) : slot_bytes_((slot_bytes + 63) / 64 * 64) {
  const Api& cu = api();
  check(cu.cuMemAllocHost(&host_, slot_bytes_ * static_cast<size_t>(slots)), "cuMemAllocHost (tsattn staging)");
  events_.reserve(static_cast<size_t>(slots));
  try {
    for (int i = 0; i < slots; ++i) {
      CUevent event = nullptr;
      check(cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate (tsattn staging)");
      events_.push_back(event);
    }
  } catch (...) {
    for (CUevent event : events_) cu.cuEventDestroy(event);
    cu.cuMemFreeHost(host_);
    throw;
  }
  current_ = events_.size() - 1;  // the first acquire() takes slot 0
}

StagingRing::~StagingRing() {
  const Api& cu = api();
  // The pinned memory must outlive every copy that reads it.
  for (CUevent event : events_) {
    cu.cuEventSynchronize(event);
    cu.cuEventDestroy(event);
  }
  cu.cuMemFreeHost(host_);
}

void* StagingRing::acquire() {
  current_ = current_ + 1 == events_.size() ? 0 : current_ + 1;
  CUevent event = events_[current_];
  const CUresult done = api().cuEventQuery(event);
  if (done == CUDA_ERROR_NOT_READY)
    check(api().cuEventSynchronize(event), "waiting for a staging slot");
  else
    check(done, "cuEventQuery (staging slot)");
  return static_cast<char*>(host_) + current_ * slot_bytes_;
}

void StagingRing::upload(CUdeviceptr dst, size_t bytes, CUstream stream) {
  const Api& cu = api();
  check(cu.cuMemcpyHtoDAsync(dst, static_cast<char*>(host_) + current_ * slot_bytes_, bytes, stream),
        "uploading host indptrs");
  check(cu.cuEventRecord(events_[current_], stream), "cuEventRecord (staging slot)");
}

}  // namespace tsattn::driver
