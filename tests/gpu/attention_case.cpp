#include "gpu/attention_case.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "api/dtype.hpp"
#include "api/validate.hpp"
#include "ref/random_inputs.hpp"
#include "ref/reference.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {

namespace {

// A host tensor and its device twin with identical bytes; views into either share offsets.
struct Mirrored {
  HostTensor host;
  DeviceBuffer device;

  void allocate_device() { device = DeviceBuffer(host.bytes); }
  void upload() { device.upload(host.storage.get(), host.bytes); }
  // The same elements as `view_of_host` (which points into host), on the device.
  Tensor device_view(const Tensor& view_of_host) const {
    Tensor t = view_of_host;
    t.data = static_cast<std::byte*>(device.data()) + (static_cast<std::byte*>(view_of_host.data) - host.storage.get());
    t.device_type = TSATTN_DEVICE_CUDA;
    t.device_id = 0;
    return t;
  }
};

void fill_random(HostTensor& t, std::mt19937_64& rng) {
  const tsattn_dtype dtype = t.tensor.dtype;
  ref::fill_normal(dtype, t.storage.get(), static_cast<int64_t>(t.bytes) / dtype_size(dtype), ref::input_stddev(dtype),
                   rng);
}

// Mostly valid inclusive windows, with out-of-range and inverted ones mixed in: the contract says
// those must clamp (and an empty range gives 0), never fault.
void fill_bounds(int32_t* starts, int32_t* ends, int64_t rows, int32_t kv_len, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  for (int64_t i = 0; i < rows; ++i) {
    if (kv_len > 0 && pick(rng) < 8) {
      const int32_t s = std::uniform_int_distribution<int32_t>(0, kv_len - 1)(rng);
      starts[i] = s;
      ends[i] = std::uniform_int_distribution<int32_t>(s, kv_len - 1)(rng);
    } else {
      std::uniform_int_distribution<int32_t> wild(-5, kv_len + 5);
      starts[i] = wild(rng);
      ends[i] = wild(rng);
    }
  }
}

// Odd strides (3, 5, 7) on every size-1 dimension but the last.
void give_unit_dims_odd_strides(Tensor& t) {
  if (t.strides.empty()) t.strides = compact_strides(t.shape);
  for (size_t i = 0; i + 1 < t.shape.size(); ++i)
    if (t.shape[i] == 1) t.strides[i] = static_cast<int64_t>(2 * i + 3);
}

// A random split of `total` into `parts` non-negative lengths.
std::vector<int32_t> random_split(int64_t total, size_t parts, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, total};
  for (size_t i = 1; i < parts; ++i) cuts.push_back(std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> lengths;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) lengths.push_back(static_cast<int32_t>(cuts[i + 1] - cuts[i]));
  return lengths;
}

}  // namespace

std::string AttentionCase::describe() const {
  std::string window = mask == TSATTN_MASK_CAUSAL && window_left >= 1 ? fmt::format("+window{}", window_left) : "";
  const char* mask_text = mask == TSATTN_MASK_DENSE ? "dense" : (mask == TSATTN_MASK_CAUSAL ? "causal" : "varwin");
  return fmt::format("{} q_lens=[{}] kv_lens=[{}] heads={}/{} D={} {}->{} {}{}{}{}{}{}{}", packed ? "packed" : "fixed",
                     fmt::join(q_lens, ","), fmt::join(kv_lens, ","), num_qo_heads, num_kv_heads, head_dim,
                     dtype_name(input_dtype), dtype_name(output_dtype), mask_text, window,
                     sm_scale ? fmt::format(" sm_scale={}", *sm_scale) : "",
                     output_scale != 1.0 ? fmt::format(" output_scale={}", output_scale) : "",
                     fused_qkv ? " fused-qkv" : "", device_indptr ? " gpu-indptr" : "",
                     odd_unit_strides ? " odd-unit-strides" : "") +
         (nan_v_request >= 0 ? fmt::format(" nan-v-request={}", nan_v_request) : "");
}

