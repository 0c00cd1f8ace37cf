#include "gpu/attention_case.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

  void upload() {
    device = DeviceBuffer(host.bytes);
    device.upload(host.storage.get(), host.bytes);
  }
  // A view of the same elements as `view_of_host` (which points into host), on the device.
  Tensor device_view(const Tensor& view_of_host) const {
    Tensor t = view_of_host;
    t.data = static_cast<std::byte*>(device.data()) +
             (static_cast<std::byte*>(view_of_host.data) - host.storage.get());
    t.device_type = TSATTN_DEVICE_CUDA;
    t.device_id = 0;
    return t;
  }
};

void fill_random(HostTensor& t, std::mt19937_64& rng) {
  const tsattn_dtype dtype = t.tensor.dtype;
  ref::fill_normal(dtype, t.storage.get(), static_cast<int64_t>(t.bytes) / dtype_size(dtype), ref::input_stddev(dtype), rng);
}

// Mostly valid inclusive windows, with out-of-range and inverted ones mixed in: the SPEC says
// those must clamp (and an empty range gives 0), never fault.
void fill_bounds(int32_t* starts, int32_t* ends, int64_t rows, int32_t kv_len, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  for (int64_t i = 0; i < rows; ++i) {
    const int kind = pick(rng);
    if (kv_len > 0 && kind < 8) {
      std::uniform_int_distribution<int32_t> first(0, kv_len - 1);
      const int32_t s = first(rng);
      std::uniform_int_distribution<int32_t> last(s, kv_len - 1);
      starts[i] = s;
      ends[i] = last(rng);
    } else {
      std::uniform_int_distribution<int32_t> wild(-5, kv_len + 5);
      starts[i] = wild(rng);
      ends[i] = wild(rng);
    }
  }
}

}  // namespace

std::string AttentionCase::describe() const {
  std::string window = mask == TSATTN_MASK_CAUSAL && window_left >= 1 ? fmt::format("+window{}", window_left) : "";
  const char* mask_text = mask == TSATTN_MASK_DENSE ? "dense" : (mask == TSATTN_MASK_CAUSAL ? "causal" : "varwin");
  return fmt::format("{} q_lens=[{}] kv_lens=[{}] heads={}/{} D={} {}->{} {}{}{}{}{}{}", packed ? "packed" : "fixed",
                     fmt::join(q_lens, ","), fmt::join(kv_lens, ","), num_qo_heads, num_kv_heads, head_dim,
                     dtype_name(input_dtype), dtype_name(output_dtype), mask_text, window,
                     sm_scale ? fmt::format(" sm_scale={}", *sm_scale) : "",
                     output_scale != 1.0 ? fmt::format(" output_scale={}", output_scale) : "",
                     fused_qkv ? " fused-qkv" : "", device_indptr ? " gpu-indptr" : "");
}

