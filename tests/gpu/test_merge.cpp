// test_merge.cpp - tsattn::merge_state and tsattn::merge_states on the GPU through the C++ API, against
// a host oracle in double: fresh random inputs, outputs poisoned with NaN, -inf lse on either side and
// both, a lone finite state copied bit for bit, strided views, and a captured CUDA graph.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "common/knobs.hpp"
#include "ref/float_formats.hpp"
#include "support/gpu.hpp"

namespace tsattn::test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t test_seed() {
  const std::string configured = knob_string(Knob::test_seed);
  return configured.empty() ? std::random_device{}() : std::stoull(configured);
}

int element_bytes(tsattn_dtype dtype) { return dtype == TSATTN_DTYPE_FLOAT32 ? 4 : 2; }

// Host values of one dtype, kept as their bytes (what goes to and comes from the GPU).
struct HostValues {
  tsattn_dtype dtype;
  std::vector<uint8_t> bytes;

  HostValues(tsattn_dtype d, size_t count) : dtype(d), bytes(count * element_bytes(d)) {}
  size_t size() const { return bytes.size() / element_bytes(dtype); }
  float get(size_t i) const {
    if (dtype == TSATTN_DTYPE_FLOAT32) {
      float x;
      std::memcpy(&x, &bytes[4 * i], 4);
      return x;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    return dtype == TSATTN_DTYPE_FLOAT16 ? ref::half_to_float(h) : ref::bfloat16_to_float(h);
  }
  void set(size_t i, float x) {
    if (dtype == TSATTN_DTYPE_FLOAT32) {
      std::memcpy(&bytes[4 * i], &x, 4);
      return;
    }
    const uint16_t h = dtype == TSATTN_DTYPE_FLOAT16 ? ref::float_to_half(x) : ref::float_to_bfloat16(x);
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  bool same_bits(size_t i, const HostValues& other, size_t j) const {
    const int b = element_bytes(dtype);
    return std::memcmp(&bytes[b * i], &other.bytes[b * j], b) == 0;
  }
};

// A device copy of host values.
struct DeviceValues {
  DeviceBuffer buffer;
  explicit DeviceValues(const HostValues& host) : buffer(std::max<size_t>(host.bytes.size(), 16)) {
    if (!host.bytes.empty()) buffer.upload(host.bytes.data(), host.bytes.size());
  }
  HostValues download(tsattn_dtype dtype, size_t count) const {
    HostValues host(dtype, count);
    if (count > 0) buffer.download(host.bytes.data(), host.bytes.size());
    return host;
  }
};

HostValues random_v(tsattn_dtype dtype, size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 0.2f);
  HostValues v(dtype, count);
  for (size_t i = 0; i < count; ++i) v.set(i, normal(rng));
  return v;
}

// lse values in [-6, 6], `minus_inf` of them -inf.
HostValues random_s(size_t count, double minus_inf, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-6.0f, 6.0f);
  std::bernoulli_distribution empty(minus_inf);
  HostValues s(TSATTN_DTYPE_FLOAT32, count);
  for (size_t i = 0; i < count; ++i) s.set(i, empty(rng) ? kNegInf : uniform(rng));
  return s;
}

HostValues poison(tsattn_dtype dtype, size_t count) {
  HostValues p(dtype, count);
  for (size_t i = 0; i < count; ++i) p.set(i, std::nanf(""));
  return p;
}

// One item's states as (s_i, pointer to v_i) pairs, merged in double; `lone` is the index of the only
// finite state, or -1.
struct Expected {
  std::vector<double> v;
  double s;
  int lone;
};
Expected merge_on_host(const std::vector<float>& s, const std::vector<std::vector<float>>& v, int head_dim) {
  Expected e{std::vector<double>(head_dim, 0.0), -std::numeric_limits<double>::infinity(), -1};
  double m = -std::numeric_limits<double>::infinity();
  int finite = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != kNegInf) {
      m = std::max(m, static_cast<double>(s[i]));
      ++finite;
      e.lone = static_cast<int>(i);
    }
  if (finite != 1) e.lone = -1;
  if (finite == 0) return e;
  double l = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == kNegInf) continue;
    const double w = std::exp(s[i] - m);
    l += w;
    for (int d = 0; d < head_dim; ++d) e.v[d] += w * v[i][d];
  }
  for (double& x : e.v) x /= l;
  e.s = m + std::log(l);
  return e;
}

