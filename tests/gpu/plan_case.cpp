#include "gpu/plan_case.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "api/dtype.hpp"
#include "ref/random_inputs.hpp"

namespace tsattn::test {

PlanOptions PlanCase::options() const {
  PlanOptions o;
  o.packed = packed;
  o.batch_size = batch_size;
  o.max_seq_len_q = max_q;
  o.max_kv_len = max_kv;
  o.num_qo_heads = num_qo_heads;
  o.num_kv_heads = num_kv_heads;
  o.head_dim = head_dim;
  o.q_dtype = o.kv_dtype = input;
  o.out_dtype = output;
  o.mask = mask;
  o.window_left = window_left;
  return o;
}

std::string PlanCase::describe() const {
  return fmt::format("{} plan B<={} Sq<={} Sk<={} Hq={} Hkv={} D={} in={} out={} mask={} window={}",
                     packed ? "packed" : "fixed", batch_size, max_q, max_kv, num_qo_heads, num_kv_heads, head_dim,
                     dtype_name(input), dtype_name(output), static_cast<int>(mask), window_left);
}

std::string Lengths::describe() const { return fmt::format("q_lens={} kv_lens={}", q, kv); }

Lengths random_lengths(const PlanCase& c, std::mt19937_64& rng) {
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const auto batch = static_cast<size_t>(uniform(1, c.batch_size));
  const bool causal = c.mask == TSATTN_MASK_CAUSAL;
  Lengths l;
  const auto one = [&](bool may_be_empty) {
    auto q = static_cast<int32_t>(may_be_empty && uniform(0, 5) == 0 ? 0 : uniform(1, c.max_q));
    auto kv = static_cast<int32_t>(may_be_empty && uniform(0, 6) == 0 ? 0 : uniform(1, c.max_kv));
    if (causal) kv = static_cast<int32_t>(uniform(std::min<int64_t>(q, c.max_kv), c.max_kv));
    if (causal && q > kv) q = kv;
    l.q.push_back(q);
    l.kv.push_back(kv);
  };
  if (c.packed) {
    for (size_t b = 0; b < batch; ++b) one(true);
  } else {
    one(false);
    l.q.resize(batch, l.q[0]);
    l.kv.resize(batch, l.kv[0]);
  }
  return l;
}

DeviceBuffer& RunData::buffer_for(Tensor& t, int64_t elements, tsattn_dtype dtype, std::vector<int64_t> shape) {
  DeviceBuffer& b = buffers_.emplace_back(static_cast<size_t>(std::max<int64_t>(elements, 1)) * dtype_size(dtype));
  t = Tensor{b.data(), dtype, TSATTN_DEVICE_CUDA, 0, std::move(shape), {}};
  return b;
}

RunData::RunData(const PlanCase& c, const Lengths& l, std::mt19937_64& rng) : c_(c) {
  buffers_.reserve(11);
  const auto batch = static_cast<int64_t>(l.q.size());
  const int64_t total_q = std::accumulate(l.q.begin(), l.q.end(), int64_t{0});
  const int64_t total_k = std::accumulate(l.kv.begin(), l.kv.end(), int64_t{0});
  const int64_t d = c.head_dim;
  const auto shape = [&](int64_t tokens_packed, int64_t tokens_fixed, int64_t heads) {
    return c.packed ? std::vector<int64_t>{tokens_packed, heads, d}
                    : std::vector<int64_t>{batch, tokens_fixed, heads, d};
  };
  const int64_t q_rows = c.packed ? total_q : batch * l.q[0];
  const int64_t kv_rows = c.packed ? total_k : batch * l.kv[0];
  const auto random_tensor = [&](Tensor& t, int64_t rows, int64_t heads, std::vector<int64_t> s) {
    const int64_t elements = rows * heads * d;
    DeviceBuffer& b = buffer_for(t, elements, c.input, std::move(s));
    std::vector<std::byte> host(static_cast<size_t>(std::max<int64_t>(elements, 1)) * dtype_size(c.input));
    ref::fill_normal(c.input, host.data(), elements, ref::input_stddev(c.input), rng);
    b.upload(host.data(), host.size());
  };
  random_tensor(q, q_rows, c.num_qo_heads, shape(total_q, l.q[0], c.num_qo_heads));
  random_tensor(k, kv_rows, c.num_kv_heads, shape(total_k, l.kv[0], c.num_kv_heads));
  random_tensor(v, kv_rows, c.num_kv_heads, shape(total_k, l.kv[0], c.num_kv_heads));
  buffer_for(out_run, q_rows * c.num_qo_heads * d, c.output, q.shape);
  buffer_for(out_shot, q_rows * c.num_qo_heads * d, c.output, q.shape);

  std::vector<int32_t> qo{0}, kv{0};
  for (size_t b = 0; b < l.q.size(); ++b) {
    qo.push_back(qo.back() + l.q[b]);
    kv.push_back(kv.back() + l.kv[b]);
  }
  qo_ = int32_tensor(qo);
  kv_ = int32_tensor(kv);
  qo_host = qo_.tensor;
  kv_host = kv_.tensor;
  buffer_for(qo_device, batch + 1, TSATTN_DTYPE_INT32, {batch + 1});
  buffer_for(kv_device, batch + 1, TSATTN_DTYPE_INT32, {batch + 1});
  set_indptrs(qo, kv);

  if (c.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    // Mostly valid inclusive windows, some out of range or inverted: both calls clamp them alike.
    const std::vector<int64_t> bounds_shape =
        c.packed ? std::vector<int64_t>{total_q} : std::vector<int64_t>{batch, l.q[0]};
    std::vector<int32_t> s(static_cast<size_t>(std::max<int64_t>(q_rows, 1))), e(s.size());
    const int32_t keys = std::max(1, *std::max_element(l.kv.begin(), l.kv.end()));
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = std::uniform_int_distribution<int32_t>(-3, keys)(rng);
      e[i] = std::uniform_int_distribution<int32_t>(s[i] - 2, keys + 3)(rng);
    }
    buffer_for(starts, q_rows, TSATTN_DTYPE_INT32, bounds_shape).upload(s.data(), s.size() * sizeof(int32_t));
    buffer_for(ends, q_rows, TSATTN_DTYPE_INT32, bounds_shape).upload(e.data(), e.size() * sizeof(int32_t));
  }
}