CaseOutcome run_attention_case(const AttentionCase& c, std::mt19937_64& rng, CUstream stream) {
  const int64_t batch = static_cast<int64_t>(c.q_lens.size());
  const int64_t total_q = std::accumulate(c.q_lens.begin(), c.q_lens.end(), int64_t{0});
  const int64_t total_k = std::accumulate(c.kv_lens.begin(), c.kv_lens.end(), int64_t{0});
  const int64_t hq = c.num_qo_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const int64_t sq = c.packed ? 0 : c.q_lens.at(0), sk = c.packed ? 0 : c.kv_lens.at(0);
  auto token_shape = [&](int64_t tokens_packed, int64_t tokens_fixed, int64_t heads) {
    return c.packed ? std::vector<int64_t>{tokens_packed, heads, d} : std::vector<int64_t>{batch, tokens_fixed, heads, d};
  };

  // Inputs: three tensors, or three head slices of one fused projection.
  std::vector<Mirrored> inputs;
  Tensor q_view, k_view, v_view;
  if (c.fused_qkv) {
    const int64_t heads = hq + 2 * hkv;
    Mirrored& qkv = inputs.emplace_back();
    qkv.host = HostTensor(c.input_dtype, token_shape(total_q, sq, heads));
    fill_random(qkv.host, rng);
    const std::vector<int64_t> strides = compact_strides(qkv.host.tensor.shape);
    const int64_t element = dtype_size(c.input_dtype);
    auto slice = [&](int64_t first_head, int64_t count) {
      Tensor t = qkv.host.tensor;
      t.shape[t.shape.size() - 2] = count;
      t.strides = strides;
      t.data = qkv.host.storage.get() + first_head * d * element;
      return t;
    };
    q_view = slice(0, hq);
    k_view = slice(hq, hkv);
    v_view = slice(hq + hkv, hkv);
  } else {
    for (auto [view, shape] : {std::pair{&q_view, token_shape(total_q, sq, hq)},
                               std::pair{&k_view, token_shape(total_k, sk, hkv)},
                               std::pair{&v_view, token_shape(total_k, sk, hkv)}}) {
      Mirrored& m = inputs.emplace_back();
      m.host = HostTensor(c.input_dtype, shape);
      fill_random(m.host, rng);
      *view = m.host.tensor;
    }
  }
  Mirrored out;
  out.host = HostTensor(c.output_dtype, token_shape(total_q, sq, hq));

  std::vector<int32_t> qo{0}, kv{0};
  for (int64_t b = 0; b < batch; ++b) {
    qo.push_back(qo.back() + c.q_lens[b]);
    kv.push_back(kv.back() + c.kv_lens[b]);
  }
  Mirrored qo_indptr{int32_tensor(qo), {}}, kv_indptr{int32_tensor(kv), {}};
  Mirrored starts, ends;
  if (c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    const std::vector<int64_t> shape = c.packed ? std::vector<int64_t>{total_q} : std::vector<int64_t>{batch, sq};
    starts.host = HostTensor(TSATTN_DTYPE_INT32, shape);
    ends.host = HostTensor(TSATTN_DTYPE_INT32, shape);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t row0 = c.packed ? qo[b] : b * sq;
      fill_bounds(starts.host.as<int32_t>() + row0, ends.host.as<int32_t>() + row0, c.q_lens[b], c.kv_lens[b], rng);
    }
  }

  tsattn_prefill_options options;
  tsattn_prefill_options_init(&options);
  options.mask_type = c.mask;
  options.window_left = c.window_left;
  options.has_sm_scale = c.sm_scale.has_value();
  options.sm_scale = c.sm_scale.value_or(0.0);
  options.output_scale = c.output_scale;
  options.stream = stream;

  // The oracle, through the same validation as the library call.
  std::vector<float> expected;
  {
    const tsattn_tensor_view qv = q_view.view(), kvw = k_view.view(), vv = v_view.view(), ov = out.host.tensor.view();
    const tsattn_tensor_view qo_v = qo_indptr.host.tensor.view(), kv_v = kv_indptr.host.tensor.view();
    const tsattn_tensor_view sv = starts.host.tensor.view(), ev = ends.host.tensor.view();
    tsattn_prefill_options host_options = options;
    if (c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
      host_options.variable_window_token_starts = &sv;
      host_options.variable_window_token_ends = &ev;
    }
    const Arguments args{&qv, &kvw, &vv, c.packed ? &qo_v : nullptr, c.packed ? &kv_v : nullptr, &host_options, &ov};
    expected = ref::reference_prefill(validate_arguments(args, Residency::host), ref::Accumulation::fp64);
  }

  // The library call on the GPU.
  for (Mirrored& m : inputs) m.upload();
  out.upload();
  out.device.fill_bytes(0xFF);  // NaN in float16, bfloat16 and float8_e4m3fn alike
  const Tensor q_dev = inputs.front().device_view(q_view);
  const Tensor k_dev = inputs[c.fused_qkv ? 0 : 1].device_view(k_view);
  const Tensor v_dev = inputs[c.fused_qkv ? 0 : 2].device_view(v_view);
  const Tensor out_dev = out.device_view(out.host.tensor);
  Tensor qo_t = qo_indptr.host.tensor, kv_t = kv_indptr.host.tensor;
  if (c.device_indptr) {
    qo_indptr.upload();
    kv_indptr.upload();
    qo_t = qo_indptr.device_view(qo_t);
    kv_t = kv_indptr.device_view(kv_t);
  }
  Tensor starts_dev, ends_dev;
  tsattn_tensor_view starts_view{}, ends_view{};
  if (c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    starts.upload();
    ends.upload();
    starts_dev = starts.device_view(starts.host.tensor);
    ends_dev = ends.device_view(ends.host.tensor);
    starts_view = starts_dev.view();
    ends_view = ends_dev.view();
    options.variable_window_token_starts = &starts_view;
    options.variable_window_token_ends = &ends_view;
  }
  const tsattn_tensor_view qv = q_dev.view(), kvw = k_dev.view(), vv = v_dev.view(), ov = out_dev.view();
  const tsattn_tensor_view qo_v = qo_t.view(), kv_v = kv_t.view();

  CaseOutcome outcome;
  outcome.status =
      tsattn_batch_prefill(&qv, &kvw, &vv, c.packed ? &qo_v : nullptr, c.packed ? &kv_v : nullptr, &options, &ov);
  outcome.message = tsattn_last_error_message();
  if (stream) driver::check(driver::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
  synchronize_device();
  if (outcome.status != TSATTN_OK) return outcome;

  out.device.download(out.host.storage.get(), out.host.bytes);
  outcome.comparison = ref::compare_output(c.output_dtype, out.host.storage.get(), expected, c.num_qo_heads,
                                           c.head_dim, ref::tolerance_for(c.input_dtype, c.output_dtype));
  return outcome;
}

}  // namespace tsattn::test
