// device_context.hpp - which CUDA context a call runs in, and what its device offers.
//
// Work runs on the caller's stream, so it must run in that stream's context: kernels loaded in
// another context cannot be launched on it. A null stream (the legacy default stream) means the
// calling thread's current context, or the device's primary context (what PyTorch uses) when the
// thread has none.
#pragma once

#include <cuda.h>

#include <optional>
#include <string>

namespace tsattn::driver {

struct DeviceInfo {
  int ordinal = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;
  int max_shared_per_block_optin = 0;  // bytes a kernel may opt into
  std::string name;
};

// Cached per device; throws Error(runtime) without a usable driver, Error(value) for a bad ordinal.
const DeviceInfo& device_info(int ordinal);

// Makes `context` current for its lifetime and restores the previous one afterwards (a plan's
// runs: their context is known, so only the push is left).
class CurrentContext {
 public:
  explicit CurrentContext(CUcontext context);
  ~CurrentContext();
  CurrentContext(const CurrentContext&) = delete;
  CurrentContext& operator=(const CurrentContext&) = delete;

 private:
  bool pushed_ = false;
};

// Makes the context of `stream` (or of device_ordinal, for a null stream) current for its
// lifetime and restores the previous one afterwards. Throws Error(value) when the stream's
// context belongs to another device than the tensors.
class ContextScope {
 public:
  ContextScope(CUstream stream, int device_ordinal);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  CUcontext context() const { return context_; }
  const DeviceInfo& device() const { return device_; }

 private:
  const DeviceInfo& device_;
  CUcontext context_ = nullptr;
  std::optional<CurrentContext> current_;
};

}  // namespace tsattn::driver
