#include "api/merge_arguments.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "api/dtype.hpp"
#include "codegen/merge_spec.hpp"
#include "common/checked_int.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

Dims dims_of(const int64_t* first, const int64_t* last) {
  Dims d;
  d.assign(first, last);
  return d;
}

std::string dims_text(const Dims& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

// The dtype rules, in the order the contract lists them: v's dtype (NotImplementedError, as q's),
// the other v tensors' (the same dtype), the lse tensors' (float32, a TypeError as lse's).
void check_v_dtype(const CheckedTensor& v) {
  const auto dtypes = merge_dtypes();
  if (std::find(dtypes.begin(), dtypes.end(), v.view->dtype) == dtypes.end())
    raise(ErrorKind::not_implemented, "{} has dtype {}; supported: {}", v.name, dtype_name(v.view->dtype),
          supported_merge_dtypes());
}

void check_out_dtype(const CheckedTensor& out, const CheckedTensor& v) {
  if (out.view->dtype != v.view->dtype)
    raise(ErrorKind::value, "{} has dtype {}; the merged state keeps {}'s dtype, {}", out.name,
          dtype_name(out.view->dtype), v.name, dtype_name(v.view->dtype));
}

void check_lse_dtype(const CheckedTensor& s) {
  if (s.view->dtype != TSATTN_DTYPE_FLOAT32)
    raise(ErrorKind::type, "{} has dtype {}; it must be float32", s.name, dtype_name(s.view->dtype));
}

void check_shape(const CheckedTensor& t, const Dims& expected, const char* expected_name) {
  if (t.shape != expected)
    raise(ErrorKind::value, "{}.shape={} must be {}={}", t.name, t.shape_text(), expected_name, dims_text(expected));
}

void check_device(const CheckedTensor& t, const CheckedTensor& first) {
  if (t.view->device_type != TSATTN_DEVICE_CUDA)
    raise(ErrorKind::value, "{} must be a CUDA tensor (got {})", t.name, t.device_text());
  if (t.view->device_id != first.view->device_id)
    raise(ErrorKind::value, "{} is on {} but {} is on {}; all tensors must share one device", t.name, t.device_text(),
          first.name, first.device_text());
}

// v tensors: D contiguous and the base aligned to an element (strides in elements keep that).
// Wider accesses are the kernel's own choice, where alignment allows them (plan/merge_launch).
void check_v_layout(const CheckedTensor& v) {
  const int last = v.ndim() - 1;
  if (v.shape[last] > 1 && v.strides[last] != 1)
    raise(ErrorKind::value, "{}.stride({})={}: the head dimension must be contiguous (stride 1)", v.name, last,
          v.strides[last]);
  const int bytes = dtype_size(v.view->dtype);
  // The kernel addresses a row's D elements in int bytes.
  if (v.shape[last] > kInt32Max / bytes)
    raise(ErrorKind::value, "{}: head_dim={} ({} bytes a row) is too large; at most 2^31-1 bytes", v.name,
          v.shape[last], v.shape[last] * bytes);
  if (v.numel > 0 && reinterpret_cast<uintptr_t>(v.view->data) % static_cast<uintptr_t>(bytes) != 0)
    raise(ErrorKind::value, "{}.data={:#x} is not {}-byte aligned ({})", v.name,
          reinterpret_cast<uintptr_t>(v.view->data), bytes, dtype_name(v.view->dtype));
}

void check_lse_layout(const CheckedTensor& s) {
  if (s.numel > 0 && reinterpret_cast<uintptr_t>(s.view->data) % alignof(float) != 0)
    raise(ErrorKind::value, "{}.data is not 4-byte aligned", s.name);
}

// The outputs: neither writes an element twice, neither shares a byte with an input or the other.
void check_outputs(const CheckedTensor& out, const std::optional<CheckedTensor>& s_out,
                   std::initializer_list<const CheckedTensor*> inputs) {
  check_no_self_overlap(out);
  if (s_out) check_no_self_overlap(*s_out);
  for (const CheckedTensor* input : inputs) {
    check_disjoint(out, *input);
    if (s_out) check_disjoint(*s_out, *input);
  }
  if (s_out) check_disjoint(*s_out, out);
}

MergeOperand operand(const CheckedTensor& t, Dims strides) { return {t.view->data, strides}; }

// The kernel numbers items (rows times heads) in 31 bits.
void check_item_count(const Dims& items, const CheckedTensor& v) {
  Checked<int64_t> count = 1;
  for (int64_t extent : items) count = count * extent;
  if (count.overflowed() || count.value() > kInt32Max)
    raise(ErrorKind::value, "{}.shape={} has more than 2^31-1 rows x heads to merge", v.name, v.shape_text());
}

}  // namespace

