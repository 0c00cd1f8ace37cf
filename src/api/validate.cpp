#include "api/validate.hpp"

#include <cmath>
#include <array>
#include <numbers>
#include <limits>
#include <optional>

#include <fmt/ranges.h>

#include "api/dtype.hpp"
#include "api/tensor_checks.hpp"
#include "common/checked_int.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

float check_scale(double value, const char* name) {
  if (!std::isfinite(value) || value <= 0.0) raise(ErrorKind::value, "{}={} must be finite and > 0", name, value);
  const auto as_float = static_cast<float>(value);
  if (!std::isfinite(as_float) || as_float <= 0.0f)
    raise(ErrorKind::value, "{}={} is not finite and > 0 as float32 (it becomes {})", name, value, as_float);
  return as_float;
}

CheckedOptions check_options(const tsattn_prefill_options* options) {
  tsattn_prefill_options defaults;
  tsattn_prefill_options_init(&defaults);
  if (options == nullptr) options = &defaults;
  check_struct_size(options->struct_size, sizeof(tsattn_prefill_options), "options", "tsattn_prefill_options");
  const CheckedOptions checked =
      check_scalar_options({options->mask_type, options->window_left, options->has_sm_scale != 0, options->sm_scale,
                            options->output_scale, options->out_dtype});

  const bool has_starts = options->variable_window_token_starts != nullptr;
  const bool has_ends = options->variable_window_token_ends != nullptr;
  if (checked.mask == MaskMode::variable_window && !(has_starts && has_ends))
    raise(ErrorKind::value,
          "mask_type='variable_window' requires both variable_window_token_starts and "
          "variable_window_token_ends (missing: {})",
          has_starts ? "variable_window_token_ends" : (has_ends ? "variable_window_token_starts" : "both"));
  if (checked.mask != MaskMode::variable_window && (has_starts || has_ends))
    raise(ErrorKind::value, "{} is only allowed with mask_type='variable_window' (got mask_type='{}')",
          has_starts ? "variable_window_token_starts" : "variable_window_token_ends", mask_name(options->mask_type));
  return checked;
}

void check_rank(const CheckedTensor& t, int rank, const char* layout_text) {
  if (t.ndim() != rank)
    raise(ErrorKind::value, "{} must be {}-D {} (got shape {})", t.name, rank, layout_text, t.shape_text());
}

void check_int32_index(const CheckedTensor& t) {
  if (t.view->dtype != TSATTN_DTYPE_INT32)
    raise(ErrorKind::value, "{} must have dtype int32 (got {})", t.name, dtype_name(t.view->dtype));
  if (t.numel > 0 && reinterpret_cast<uintptr_t>(t.view->data) % alignof(int32_t) != 0)
    raise(ErrorKind::value, "{}.data is not 4-byte aligned", t.name);
}

// Indptr values: start at 0, non-decreasing, end at the packed extent.
void check_indptr_values(const std::vector<int32_t>& values, const char* name, int64_t total,
                         const char* packed_tensor) {
  if (values.front() != 0) raise(ErrorKind::value, "{}[0]={} must be 0", name, values.front());
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] < values[i - 1])
      raise(ErrorKind::value, "{} must be non-decreasing, but {}[{}]={} < {}[{}]={}", name, name, i, values[i], name,
            i - 1, values[i - 1]);
  if (values.back() != total)
    raise(ErrorKind::value, "{}[-1]={} must equal {}.shape[0]={}", name, values.back(), packed_tensor, total);
}

std::vector<int32_t> read_host_indptr(const CheckedTensor& t) {
  std::vector<int32_t> values(static_cast<size_t>(t.shape[0]));
  const auto* data = static_cast<const int32_t*>(t.view->data);
  for (size_t i = 0; i < values.size(); ++i)  // within the largest offset that inspect_tensor() bounded
    values[i] = data[(Checked<int64_t>(static_cast<int64_t>(i)) * t.strides[0]).value()];
  return values;
}

