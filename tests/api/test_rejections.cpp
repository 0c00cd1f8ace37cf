// test_rejections.cpp - one case per rule of docs/contract.md: the C API returns the rule's error kind and a
// message naming the argument and the offending value.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "api/call_builder.hpp"

namespace tsattn::test {
namespace {

enum class Start { fixed, packed };

struct RejectionCase {
  const char* rule;
  Start start;
  std::function<void(CallBuilder&)> mutate;
  tsattn_status expected;
  std::vector<const char*> message_parts;  // the argument's name and the offending value
};

// Packed start: three requests, the middle one empty, lengths valid for the causal mask.
CallBuilder start_call(Start start) {
  return start == Start::fixed ? CallBuilder::fixed() : CallBuilder::packed({5, 0, 7}, {9, 3, 7});
}

constexpr auto kType = TSATTN_ERROR_TYPE;
constexpr auto kValue = TSATTN_ERROR_VALUE;
constexpr auto kNotImpl = TSATTN_ERROR_NOT_IMPLEMENTED;
constexpr double kInf = std::numeric_limits<double>::infinity();

void shift_data(Tensor& t, int bytes) { t.data = static_cast<std::byte*>(t.data) + bytes; }

constexpr int64_t k2Pow16 = int64_t{1} << 16, k2Pow25 = int64_t{1} << 25, k2Pow32 = int64_t{1} << 32;
constexpr int64_t k2Pow62 = int64_t{1} << 62;

const std::vector<RejectionCase>& rejection_cases() {
  static const std::vector<RejectionCase> cases = {
      // Presence and layout selection.
      {"q missing", Start::fixed, [](CallBuilder& c) { c.null_argument = "q"; }, kValue, {"q is required"}},
      {"k missing", Start::fixed, [](CallBuilder& c) { c.null_argument = "k"; }, kValue, {"k is required"}},
      {"v missing", Start::fixed, [](CallBuilder& c) { c.null_argument = "v"; }, kValue, {"v is required"}},
      {"out missing", Start::fixed, [](CallBuilder& c) { c.null_argument = "out"; }, kValue, {"out is required"}},
      {"qo_indptr alone",
       Start::packed,
       [](CallBuilder& c) { c.kv_indptr.reset(); },
       kValue,
       {"qo_indptr and kv_indptr must be given together", "only qo_indptr"}},
      {"kv_indptr alone", Start::packed, [](CallBuilder& c) { c.qo_indptr.reset(); }, kValue, {"only kv_indptr"}},

      // Dtypes.
      {"q float32",
       Start::fixed,
       [](CallBuilder& c) { c.q.dtype = TSATTN_DTYPE_FLOAT32; },
       kNotImpl,
       {"q has dtype float32"}},
      {"q int8", Start::fixed, [](CallBuilder& c) { c.q.dtype = TSATTN_DTYPE_INT8; }, kNotImpl, {"q has dtype int8"}},
      {"k dtype differs",
       Start::fixed,
       [](CallBuilder& c) { c.k.dtype = TSATTN_DTYPE_FLOAT16; },
       kNotImpl,
       {"share one dtype", "k=float16"}},
      {"v dtype differs",
       Start::fixed,
       [](CallBuilder& c) { c.v.dtype = TSATTN_DTYPE_FLOAT8_E4M3FN; },
       kNotImpl,
       {"v=float8_e4m3fn"}},
      {"out float32",
       Start::fixed,
       [](CallBuilder& c) { c.out.dtype = TSATTN_DTYPE_FLOAT32; },
       kNotImpl,
       {"out has dtype float32"}},
      {"out_dtype unsupported",
       Start::fixed,
       [](CallBuilder& c) { c.options.out_dtype = TSATTN_DTYPE_FLOAT64; },
       kNotImpl,
       {"out_dtype=float64"}},
      {"out_dtype differs from out",
       Start::fixed,
       [](CallBuilder& c) { c.options.out_dtype = TSATTN_DTYPE_FLOAT16; },
       kValue,
       {"out_dtype=float16", "out.dtype=bfloat16"}},

      // Devices.
      {"q on cpu",
       Start::fixed,
       [](CallBuilder& c) { c.q.device_type = TSATTN_DEVICE_CPU; },
       kValue,
       {"q must be a CUDA tensor", "cpu"}},
      {"k on another gpu", Start::fixed, [](CallBuilder& c) { c.k.device_id = 1; }, kValue, {"k is on cuda:1"}},
      {"out on another gpu", Start::fixed, [](CallBuilder& c) { c.out.device_id = 3; }, kValue, {"out is on cuda:3"}},

      // Ranks and shapes.
      {"fixed q rank 3",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.shape = {32, 8, 128};
         c.out.shape = c.q.shape;
       },
       kValue,
       {"q must be 4-D", "[32, 8, 128]"}},
      {"fixed k rank 5",
       Start::fixed,
       [](CallBuilder& c) { c.k.shape.insert(c.k.shape.begin(), 1); },
       kValue,
       {"k must be 4-D"}},
      {"packed q rank 4",
       Start::packed,
       [](CallBuilder& c) { c.q.shape.insert(c.q.shape.begin(), 1); },
       kValue,
       {"q must be 3-D", "packed"}},
      {"v shape differs",
       Start::fixed,
       [](CallBuilder& c) { c.v.shape[1] = 31; },
       kValue,
       {"v.shape=[2, 31, 2, 128]", "k.shape=[2, 32, 2, 128]"}},
      {"lse float16",
       Start::fixed,
       [](CallBuilder& c) { c.set_lse(TSATTN_DTYPE_FLOAT16); },
       TSATTN_ERROR_TYPE,
       {"lse has dtype float16", "float32"}},
      {"lse shape of out",
       Start::fixed,
       [](CallBuilder& c) { c.set_lse(TSATTN_DTYPE_FLOAT32, c.out.shape); },
       kValue,
       {"lse.shape=[2, 16, 8, 128]", "[2, 16, 8]", "[B, Sq, Hq]"}},
      {"packed lse with a batch dimension",
       Start::packed,
       [](CallBuilder& c) {
         c.set_lse(TSATTN_DTYPE_FLOAT32, {1, c.q.shape[0], c.q.shape[1]});
       },
       kValue,
       {"lse.shape=[1, 12, 8]", "[total_q, Hq]"}},
      {"lse inside out",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_lse();
         c.lse->data = c.out.data;
       },
       kValue,
       {"lse overlaps out"}},
      {"out shape differs",
       Start::fixed,
       [](CallBuilder& c) { c.out.shape[2] = 4; },
       kValue,
       {"out.shape=[2, 16, 4, 128]"}},
      {"head dims differ",
       Start::fixed,
       [](CallBuilder& c) {
         c.k.shape[3] = 64;
         c.v.shape[3] = 64;
       },
       kValue,
       {"q.shape[-1]=128", "k.shape[-1]=64"}},
      {"head dim 64",
       Start::fixed,
       [](CallBuilder& c) {
         for (Tensor* t : {&c.q, &c.k, &c.v, &c.out}) t->shape[3] = 64;
       },
       kNotImpl,
       {"head_dim=64"}},
      {"Hq not a multiple of Hkv",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.shape[2] = 6;
         c.out.shape[2] = 6;
         c.k.shape[2] = 4;
         c.v.shape[2] = 4;
       },
       kValue,
       {"Hq=q.shape[2]=6", "Hkv=k.shape[2]=4"}},
      {"zero kv heads",
       Start::fixed,
       [](CallBuilder& c) {
         c.k.shape[2] = 0;
         c.v.shape[2] = 0;
       },
       kValue,
       {"head counts", "Hkv=k.shape[2]=0"}},
      {"batch sizes differ",
       Start::fixed,
       [](CallBuilder& c) {
         c.k.shape[0] = 3;
         c.v.shape[0] = 3;
       },
       kValue,
       {"q.shape[0]=2", "k.shape[0]=3"}},
      {"negative extent",
       Start::fixed,
       [](CallBuilder& c) { c.q.shape[1] = -1; },
       kValue,
       {"q.shape=[2, -1, 8, 128]", "negative"}},
      {"too many tokens",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.shape = {4096, 1 << 20, 8, 128};
         c.out.shape = c.q.shape;
         c.k.shape = {4096, 32, 2, 128};
         c.v.shape = c.k.shape;
       },
       kValue,
       {"too many tokens", "4294967296 query rows"}},

      // Strides, alignment, memory.
      {"head dim not contiguous",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.strides = {2 * 16 * 8 * 256, 8 * 256, 256, 2};
       },
       kValue,
       {"q.stride(3)=2"}},
      {"misaligned base pointer",
       Start::fixed,
       [](CallBuilder& c) { shift_data(c.k, 2); },
       kValue,
       {"k.data=", "16-byte aligned"}},
      {"token stride breaks alignment",
       Start::fixed,
       [](CallBuilder& c) {
         c.v.strides = {32 * 256, 256, 129, 1};
       },
       kValue,
       {"v.stride(2)=129"}},
      {"negative stride",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.strides = {16 * 8 * 128, -8 * 128, 128, 1};
       },
       kValue,
       {"q.strides=", "negative"}},
      {"null data", Start::fixed, [](CallBuilder& c) { c.v.data = nullptr; }, kValue, {"v.data is null"}},
      {"out writes an element twice",
       Start::fixed,
       [](CallBuilder& c) {
         c.out.strides = {16 * 128, 128, 0, 1};
       },
       kValue,
       {"out", "overlapping"}},
      {"out overlaps q", Start::fixed, [](CallBuilder& c) { c.out.data = c.q.data; }, kValue, {"out overlaps q"}},
      {"out overlaps v partially",
       Start::fixed,
       [](CallBuilder& c) { c.out.data = static_cast<std::byte*>(c.v.data) + 1024; },
       kValue,
       {"out overlaps"}},

      // Views whose sizes overflow int64 (a wrapped element count of 0 would skip every memory check).
      {"q element count is 2^64 (2^16 per dim)",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.shape = {k2Pow16, k2Pow16, k2Pow16, k2Pow16};
         c.q.strides = {1, 1, 1, 1};
       },
       kValue,
       {"q.shape=[65536, 65536, 65536, 65536] with q.strides=[1, 1, 1, 1] overflows int64",
        "the element count (the product of the extents) is not representable"}},
      {"q and out element counts are 2^64 with broadcast strides",
       Start::fixed,
       [](CallBuilder& c) {
         for (Tensor* t : {&c.q, &c.out}) {
           t->shape = {k2Pow32, k2Pow25, 1, 128};
           t->strides = {0, 0, 128, 1};
         }
       },
       kValue,
       {"q.shape=[4294967296, 33554432, 1, 128] with q.strides=[0, 0, 128, 1] overflows int64", "the element count"}},
      {"compact q with 2^71 elements",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.shape = {k2Pow32, k2Pow32, 1, 128};
         c.out.shape = c.q.shape;
       },
       kValue,
       {"q.shape=[4294967296, 4294967296, 1, 128] with q.strides=NULL (compact) overflows int64", "the element count"}},
      {"empty compact q whose strides overflow",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.shape = {0, k2Pow32, k2Pow32, 128};
         c.out.shape = c.q.shape;
       },
       kValue,
       {"q.shape=[0, 4294967296, 4294967296, 128]", "overflows int64", "a compact stride"}},
      {"k extent times stride overflows",
       Start::fixed,
       [](CallBuilder& c) {
         c.k.strides = {k2Pow62, 256, 128, 1};
         c.k.shape[0] = 3;
       },
       kValue,
       {"k.shape=[3, 32, 2, 128] with k.strides=[4611686018427387904, 256, 128, 1] overflows int64",
        "the largest element offset"}},
      {"v offsets sum past int64",
       Start::fixed,
       [](CallBuilder& c) {
         c.v.shape = {2, 2, 2, 128};
         c.v.strides = {k2Pow62, k2Pow62, 128, 1};
       },
       kValue,
       {"v.shape=[2, 2, 2, 128]", "overflows int64", "the largest element offset"}},
      {"q byte span overflows",
       Start::fixed,
       [](CallBuilder& c) {
         c.q.strides = {k2Pow62, 8 * 128, 128, 1};
       },
       kValue,
       {"q.shape=[2, 16, 8, 128] with q.strides=[4611686018427387904, 1024, 128, 1] overflows int64", "the byte span"}},
      {"out runs past the end of the address space",
       Start::fixed,
       [](CallBuilder& c) { c.out.data = reinterpret_cast<void*>(~uintptr_t{15}); },
       kValue,
       {"out.data=0xfffffffffffffff0 with a span of 65536 bytes runs past the end of the address space"}},
      {"kv_indptr element count is 2^64",
       Start::packed,
       [](CallBuilder& c) {
         c.kv_indptr->shape = {k2Pow32, k2Pow32};
         c.kv_indptr->strides = {0, 1};
       },
       kValue,
       {"kv_indptr.shape=[4294967296, 4294967296]", "overflows int64", "the element count"}},
      {"bounds element count is 2^64",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.ends->shape = {k2Pow32, k2Pow32};
         c.ends->strides = {0, 0};
       },
       kValue,
       {"variable_window_token_ends.shape=[4294967296, 4294967296]", "overflows int64", "the element count"}},

      // Options: mask, window, scales, struct size.
      {"unknown mask", Start::fixed, [](CallBuilder& c) { c.options.mask_type = 7; }, kValue, {"mask_type=7"}},
      {"window 0",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.mask_type = TSATTN_MASK_CAUSAL;
         c.options.window_left = 0;
       },
       kValue,
       {"window_left=0", "use -1"}},
      {"window below -1", Start::fixed, [](CallBuilder& c) { c.options.window_left = -5; }, kValue, {"window_left=-5"}},
      {"window without causal",
       Start::fixed,
       [](CallBuilder& c) { c.options.window_left = 128; },
       kValue,
       {"window_left=128", "mask_type='causal'", "'dense'"}},
      {"window with variable window",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.options.window_left = 4;
       },
       kValue,
       {"window_left=4", "variable_window"}},
      {"causal Sq > Sk fixed",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.mask_type = TSATTN_MASK_CAUSAL;
         for (Tensor* t : {&c.k, &c.v}) t->shape[1] = 8;
       },
       kValue,
       {"Sq=q.shape[1]=16", "Sk=k.shape[1]=8"}},
      {"causal Sq > Sk in one request",
       Start::packed,
       [](CallBuilder& c) {
         c.options.mask_type = TSATTN_MASK_CAUSAL;
         c.set_indptrs({0, 5, 5, 12}, {0, 9, 14, 19});
       },
       kValue,
       {"request 2", "Sq=7", "Sk=5"}},
      {"sm_scale nan",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.has_sm_scale = 1;
         c.options.sm_scale = std::nan("");
       },
       kValue,
       {"sm_scale=nan"}},
      {"sm_scale negative",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.has_sm_scale = 1;
         c.options.sm_scale = -0.5;
       },
       kValue,
       {"sm_scale=-0.5"}},
      {"sm_scale zero",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.has_sm_scale = 1;
         c.options.sm_scale = 0;
       },
       kValue,
       {"sm_scale=0"}},
      {"sm_scale underflows float32",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.has_sm_scale = 1;
         c.options.sm_scale = 1e-50;
       },
       kValue,
       {"sm_scale=1e-50", "float32"}},
      {"sm_scale overflows exp2 scaling",
       Start::fixed,
       [](CallBuilder& c) {
         c.options.has_sm_scale = 1;
         c.options.sm_scale = 3e38;
       },
       kValue,
       {"sm_scale=3e+38", "too large"}},
      {"output_scale inf",
       Start::fixed,
       [](CallBuilder& c) { c.options.output_scale = kInf; },
       kValue,
       {"output_scale=inf"}},
      {"output_scale overflows float32",
       Start::fixed,
       [](CallBuilder& c) { c.options.output_scale = 1e39; },
       kValue,
       {"output_scale=1e+39", "float32"}},
      {"options too small",
       Start::fixed,
       [](CallBuilder& c) { c.options.struct_size = 8; },
       kValue,
       {"options.struct_size=8"}},
      {"options from a newer library",
       Start::fixed,
       [](CallBuilder& c) { c.options.struct_size = sizeof(tsattn_prefill_options) + 8; },
       kNotImpl,
       {"options.struct_size=", "newer"}},

      // Variable-window bounds.
      {"variable window without ends",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.ends.reset();
       },
       kValue,
       {"variable_window_token_ends", "missing"}},
      {"variable window without bounds",
       Start::fixed,
       [](CallBuilder& c) { c.options.mask_type = TSATTN_MASK_VARIABLE_WINDOW; },
       kValue,
       {"variable_window_token_starts", "missing: both"}},
      {"bounds with the causal mask",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.options.mask_type = TSATTN_MASK_CAUSAL;
       },
       kValue,
       {"variable_window_token_starts is only allowed", "'causal'"}},
      {"bounds int64",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.starts->dtype = TSATTN_DTYPE_INT64;
       },
       kValue,
       {"variable_window_token_starts must have dtype int32", "int64"}},
      {"bounds wrong shape",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.ends->shape = {32};
       },
       kValue,
       {"variable_window_token_ends.shape=[32]", "[2, 16]"}},
      {"packed bounds wrong shape",
       Start::packed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(12, 0), std::vector<int32_t>(12, 3));
         c.starts->shape = {3, 4};
       },
       kValue,
       {"variable_window_token_starts.shape=[3, 4]", "[total_q]"}},
      {"bounds on the cpu",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.starts->device_type = TSATTN_DEVICE_CPU;
       },
       kValue,
       {"variable_window_token_starts must be a CUDA tensor"}},
      {"out overlaps bounds",
       Start::fixed,
       [](CallBuilder& c) {
         c.set_bounds(std::vector<int32_t>(32, 0), std::vector<int32_t>(32, 3));
         c.ends->data = c.out.data;
       },
       kValue,
       {"out overlaps variable_window_token_ends"}},

      // Indptrs.
      {"qo_indptr int64",
       Start::packed,
       [](CallBuilder& c) { c.qo_indptr->dtype = TSATTN_DTYPE_INT64; },
       kType,
       {"qo_indptr has dtype int64; expected int32"}},
      {"kv_indptr float32",
       Start::packed,
       [](CallBuilder& c) { c.kv_indptr->dtype = TSATTN_DTYPE_FLOAT32; },
       kType,
       {"kv_indptr has dtype float32; expected int32"}},
      {"kv_indptr int16 on another device",
       Start::packed,
       [](CallBuilder& c) {
         c.kv_indptr->dtype = TSATTN_DTYPE_INT16;
         c.kv_indptr->device_type = TSATTN_DEVICE_CUDA;
         c.kv_indptr->device_id = 1;
       },
       kType,
       {"kv_indptr has dtype int16; expected int32"}},
      {"indptr 2-D",
       Start::packed,
       [](CallBuilder& c) {
         c.kv_indptr->shape = {2, 2};
       },
       kValue,
       {"kv_indptr must be 1-D", "[2, 2]"}},
      {"indptr empty",
       Start::packed,
       [](CallBuilder& c) { c.qo_indptr->shape = {0}; },
       kValue,
       {"qo_indptr must be 1-D with B+1 >= 1 entries"}},
      {"indptr lengths differ",
       Start::packed,
       [](CallBuilder& c) {
         c.set_indptrs({0, 5, 12}, {0, 9, 12, 19});
       },
       kValue,
       {"qo_indptr has 3 entries but kv_indptr has 4"}},
      {"indptr does not start at 0",
       Start::packed,
       [](CallBuilder& c) {
         c.set_indptrs({1, 5, 5, 12}, {0, 9, 12, 19});
       },
       kValue,
       {"qo_indptr[0]=1"}},
      {"indptr decreasing",
       Start::packed,
       [](CallBuilder& c) {
         c.set_indptrs({0, 5, 5, 12}, {0, 9, 8, 19});
       },
       kValue,
       {"kv_indptr must be non-decreasing", "kv_indptr[2]=8"}},
      {"indptr end differs from total",
       Start::packed,
       [](CallBuilder& c) {
         c.set_indptrs({0, 5, 5, 11}, {0, 9, 12, 19});
       },
       kValue,
       {"qo_indptr[-1]=11", "q.shape[0]=12"}},
      {"indptrs on different sides",
       Start::packed,
       [](CallBuilder& c) { c.kv_indptr->device_type = TSATTN_DEVICE_CUDA; },
       kValue,
       {"qo_indptr (cpu) and kv_indptr (cuda:0)"}},
      {"indptr on another gpu",
       Start::packed,
       [](CallBuilder& c) {
         c.qo_indptr->device_type = TSATTN_DEVICE_CUDA;
         c.qo_indptr->device_id = 1;
       },
       kValue,
       {"qo_indptr is on cuda:1"}},
      {"device indptr not contiguous",
       Start::packed,
       [](CallBuilder& c) {
         for (Tensor* t : {&*c.qo_indptr, &*c.kv_indptr}) {
           t->device_type = TSATTN_DEVICE_CUDA;
           t->shape = {2};
           t->strides = {2};
         }
       },
       kValue,
       {"qo_indptr on the GPU must be contiguous"}},
  };
  return cases;
}

