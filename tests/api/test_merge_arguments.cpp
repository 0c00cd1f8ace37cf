// test_merge_arguments.cpp - tsattn_merge_state and tsattn_merge_states without a GPU: one rejection
// per rule of docs/contract.md ("Merging attention states") with its error kind and a message naming
// the argument and the value, the MergeProblem a valid call becomes, and empty merges that return
// without touching the driver.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "api/merge_arguments.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {
namespace {

struct MergeResult {
  tsattn_status status;
  std::string message;
};

// A valid merge_state of fake CUDA tensors (host memory the validator must never read): v_a, v_b
// and out of `v_shape`, s_a, s_b and s_out of v_shape[:-1].
struct MergeStateCall {
  HostTensor v_a_mem, s_a_mem, v_b_mem, s_b_mem, out_mem, s_out_mem;
  Tensor v_a, s_a, v_b, s_b, out, s_out;
  bool pass_s_out = true;
  std::string_view null_argument;

  explicit MergeStateCall(std::vector<int64_t> v_shape = {7, 4, 128}, tsattn_dtype dtype = TSATTN_DTYPE_BFLOAT16) {
    std::vector<int64_t> s_shape(v_shape.begin(), v_shape.end() - 1);
    v_a_mem = HostTensor(dtype, v_shape);
    v_b_mem = HostTensor(dtype, v_shape);
    out_mem = HostTensor(dtype, v_shape);
    s_a_mem = HostTensor(TSATTN_DTYPE_FLOAT32, s_shape);
    s_b_mem = HostTensor(TSATTN_DTYPE_FLOAT32, s_shape);
    s_out_mem = HostTensor(TSATTN_DTYPE_FLOAT32, s_shape);
    v_a = v_a_mem.fake_cuda();
    v_b = v_b_mem.fake_cuda();
    out = out_mem.fake_cuda();
    s_a = s_a_mem.fake_cuda();
    s_b = s_b_mem.fake_cuda();
    s_out = s_out_mem.fake_cuda();
  }

  MergeProblem validate() const {
    const tsattn_tensor_view va = v_a.view(), sa = s_a.view(), vb = v_b.view(), sb = s_b.view(), o = out.view(),
                             so = s_out.view();
    return validate_merge_state({&va, &sa, &vb, &sb, &o, pass_s_out ? &so : nullptr, nullptr});
  }

  MergeResult run() const {
    const tsattn_tensor_view va = v_a.view(), sa = s_a.view(), vb = v_b.view(), sb = s_b.view(), o = out.view(),
                             so = s_out.view();
    auto unless_null = [&](const tsattn_tensor_view& view, const char* name) {
      return null_argument == name ? nullptr : &view;
    };
    const tsattn_status status =
        tsattn_merge_state(unless_null(va, "v_a"), unless_null(sa, "s_a"), unless_null(vb, "v_b"),
                           unless_null(sb, "s_b"), unless_null(o, "out"), pass_s_out ? &so : nullptr, nullptr);
    return {status, tsattn_last_error_message()};
  }
};

// A valid merge_states: v [..., n, H, D], s [..., n, H], out [..., H, D], s_out [..., H].
struct MergeStatesCall {
  HostTensor v_mem, s_mem, out_mem, s_out_mem;
  Tensor v, s, out, s_out;
  bool pass_s_out = true;

  explicit MergeStatesCall(std::vector<int64_t> v_shape = {5, 3, 8, 128}, tsattn_dtype dtype = TSATTN_DTYPE_FLOAT16) {
    const size_t rank = v_shape.size();
    std::vector<int64_t> s_shape(v_shape.begin(), v_shape.end() - 1);
    std::vector<int64_t> out_shape(v_shape.begin(), v_shape.begin() + static_cast<int64_t>(rank) - 3);
    out_shape.push_back(v_shape[rank - 2]);
    std::vector<int64_t> s_out_shape = out_shape;
    out_shape.push_back(v_shape[rank - 1]);
    v_mem = HostTensor(dtype, v_shape);
    s_mem = HostTensor(TSATTN_DTYPE_FLOAT32, s_shape);
    out_mem = HostTensor(dtype, out_shape);
    s_out_mem = HostTensor(TSATTN_DTYPE_FLOAT32, s_out_shape);
    v = v_mem.fake_cuda();
    s = s_mem.fake_cuda();
    out = out_mem.fake_cuda();
    s_out = s_out_mem.fake_cuda();
  }