// The causal mask is bottom-right aligned, which needs Sq <= Sk in every request.
void check_causal_lengths(const Problem& p) {
  if (p.mask != MaskMode::causal) return;
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.q_len(b) <= p.kv_len(b)) continue;
    if (p.layout == Layout::packed)
      raise(ErrorKind::value, "mask_type='causal' needs Sq <= Sk in every request; request {} has Sq={} > Sk={}", b,
            p.q_len(b), p.kv_len(b));
    raise(ErrorKind::value, "mask_type='causal' needs Sq <= Sk; got Sq=q.shape[1]={} > Sk=k.shape[1]={}", p.q_len(b),
          p.kv_len(b));
  }
}

}  // namespace

TokenTensor token_tensor(void* data, const int64_t* strides, Layout layout) {
  TokenTensor tt;
  tt.data = data;
  if (layout == Layout::fixed) {
    tt.batch_stride = strides[0];
    tt.token_stride = strides[1];
    tt.head_stride = strides[2];
  } else {
    tt.token_stride = strides[0];
    tt.head_stride = strides[1];
  }
  return tt;
}

RowIndexTensor row_index_tensor(const void* data, const int64_t* strides, Layout layout) {
  RowIndexTensor r;
  r.data = static_cast<const int32_t*>(data);
  if (layout == Layout::fixed) {
    r.batch_stride = strides[0];
    r.row_stride = strides[1];
  } else {
    r.row_stride = strides[0];
  }
  return r;
}

std::string supported_dtypes() { return "float16, bfloat16, float8_e4m3fn"; }

