// attention_case.hpp - batch_prefill calls on the GPU checked against the CPU oracle.
//
// Fresh random inputs (0.2*randn, 0.125*randn for fp8) on every run, `out` poisoned with NaN
// bytes first, every element checked for being written, errors measured against the fp64
// oracle with docs/contract.md's tolerances for the least precise of the input and output dtypes.
#pragma once

#include <tsattn/tsattn.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ref/compare.hpp"
#include "support/gpu.hpp"

namespace tsattn::test {

struct AttentionCase {
  bool packed = false;
  // Per request. Fixed layout: every entry equal (Sq, Sk of all B requests).
  std::vector<int32_t> q_lens{128};
  std::vector<int32_t> kv_lens{128};
  int num_qo_heads = 4;
  int num_kv_heads = 4;
  int head_dim = 128;
  tsattn_dtype input_dtype = TSATTN_DTYPE_BFLOAT16;
  tsattn_dtype output_dtype = TSATTN_DTYPE_BFLOAT16;
  // The variable-window mask draws its bounds at random, some out of range or inverted on purpose.
  tsattn_mask_type mask = TSATTN_MASK_DENSE;
  int64_t window_left = -1;
  std::optional<double> sm_scale;
  double output_scale = 1.0;
  // q, k, v as head slices of one fused [tokens, Hq + 2*Hkv, D] projection (needs Sq == Sk).
  bool fused_qkv = false;
  // Packed layout: hand the indptrs over in device memory instead of host memory.
  bool device_indptr = false;
  // Give every size-1 dimension of q, k, v and out (but d) an odd stride: valid per the contract, since
  // such a stride never multiplies a non-zero index.
  bool odd_unit_strides = false;
  // Packed layout: fill every V row of this request with NaN, and leave that request's output
  // rows out of the comparison. The other requests must come out exact: a kernel that reads a
  // neighbour's rows in a shared tile must not let them reach its own result (p = 0 times NaN).
  int nan_v_request = -1;

  std::string describe() const;
};

struct CaseOutcome {
  tsattn_status status = TSATTN_OK;
  std::string message;  // the library's error, if any
  ref::Comparison comparison;

  bool passed() const { return status == TSATTN_OK && comparison.passed(); }
};

// One case's tensors on the host (for the oracle) and on the device (for tsattn), reusable
// across calls: graph tests capture call() once and replay it after refresh().
class PreparedCase {
 public:
  PreparedCase(const AttentionCase& c, std::mt19937_64& rng);
  ~PreparedCase();
  PreparedCase(const PreparedCase&) = delete;
  PreparedCase& operator=(const PreparedCase&) = delete;

  // New random inputs uploaded in place; with resplit (packed layout), new request lengths with
  // the same totals (and new variable-window bounds), written into the same indptr storage.
  void refresh(std::mt19937_64& rng, bool resplit);
  void poison_output();
  // Overwrites the device copies of the indptrs (B+1 values each) behind the library's back, as
  // a caller could under graph capture where nothing is validated on the host.
  void write_device_indptrs(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv);
  // The library call on `stream` (nullptr: legacy default stream); does not synchronize.
  tsattn_status call(CUstream stream, std::string* message);
  // Synchronizes, downloads out and compares it with the oracle for the current inputs.
  ref::Comparison check();
  const AttentionCase& current() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Runs c once on `stream` (nullptr: legacy default stream) and compares with the oracle.
CaseOutcome run_attention_case(const AttentionCase& c, std::mt19937_64& rng, CUstream stream = nullptr);

}  // namespace tsattn::test
