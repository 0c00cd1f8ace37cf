// test_problem.cpp - valid calls normalize into the right Problem, and edge cases the contract (docs/contract.md)
// allows are accepted.
#include <doctest/doctest.h>

#include <cmath>

#include "api/call_builder.hpp"
#include "jit/driver/driver_api.hpp"

namespace tsattn::test {
namespace {

TEST_SUITE("api/problem") {
  TEST_CASE("fixed layout: shapes, strides, defaults") {
    const Problem p = CallBuilder::fixed(3, 17, 40, 6, 3, 256, TSATTN_DTYPE_FLOAT16).validate();
    CHECK(p.layout == Layout::fixed);
    CHECK(p.batch == 3);
    CHECK(p.q_tokens == 17);
    CHECK(p.kv_tokens == 40);
    CHECK(p.num_qo_heads == 6);
    CHECK(p.num_kv_heads == 3);
    CHECK(p.group_size() == 2);
    CHECK(p.head_dim == 256);
    CHECK(p.input_dtype == TSATTN_DTYPE_FLOAT16);
    CHECK(p.output_dtype == TSATTN_DTYPE_FLOAT16);
    CHECK(p.q.batch_stride == 17 * 6 * 256);
    CHECK(p.q.token_stride == 6 * 256);
    CHECK(p.q.head_stride == 256);
    CHECK(p.k.token_stride == 3 * 256);
    CHECK(p.sm_scale == doctest::Approx(1.0 / 16.0));
    CHECK(p.output_scale == 1.0f);
    CHECK(p.mask == MaskMode::dense);
    CHECK(p.window_left == -1);
    CHECK(p.lengths_on_host());
    CHECK(p.q_len(2) == 17);
    CHECK(p.kv_len(2) == 40);
  }

  TEST_CASE("packed layout with host indptrs and empty requests") {
    CallBuilder call = CallBuilder::packed({5, 0, 7, 0}, {9, 3, 7, 0}, 8, 1);
    call.options.mask_type = TSATTN_MASK_CAUSAL;
    call.options.window_left = 3;
    const Problem p = call.validate();
    CHECK(p.layout == Layout::packed);
    CHECK(p.batch == 4);
    CHECK(p.indptr_on_host);
    CHECK(p.q_tokens == 12);
    CHECK(p.kv_tokens == 19);
    CHECK(p.q.batch_stride == 0);
    CHECK(p.q.token_stride == 8 * 128);
    CHECK(p.q_len(1) == 0);
    CHECK(p.kv_len(1) == 3);
    CHECK(p.q_token_offset(2) == 5);
    CHECK(p.kv_token_offset(2) == 12);
    CHECK(p.q_len(3) == 0);
    CHECK(p.kv_len(3) == 0);
    CHECK(p.window_left == 3);
  }

  TEST_CASE("packed layout with device indptrs defers lengths to the planner") {
    CallBuilder call = CallBuilder::packed({5, 7}, {9, 7});
    call.qo_indptr = call.qo_mem->fake_cuda();
    call.kv_indptr = call.kv_mem->fake_cuda();
    const Problem p = call.validate();
    CHECK_FALSE(p.indptr_on_host);
    CHECK_FALSE(p.lengths_on_host());
    CHECK(p.batch == 2);
    CHECK(p.qo_indptr == call.qo_mem->as<int32_t>());
  }

  TEST_CASE("strided q, k, v: slices of one fused QKV projection") {
    // qkv [B, S, 3*H, D]; q, k, v are head slices with the fused token stride.
    const int64_t b = 2, s = 33, h = 4, d = 128;
    HostTensor qkv(TSATTN_DTYPE_BFLOAT16, {b, s, 3 * h, d});
    CallBuilder call = CallBuilder::fixed(b, s, s, h, h, d);
    const std::vector<int64_t> strides{s * 3 * h * d, 3 * h * d, d, 1};
    for (int i = 0; i < 3; ++i) {
      Tensor& t = i == 0 ? call.q : (i == 1 ? call.k : call.v);
      t.data = qkv.as<std::byte>() + i * h * d * 2;
      t.strides = strides;
    }
    call.q.device_type = call.k.device_type = call.v.device_type = TSATTN_DEVICE_CUDA;
    const Problem p = call.validate();
    CHECK(p.q.token_stride == 3 * h * d);
    CHECK(p.k.batch_stride == s * 3 * h * d);
    CHECK(p.v.data == qkv.as<std::byte>() + 2 * h * d * 2);
  }

  TEST_CASE("edge cases the contract allows") {
    SUBCASE("dense with Sq > Sk") { CHECK_NOTHROW(CallBuilder::fixed(1, 129, 17).validate()); }
    SUBCASE("causal with Sq < Sk and a window") {
      CallBuilder call = CallBuilder::fixed(1, 2, 4);
      call.options.mask_type = TSATTN_MASK_CAUSAL;
      call.options.window_left = 1;
      CHECK_NOTHROW(call.validate());
    }
    SUBCASE("a window wider than int32") {
      CallBuilder call = CallBuilder::fixed();
      call.options.mask_type = TSATTN_MASK_CAUSAL;
      call.options.window_left = int64_t{1} << 40;
      CHECK(call.validate().window_left == int64_t{1} << 40);
    }
    SUBCASE("an empty batch") { CHECK(CallBuilder::fixed(0, 16, 16).validate().batch == 0); }
    SUBCASE("no keys at all") { CHECK(CallBuilder::fixed(2, 5, 0).validate().kv_tokens == 0); }
    SUBCASE("a batch of only empty requests") {
      const Problem p = CallBuilder::packed({0, 0}, {0, 0}).validate();
      CHECK(p.batch == 2);
      CHECK(p.q_tokens == 0);
    }
    SUBCASE("MQA, fp8 in, fp16 out via out_dtype") {
      CallBuilder call = CallBuilder::fixed(1, 8, 8, 16, 1, 128, TSATTN_DTYPE_FLOAT8_E4M3FN);
      call.set_out_dtype(TSATTN_DTYPE_FLOAT16);
      call.options.out_dtype = TSATTN_DTYPE_FLOAT16;
      const Problem p = call.validate();
      CHECK(p.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN);
      CHECK(p.output_dtype == TSATTN_DTYPE_FLOAT16);
    }
    SUBCASE("explicit scales") {
      CallBuilder call = CallBuilder::fixed();
      call.options.has_sm_scale = 1;
      call.options.sm_scale = 0.3;
      call.options.output_scale = 2.5;
      const Problem p = call.validate();
      CHECK(p.sm_scale == 0.3f);
      CHECK(p.output_scale == 2.5f);
    }
    SUBCASE("null options mean defaults") {
      CallBuilder call = CallBuilder::fixed();
      call.pass_options = false;
      CHECK(call.validate().mask == MaskMode::dense);
    }
    SUBCASE("variable window bounds, out-of-range values included") {
      CallBuilder call = CallBuilder::packed({3, 2}, {4, 4});
      call.set_bounds({0, -7, 2, 5, 100}, {3, 1, 1, 9, -1});
      const Problem p = call.validate();
      CHECK(p.mask == MaskMode::variable_window);
      CHECK(p.window_starts.row_stride == 1);
      CHECK(p.window_ends.batch_stride == 0);
    }
    SUBCASE("size-1 dimensions may carry any stride") {
      CallBuilder call = CallBuilder::fixed(1, 16, 32);
      call.q.strides = {12345, 8 * 128, 128, 1};
      CHECK_NOTHROW(call.validate());
    }
    SUBCASE("an empty out may broadcast, even over extents whose offsets would overflow int64") {
      CallBuilder call = CallBuilder::fixed(0, 16, 32);
      call.out.strides = {0, 0, 0, 1};
      CHECK_NOTHROW(call.validate());
      call.q.shape = call.out.shape = {0, int64_t{1} << 40, 8, 128};
      call.out.strides = {1, int64_t{1} << 40, int64_t{1} << 40, 1};
      CHECK(call.validate().q_tokens == int64_t{1} << 40);
    }
  }

  TEST_CASE("without a CUDA driver a valid call reports a runtime error and computes nothing") {
    // The call's tensors are host memory tagged as CUDA: it must never reach a real GPU.
    if (driver::unavailable_reason().empty()) {
      MESSAGE("skipped: a CUDA driver is present (this case is for machines without one)");
      return;
    }
    const CallResult result = CallBuilder::fixed().call_c_api();
    CHECK(result.status == TSATTN_ERROR_RUNTIME);
    CHECK(result.message == driver::unavailable_reason());
    CHECK(result.message.find("libcuda.so.1") != std::string::npos);
  }

  TEST_CASE("visible pairs follow the masks") {
    // The contract's window example: Sq=2, Sk=4, W=1 -> rows see keys 1..2 and 2..3.
    CallBuilder call = CallBuilder::fixed(1, 2, 4, 8, 2);
    call.options.mask_type = TSATTN_MASK_CAUSAL;
    call.options.window_left = 1;
    CHECK(call.validate().visible_pairs() == 4);
    CHECK(causal_key_range(0, 2, 4, 1).first == 1);
    CHECK(causal_key_range(0, 2, 4, 1).last == 2);
    CHECK(causal_key_range(1, 2, 4, 1).first == 2);
    CHECK(causal_key_range(1, 2, 4, 1).last == 3);
    call.options.window_left = -1;
    CHECK(call.validate().visible_pairs() == 3 + 4);
    CHECK(CallBuilder::fixed(2, 3, 5).validate().visible_pairs() == 2 * 3 * 5);
    CHECK(variable_key_range(3, 1, 10).empty());
    CHECK(variable_key_range(-4, 100, 10).size() == 10);
  }
}

}  // namespace
}  // namespace tsattn::test