  MergeProblem validate() const {
    const tsattn_tensor_view vv = v.view(), sv = s.view(), o = out.view(), so = s_out.view();
    return validate_merge_states({&vv, &sv, &o, pass_s_out ? &so : nullptr, nullptr});
  }

  MergeResult run() const {
    const tsattn_tensor_view vv = v.view(), sv = s.view(), o = out.view(), so = s_out.view();
    const tsattn_status status = tsattn_merge_states(&vv, &sv, &o, pass_s_out ? &so : nullptr, nullptr);
    return {status, tsattn_last_error_message()};
  }
};

void shift_data(Tensor& t, int bytes) { t.data = static_cast<std::byte*>(t.data) + bytes; }

constexpr auto kType = TSATTN_ERROR_TYPE;
constexpr auto kValue = TSATTN_ERROR_VALUE;
constexpr auto kNotImpl = TSATTN_ERROR_NOT_IMPLEMENTED;

template <class Call>
struct Rejection {
  const char* rule;
  std::function<void(Call&)> mutate;
  tsattn_status expected;
  std::vector<const char*> message_parts;
};

template <class Call>
void check_rejections(const std::vector<Rejection<Call>>& cases) {
  for (const Rejection<Call>& c : cases) {
    const std::string rule = c.rule;
    CAPTURE(rule);
    Call call;
    c.mutate(call);
    const MergeResult r = call.run();
    CAPTURE(r.message);
    CHECK(r.status == c.expected);
    for (const char* part : c.message_parts) CHECK(r.message.find(part) != std::string::npos);
  }
}

TEST_SUITE("api/merge_arguments") {
  TEST_CASE("merge_state: every rule is rejected with its error kind and a message naming the argument") {
    using C = MergeStateCall;
    const std::vector<Rejection<C>> cases = {
        {"v_a missing", [](C& c) { c.null_argument = "v_a"; }, kValue, {"v_a is required"}},
        {"s_b missing", [](C& c) { c.null_argument = "s_b"; }, kValue, {"s_b is required"}},
        {"out missing", [](C& c) { c.null_argument = "out"; }, kValue, {"out is required"}},
        {"v_a e4m3",
         [](C& c) { c.v_a.dtype = TSATTN_DTYPE_FLOAT8_E4M3FN; },
         kNotImpl,
         {"v_a has dtype float8_e4m3fn; supported: float16, bfloat16, float32"}},
        {"v_a int32", [](C& c) { c.v_a.dtype = TSATTN_DTYPE_INT32; }, kNotImpl, {"v_a has dtype int32"}},
        {"v_b dtype differs",
         [](C& c) { c.v_b.dtype = TSATTN_DTYPE_FLOAT16; },
         kNotImpl,
         {"v_a and v_b must share one dtype", "v_a=bfloat16, v_b=float16"}},
        {"out dtype differs",
         [](C& c) { c.out.dtype = TSATTN_DTYPE_FLOAT32; },
         kValue,
         {"out has dtype float32", "v_a's dtype, bfloat16"}},
        {"s_a float16",
         [](C& c) { c.s_a.dtype = TSATTN_DTYPE_FLOAT16; },
         kType,
         {"s_a has dtype float16; it must be float32"}},
        {"s_b bfloat16", [](C& c) { c.s_b.dtype = TSATTN_DTYPE_BFLOAT16; }, kType, {"s_b has dtype bfloat16"}},
        {"s_out float64", [](C& c) { c.s_out.dtype = TSATTN_DTYPE_FLOAT64; }, kType, {"s_out has dtype float64"}},
        {"v_a 1-D",
         [](C& c) {
           c.v_a.shape = {128};
           c.v_b.shape = {128};
           c.out.shape = {128};
         },
         kValue,
         {"v_a must be [..., H, D], at least 2-D (got shape [128])"}},
        {"v_b shape differs",
         [](C& c) {
           c.v_b.shape = {7, 2, 128};
         },
         kValue,
         {"v_b.shape=[7, 2, 128] must equal v_a.shape=[7, 4, 128]"}},
        {"out shape differs",
         [](C& c) {
           c.out.shape = {7, 4, 64};
         },
         kValue,
         {"out.shape=[7, 4, 64] must equal"}},
        {"s_a shape",
         [](C& c) {
           c.s_a.shape = {7, 3};
         },
         kValue,
         {"s_a.shape=[7, 3] must be v_a.shape[:-1]=[7, 4]"}},
        {"s_b shape with D",
         [](C& c) {
           c.s_b.shape = {7, 4, 1};
         },
         kValue,
         {"s_b.shape=[7, 4, 1] must be"}},
        {"s_out shape", [](C& c) { c.s_out.shape = {4}; }, kValue, {"s_out.shape=[4] must be v_a.shape[:-1]"}},
        {"v_a on the host",
         [](C& c) { c.v_a.device_type = TSATTN_DEVICE_CPU; },
         kValue,
         {"v_a must be a CUDA tensor (got cpu)"}},
        {"s_b on another GPU",
         [](C& c) { c.s_b.device_id = 1; },
         kValue,
         {"s_b is on cuda:1 but v_a is on cuda:0; all tensors must share one device"}},
        {"s_out pinned host",
         [](C& c) { c.s_out.device_type = TSATTN_DEVICE_CUDA_HOST; },
         kValue,
         {"s_out must be a CUDA tensor"}},
        {"D not contiguous",
         [](C& c) {
           c.v_b_mem = HostTensor(TSATTN_DTYPE_BFLOAT16, {7, 4, 128}, 7 * 4 * 128);
           c.v_b = c.v_b_mem.fake_cuda();
           c.v_b.strides = {1024, 256, 2};
         },
         kValue,
         {"v_b.stride(2)=2: the head dimension must be contiguous (stride 1)"}},
        {"negative stride",
         [](C& c) {
           c.out.strides = {-512, 128, 1};
         },
         kValue,
         {"out.strides=[-512, 128, 1]: negative strides are not supported"}},
        {"v_a not element aligned", [](C& c) { shift_data(c.v_a, 1); }, kValue, {"is not 2-byte aligned (bfloat16)"}},
        {"s_b not 4-byte aligned", [](C& c) { shift_data(c.s_b, 2); }, kValue, {"s_b.data is not 4-byte aligned"}},
        {"out is v_a", [](C& c) { c.out.data = c.v_a.data; }, kValue, {"out overlaps v_a"}},
        {"s_out is s_b", [](C& c) { c.s_out.data = c.s_b.data; }, kValue, {"s_out overlaps s_b"}},
        {"s_out inside out", [](C& c) { c.s_out.data = c.out.data; }, kValue, {"s_out overlaps out"}},
        {"out writes rows twice",
         [](C& c) {
           c.out.strides = {0, 128, 1};
         },
         kValue,
         {"out with shape [7, 4, 128] and strides [0, 128, 1] has overlapping elements"}},
        {"D too large for int bytes",
         [](C& c) {
           for (Tensor* t : {&c.v_a, &c.v_b, &c.out}) t->shape = {0, 4, int64_t{1} << 30};
           for (Tensor* t : {&c.s_a, &c.s_b, &c.s_out}) t->shape = {0, 4};
         },
         kValue,
         {"v_a: head_dim=1073741824 (2147483648 bytes a row) is too large"}},
        {"extents overflow int64",
         [](C& c) {
           c.v_a.shape = {int64_t{1} << 40, int64_t{1} << 40, 128};
         },
         kValue,
         {"v_a.shape=", "overflows int64"}},
    };
    check_rejections(cases);
  }

  TEST_CASE("merge_states: its own shape rules, the dtype rules of merge_state") {
    using C = MergeStatesCall;
    const std::vector<Rejection<C>> cases = {
        {"v 2-D",
         [](C& c) {
           c.v.shape = {8, 128};
           c.s.shape = {8};
         },
         kValue,
         {"v must be [..., n, H, D], at least 3-D (got shape [8, 128])"}},
        {"v e4m3", [](C& c) { c.v.dtype = TSATTN_DTYPE_FLOAT8_E4M3FN; }, kNotImpl, {"v has dtype float8_e4m3fn"}},
        {"s float16",
         [](C& c) { c.s.dtype = TSATTN_DTYPE_FLOAT16; },
         kType,
         {"s has dtype float16; it must be float32"}},
        {"out dtype", [](C& c) { c.out.dtype = TSATTN_DTYPE_BFLOAT16; }, kValue, {"out has dtype bfloat16", "float16"}},
        {"s shape",
         [](C& c) {
           c.s.shape = {5, 3, 7};
         },
         kValue,
         {"s.shape=[5, 3, 7] must be v.shape[:-1]=[5, 3, 8]"}},
        {"out keeps the states axis",
         [](C& c) {
           c.out.shape = {5, 3, 8, 128};
         },
         kValue,
         {"out.shape=[5, 3, 8, 128] must be v.shape[:-3] + v.shape[-2:]=[5, 8, 128]"}},
        {"s_out shape",
         [](C& c) {
           c.s_out.shape = {5, 8, 1};
         },
         kValue,
         {"s_out.shape=[5, 8, 1] must be v.shape[:-3] + v.shape[-2:-1]=[5, 8]"}},
        {"s on the host",
         [](C& c) { c.s.device_type = TSATTN_DEVICE_CPU; },
         kValue,
         {"s must be a CUDA tensor (got cpu)"}},
        {"2^31 items",
         [](C& c) {
           c.v.shape = {int64_t{1} << 16, 0, int64_t{1} << 15, 0};
           c.s.shape = {int64_t{1} << 16, 0, int64_t{1} << 15};
           c.out.shape = {int64_t{1} << 16, int64_t{1} << 15, 0};
           c.pass_s_out = false;
         },
         kValue,
         {"v.shape=[65536, 0, 32768, 0] has more than 2^31-1 rows x heads to merge"}},
        {"item extents overflow int64 (caught on out)",
         [](C& c) {
           c.v.shape = {int64_t{1} << 40, 0, int64_t{1} << 40, 0};
           c.s.shape = {int64_t{1} << 40, 0, int64_t{1} << 40};
           c.out.shape = {int64_t{1} << 40, int64_t{1} << 40, 0};
           c.pass_s_out = false;
         },
         kValue,
         {"out.shape=[1099511627776, 1099511627776, 0]", "overflows int64"}},
        {"out overlaps v", [](C& c) { c.out.data = c.v.data; }, kValue, {"out overlaps v"}},
        {"s_out overlaps s", [](C& c) { c.s_out.data = c.s.data; }, kValue, {"s_out overlaps s"}},
    };
    check_rejections(cases);
  }

  TEST_CASE("the C++ layer throws tsattn::Error with the kind") {
    MergeStatesCall call;
    call.s.dtype = TSATTN_DTYPE_INT32;
    try {
      tsattn::merge_states(call.v, call.s, call.out, &call.s_out);
      FAIL("no exception");
    } catch (const tsattn::Error& e) {
      CHECK(e.kind() == ErrorKind::type);
      CHECK(std::string(e.what()).find("s has dtype int32") != std::string::npos);
    }
    MergeStateCall pair;
    pair.v_b.device_id = 2;
    CHECK_THROWS_WITH_AS(tsattn::merge_state(pair.v_a, pair.s_a, pair.v_b, pair.s_b, pair.out),
                         doctest::Contains("v_b is on cuda:2"), tsattn::Error);
  }

  TEST_CASE("merges with nothing to write return at once, with or without a GPU") {
    // No rows: nothing is launched, so not even the driver is needed (these views are fake).
    MergeStateCall no_rows({0, 4, 128});
    MergeResult r = no_rows.run();
    CHECK(r.status == TSATTN_OK);
    CHECK(r.message.empty());
    MergeStatesCall no_heads({3, 2, 0, 256}, TSATTN_DTYPE_FLOAT32);
    CHECK(no_heads.run().status == TSATTN_OK);
    // D = 0 without s_out: nothing to write either.
    MergeStatesCall no_dim({3, 2, 4, 0}, TSATTN_DTYPE_BFLOAT16);
    no_dim.pass_s_out = false;
    CHECK(no_dim.run().status == TSATTN_OK);
    CHECK(no_dim.validate().writes_nothing());
    no_dim.pass_s_out = true;
    CHECK_FALSE(no_dim.validate().writes_nothing());  // the lse still has to be written
  }

  TEST_CASE("a valid merge_state becomes its item dims, strides and two states") {
    MergeStateCall call({2, 7, 4, 128}, TSATTN_DTYPE_FLOAT32);
    call.v_b_mem = HostTensor(TSATTN_DTYPE_FLOAT32, {2, 7, 4, 128}, 2 * 7 * 4 * 128);
    call.v_b = call.v_b_mem.fake_cuda();
    call.v_b.strides = {7 * 8 * 128, 8 * 128, 256, 1};  // every other head of a wider tensor
    const MergeProblem p = call.validate();
    CHECK(p.dtype == TSATTN_DTYPE_FLOAT32);
    CHECK(p.shape == Dims{2, 7, 4});
    CHECK(p.items() == 56);
    CHECK(p.head_dim == 128);
    CHECK(p.num_states == 2);
    CHECK(p.v_first.data == call.v_a.data);
    CHECK(p.v_first.strides == Dims{7 * 4 * 128, 4 * 128, 128});
    CHECK(p.v_rest.data == call.v_b.data);
    CHECK(p.v_rest.strides == Dims{7 * 8 * 128, 8 * 128, 256});
    CHECK(p.s_first.strides == Dims{28, 4, 1});
    CHECK(p.s_out.data == call.s_out.data);
    call.pass_s_out = false;
    const MergeProblem without = call.validate();
    CHECK(without.s_out.data == nullptr);
    CHECK(without.s_out.strides == Dims{0, 0, 0});
  }

  TEST_CASE("a valid merge_states reads state i >= 1 from state 1 on, one state stride apart") {
    MergeStatesCall call({5, 3, 8, 128}, TSATTN_DTYPE_BFLOAT16);
    const MergeProblem p = call.validate();
    CHECK(p.shape == Dims{5, 8});
    CHECK(p.num_states == 3);
    CHECK(p.v_first.strides == Dims{3 * 8 * 128, 128});
    CHECK(p.v_state_stride == 8 * 128);
    CHECK(p.s_first.strides == Dims{24, 1});
    CHECK(p.s_state_stride == 8);
    CHECK(static_cast<const std::byte*>(p.v_rest.data) == static_cast<const std::byte*>(call.v.data) + 8 * 128 * 2);
    CHECK(static_cast<const std::byte*>(p.s_rest.data) == static_cast<const std::byte*>(call.s.data) + 8 * 4);
    CHECK(p.out.strides == Dims{8 * 128, 128});
    // One state: nothing past state 0 is ever addressed.
    MergeStatesCall one({5, 1, 8, 128}, TSATTN_DTYPE_BFLOAT16);
    const MergeProblem q = one.validate();
    CHECK(q.num_states == 1);
    CHECK(q.v_rest.data == one.v.data);
    // No leading dims: v [n, H, D] has the heads as its only item dim.
    MergeStatesCall plain({3, 8, 64});
    CHECK(plain.validate().shape == Dims{8});
  }
}

}  // namespace
}  // namespace tsattn::test