struct PreparedCase::State {
  AttentionCase c;
  std::vector<Mirrored> inputs;   // q, k, v, or one fused qkv
  Tensor q_view, k_view, v_view;  // into inputs' host storage
  Mirrored out, qo_indptr, kv_indptr, starts, ends;
  tsattn_prefill_options options{};
  tsattn_tensor_view starts_view{}, ends_view{};

  int64_t total(const std::vector<int32_t>& lens) const {
    return std::accumulate(lens.begin(), lens.end(), int64_t{0});
  }

  void write_lengths(std::mt19937_64& rng) {
    int32_t* qo = qo_indptr.host.as<int32_t>();
    int32_t* kv = kv_indptr.host.as<int32_t>();
    qo[0] = kv[0] = 0;
    for (size_t b = 0; b < c.q_lens.size(); ++b) {
      qo[b + 1] = qo[b] + c.q_lens[b];
      kv[b + 1] = kv[b] + c.kv_lens[b];
    }
    if (c.mask != TSATTN_MASK_VARIABLE_WINDOW) return;
    const int64_t sq = c.q_lens[0];
    for (size_t b = 0; b < c.q_lens.size(); ++b) {
      const int64_t row0 = c.packed ? qo[b] : static_cast<int64_t>(b) * sq;
      fill_bounds(starts.host.as<int32_t>() + row0, ends.host.as<int32_t>() + row0, c.q_lens[b], c.kv_lens[b], rng);
    }
  }

  // NaN bits of a 16- or 8-bit float (e4m3 has no infinity; NaN is what a 0 weight cannot cancel).
  static uint16_t nan_bits(tsattn_dtype dtype) {
    return dtype == TSATTN_DTYPE_BFLOAT16 ? 0x7FC0 : (dtype == TSATTN_DTYPE_FLOAT16 ? 0x7E00 : 0x7F);
  }

  // Every element of V's rows of request nan_v_request (packed, compact V) becomes NaN.
  void write_nan_v_rows() {
    const int b = c.nan_v_request;
    const int64_t row_elements = int64_t{c.num_kv_heads} * c.head_dim;
    const int32_t* kv = kv_indptr.host.as<int32_t>();
    const size_t bytes = dtype_size(c.input_dtype);
    auto* base = static_cast<std::byte*>(v_view.data);
    const uint16_t nan = nan_bits(c.input_dtype);
    for (int64_t e = kv[b] * row_elements; e < kv[b + 1] * row_elements; ++e)
      std::memcpy(base + e * bytes, &nan, bytes);
  }

  // Output rows of request nan_v_request: zeroed in both results, so the comparison skips them.
  void forget_nan_request_rows(std::vector<float>& expected) {
    const int b = c.nan_v_request;
    const int64_t row_elements = int64_t{c.num_qo_heads} * c.head_dim;
    const int32_t* qo = qo_indptr.host.as<int32_t>();
    const size_t bytes = dtype_size(c.output_dtype);
    std::fill(expected.begin() + qo[b] * row_elements, expected.begin() + qo[b + 1] * row_elements, 0.0f);
    std::memset(out.host.storage.get() + qo[b] * row_elements * bytes, 0,
                static_cast<size_t>((qo[b + 1] - qo[b]) * row_elements) * bytes);
  }

  void upload_all() {
    for (Mirrored& m : inputs) m.upload();
    for (Mirrored* m : {&qo_indptr, &kv_indptr}) m->upload();
    if (c.mask == TSATTN_MASK_VARIABLE_WINDOW)
      for (Mirrored* m : {&starts, &ends}) m->upload();
  }
};

