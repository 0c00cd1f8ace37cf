#include "api/tensor_checks.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/ranges.h>

#include "api/dtype.hpp"

namespace tsattn {

namespace {

constexpr int64_t kAlignmentBytes = 16;

}  // namespace

int64_t CheckedTensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

bool CheckedTensor::on_host() const {
  return view->device_type == TSATTN_DEVICE_CPU || view->device_type == TSATTN_DEVICE_CUDA_HOST;
}

std::string CheckedTensor::shape_text() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string CheckedTensor::strides_text() const { return fmt::format("[{}]", fmt::join(strides, ", ")); }

std::string CheckedTensor::device_text() const {
  switch (view->device_type) {
    case TSATTN_DEVICE_CPU: return "cpu";
    case TSATTN_DEVICE_CUDA: return fmt::format("cuda:{}", view->device_id);
    case TSATTN_DEVICE_CUDA_HOST: return "cuda_host (pinned cpu)";
    default: return fmt::format("device_type {}", view->device_type);
  }
}

CheckedTensor::Span CheckedTensor::span() const {
  if (numel() == 0) return {};
  // inspect_tensor() proved that this sum cannot overflow.
  int64_t last = 0;
  for (int i = 0; i < ndim(); ++i) last += (shape[i] - 1) * strides[i];
  const auto begin = reinterpret_cast<uintptr_t>(view->data);
  return {begin, begin + static_cast<uintptr_t>((last + 1) * dtype_size(view->dtype))};
}

CheckedTensor inspect_tensor(const tsattn_tensor_view* view, const char* name) {
  if (view == nullptr) raise(ErrorKind::value, "{} is required (got a null tensor view)", name);
  CheckedTensor t;
  t.name = name;
  t.view = view;
  if (view->ndim < 0 || view->ndim > kMaxRank)
    raise(ErrorKind::value, "{}.ndim={} is out of range [0, {}]", name, view->ndim, kMaxRank);
  if (view->ndim > 0 && view->shape == nullptr)
    raise(ErrorKind::value, "{}.shape is null for a {}-D tensor", name, view->ndim);
  t.shape.assign(view->shape, view->shape + view->ndim);
  for (int64_t extent : t.shape)
    if (extent < 0) raise(ErrorKind::value, "{}.shape={} has a negative extent", name, t.shape_text());

  if (view->strides != nullptr) {
    t.strides.assign(view->strides, view->strides + view->ndim);
  } else {
    t.strides.resize(t.shape.size());
    int64_t stride = 1;
    for (int i = t.ndim(); i-- > 0;) {
      t.strides[i] = stride;
      if (__builtin_mul_overflow(stride, std::max<int64_t>(t.shape[i], 1), &stride))
        raise(ErrorKind::value, "{}.shape={} has more elements than int64 can count", name, t.shape_text());
    }
  }
  for (int64_t stride : t.strides)
    if (stride < 0)
      raise(ErrorKind::value, "{}.strides={}: negative strides are not supported", name, t.strides_text());

  if (t.numel() == 0) return t;
  if (view->data == nullptr) raise(ErrorKind::value, "{}.data is null but {} has shape {}", name, name, t.shape_text());
  // The furthest addressable byte must be representable, so later offset arithmetic is safe.
  int64_t last = 0;
  for (int i = 0; i < t.ndim(); ++i) {
    int64_t term = 0;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &term) || __builtin_add_overflow(last, term, &last))
      raise(ErrorKind::value, "{} with shape {} and strides {} addresses more than 2^63 elements", name, t.shape_text(),
            t.strides_text());
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(last + 1, int64_t{std::max(dtype_size(view->dtype), 1)}, &bytes))
    raise(ErrorKind::value, "{} with shape {} and strides {} addresses more than 2^63 bytes", name, t.shape_text(),
          t.strides_text());
  return t;
}

void check_attention_strides(const CheckedTensor& t) {
  const int64_t element_bytes = dtype_size(t.view->dtype);
  const int last = t.ndim() - 1;
  if (t.shape[last] > 1 && t.strides[last] != 1)
    raise(ErrorKind::value, "{}.stride({})={}: the head dimension must be contiguous (stride 1)", t.name, last,
          t.strides[last]);
  if (t.numel() == 0) return;
  const auto address = reinterpret_cast<uintptr_t>(t.view->data);
  if (address % kAlignmentBytes != 0)
    raise(ErrorKind::value, "{}.data={:#x} is not {}-byte aligned", t.name, address, kAlignmentBytes);
  for (int i = 0; i < last; ++i) {
    if (t.shape[i] <= 1) continue;
    if ((t.strides[i] * element_bytes) % kAlignmentBytes != 0)
      raise(ErrorKind::value,
            "{}.stride({})={} elements ({} bytes) is not a multiple of {} bytes; strided views must keep "
            "16-byte alignment",
            t.name, i, t.strides[i], t.strides[i] * element_bytes, kAlignmentBytes);
  }
}

void check_no_self_overlap(const CheckedTensor& t) {
  // Sufficient condition: ordered by stride, each dimension steps over everything the
  // dimensions inside it can address.
  std::vector<int> dims;
  for (int i = 0; i < t.ndim(); ++i)
    if (t.shape[i] > 1) dims.push_back(i);
  std::sort(dims.begin(), dims.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  int64_t covered = 1;
  for (int d : dims) {
    if (t.strides[d] < covered)
      raise(ErrorKind::value,
            "{} with shape {} and strides {} has overlapping elements; it must not be "
            "written twice",
            t.name, t.shape_text(), t.strides_text());
    covered += (t.shape[d] - 1) * t.strides[d];
  }
}

void check_disjoint(const CheckedTensor& out, const CheckedTensor& input) {
  const CheckedTensor::Span a = out.span(), b = input.span();
  if (a.begin == a.end || b.begin == b.end) return;
  if (out.on_host() != input.on_host()) return;  // host and device memory cannot alias here
  if (a.begin < b.end && b.begin < a.end)
    raise(ErrorKind::value, "{} overlaps {} ({} bytes [{:#x}, {:#x}), {} bytes [{:#x}, {:#x}))", out.name, input.name,
          out.name, a.begin, a.end, input.name, b.begin, b.end);
}

}  // namespace tsattn
