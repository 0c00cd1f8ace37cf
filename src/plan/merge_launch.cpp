#include "plan/merge_launch.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

#include "api/dtype.hpp"
#include "common/error.hpp"

namespace tsattn {

namespace {

// The tensors of a merge, in one list for the dim folding.
constexpr int kOperands = 6;
std::array<const MergeOperand*, kOperands> operands(const MergeProblem& p) {
  return {&p.v_first, &p.s_first, &p.v_rest, &p.s_rest, &p.out, &p.s_out};
}

struct FoldedDim {
  int64_t extent;
  std::array<int64_t, kOperands> strides;
};

// The item dims innermost first, without dims of extent 1 (their index is always 0), and with a
// dim folded into the one inside it whenever every tensor steps over the inner dim's whole extent
// by one step of the outer: then both are one dim of their product.
std::vector<FoldedDim> fold_item_dims(const MergeProblem& p) {
  const auto ops = operands(p);
  std::vector<FoldedDim> dims;
  for (size_t k = p.shape.size(); k-- > 0;) {
    if (p.shape[k] == 1) continue;
    FoldedDim dim{p.shape[k], {}};
    for (int o = 0; o < kOperands; ++o) dim.strides[o] = ops[o]->strides[k];
    if (!dims.empty()) {
      FoldedDim& inner = dims.back();
      bool folds = true;
      for (int o = 0; o < kOperands; ++o) folds = folds && dim.strides[o] == inner.strides[o] * inner.extent;
      if (folds) {
        inner.extent *= dim.extent;  // within the item count, which fits
        continue;
      }
    }
    dims.push_back(dim);
  }
  if (dims.empty()) dims.push_back({1, {}});  // one item
  return dims;
}

bool aligned(const void* data, int64_t bytes) { return reinterpret_cast<uintptr_t>(data) % bytes == 0; }

// The widest access every v read and write keeps aligned: D's bytes, the v pointers (state 1's
// included), the item strides and the state stride.
int access_bytes(const MergeProblem& p, const std::vector<FoldedDim>& dims) {
  const int64_t element = dtype_size(p.dtype);
  if (p.head_dim == 0) return static_cast<int>(element);
  const auto ops = operands(p);
  for (int64_t bytes : {16, 8, 4}) {
    if (bytes < element) break;
    bool ok = p.head_dim * element % bytes == 0;
    for (int o : {0, 2, 4})  // v_first, v_rest, out
      ok = ok && aligned(ops[o]->data, bytes);
    for (const FoldedDim& dim : dims)
      for (int o : {0, 2, 4}) ok = ok && dim.strides[o] * element % bytes == 0;
    if (p.num_states > 2) ok = ok && p.v_state_stride * element % bytes == 0;
    if (ok) return static_cast<int>(bytes);
  }
  return static_cast<int>(element);
}

void fill(TsattnMergeTensor& t, const MergeOperand& o) { t.data = o.data; }
void fill(TsattnMergeOutput& t, const MergeOperand& o) { t.data = const_cast<void*>(o.data); }

}  // namespace

MergeLaunch plan_merge_launch(const MergeProblem& p, int64_t resident_ctas) {
  const std::vector<FoldedDim> dims = fold_item_dims(p);
  if (dims.size() > TSATTN_MERGE_MAX_DIMS)
    raise(ErrorKind::runtime, "internal error: a merge over {} item dims (at most {})", dims.size(),
          TSATTN_MERGE_MAX_DIMS);
  MergeLaunch launch;
  TsattnMergeParams& params = launch.params;
  params.ndim = static_cast<int>(dims.size());
  params.items = static_cast<int>(p.items());  // validation bounds it below 2^31
  params.head_dim = static_cast<int>(p.head_dim);
  params.num_states = static_cast<int>(p.num_states);
  fill(params.v_first, p.v_first);
  fill(params.s_first, p.s_first);
  fill(params.v_rest, p.v_rest);
  fill(params.s_rest, p.s_rest);
  fill(params.v_out, p.out);
  fill(params.s_out, p.s_out);
  for (size_t k = 0; k < dims.size(); ++k) {
    params.shape[k] = static_cast<int>(dims[k].extent);
    params.v_first.strides[k] = dims[k].strides[0];
    params.s_first.strides[k] = dims[k].strides[1];
    params.v_rest.strides[k] = dims[k].strides[2];
    params.s_rest.strides[k] = dims[k].strides[3];
    params.v_out.strides[k] = dims[k].strides[4];
    params.s_out.strides[k] = dims[k].strides[5];
  }
  params.v_state_stride = p.v_state_stride;
  params.s_state_stride = p.s_state_stride;
  params.access_bytes = access_bytes(p, dims);

  const int64_t accesses = p.head_dim * dtype_size(p.dtype) / params.access_bytes;
  int lanes = 1;
  while (lanes < 32 && lanes < accesses) lanes *= 2;
  params.lanes_per_item = lanes;

  const int64_t items_per_cta = TSATTN_MERGE_THREADS / lanes;
  const int64_t needed = (int64_t{params.items} + items_per_cta - 1) / items_per_cta;
  // CTAs beyond what the GPU holds would only queue behind the others.
  launch.ctas = static_cast<unsigned>(std::clamp<int64_t>(needed, 1, std::max<int64_t>(resident_ctas, 1)));
  return launch;
}

}  // namespace tsattn
