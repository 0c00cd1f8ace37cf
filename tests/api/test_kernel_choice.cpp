// test_kernel_choice.cpp - which kernel a call runs, without a GPU: the kernel that writes the
// log-sum-exp output exactly when the call passes one, on both families, and nothing else of the
// spec changes with it; which paged calls read their pages in the kernel.
#include <doctest/doctest.h>

#include "api/call_builder.hpp"
#include "api/kernel_choice.hpp"
#include "support/scoped_env.hpp"

namespace tsattn::test {
namespace {

driver::DeviceInfo device_of(int cc_major) {
  driver::DeviceInfo device;
  device.cc_major = cc_major;
  device.multiprocessors = 132;
  device.name = "test device";
  return device;
}

TEST_SUITE("api/kernel_choice") {
  TEST_CASE("a call runs the lse kernel exactly when it passes an lse output") {
    for (bool packed : {false, true}) {
      CAPTURE(packed);
      CallBuilder call = packed ? CallBuilder::packed({5, 0, 7}, {9, 3, 7}) : CallBuilder::fixed(2, 17, 40, 4, 2, 128);
      const Problem plain = call.validate();
      call.set_lse();
      const Problem with_lse = call.validate();
      REQUIRE(with_lse.lse.data != nullptr);

      // The portable family chooses without TMA descriptors, so choose_kernel runs here whole.
      const driver::DeviceInfo ampere = device_of(8);
      const KernelChoice a = choose_kernel(plain, ampere, Arch::sm_80);
      const KernelChoice b = choose_kernel(with_lse, ampere, Arch::sm_80);
      CHECK(a.spec.family == KernelFamily::sm80);
      CHECK_FALSE(a.spec.lse);
      CHECK(b.spec.lse);
      KernelSpec twin = b.spec;
      twin.lse = false;
      CHECK(twin == a.spec);  // the lse axis is all that differs
      CHECK(canonical_name(b.spec) == canonical_name(a.spec) + ".lse");

      // The Hopper family: choose_spec takes the lse axis from its caller (the one-shot call: the
      // problem's lse output; a plan: both).
      const driver::DeviceInfo hopper = device_of(9);
      for (bool lse : {false, true}) {
        const KernelChoice h = choose_spec(plain, hopper, Arch::sm_90a, lse);
        CHECK(h.spec.family == KernelFamily::sm90a);
        CHECK(h.spec.lse == lse);
        CHECK(h.tile == tile_config(h.spec));
      }
      KernelSpec hopper_twin = choose_spec(plain, hopper, Arch::sm_90a, true).spec;
      hopper_twin.lse = false;
      CHECK(hopper_twin == choose_spec(plain, hopper, Arch::sm_90a, false).spec);
    }
  }

  TEST_CASE("the lse axis picks no other tile, traits or TMA shape") {
    CallBuilder call = CallBuilder::fixed(1, 64, 64, 8, 8, 256, TSATTN_DTYPE_FLOAT8_E4M3FN);
    call.options.mask_type = TSATTN_MASK_CAUSAL;
    const Problem p = call.validate();
    const driver::DeviceInfo hopper = device_of(9);
    const KernelChoice plain = choose_spec(p, hopper, Arch::sm_90a, false);
    const KernelChoice lse = choose_spec(p, hopper, Arch::sm_90a, true);
    CHECK(plain.tile == lse.tile);
    CHECK(kernel_traits(plain.spec) == kernel_traits(lse.spec));
    const MapShape a = map_shape(plain), b = map_shape(lse);
    CHECK(a.block_m == b.block_m);
    CHECK(a.block_n == b.block_n);
    CHECK(a.out_store_bytes == b.out_store_bytes);
    CHECK(a.out_map == b.out_map);
    CHECK(transposes_v(plain.spec) == transposes_v(lse.spec));
  }

  TEST_CASE("paged calls: Hopper 16-bit D128 kernels read pages of 32 keys or more, TSATTN_PAGED_KV overrides") {
    const driver::DeviceInfo hopper = device_of(9), ampere = device_of(8);
    testing::ScopedEnv env;
    for (const char* mode : {"auto", "kernel", "gather"}) {
      env.set("TSATTN_PAGED_KV", mode);
      for (int64_t page_size : {16, 32, 64, 128}) {
        CAPTURE(mode);
        CAPTURE(page_size);
        const bool kernel_reads = std::string(mode) == "kernel" || (std::string(mode) == "auto" && page_size >= 32);
        for (tsattn_dtype dtype : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT16})
          CHECK(reads_pages_directly(hopper, Arch::sm_90a, dtype, 128, page_size) == kernel_reads);
        // No paged variant: the gather, whatever the knob says.
        CHECK_FALSE(reads_pages_directly(hopper, Arch::sm_90a, TSATTN_DTYPE_BFLOAT16, 256, page_size));
        CHECK_FALSE(reads_pages_directly(hopper, Arch::sm_90a, TSATTN_DTYPE_FLOAT8_E4M3FN, 128, page_size));
        CHECK_FALSE(reads_pages_directly(ampere, Arch::sm_80, TSATTN_DTYPE_BFLOAT16, 128, page_size));
      }
    }
  }
}

}  // namespace
}  // namespace tsattn::test