void RunData::poison() {
  for (const Tensor* out : {&out_run, &out_shot})
    for (DeviceBuffer& b : buffers_)
      if (b.data() == out->data) b.fill_bytes(0xFF);
}

void RunData::set_indptrs(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv) {
  std::copy(qo.begin(), qo.end(), qo_.as<int32_t>());
  std::copy(kv.begin(), kv.end(), kv_.as<int32_t>());
  for (DeviceBuffer& b : buffers_) {
    if (b.data() == qo_device.data) b.upload(qo.data(), qo.size() * sizeof(int32_t));
    if (b.data() == kv_device.data) b.upload(kv.data(), kv.size() * sizeof(int32_t));
  }
}

namespace {

// The status and message of a C++ call that may throw tsattn::Error.
template <class Call>
tsattn_status status_of(Call&& call, std::string* message) {
  try {
    call();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return static_cast<tsattn_status>(e.kind());
  }
  return TSATTN_OK;
}

}  // namespace

const Tensor* RunData::indptr(const Tensor& device, const Tensor& host, bool device_indptrs) const {
  return c_.packed ? (device_indptrs ? &device : &host) : nullptr;
}

tsattn_status RunData::run(const BatchPrefillTSWrapper& wrapper, bool device_indptrs, CUstream stream, bool validate,
                           std::string* message) {
  RunOptions o;
  o.stream = stream;
  o.validate = validate;
  if (c_.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    o.variable_window_token_starts = &starts;
    o.variable_window_token_ends = &ends;
  }
  return status_of(
      [&] {
        wrapper.run(q, k, v, out_run, o, indptr(qo_device, qo_host, device_indptrs),
                    indptr(kv_device, kv_host, device_indptrs));
      },
      message);
}

tsattn_status RunData::one_shot(bool device_indptrs, CUstream stream, std::string* message) {
  PrefillOptions o;
  o.mask = c_.mask;
  o.window_left = c_.window_left;
  o.out_dtype = c_.output;
  o.stream = stream;
  if (c_.mask == TSATTN_MASK_VARIABLE_WINDOW) {
    o.variable_window_token_starts = &starts;
    o.variable_window_token_ends = &ends;
  }
  return status_of(
      [&] {
        batch_prefill(q, k, v, out_shot, o, indptr(qo_device, qo_host, device_indptrs),
                      indptr(kv_device, kv_host, device_indptrs));
      },
      message);
}

namespace {

std::vector<std::byte> download(const std::vector<DeviceBuffer>& buffers, const Tensor& t) {
  for (const DeviceBuffer& b : buffers)
    if (b.data() == t.data) {
      std::vector<std::byte> bytes(b.size());
      b.download(bytes.data(), bytes.size());
      return bytes;
    }
  FAIL("no buffer");
  return {};
}

int64_t poisoned_elements(const std::vector<std::byte>& bytes, int element_bytes, int64_t elements) {
  int64_t poisoned = 0;
  for (int64_t i = 0; i < elements; ++i) {
    bool all_ones = true;
    for (int j = 0; j < element_bytes; ++j)
      all_ones = all_ones && bytes[static_cast<size_t>(i * element_bytes + j)] == std::byte{0xFF};
    poisoned += all_ones;
  }
  return poisoned;
}

int64_t elements_of(const Tensor& t) {
  return std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1}, std::multiplies<>());
}

}  // namespace

void RunData::check_identical(const std::string& what) const {
  const std::vector<std::byte> run = download(buffers_, out_run), shot = download(buffers_, out_shot);
  const int64_t elements = elements_of(out_run);
  const size_t bytes = static_cast<size_t>(elements) * dtype_size(c_.output);
  INFO(what);
  size_t first = 0;
  while (first < bytes && run[first] == shot[first]) ++first;
  INFO("first differing byte: ", first, " of ", bytes);
  CHECK(first == bytes);
  CHECK(poisoned_elements(run, dtype_size(c_.output), elements) == 0);
}

int64_t RunData::poisoned_run_elements() const {
  return poisoned_elements(download(buffers_, out_run), dtype_size(c_.output), elements_of(out_run));
}

}  // namespace tsattn::test