std::string supported_merge_dtypes() {
  std::string text;
  for (tsattn_dtype dtype : merge_dtypes()) text += (text.empty() ? "" : ", ") + dtype_name(dtype);
  return text;
}

int64_t MergeProblem::items() const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;  // below 2^31: validation checked it
  return n;
}

bool MergeProblem::writes_nothing() const { return items() == 0 || (head_dim == 0 && s_out.data == nullptr); }

MergeProblem validate_merge_state(const MergeStateArguments& args) {
  const CheckedTensor v_a = inspect_tensor(args.v_a, "v_a");
  const CheckedTensor s_a = inspect_tensor(args.s_a, "s_a");
  const CheckedTensor v_b = inspect_tensor(args.v_b, "v_b");
  const CheckedTensor s_b = inspect_tensor(args.s_b, "s_b");
  const CheckedTensor out = inspect_tensor(args.out, "out");
  std::optional<CheckedTensor> s_out;
  if (args.s_out != nullptr) s_out = inspect_tensor(args.s_out, "s_out");

  check_v_dtype(v_a);
  if (v_b.view->dtype != v_a.view->dtype)
    raise(ErrorKind::not_implemented, "v_a and v_b must share one dtype (got v_a={}, v_b={})",
          dtype_name(v_a.view->dtype), dtype_name(v_b.view->dtype));
  check_out_dtype(out, v_a);
  check_lse_dtype(s_a);
  check_lse_dtype(s_b);
  if (s_out) check_lse_dtype(*s_out);

  if (v_a.ndim() < 2) raise(ErrorKind::value, "v_a must be [..., H, D], at least 2-D (got shape {})", v_a.shape_text());
  if (v_b.shape != v_a.shape)
    raise(ErrorKind::value, "v_b.shape={} must equal v_a.shape={}", v_b.shape_text(), v_a.shape_text());
  if (out.shape != v_a.shape)
    raise(ErrorKind::value, "out.shape={} must equal v_a.shape={}", out.shape_text(), v_a.shape_text());
  const Dims rows = dims_of(v_a.shape.begin(), v_a.shape.end() - 1);
  check_shape(s_a, rows, "v_a.shape[:-1]");
  check_shape(s_b, rows, "v_a.shape[:-1]");
  if (s_out) check_shape(*s_out, rows, "v_a.shape[:-1]");

  check_item_count(rows, v_a);

  for (const CheckedTensor* t : {&v_a, &s_a, &v_b, &s_b, &out}) check_device(*t, v_a);
  if (s_out) check_device(*s_out, v_a);

  for (const CheckedTensor* t : {&v_a, &v_b, &out}) check_v_layout(*t);
  for (const CheckedTensor* t : {&s_a, &s_b}) check_lse_layout(*t);
  if (s_out) check_lse_layout(*s_out);
  check_outputs(out, s_out, {&v_a, &s_a, &v_b, &s_b});

  MergeProblem p;
  p.dtype = static_cast<tsattn_dtype>(v_a.view->dtype);
  p.device_id = v_a.view->device_id;
  p.stream = args.stream;
  p.shape = rows;
  p.head_dim = v_a.shape[v_a.ndim() - 1];
  p.num_states = 2;
  auto row_strides = [](const CheckedTensor& v) { return dims_of(v.strides.begin(), v.strides.end() - 1); };
  p.v_first = operand(v_a, row_strides(v_a));
  p.s_first = operand(s_a, s_a.strides);
  p.v_rest = operand(v_b, row_strides(v_b));
  p.s_rest = operand(s_b, s_b.strides);
  p.out = operand(out, row_strides(out));
  p.s_out.strides.resize(rows.size());
  if (s_out) p.s_out = operand(*s_out, s_out->strides);
  return p;
}