float resolve_sm_scale(const CheckedOptions& options, int head_dim) {
  return options.sm_scale ? static_cast<float>(*options.sm_scale)
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

const char* mask_name(int32_t mask) {
  switch (mask) {
    case TSATTN_MASK_DENSE: return "dense";
    case TSATTN_MASK_CAUSAL: return "causal";
    case TSATTN_MASK_VARIABLE_WINDOW: return "variable_window";
    default: return "?";
  }
}

void check_struct_size(size_t given, size_t known, const char* name, const char* type) {
  if (given < known)
    raise(ErrorKind::value, "{}.struct_size={} is smaller than {} ({} bytes); initialise {} with {}_init()", name,
          given, type, known, name, type);
  if (given > known)
    raise(ErrorKind::not_implemented,
          "{}.struct_size={} comes from a newer tsattn (this library {} knows {} bytes); upgrade libtsattn", name,
          given, TSATTN_VERSION_STRING, known);
}

CheckedOptions check_scalar_options(const ScalarOptions& options) {
  CheckedOptions checked;
  switch (options.mask_type) {
    case TSATTN_MASK_DENSE: checked.mask = MaskMode::dense; break;
    case TSATTN_MASK_CAUSAL: checked.mask = MaskMode::causal; break;
    case TSATTN_MASK_VARIABLE_WINDOW: checked.mask = MaskMode::variable_window; break;
    default:
      raise(ErrorKind::value, "mask_type={} is not one of dense (0), causal (1), variable_window (2)",
            options.mask_type);
  }

  const int64_t window = options.window_left;
  if (window == 0) raise(ErrorKind::value, "window_left=0 is not allowed; use -1 to disable the window");
  if (window < -1) raise(ErrorKind::value, "window_left={} is not allowed; use -1 (no window) or a value >= 1", window);
  if (window >= 1 && checked.mask == MaskMode::variable_window)
    raise(ErrorKind::value, "window_left={} cannot be combined with mask_type='variable_window'", window);
  if (window >= 1 && checked.mask != MaskMode::causal)
    raise(ErrorKind::value, "window_left={} requires mask_type='causal' (got mask_type='{}')", window,
          mask_name(options.mask_type));
  checked.window_left = window;

  if (options.has_sm_scale) {
    checked.sm_scale = check_scale(options.sm_scale, "sm_scale");
    // Kernels scale scores by sm_scale * log2(e) (they use exp2): that product must stay finite.
    if (!std::isfinite(static_cast<float>(*checked.sm_scale * std::numbers::log2e)))
      raise(ErrorKind::value, "sm_scale={} is too large: sm_scale * log2(e) overflows float32", options.sm_scale);
  }
  checked.output_scale = check_scale(options.output_scale, "output_scale");

  if (options.out_dtype != TSATTN_DTYPE_UNSET && !is_attention_dtype(options.out_dtype))
    raise(ErrorKind::not_implemented, "out_dtype={} is not supported; supported: {}", dtype_name(options.out_dtype),
          supported_dtypes());
  checked.out_dtype = options.out_dtype;
  return checked;
}

void check_device_indptr_values(const Problem& p, std::vector<int32_t> qo, std::vector<int32_t> kv) {
  check_indptr_values(qo, "qo_indptr", p.q_tokens, "q");
  check_indptr_values(kv, "kv_indptr", p.kv_tokens, "k");
  Problem with_lengths = p;  // the same checks as for host indptrs, on the values read back
  with_lengths.indptr_on_host = true;
  with_lengths.qo_indptr_host = std::move(qo);
  with_lengths.kv_indptr_host = std::move(kv);
  check_causal_lengths(with_lengths);
}

Problem validate_arguments(const Arguments& args, Residency residency) {
  const CheckedOptions options = check_options(args.options);
  Problem p;
  p.residency = residency;
  p.mask = options.mask;
  p.window_left = options.window_left;
  p.output_scale = options.output_scale;
  p.stream = args.options ? args.options->stream : nullptr;

  // Layout: both indptrs select the packed layout; one alone is a mistake.
  if ((args.qo_indptr == nullptr) != (args.kv_indptr == nullptr))
    raise(ErrorKind::value, "qo_indptr and kv_indptr must be given together for the packed layout (got only {})",
          args.qo_indptr ? "qo_indptr" : "kv_indptr");
  p.layout = args.qo_indptr ? Layout::packed : Layout::fixed;
  const bool packed = p.layout == Layout::packed;

  const CheckedTensor q = inspect_tensor(args.q, "q");
  const CheckedTensor k = inspect_tensor(args.k, "k");
  const CheckedTensor v = inspect_tensor(args.v, "v");
  const CheckedTensor out = inspect_tensor(args.out, "out");
  std::optional<CheckedTensor> qo_indptr, kv_indptr;
  if (packed) {
    qo_indptr = inspect_tensor(args.qo_indptr, "qo_indptr");
    kv_indptr = inspect_tensor(args.kv_indptr, "kv_indptr");
  }

  // Dtypes: one attention dtype for q, k, v; out's resolved as docs/contract.md says.
  if (!is_attention_dtype(q.view->dtype))
    raise(ErrorKind::not_implemented, "q has dtype {}; supported: {}", dtype_name(q.view->dtype), supported_dtypes());
  if (k.view->dtype != q.view->dtype || v.view->dtype != q.view->dtype)
    raise(ErrorKind::not_implemented, "q, k and v must share one dtype (got q={}, k={}, v={})",
          dtype_name(q.view->dtype), dtype_name(k.view->dtype), dtype_name(v.view->dtype));
  p.input_dtype = static_cast<tsattn_dtype>(q.view->dtype);
  if (!is_attention_dtype(out.view->dtype))
    raise(ErrorKind::not_implemented, "out has dtype {}; supported: {}", dtype_name(out.view->dtype),
          supported_dtypes());
  if (options.out_dtype != TSATTN_DTYPE_UNSET && options.out_dtype != out.view->dtype)
    raise(ErrorKind::value, "out_dtype={} differs from out.dtype={}", dtype_name(options.out_dtype),
          dtype_name(out.view->dtype));
  p.output_dtype = static_cast<tsattn_dtype>(out.view->dtype);
  // An indptr of another dtype is a TypeError, as in prims_ts; bounds tensors' is a ValueError
  // (check_int32_index).
  for (const std::optional<CheckedTensor>* t : {&qo_indptr, &kv_indptr})
    if (*t && (*t)->view->dtype != TSATTN_DTYPE_INT32)
      raise(ErrorKind::type, "{} has dtype {}; expected int32", (*t)->name, dtype_name((*t)->view->dtype));

  // Devices.
  p.device_id = q.view->device_id;
  for (const CheckedTensor* t : {&q, &k, &v, &out}) check_residency(*t, residency, p.device_id, "q");

  // Ranks and shapes.
  const char* q_layout = packed ? "[total_q, Hq, D] (packed layout)" : "[B, Sq, Hq, D] (fixed layout)";
  const char* kv_layout = packed ? "[total_k, Hkv, D] (packed layout)" : "[B, Sk, Hkv, D] (fixed layout)";
  const int rank = packed ? 3 : 4;
  check_rank(q, rank, q_layout);
  check_rank(k, rank, kv_layout);
  if (v.shape != k.shape) raise(ErrorKind::value, "v.shape={} must equal k.shape={}", v.shape_text(), k.shape_text());
  if (out.shape != q.shape)
    raise(ErrorKind::value, "out.shape={} must equal q.shape={}", out.shape_text(), q.shape_text());
  const int head_axis = rank - 2;
  const int64_t head_dim = q.shape[rank - 1];
  if (k.shape[rank - 1] != head_dim)
    raise(ErrorKind::value, "head dims differ: q.shape[-1]={} but k.shape[-1]={}", head_dim, k.shape[rank - 1]);
  if (head_dim != 128 && head_dim != 256)
    raise(ErrorKind::not_implemented, "head_dim={} (q.shape[-1]) is not supported; supported: 128, 256", head_dim);
  const int64_t hq = q.shape[head_axis], hkv = k.shape[head_axis];
  if (hq < 1 || hkv < 1)
    raise(ErrorKind::value, "head counts must be >= 1 (got Hq=q.shape[{}]={}, Hkv=k.shape[{}]={})", head_axis, hq,
          head_axis, hkv);
  if (hq % hkv != 0)
    raise(ErrorKind::value, "Hq=q.shape[{}]={} must be a multiple of Hkv=k.shape[{}]={}", head_axis, hq, head_axis,
          hkv);
  if (hq > kInt32Max) raise(ErrorKind::value, "Hq={} is too large (int32)", hq);
  p.head_dim = static_cast<int>(head_dim);
  p.num_qo_heads = static_cast<int>(hq);
  p.num_kv_heads = static_cast<int>(hkv);

  if (packed) {
    p.q_tokens = q.shape[0];
    p.kv_tokens = k.shape[0];
  } else {
    if (k.shape[0] != q.shape[0])
      raise(ErrorKind::value, "batch sizes differ: q.shape[0]={} but k.shape[0]={}", q.shape[0], k.shape[0]);
    p.batch = q.shape[0];
    p.q_tokens = q.shape[1];
    p.kv_tokens = k.shape[1];
  }
  // Token counts index int32 indptrs and int32 row numbers on the device. Each is at most q's
  // (k's) element count, as every other extent is >= 1, so it fits in int64.
  const int64_t q_rows = (Checked<int64_t>(p.q_tokens) * (packed ? 1 : p.batch)).value();
  const int64_t kv_rows = (Checked<int64_t>(p.kv_tokens) * (packed ? 1 : p.batch)).value();
  if (q_rows > kInt32Max || kv_rows > kInt32Max)
    raise(ErrorKind::value, "too many tokens: {} query rows and {} key rows; at most 2^31-1 each", q_rows, kv_rows);

  // Strides and memory.
  for (const CheckedTensor* t : {&q, &k, &v, &out}) check_attention_strides(*t);
  check_no_self_overlap(out);
  p.q = token_tensor(q.view->data, q.strides.data(), p.layout);
  p.k = token_tensor(k.view->data, k.strides.data(), p.layout);
  p.v = token_tensor(v.view->data, v.strides.data(), p.layout);
  p.out = token_tensor(out.view->data, out.strides.data(), p.layout);

  // Indptrs and bounds, for the overlap check with out.
  std::array<CheckedTensor, 4> index_tensors;
  size_t index_count = 0;

  if (packed) {
    const CheckedTensor &qo = *qo_indptr, &kvp = *kv_indptr;
    for (const CheckedTensor* t : {&qo, &kvp}) {
      check_int32_index(*t);
      if (t->ndim() != 1 || t->shape[0] < 1)
        raise(ErrorKind::value, "{} must be 1-D with B+1 >= 1 entries (got shape {})", t->name, t->shape_text());
      if (residency == Residency::host || t->view->device_type != TSATTN_DEVICE_CUDA) {
        if (!t->on_host())
          raise(ErrorKind::value, "{} must be on the host or on q's CUDA device (got {})", t->name, t->device_text());
      } else {
        check_residency(*t, residency, p.device_id, "q");
        if (t->strides[0] != 1 && t->shape[0] > 1)
          raise(ErrorKind::value, "{} on the GPU must be contiguous (got stride {})", t->name, t->strides[0]);
      }
    }
    if (qo.shape[0] != kvp.shape[0])
      raise(ErrorKind::value, "qo_indptr has {} entries but kv_indptr has {}; both need B+1", qo.shape[0],
            kvp.shape[0]);
    if (qo.on_host() != kvp.on_host())
      raise(ErrorKind::value, "qo_indptr ({}) and kv_indptr ({}) must both be on the host or both on the GPU",
            qo.device_text(), kvp.device_text());
    p.batch = qo.shape[0] - 1;
    p.qo_indptr = static_cast<const int32_t*>(qo.view->data);
    p.kv_indptr = static_cast<const int32_t*>(kvp.view->data);
    p.indptr_on_host = qo.on_host();
    if (p.indptr_on_host) {
      p.qo_indptr_host = read_host_indptr(qo);
      p.kv_indptr_host = read_host_indptr(kvp);
      check_indptr_values(p.qo_indptr_host, "qo_indptr", p.q_tokens, "q");
      check_indptr_values(p.kv_indptr_host, "kv_indptr", p.kv_tokens, "k");
    }
    index_tensors[index_count++] = qo;
    index_tensors[index_count++] = kvp;
  }
  if (p.batch > kInt32Max) raise(ErrorKind::value, "batch size {} is too large (int32)", p.batch);

  if (p.lengths_on_host()) check_causal_lengths(p);

  if (p.mask == MaskMode::variable_window) {
    const char* bounds_layout = packed ? "[total_q]" : "[B, Sq]";
    const Dims expected = packed ? Dims{p.q_tokens} : Dims{p.batch, p.q_tokens};
    auto check_bounds = [&](const tsattn_tensor_view* view, const char* name) {
      const CheckedTensor bounds = inspect_tensor(view, name);
      check_int32_index(bounds);
      check_residency(bounds, residency, p.device_id, "q");
      if (bounds.shape != expected)
        raise(ErrorKind::value, "{}.shape={} must be {} = [{}]", name, bounds.shape_text(), bounds_layout,
              fmt::join(expected, ", "));
      index_tensors[index_count++] = bounds;
      return row_index_tensor(bounds.view->data, bounds.strides.data(), p.layout);
    };
    p.window_starts = check_bounds(args.options->variable_window_token_starts, "variable_window_token_starts");
    p.window_ends = check_bounds(args.options->variable_window_token_ends, "variable_window_token_ends");
  }

  for (const CheckedTensor* t : {&q, &k, &v}) check_disjoint(out, *t);
  for (size_t i = 0; i < index_count; ++i) check_disjoint(out, index_tensors[i]);

  // Null options are the defaults, which ask for no lse.
  if (args.options != nullptr && args.options->lse != nullptr) {
    const CheckedTensor lse = inspect_tensor(args.options->lse, "lse");
    if (lse.view->dtype != TSATTN_DTYPE_FLOAT32)
      raise(ErrorKind::type, "lse has dtype {}; it must be float32", dtype_name(lse.view->dtype));
    check_residency(lse, residency, p.device_id, "q");
    Dims expected;
    expected.assign(q.shape.begin(), q.shape.end() - 1);
    if (lse.shape != expected)
      raise(ErrorKind::value, "lse.shape={} must be q.shape[:-1]=[{}] ({})", lse.shape_text(),
            fmt::join(expected, ", "), packed ? "[total_q, Hq]" : "[B, Sq, Hq]");
    if (lse.numel > 0 && reinterpret_cast<uintptr_t>(lse.view->data) % alignof(float) != 0)
      raise(ErrorKind::value, "lse.data is not 4-byte aligned");
    check_no_self_overlap(lse);
    for (const CheckedTensor* t : {&q, &k, &v, &out}) check_disjoint(lse, *t);
    for (size_t i = 0; i < index_count; ++i) check_disjoint(lse, index_tensors[i]);
    p.lse.data = lse.view->data;
    if (packed) {
      p.lse.token_stride = lse.strides[0];
      p.lse.head_stride = lse.strides[1];
    } else {
      p.lse.batch_stride = lse.strides[0];
      p.lse.token_stride = lse.strides[1];
      p.lse.head_stride = lse.strides[2];
    }
  }

  p.sm_scale = resolve_sm_scale(options, p.head_dim);
  return p;
}

}  // namespace tsattn
