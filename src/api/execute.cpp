#include "api/execute.hpp"

#include <tsattn/tsattn.hpp>

#include "api/tensor_checks.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn {

void execute(const Problem& p) {
  const driver::Api& cu = driver::api();  // throws with the reason when there is no usable driver
  int device_count = 0;
  driver::check(cu.device_get_count(&device_count), "cuDeviceGetCount");
  if (p.device_id < 0 || p.device_id >= device_count)
    raise(ErrorKind::value, "q is on cuda:{} but this machine has {} CUDA device(s)", p.device_id, device_count);
  // The kernel families (sm80 portable, sm90a Hopper) and the JIT that builds them are not
  // part of this build yet: say so rather than pretend to have computed anything.
  raise(ErrorKind::runtime,
        "tsattn {} has no attention kernels yet (the JIT pipeline and kernel families are still being built); "
        "nothing was computed and out was not written",
        TSATTN_VERSION_STRING);
}

}  // namespace tsattn