TEST_SUITE("api/rejections") {
  TEST_CASE("every contract rule is rejected with its error kind and a message naming the argument") {
    CHECK(rejection_cases().size() >= 40);
    for (const RejectionCase& rc : rejection_cases()) {
      CAPTURE(rc.rule);
      CallBuilder call = start_call(rc.start);
      // The unmutated call passes validation, so the mutation alone causes the error.
      CHECK_NOTHROW(call.validate());
      rc.mutate(call);
      const CallResult result = call.call_c_api();
      CAPTURE(result.message);
      CHECK(result.status == rc.expected);
      for (const char* part : rc.message_parts) {
        CAPTURE(part);
        CHECK(result.message.find(part) != std::string::npos);
      }
    }
  }

  TEST_CASE("tsattn_last_kernel_name is \"\" on a thread that made no call, and after a rejected call") {
    std::string before_any_call = "unset";
    std::thread([&] { before_any_call = tsattn_last_kernel_name(); }).join();
    CHECK(before_any_call.empty());
    CallBuilder call = CallBuilder::fixed();
    call.options.window_left = 0;
    CHECK(call.call_c_api().status == TSATTN_ERROR_VALUE);
    CHECK(std::string(tsattn_last_kernel_name()).empty());
    CHECK(last_kernel_name().empty());  // the C++ layer
  }

  TEST_CASE("the C++ layer throws tsattn::Error carrying the kind") {
    CallBuilder call = CallBuilder::fixed();
    PrefillOptions options;
    options.window_left = 0;
    try {
      batch_prefill(call.q, call.k, call.v, call.out, options);
      FAIL("batch_prefill accepted window_left=0");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::value);
      CHECK(std::string(e.what()).find("window_left=0") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace tsattn::test
