// plan_case.hpp - what the plan tests on the GPU share: a plan's settings, one run's device
// tensors (fresh random inputs, two poisoned outputs: the run's and the one-shot call's), the
// one-shot call on them and the bit-for-bit comparison of the two outputs.
#pragma once

#include <tsattn/tsattn.hpp>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/gpu.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {

struct PlanCase {
  bool packed = false;
  int64_t batch_size = 4;  // capacities
  int64_t max_q = 256;
  int64_t max_kv = 512;
  int num_qo_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 128;
  tsattn_dtype input = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype output = TSATTN_DTYPE_BFLOAT16;
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;

  PlanOptions options() const;
  std::string describe() const;
};

// Per-request lengths of a run; in the fixed layout every request has q[0] queries and kv[0] keys.
struct Lengths {
  std::vector<int32_t> q, kv;
  std::string describe() const;
};

// Random lengths within c's capacities: 1..batch_size requests (some empty when packed), causal ones
// with Sq <= Sk.
Lengths random_lengths(const PlanCase& c, std::mt19937_64& rng);

// The device tensors of one run of c with lengths l.
class RunData {
 public:
  RunData(const PlanCase& c, const Lengths& l, std::mt19937_64& rng);

  // Both outputs filled with 0xFF bytes: NaN in every output dtype.
  void poison();
  // New indptr values (same totals) into the host and device indptrs.
  void set_indptrs(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv);
  // The plan's run into out_run (device or host indptrs), not synchronized.
  tsattn_status run(const BatchPrefillTSWrapper& wrapper, bool device_indptrs, CUstream stream, bool validate = true,
                    std::string* message = nullptr);
  // The one-shot call into out_shot.
  tsattn_status one_shot(bool device_indptrs, CUstream stream, std::string* message = nullptr);
  // After a synchronization: out_run and out_shot are byte-identical and no element is left poisoned.
  void check_identical(const std::string& what) const;
  // Elements of out_run still poisoned.
  int64_t poisoned_run_elements() const;

  const PlanCase& plan_case() const { return c_; }
  Tensor q, k, v, out_run, out_shot, qo_host, kv_host, qo_device, kv_device, starts, ends;

 private:
  PlanCase c_;
  std::vector<DeviceBuffer> buffers_;
  HostTensor qo_, kv_;
  DeviceBuffer& buffer_for(Tensor& t, int64_t elements, tsattn_dtype dtype, std::vector<int64_t> shape);
  // The indptr a call of this case takes: none (fixed), the device or the host one.
  const Tensor* indptr(const Tensor& device, const Tensor& host, bool device_indptrs) const;
};

}  // namespace tsattn::test
