// test_merge_launch.cpp - a MergeProblem as the merge kernel's launch (plan/merge_launch.hpp), without
// a GPU: item dims folded where every tensor allows it, the widest access that keeps every v read
// and write aligned, lanes per item, and the grid.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "plan/merge_launch.hpp"

namespace tsattn::test {
namespace {

// Addresses only: the plan never reads memory.
const void* address(uintptr_t value) { return reinterpret_cast<const void*>(value); }

// A compact merge_state of rows x heads items: v [rows, heads, D], s [rows, heads].
MergeProblem compact_pair(int64_t rows, int64_t heads, int64_t head_dim, tsattn_dtype dtype) {
  MergeProblem p;
  p.dtype = dtype;
  p.shape = {rows, heads};
  p.head_dim = head_dim;
  p.num_states = 2;
  const Dims v_strides{heads * head_dim, head_dim}, s_strides{heads, 1};
  p.v_first = {address(0x10000), v_strides};
  p.v_rest = {address(0x20000), v_strides};
  p.out = {address(0x30000), v_strides};
  p.s_first = {address(0x40000), s_strides};
  p.s_rest = {address(0x50000), s_strides};
  p.s_out = {address(0x60000), s_strides};
  return p;
}

TEST_SUITE("plan/merge_launch") {
  TEST_CASE("a compact merge is one item dim, read 16 bytes at a time") {
    const MergeLaunch l = plan_merge_launch(compact_pair(7, 4, 128, TSATTN_DTYPE_BFLOAT16), 1024);
    const TsattnMergeParams& p = l.params;
    CHECK(p.ndim == 1);
    CHECK(p.shape[0] == 28);
    CHECK(p.items == 28);
    CHECK(p.v_first.strides[0] == 128);
    CHECK(p.s_first.strides[0] == 1);
    CHECK(p.v_out.strides[0] == 128);
    CHECK(p.access_bytes == 16);
    CHECK(p.lanes_per_item == 16);  // 256 bytes of D in 16-byte accesses
    CHECK(p.num_states == 2);
    CHECK(p.head_dim == 128);
    CHECK(p.v_first.data == address(0x10000));
    CHECK(p.v_out.data == reinterpret_cast<void*>(0x30000));
    CHECK(l.ctas == 2);  // 16 items per CTA of 256 threads
  }

  TEST_CASE("dims that some tensor does not step through alike stay apart, innermost first") {
    MergeProblem m = compact_pair(3, 8, 256, TSATTN_DTYPE_FLOAT16);
    m.v_rest.strides = {3 * 8 * 256, 256};  // b: rows of a wider tensor
    const TsattnMergeParams p = plan_merge_launch(m, 1024).params;
    CHECK(p.ndim == 2);
    CHECK(p.shape[0] == 8);  // the heads
    CHECK(p.shape[1] == 3);
    CHECK(p.v_rest.strides[0] == 256);
    CHECK(p.v_rest.strides[1] == 3 * 8 * 256);
    CHECK(p.v_first.strides[1] == 8 * 256);
    CHECK(p.lanes_per_item == 32);
    // Extent-1 dims take no place, and a single item is one dim of 1.
    MergeProblem one = compact_pair(1, 1, 128, TSATTN_DTYPE_FLOAT32);
    one.shape = {1, 1, 1};
    one.v_first.strides = one.v_rest.strides = one.out.strides = {999, 5, 7};
    one.s_first.strides = one.s_rest.strides = one.s_out.strides = {3, 2, 1};
    const TsattnMergeParams q = plan_merge_launch(one, 1024).params;
    CHECK(q.ndim == 1);
    CHECK(q.shape[0] == 1);
    CHECK(q.items == 1);
  }

  TEST_CASE("merge_states: the states axis between rows and heads keeps them apart") {
    MergeProblem m = compact_pair(5, 8, 128, TSATTN_DTYPE_BFLOAT16);
    m.num_states = 3;
    m.v_first.strides = m.v_rest.strides = {3 * 8 * 128, 128};
    m.s_first.strides = m.s_rest.strides = {24, 1};
    m.v_state_stride = 8 * 128;
    m.s_state_stride = 8;
    const TsattnMergeParams p = plan_merge_launch(m, 1024).params;
    CHECK(p.ndim == 2);
    CHECK(p.v_state_stride == 1024);
    CHECK(p.s_state_stride == 8);
    CHECK(p.num_states == 3);
    CHECK(p.access_bytes == 16);
  }

  TEST_CASE("the access narrows to what D, every v pointer and every v stride allow") {
    auto access = [](const MergeProblem& m) { return plan_merge_launch(m, 1024).params.access_bytes; };
    auto lanes = [](const MergeProblem& m) { return plan_merge_launch(m, 1024).params.lanes_per_item; };
    // D = 100 f16: 200 bytes are whole 8-byte accesses, not 16-byte ones.
    MergeProblem m = compact_pair(4, 2, 100, TSATTN_DTYPE_FLOAT16);
    CHECK(access(m) == 8);
    CHECK(lanes(m) == 32);  // 25 accesses
    // D = 3: f32 reads one element (4 bytes) at a time, f16 one element (2 bytes).
    CHECK(access(compact_pair(4, 2, 3, TSATTN_DTYPE_FLOAT32)) == 4);
    CHECK(lanes(compact_pair(4, 2, 3, TSATTN_DTYPE_FLOAT32)) == 4);
    CHECK(access(compact_pair(4, 2, 3, TSATTN_DTYPE_FLOAT16)) == 2);
    // A v pointer 4 bytes past 16-byte alignment.
    m = compact_pair(4, 2, 128, TSATTN_DTYPE_BFLOAT16);
    m.v_rest.data = address(0x20004);
    CHECK(access(m) == 4);
    m.v_rest.data = address(0x20002);
    CHECK(access(m) == 2);
    // out's row stride 130 bf16 (260 bytes).
    m = compact_pair(4, 1, 128, TSATTN_DTYPE_BFLOAT16);
    m.out.strides = {130, 128};
    CHECK(access(m) == 4);
    // The state stride matters from the third state on.
    m = compact_pair(4, 2, 128, TSATTN_DTYPE_BFLOAT16);
    m.v_state_stride = 1028;
    CHECK(access(m) == 16);
    m.num_states = 3;
    CHECK(access(m) == 8);
    // Strides of s never narrow v's access.
    m = compact_pair(4, 2, 128, TSATTN_DTYPE_BFLOAT16);
    m.s_first.strides = {7, 3};
    CHECK(access(m) == 16);
    // f32 D = 256: 64 accesses of 16 bytes, two per lane of a full warp.
    CHECK(lanes(compact_pair(4, 2, 256, TSATTN_DTYPE_FLOAT32)) == 32);
  }

  TEST_CASE("D = 0 writes only the lse, and an absent s_out folds like the others") {
    MergeProblem m = compact_pair(6, 3, 0, TSATTN_DTYPE_BFLOAT16);
    TsattnMergeParams p = plan_merge_launch(m, 1024).params;
    CHECK(p.head_dim == 0);
    CHECK(p.lanes_per_item == 1);
    CHECK(p.ndim == 1);
    m = compact_pair(6, 3, 128, TSATTN_DTYPE_BFLOAT16);
    m.s_out = {nullptr, Dims{0, 0}};
    p = plan_merge_launch(m, 1024).params;
    CHECK(p.s_out.data == nullptr);
    CHECK(p.ndim == 1);
  }

  TEST_CASE("the grid covers the items, at most as many CTAs as the GPU holds at once") {
    constexpr int64_t kResident = 5 * 132;
    CHECK(plan_merge_launch(compact_pair(1, 1, 128, TSATTN_DTYPE_BFLOAT16), kResident).ctas == 1);
    // 16 lanes per item: 16 items per CTA.
    CHECK(plan_merge_launch(compact_pair(100, 32, 128, TSATTN_DTYPE_BFLOAT16), kResident).ctas == 200);
    CHECK(plan_merge_launch(compact_pair(100000, 32, 128, TSATTN_DTYPE_BFLOAT16), kResident).ctas == kResident);
    CHECK(plan_merge_launch(compact_pair(100000, 32, 128, TSATTN_DTYPE_BFLOAT16), 0).ctas == 1);
  }
}

}  // namespace
}  // namespace tsattn::test