MergeProblem validate_merge_states(const MergeStatesArguments& args) {
  const CheckedTensor v = inspect_tensor(args.v, "v");
  const CheckedTensor s = inspect_tensor(args.s, "s");
  const CheckedTensor out = inspect_tensor(args.out, "out");
  std::optional<CheckedTensor> s_out;
  if (args.s_out != nullptr) s_out = inspect_tensor(args.s_out, "s_out");

  check_v_dtype(v);
  check_out_dtype(out, v);
  check_lse_dtype(s);
  if (s_out) check_lse_dtype(*s_out);

  const int rank = v.ndim();
  if (rank < 3) raise(ErrorKind::value, "v must be [..., n, H, D], at least 3-D (got shape {})", v.shape_text());
  const int states_axis = rank - 3;
  check_shape(s, dims_of(v.shape.begin(), v.shape.end() - 1), "v.shape[:-1]");
  // The item dims: v's leading dims and H, without the states axis and D.
  Dims items = dims_of(v.shape.begin(), v.shape.begin() + states_axis);
  items.resize(items.size() + 1);
  items[items.size() - 1] = v.shape[rank - 2];
  Dims merged = items;  // out: the items, then D
  merged.resize(merged.size() + 1);
  merged[merged.size() - 1] = v.shape[rank - 1];
  check_shape(out, merged, "v.shape[:-3] + v.shape[-2:]");
  if (s_out) check_shape(*s_out, items, "v.shape[:-3] + v.shape[-2:-1]");
  const int64_t states = v.shape[states_axis];
  if (states > kInt32Max)
    raise(ErrorKind::value, "v has n={} states (v.shape[{}]); at most 2^31-1", states, states_axis);

  check_item_count(items, v);

  for (const CheckedTensor* t : {&v, &s, &out}) check_device(*t, v);
  if (s_out) check_device(*s_out, v);

  check_v_layout(v);
  check_v_layout(out);
  check_lse_layout(s);
  if (s_out) check_lse_layout(*s_out);
  check_outputs(out, s_out, {&v, &s});

  // The strides of v and s over the items (the states axis left out) and along the states axis.
  auto item_strides = [&](const CheckedTensor& t, int head_axis) {
    Dims d = dims_of(t.strides.begin(), t.strides.begin() + states_axis);
    d.resize(d.size() + 1);
    d[d.size() - 1] = t.strides[head_axis];
    return d;
  };
  MergeProblem p;
  p.dtype = static_cast<tsattn_dtype>(v.view->dtype);
  p.device_id = v.view->device_id;
  p.stream = args.stream;
  p.shape = items;
  p.head_dim = v.shape[rank - 1];
  p.num_states = states;
  p.v_state_stride = v.strides[states_axis];
  p.s_state_stride = s.strides[states_axis];
  p.v_first = operand(v, item_strides(v, rank - 2));
  p.s_first = operand(s, item_strides(s, rank - 2));
  p.v_rest = p.v_first;
  p.s_rest = p.s_first;
  if (states >= 2) {  // state 1's address, within the views' spans
    p.v_rest.data = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(v.view->data) +
                                                  static_cast<uintptr_t>(p.v_state_stride * dtype_size(p.dtype)));
    p.s_rest.data = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(s.view->data) +
                                                  static_cast<uintptr_t>(p.s_state_stride * 4));
  }
  p.out = operand(out, dims_of(out.strides.begin(), out.strides.end() - 1));
  p.s_out.strides.resize(items.size());
  if (s_out) p.s_out = operand(*s_out, s_out->strides);
  return p;
}

}  // namespace tsattn