// Checks one item against its expectation; returns a description of the first problem, or "".
std::string check_item(const Expected& e, const HostValues& out, size_t out_offset, const HostValues& s_out,
                       size_t s_offset, int head_dim, const HostValues* lone_v, size_t lone_offset,
                       const HostValues* lone_s, size_t lone_s_offset) {
  const double rtol = out.dtype == TSATTN_DTYPE_FLOAT32 ? 1e-5 : (out.dtype == TSATTN_DTYPE_FLOAT16 ? 2e-3 : 1e-2);
  const double atol = out.dtype == TSATTN_DTYPE_FLOAT32 ? 1e-6 : 1e-3;
  for (int d = 0; d < head_dim; ++d) {
    const float got = out.get(out_offset + d);
    if (std::isnan(got) || std::abs(got - e.v[d]) > atol + rtol * std::abs(e.v[d]))
      return "v[" + std::to_string(d) + "] = " + std::to_string(got) + ", want " + std::to_string(e.v[d]);
    if (lone_v != nullptr && !out.same_bits(out_offset + d, *lone_v, lone_offset + d))
      return "v[" + std::to_string(d) + "] is not the lone finite state's, bit for bit";
  }
  const float s = s_out.get(s_offset);
  if (std::isinf(e.s)) return s == kNegInf ? "" : "s = " + std::to_string(s) + ", want -inf";
  if (std::isnan(s) || std::abs(s - e.s) > 1e-5 + 1e-5 * std::abs(e.s))
    return "s = " + std::to_string(s) + ", want " + std::to_string(e.s);
  if (lone_s != nullptr && !s_out.same_bits(s_offset, *lone_s, lone_s_offset))
    return "s is not the lone finite state's, bit for bit";
  return "";
}