PreparedCase::PreparedCase(const AttentionCase& c, std::mt19937_64& rng) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.c = c;
  // The NaN rows are written into a compact packed V and skipped in a compact packed out.
  REQUIRE((c.nan_v_request < 0 ||
           (c.packed && !c.fused_qkv && !c.odd_unit_strides && c.nan_v_request < static_cast<int>(c.q_lens.size()))));
  const int64_t batch = static_cast<int64_t>(c.q_lens.size());
  const int64_t total_q = s.total(c.q_lens), total_k = s.total(c.kv_lens);
  const int64_t hq = c.num_qo_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const int64_t sq = c.packed ? 0 : c.q_lens.at(0), sk = c.packed ? 0 : c.kv_lens.at(0);
  auto token_shape = [&](int64_t tokens_packed, int64_t tokens_fixed, int64_t heads) {
    return c.packed ? std::vector<int64_t>{tokens_packed, heads, d}
                    : std::vector<int64_t>{batch, tokens_fixed, heads, d};
  };

  // Inputs: three tensors, or three head slices of one fused projection.
  if (c.fused_qkv) {
    Mirrored& qkv = s.inputs.emplace_back();
    qkv.host = HostTensor(c.input_dtype, token_shape(total_q, sq, hq + 2 * hkv));
    const std::vector<int64_t> strides = compact_strides(qkv.host.tensor.shape);
    auto slice = [&](int64_t first_head, int64_t count) {
      Tensor t = qkv.host.tensor;
      t.shape[t.shape.size() - 2] = count;
      t.strides = strides;
      t.data = qkv.host.storage.get() + first_head * d * dtype_size(c.input_dtype);
      return t;
    };
    s.q_view = slice(0, hq);
    s.k_view = slice(hq, hkv);
    s.v_view = slice(hq + hkv, hkv);
  } else {
    for (auto [view, shape] :
         {std::pair{&s.q_view, token_shape(total_q, sq, hq)}, std::pair{&s.k_view, token_shape(total_k, sk, hkv)},
          std::pair{&s.v_view, token_shape(total_k, sk, hkv)}}) {
      Mirrored& m = s.inputs.emplace_back();
      m.host = HostTensor(c.input_dtype, shape);
      *view = m.host.tensor;
    }
  }
  s.out.host = HostTensor(c.output_dtype, token_shape(total_q, sq, hq));
  if (c.odd_unit_strides)
    for (Tensor* t : {&s.q_view, &s.k_view, &s.v_view, &s.out.host.tensor}) give_unit_dims_odd_strides(*t);
  s.qo_indptr.host = HostTensor(TSATTN_DTYPE_INT32, {batch + 1});
  s.kv_indptr.host = HostTensor(TSATTN_DTYPE_INT32, {batch + 1});
  if (c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    const std::vector<int64_t> shape = c.packed ? std::vector<int64_t>{total_q} : std::vector<int64_t>{batch, sq};
    s.starts.host = HostTensor(TSATTN_DTYPE_INT32, shape);
    s.ends.host = HostTensor(TSATTN_DTYPE_INT32, shape);
  }
  for (Mirrored& m : s.inputs) m.allocate_device();
  for (Mirrored* m : {&s.out, &s.qo_indptr, &s.kv_indptr, &s.starts, &s.ends}) m->allocate_device();

  tsattn_prefill_options_init(&s.options);
  s.options.mask_type = c.mask;
  s.options.window_left = c.window_left;
  s.options.has_sm_scale = c.sm_scale.has_value();
  s.options.sm_scale = c.sm_scale.value_or(0.0);
  s.options.output_scale = c.output_scale;
  refresh(rng, false);
}

PreparedCase::~PreparedCase() = default;

const AttentionCase& PreparedCase::current() const { return state_->c; }

void PreparedCase::refresh(std::mt19937_64& rng, bool resplit) {
  State& s = *state_;
  for (Mirrored& m : s.inputs) fill_random(m.host, rng);
  if (resplit && s.c.packed) {
    s.c.q_lens = random_split(s.total(s.c.q_lens), s.c.q_lens.size(), rng);
    s.c.kv_lens = random_split(s.total(s.c.kv_lens), s.c.kv_lens.size(), rng);
  }
  s.write_lengths(rng);
  if (s.c.nan_v_request >= 0) s.write_nan_v_rows();
  s.upload_all();
}

