#include "api/tensor_checks.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/ranges.h>

#include "api/dtype.hpp"
#include "common/checked_int.hpp"

namespace tsattn {

namespace {

constexpr int64_t kAlignmentBytes = 16;

}  // namespace

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
  if (bytes == 0) return {};
  const auto begin = reinterpret_cast<uintptr_t>(view->data);
  return {begin, (Checked<uintptr_t>(begin) + static_cast<uintptr_t>(bytes)).value()};
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

  if (view->strides != nullptr) t.strides.assign(view->strides, view->strides + view->ndim);

  // A size that wraps would let a huge view pass as a small (or empty) one, so none may.
  auto overflows = [&](const char* what) {
    raise(ErrorKind::value, "{}.shape={} with {}.strides={} overflows int64: {} is not representable", name,
          t.shape_text(), name, view->strides != nullptr ? t.strides_text() : "NULL (compact)", what);
  };
  Checked<int64_t> numel = 1;
  for (int64_t extent : t.shape) numel = numel * extent;
  if (numel.overflowed()) overflows("the element count (the product of the extents)");
  t.numel = numel.value();

  if (view->strides == nullptr) {
    // Compact row-major; an extent of 0 steps like 1, so that an empty view still gets strides.
    t.strides.resize(t.shape.size());
    Checked<int64_t> stride = 1;
    for (int i = t.ndim(); i-- > 0;) {
      if (stride.overflowed()) overflows("a compact stride");
      t.strides[i] = stride.value();
      stride = stride * std::max<int64_t>(t.shape[i], 1);
    }
  }
  for (int64_t stride : t.strides)
    if (stride < 0)
      raise(ErrorKind::value, "{}.strides={}: negative strides are not supported", name, t.strides_text());

  if (t.numel == 0) return t;
  if (view->data == nullptr) raise(ErrorKind::value, "{}.data is null but {} has shape {}", name, name, t.shape_text());
  Checked<int64_t> last = 0;
  for (int i = 0; i < t.ndim(); ++i) last = last + Checked<int64_t>(t.shape[i] - 1) * t.strides[i];
  if (last.overflowed()) overflows("the largest element offset");
  const Checked<int64_t> bytes = (last + 1) * std::max(dtype_size(view->dtype), 1);
  if (bytes.overflowed()) overflows("the byte span");
  t.bytes = bytes.value();
  const auto address = reinterpret_cast<uintptr_t>(view->data);
  if ((Checked<uintptr_t>(address) + static_cast<uintptr_t>(t.bytes)).overflowed())
    raise(ErrorKind::value, "{}.data={:#x} with a span of {} bytes runs past the end of the address space", name,
          address, t.bytes);
  return t;
}

void check_attention_strides(const CheckedTensor& t) {
  const int64_t element_bytes = dtype_size(t.view->dtype);
  const int last = t.ndim() - 1;
  if (t.shape[last] > 1 && t.strides[last] != 1)
    raise(ErrorKind::value, "{}.stride({})={}: the head dimension must be contiguous (stride 1)", t.name, last,
          t.strides[last]);
  if (t.numel == 0) return;
  const auto address = reinterpret_cast<uintptr_t>(t.view->data);
  if (address % kAlignmentBytes != 0)
    raise(ErrorKind::value, "{}.data={:#x} is not {}-byte aligned", t.name, address, kAlignmentBytes);
  for (int i = 0; i < last; ++i) {
    if (t.shape[i] <= 1) continue;
    // Within t.bytes, since this dimension has a second index.
    const int64_t stride_bytes = (Checked<int64_t>(t.strides[i]) * element_bytes).value();
    if (stride_bytes % kAlignmentBytes != 0)
      raise(ErrorKind::value,
            "{}.stride({})={} elements ({} bytes) is not a multiple of {} bytes; strided views must keep "
            "16-byte alignment",
            t.name, i, t.strides[i], stride_bytes, kAlignmentBytes);
  }
}

void check_no_self_overlap(const CheckedTensor& t) {
  if (t.numel == 0) return;  // writes nothing
  // Sufficient condition: ordered by stride, each dimension steps over everything the
  // dimensions inside it can address. covered stays within the largest offset + 1.
  std::vector<int> dims;
  for (int i = 0; i < t.ndim(); ++i)
    if (t.shape[i] > 1) dims.push_back(i);
  std::sort(dims.begin(), dims.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  Checked<int64_t> covered = 1;
  for (int d : dims) {
    if (t.strides[d] < covered.value())
      raise(ErrorKind::value,
            "{} with shape {} and strides {} has overlapping elements; it must not be "
            "written twice",
            t.name, t.shape_text(), t.strides_text());
    covered = covered + Checked<int64_t>(t.shape[d] - 1) * t.strides[d];
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

void check_residency(const CheckedTensor& t, Residency residency, int device_id, const char* anchor) {
  if (residency == Residency::host) {
    if (!t.on_host())
      raise(ErrorKind::value, "{} must be in host memory for the CPU reference (got {})", t.name, t.device_text());
    return;
  }
  if (t.view->device_type != TSATTN_DEVICE_CUDA)
    raise(ErrorKind::value, "{} must be a CUDA tensor (got {})", t.name, t.device_text());
  if (t.view->device_id != device_id)
    raise(ErrorKind::value, "{} is on {} but {} is on cuda:{}; all tensors must share one device", t.name,
          t.device_text(), anchor, device_id);
}

}  // namespace tsattn