// merge_state over [rows, heads, D]; b's v read through a view of every other head of a wider tensor.
void check_merge_state(tsattn_dtype dtype, int64_t rows, int64_t heads, int64_t head_dim, std::mt19937_64& rng,
                       CUstream stream) {
  const size_t items = static_cast<size_t>(rows * heads), n_v = items * head_dim;
  const HostValues v_a = random_v(dtype, n_v, rng), v_b_wide = random_v(dtype, 2 * n_v, rng);
  HostValues s_a = random_s(items, 0.15, rng), s_b = random_s(items, 0.15, rng);
  s_a.set(0, kNegInf);
  s_b.set(0, kNegInf);
  const DeviceValues dv_a(v_a), dv_b(v_b_wide), ds_a(s_a), ds_b(s_b), d_out(poison(dtype, n_v)),
      ds_out(poison(TSATTN_DTYPE_FLOAT32, items));
  const Tensor t_va{dv_a.buffer.data(), dtype, TSATTN_DEVICE_CUDA, 0, {rows, heads, head_dim}, {}};
  const Tensor t_vb{dv_b.buffer.data(),      dtype,
                    TSATTN_DEVICE_CUDA,      0,
                    {rows, heads, head_dim}, {2 * heads * head_dim, 2 * head_dim, 1}};
  const Tensor t_sa{ds_a.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
  const Tensor t_sb{ds_b.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
  const Tensor t_out{d_out.buffer.data(), dtype, TSATTN_DEVICE_CUDA, 0, {rows, heads, head_dim}, {}};
  const Tensor t_sout{ds_out.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
  tsattn::merge_state(t_va, t_sa, t_vb, t_sb, t_out, &t_sout, stream);
  synchronize_device();
  const HostValues out = d_out.download(dtype, n_v), s_out = ds_out.download(TSATTN_DTYPE_FLOAT32, items);
  int problems = 0;
  for (size_t item = 0; item < items && problems < 5; ++item) {
    const size_t row = item / heads, head = item % heads;
    const size_t a_offset = item * head_dim, b_offset = (row * 2 * heads + 2 * head) * head_dim;
    std::vector<std::vector<float>> v(2, std::vector<float>(head_dim));
    for (int64_t d = 0; d < head_dim; ++d) {
      v[0][d] = v_a.get(a_offset + d);
      v[1][d] = v_b_wide.get(b_offset + d);
    }
    const Expected e = merge_on_host({s_a.get(item), s_b.get(item)}, v, static_cast<int>(head_dim));
    const HostValues* lone_v = e.lone == 0 ? &v_a : (e.lone == 1 ? &v_b_wide : nullptr);
    const HostValues* lone_s = e.lone == 0 ? &s_a : (e.lone == 1 ? &s_b : nullptr);
    const std::string problem = check_item(e, out, item * head_dim, s_out, item, static_cast<int>(head_dim), lone_v,
                                           e.lone == 0 ? a_offset : b_offset, lone_s, item);
    if (!problem.empty()) {
      ++problems;
      FAIL_CHECK("merge_state item " << item << " (row " << row << ", head " << head << "): " << problem);
    }
  }
}

// merge_states over v [rows, n, heads, D].
void check_merge_states(tsattn_dtype dtype, int64_t rows, int64_t n, int64_t heads, int64_t head_dim,
                        std::mt19937_64& rng) {
  const size_t items = static_cast<size_t>(rows * heads);
  const HostValues v = random_v(dtype, items * n * head_dim, rng);
  const HostValues s = random_s(items * n, 0.2, rng);
  const DeviceValues dv(v), ds(s), d_out(poison(dtype, items * head_dim)), ds_out(poison(TSATTN_DTYPE_FLOAT32, items));
  const Tensor t_v{dv.buffer.data(), dtype, TSATTN_DEVICE_CUDA, 0, {rows, n, heads, head_dim}, {}};
  const Tensor t_s{ds.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, n, heads}, {}};
  const Tensor t_out{d_out.buffer.data(), dtype, TSATTN_DEVICE_CUDA, 0, {rows, heads, head_dim}, {}};
  const Tensor t_sout{ds_out.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
  tsattn::merge_states(t_v, t_s, t_out, &t_sout);
  synchronize_device();
  const HostValues out = d_out.download(dtype, items * head_dim), s_out = ds_out.download(TSATTN_DTYPE_FLOAT32, items);
  int problems = 0;
  for (size_t item = 0; item < items && problems < 5; ++item) {
    const size_t row = item / heads, head = item % heads;
    std::vector<float> states(n);
    std::vector<std::vector<float>> values(n, std::vector<float>(head_dim));
    for (int64_t i = 0; i < n; ++i) {
      states[i] = s.get((row * n + i) * heads + head);
      for (int64_t d = 0; d < head_dim; ++d) values[i][d] = v.get(((row * n + i) * heads + head) * head_dim + d);
    }
    const Expected e = merge_on_host(states, values, static_cast<int>(head_dim));
    const size_t lone_item = (row * n + std::max(e.lone, 0)) * heads + head;
    const std::string problem =
        check_item(e, out, item * head_dim, s_out, item, static_cast<int>(head_dim), e.lone >= 0 ? &v : nullptr,
                   lone_item * head_dim, e.lone >= 0 ? &s : nullptr, lone_item);
    if (!problem.empty()) {
      ++problems;
      FAIL_CHECK("merge_states n=" << n << " item " << item << ": " << problem);
    }
  }
}

TEST_SUITE("gpu/merge") {
  TEST_CASE("merge_state against the host oracle: dtypes, odd sizes, -inf on either side and both") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    Stream stream;
    for (tsattn_dtype dtype : {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT32})
      for (int64_t rows : {1, 127, 129})
        for (int64_t heads : {1, 32})
          for (int64_t head_dim : {128, 256, 100}) {
            const int dtype_code = dtype;
            CAPTURE(dtype_code);
            CAPTURE(rows);
            CAPTURE(heads);
            CAPTURE(head_dim);
            check_merge_state(dtype, rows, heads, head_dim, rng, stream.get());
          }
  }

  TEST_CASE("merge_states against the host oracle: n = 0, 1, 2, 3, 5") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    for (tsattn_dtype dtype : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT32})
      for (int64_t n : {0, 1, 2, 3, 5}) {
        const int dtype_code = dtype;
        CAPTURE(dtype_code);
        CAPTURE(n);
        check_merge_states(dtype, 129, n, 4, 128, rng);
      }
  }

  TEST_CASE("a merge captured in a CUDA graph replays with the values in memory at replay time") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const int64_t rows = 33, heads = 2, head_dim = 128;
    const size_t items = rows * heads, n_v = items * head_dim;
    HostValues v_a = random_v(TSATTN_DTYPE_BFLOAT16, n_v, rng), v_b = random_v(TSATTN_DTYPE_BFLOAT16, n_v, rng);
    HostValues s_a = random_s(items, 0.0, rng), s_b = random_s(items, 0.0, rng);
    DeviceValues dv_a(v_a), dv_b(v_b), ds_a(s_a), ds_b(s_b), d_out(poison(TSATTN_DTYPE_BFLOAT16, n_v)),
        ds_out(poison(TSATTN_DTYPE_FLOAT32, items));
    const Tensor t_va{dv_a.buffer.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {rows, heads, head_dim}, {}};
    const Tensor t_vb{dv_b.buffer.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {rows, heads, head_dim}, {}};
    const Tensor t_sa{ds_a.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
    const Tensor t_sb{ds_b.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
    const Tensor t_out{d_out.buffer.data(), TSATTN_DTYPE_BFLOAT16, TSATTN_DEVICE_CUDA, 0, {rows, heads, head_dim}, {}};
    const Tensor t_sout{ds_out.buffer.data(), TSATTN_DTYPE_FLOAT32, TSATTN_DEVICE_CUDA, 0, {rows, heads}, {}};
    Stream stream;
    tsattn::merge_state(t_va, t_sa, t_vb, t_sb, t_out, &t_sout, stream.get());  // loads the module first
    stream.synchronize();
    const driver::Api& cu = driver::api();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    driver::check(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    tsattn::merge_state(t_va, t_sa, t_vb, t_sb, t_out, &t_sout, stream.get());
    driver::check(cu.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
    driver::check(cu.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");
    for (int replay = 0; replay < 2; ++replay) {
      s_a = random_s(items, 0.3, rng);
      v_b = random_v(TSATTN_DTYPE_BFLOAT16, n_v, rng);
      ds_a.buffer.upload(s_a.bytes.data(), s_a.bytes.size());
      dv_b.buffer.upload(v_b.bytes.data(), v_b.bytes.size());
      d_out.buffer.upload(poison(TSATTN_DTYPE_BFLOAT16, n_v).bytes.data(), n_v * 2);
      driver::check(cu.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
      stream.synchronize();
      const HostValues out = d_out.download(TSATTN_DTYPE_BFLOAT16, n_v);
      const HostValues s_out = ds_out.download(TSATTN_DTYPE_FLOAT32, items);
      for (size_t item = 0; item < items; ++item) {
        std::vector<std::vector<float>> v(2, std::vector<float>(head_dim));
        for (int64_t d = 0; d < head_dim; ++d) {
          v[0][d] = v_a.get(item * head_dim + d);
          v[1][d] = v_b.get(item * head_dim + d);
        }
        const Expected e = merge_on_host({s_a.get(item), s_b.get(item)}, v, static_cast<int>(head_dim));
        const std::string problem =
            check_item(e, out, item * head_dim, s_out, item, static_cast<int>(head_dim), nullptr, 0, nullptr, 0);
        if (!problem.empty()) FAIL_CHECK("replay " << replay << " item " << item << ": " << problem);
      }
    }
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace tsattn::test