void PreparedCase::write_device_indptrs(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv) {
  state_->qo_indptr.device.upload(qo.data(), qo.size() * sizeof(int32_t));
  state_->kv_indptr.device.upload(kv.data(), kv.size() * sizeof(int32_t));
}

void PreparedCase::poison_output() { state_->out.device.fill_bytes(0xFF); }  // NaN in all three dtypes

tsattn_status PreparedCase::call(CUstream stream, std::string* message) {
  State& s = *state_;
  const Tensor q = s.inputs.front().device_view(s.q_view);
  const Tensor k = s.inputs[s.c.fused_qkv ? 0 : 1].device_view(s.k_view);
  const Tensor v = s.inputs[s.c.fused_qkv ? 0 : 2].device_view(s.v_view);
  const Tensor out = s.out.device_view(s.out.host.tensor);
  const Tensor qo = s.c.device_indptr ? s.qo_indptr.device_view(s.qo_indptr.host.tensor) : s.qo_indptr.host.tensor;
  const Tensor kv = s.c.device_indptr ? s.kv_indptr.device_view(s.kv_indptr.host.tensor) : s.kv_indptr.host.tensor;
  tsattn_prefill_options options = s.options;
  options.stream = stream;
  Tensor starts, ends;
  if (s.c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    starts = s.starts.device_view(s.starts.host.tensor);
    ends = s.ends.device_view(s.ends.host.tensor);
    s.starts_view = starts.view();
    s.ends_view = ends.view();
    options.variable_window_token_starts = &s.starts_view;
    options.variable_window_token_ends = &s.ends_view;
  }
  const tsattn_tensor_view qv = q.view(), kvw = k.view(), vv = v.view(), ov = out.view(), qov = qo.view(),
                           kvv = kv.view();
  const tsattn_status status =
      tsattn_batch_prefill(&qv, &kvw, &vv, s.c.packed ? &qov : nullptr, s.c.packed ? &kvv : nullptr, &options, &ov);
  if (message) *message = tsattn_last_error_message();
  return status;
}

ref::Comparison PreparedCase::check() {
  State& s = *state_;
  synchronize_device();
  // The oracle, through the same validation as the library call, on the host copies.
  const tsattn_tensor_view qv = s.q_view.view(), kvw = s.k_view.view(), vv = s.v_view.view(),
                           ov = s.out.host.tensor.view(), qov = s.qo_indptr.host.tensor.view(),
                           kvv = s.kv_indptr.host.tensor.view(), sv = s.starts.host.tensor.view(),
                           ev = s.ends.host.tensor.view();
  tsattn_prefill_options host_options = s.options;
  if (s.c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    host_options.variable_window_token_starts = &sv;
    host_options.variable_window_token_ends = &ev;
  }
  const Arguments args{&qv, &kvw, &vv, s.c.packed ? &qov : nullptr, s.c.packed ? &kvv : nullptr, &host_options, &ov};
  std::vector<float> expected = ref::reference_prefill(validate_arguments(args, Residency::host));
  s.out.device.download(s.out.host.storage.get(), s.out.host.bytes);
  if (s.c.nan_v_request >= 0) s.forget_nan_request_rows(expected);
  return ref::compare_output(s.c.output_dtype, s.out.host.storage.get(), expected, s.c.num_qo_heads, s.c.head_dim,
                             ref::tolerance_for(s.c.input_dtype, s.c.output_dtype));
}

CaseOutcome run_attention_case(const AttentionCase& c, std::mt19937_64& rng, CUstream stream) {
  PreparedCase prepared(c, rng);
  prepared.poison_output();
  CaseOutcome outcome;
  outcome.status = prepared.call(stream, &outcome.message);
  if (outcome.status == TSATTN_OK) outcome.comparison = prepared.check();
  return outcome;
}

}  // namespace tsattn::test
