#include "api/plan_arguments.hpp"

#include <limits>

#include "api/dtype.hpp"
#include "common/error.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

void check_capacity(int64_t value, const char* name) {
  if (value < 1) raise(ErrorKind::value, "{}={} must be >= 1", name, value);
}

// The plan's values, as the one-shot call's options would carry them for this run.
tsattn_prefill_options run_options(const PlanSettings& plan, const RunViews& views, void* stream) {
  tsattn_prefill_options o;
  tsattn_prefill_options_init(&o);
  o.mask_type = plan.scalars.mask_type;
  o.window_left = plan.scalars.window_left;
  o.variable_window_token_starts = views.starts;
  o.variable_window_token_ends = views.ends;
  o.has_sm_scale = plan.scalars.has_sm_scale ? 1 : 0;
  o.sm_scale = plan.scalars.sm_scale;
  o.output_scale = plan.scalars.output_scale;
  o.out_dtype = plan.scalars.out_dtype;
  o.stream = stream;
  o.lse = views.lse;
  return o;
}

// Indptrs select the layout in the one-shot call; in a run the plan has chosen it.
void check_layout(const PlanSettings& plan, const RunViews& views) {
  const bool given = views.qo_indptr != nullptr || views.kv_indptr != nullptr;
  if (plan.base.layout == Layout::fixed && given)
    raise(ErrorKind::value, "the plan is for the fixed layout (packed=False) but {} was given",
          views.qo_indptr ? "qo_indptr" : "kv_indptr");
  if (plan.base.layout == Layout::packed && !given)
    raise(ErrorKind::value, "the plan is for the packed layout (packed=True): qo_indptr and kv_indptr are required");
}

void check_capacities(const PlanSettings& plan, const Problem& p) {
  const Capacity& c = plan.capacity;
  const auto at_most = [](int64_t value, int64_t limit, const char* what, const char* capacity) {
    if (value > limit) raise(ErrorKind::value, "{}={} exceeds the plan's {}={}", what, value, capacity, limit);
  };
  if (p.layout == Layout::fixed) {
    at_most(p.batch, c.batch, "B=q.shape[0]", "batch_size");
    at_most(p.q_tokens, c.max_q_len, "Sq=q.shape[1]", "max_seq_len_q");
    at_most(p.kv_tokens, c.max_kv_len, "Sk=k.shape[1]", "max_kv_len");
    return;
  }
  at_most(p.batch, c.batch, "B=qo_indptr.shape[0]-1", "batch_size");
  at_most(p.q_tokens, c.q_tokens(), "total_q=q.shape[0]", "batch_size*max_seq_len_q");
  at_most(p.kv_tokens, c.kv_tokens(), "total_k=k.shape[0]", "batch_size*max_kv_len");
  if (!p.indptr_on_host) return;  // GPU values are never read back by a run
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.q_len(b) > c.max_q_len)
      raise(ErrorKind::value, "request {} has Sq=qo_indptr[{}]-qo_indptr[{}]={}, more than the plan's max_seq_len_q={}",
            b, b + 1, b, p.q_len(b), c.max_q_len);
    if (p.kv_len(b) > c.max_kv_len)
      raise(ErrorKind::value, "request {} has Sk=kv_indptr[{}]-kv_indptr[{}]={}, more than the plan's max_kv_len={}", b,
            b + 1, b, p.kv_len(b), c.max_kv_len);
  }
}

// Compact row-major strides when the view gives none.
void resolve_strides(const tsattn_tensor_view& view, int64_t* strides) {
  if (view.strides != nullptr) {
    for (int i = 0; i < view.ndim; ++i) strides[i] = view.strides[i];
    return;
  }
  int64_t stride = 1;
  for (int i = view.ndim; i-- > 0;) {
    strides[i] = stride;
    stride *= view.shape[i] > 1 ? view.shape[i] : 1;
  }
}

const tsattn_tensor_view& present(const tsattn_tensor_view* view, const char* name, int rank) {
  if (view == nullptr) raise(ErrorKind::value, "{} is required (got a null tensor view)", name);
  if (view->ndim != rank || view->shape == nullptr)
    raise(ErrorKind::value, "{} must be {}-D for this plan (got ndim={})", name, rank, view->ndim);
  return *view;
}

void expect(int64_t value, int64_t wanted, const char* what, const char* plan_name) {
  if (value != wanted) raise(ErrorKind::value, "{}={} differs from the plan's {}={}", what, value, plan_name, wanted);
}

void expect_dtype(const tsattn_tensor_view& view, int32_t wanted, const char* name) {
  if (view.dtype != wanted)
    raise(ErrorKind::value, "{} has dtype {} but the plan expects {}", name, dtype_name(view.dtype),
          dtype_name(wanted));
}

bool same_shape(const tsattn_tensor_view& a, const tsattn_tensor_view& b) {
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return a.ndim == b.ndim;
}

}  // namespace

PlanSettings check_plan_options(const tsattn_prefill_plan_options* options) {
  if (options == nullptr) raise(ErrorKind::value, "options is required (got a null pointer)");
  check_struct_size(options->struct_size, sizeof(tsattn_prefill_plan_options), "options",
                    "tsattn_prefill_plan_options");
  PlanSettings plan;
  Problem& p = plan.base;
  if (options->layout != TSATTN_LAYOUT_FIXED && options->layout != TSATTN_LAYOUT_PACKED)
    raise(ErrorKind::value, "layout={} is not one of fixed (0), packed (1)", options->layout);
  p.layout = options->layout == TSATTN_LAYOUT_FIXED ? Layout::fixed : Layout::packed;

  plan.scalars = {options->mask_type, options->window_left,  options->has_sm_scale != 0,
                  options->sm_scale,  options->output_scale, options->out_dtype};
  const CheckedOptions checked = check_scalar_options(plan.scalars);

  if (!is_attention_dtype(options->q_dtype))
    raise(ErrorKind::not_implemented, "q_dtype={} is not supported; supported: {}", dtype_name(options->q_dtype),
          supported_dtypes());
  if (options->kv_dtype != options->q_dtype)
    raise(ErrorKind::not_implemented, "q, k and v must share one dtype (got q_dtype={}, kv_dtype={})",
          dtype_name(options->q_dtype), dtype_name(options->kv_dtype));
  if (options->head_dim != 128 && options->head_dim != 256)
    raise(ErrorKind::not_implemented, "head_dim={} is not supported; supported: 128, 256", options->head_dim);
  if (options->num_qo_heads < 1 || options->num_kv_heads < 1)
    raise(ErrorKind::value, "head counts must be >= 1 (got num_qo_heads={}, num_kv_heads={})", options->num_qo_heads,
          options->num_kv_heads);
  if (options->num_qo_heads % options->num_kv_heads != 0)
    raise(ErrorKind::value, "num_qo_heads={} must be a multiple of num_kv_heads={}", options->num_qo_heads,
          options->num_kv_heads);
  check_capacity(options->batch_size, "batch_size");
  check_capacity(options->max_seq_len_q, "max_seq_len_q");
  check_capacity(options->max_kv_len, "max_kv_len");
  if (options->device_id < 0) raise(ErrorKind::value, "device={} is not a CUDA device ordinal", options->device_id);

  Capacity& c = plan.capacity;
  c.layout = p.layout;
  c.mask = checked.mask;
  c.batch = options->batch_size;
  c.max_q_len = options->max_seq_len_q;
  c.max_kv_len = options->max_kv_len;
  c.num_qo_heads = options->num_qo_heads;
  c.num_kv_heads = options->num_kv_heads;
  c.head_dim = options->head_dim;
  // Token counts index int32 indptrs and row numbers on the device, as in the one-shot call.
  const auto rows = [&](int64_t per_request, const char* name) {
    if (per_request > kInt32Max / c.batch)
      raise(ErrorKind::value, "batch_size={} x {}={} is more than 2^31-1 rows", c.batch, name, per_request);
  };
  rows(c.max_q_len, "max_seq_len_q");
  rows(c.max_kv_len, "max_kv_len");

  p.residency = Residency::cuda;
  p.device_id = options->device_id;
  p.num_qo_heads = c.num_qo_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.input_dtype = static_cast<tsattn_dtype>(options->q_dtype);
  plan.scalars.out_dtype = checked.out_dtype != TSATTN_DTYPE_UNSET ? checked.out_dtype : options->q_dtype;
  p.output_dtype = static_cast<tsattn_dtype>(plan.scalars.out_dtype);
  p.mask = checked.mask;
  p.window_left = checked.window_left;
  p.sm_scale = resolve_sm_scale(checked, p.head_dim);
  p.output_scale = checked.output_scale;
  // The largest shape, so that a spec or a bound read from base covers every run.
  p.batch = c.batch;
  p.q_tokens = c.q_tokens();
  p.kv_tokens = c.kv_tokens();
  return plan;
}

Problem checked_run_problem(const PlanSettings& plan, const RunViews& views, void* stream) {
  check_layout(plan, views);
  const tsattn_prefill_options options = run_options(plan, views, stream);
  const Arguments args{views.q, views.k, views.v, views.qo_indptr, views.kv_indptr, &options, views.out};
  Problem p = validate_arguments(args, Residency::cuda);
  const Problem& want = plan.base;
  if (p.input_dtype != want.input_dtype)
    raise(ErrorKind::value, "q has dtype {} but the plan's q_dtype is {}", dtype_name(p.input_dtype),
          dtype_name(want.input_dtype));
  const int head_axis = p.layout == Layout::fixed ? 2 : 1;
  if (p.head_dim != want.head_dim)
    raise(ErrorKind::value, "head_dim=q.shape[-1]={} differs from the plan's head_dim={}", p.head_dim, want.head_dim);
  if (p.num_qo_heads != want.num_qo_heads)
    raise(ErrorKind::value, "Hq=q.shape[{}]={} differs from the plan's num_qo_heads={}", head_axis, p.num_qo_heads,
          want.num_qo_heads);
  if (p.num_kv_heads != want.num_kv_heads)
    raise(ErrorKind::value, "Hkv=k.shape[{}]={} differs from the plan's num_kv_heads={}", head_axis, p.num_kv_heads,
          want.num_kv_heads);
  if (p.device_id != want.device_id)
    raise(ErrorKind::value, "q is on cuda:{} but the plan is for cuda:{}", p.device_id, want.device_id);
  check_capacities(plan, p);
  return p;
}

Problem unchecked_run_problem(const PlanSettings& plan, const RunViews& views, void* stream) {
  check_layout(plan, views);
  const Problem& want = plan.base;
  const bool fixed = want.layout == Layout::fixed;
  const int rank = fixed ? 4 : 3;
  const tsattn_tensor_view& q = present(views.q, "q", rank);
  const tsattn_tensor_view& k = present(views.k, "k", rank);
  const tsattn_tensor_view& v = present(views.v, "v", rank);
  const tsattn_tensor_view& out = present(views.out, "out", rank);
  // What the kernel's code and the reads below assume of the tensors.
  expect_dtype(q, want.input_dtype, "q");
  expect_dtype(k, want.input_dtype, "k");
  expect_dtype(v, want.input_dtype, "v");
  expect_dtype(out, want.output_dtype, "out");
  expect(q.shape[rank - 1], want.head_dim, "head_dim=q.shape[-1]", "head_dim");
  expect(k.shape[rank - 1], want.head_dim, "head_dim=k.shape[-1]", "head_dim");
  expect(q.shape[rank - 2], want.num_qo_heads, "Hq=q.shape[-2]", "num_qo_heads");
  expect(k.shape[rank - 2], want.num_kv_heads, "Hkv=k.shape[-2]", "num_kv_heads");
  if (!same_shape(v, k)) raise(ErrorKind::value, "v.shape must equal k.shape");
  if (!same_shape(out, q)) raise(ErrorKind::value, "out.shape must equal q.shape");

  Problem p = want;
  p.stream = stream;
  int64_t strides[4];
  resolve_strides(q, strides);
  p.q = token_tensor(q.data, strides, p.layout);
  resolve_strides(k, strides);
  p.k = token_tensor(k.data, strides, p.layout);
  resolve_strides(v, strides);
  p.v = token_tensor(v.data, strides, p.layout);
  resolve_strides(out, strides);
  p.out = token_tensor(out.data, strides, p.layout);
  if (fixed) {
    if (k.shape[0] != q.shape[0])
      raise(ErrorKind::value, "batch sizes differ: q.shape[0]={} but k.shape[0]={}", q.shape[0], k.shape[0]);
    p.batch = q.shape[0];
    p.q_tokens = q.shape[1];
    p.kv_tokens = k.shape[1];
  } else {
    const tsattn_tensor_view& qo = present(views.qo_indptr, "qo_indptr", 1);
    const tsattn_tensor_view& kv = present(views.kv_indptr, "kv_indptr", 1);
    if (qo.shape[0] < 1 || kv.shape[0] != qo.shape[0])
      raise(ErrorKind::value, "qo_indptr and kv_indptr need B+1 >= 1 entries each (got {} and {})", qo.shape[0],
            kv.shape[0]);
    p.batch = qo.shape[0] - 1;
    p.q_tokens = q.shape[0];
    p.kv_tokens = k.shape[0];
    p.qo_indptr = static_cast<const int32_t*>(qo.data);
    p.kv_indptr = static_cast<const int32_t*>(kv.data);
    p.indptr_on_host = qo.device_type != TSATTN_DEVICE_CUDA;
    // Host values are read by the run itself: both on one side, with memory behind them.
    if ((kv.device_type != TSATTN_DEVICE_CUDA) != p.indptr_on_host)
      raise(ErrorKind::value, "qo_indptr and kv_indptr must both be on the host or both on the GPU");
    if (p.indptr_on_host && (qo.data == nullptr || kv.data == nullptr))
      raise(ErrorKind::value, "{} is null", qo.data == nullptr ? "qo_indptr.data" : "kv_indptr.data");
  }
  if (want.mask == MaskMode::variable_window) {
    const int bounds_rank = fixed ? 2 : 1;
    const tsattn_tensor_view* bounds[2] = {views.starts, views.ends};
    const char* names[2] = {"variable_window_token_starts", "variable_window_token_ends"};
    RowIndexTensor* targets[2] = {&p.window_starts, &p.window_ends};
    for (int i = 0; i < 2; ++i) {
      const tsattn_tensor_view& b = present(bounds[i], names[i], bounds_rank);
      expect_dtype(b, TSATTN_DTYPE_INT32, names[i]);
      for (int axis = 0; axis < bounds_rank; ++axis)
        if (b.shape[axis] != q.shape[axis])
          raise(ErrorKind::value, "{}.shape[{}]={} must equal q.shape[{}]={}", names[i], axis, b.shape[axis], axis,
                q.shape[axis]);
      resolve_strides(b, strides);
      *targets[i] = row_index_tensor(b.data, strides, p.layout);
    }
  }
  if (views.lse != nullptr) {
    const tsattn_tensor_view& lse = present(views.lse, "lse", rank - 1);
    expect_dtype(lse, TSATTN_DTYPE_FLOAT32, "lse");
    for (int axis = 0; axis < rank - 1; ++axis)
      if (lse.shape[axis] != q.shape[axis])
        raise(ErrorKind::value, "lse.shape[{}]={} must equal q.shape[{}]={}", axis, lse.shape[axis], axis,
              q.shape[axis]);
    resolve_strides(lse, strides);
    p.lse = token_tensor(lse.data, strides, p.layout);
  }
  clamp_to_capacity(p, plan.capacity);
  return p;
}

}  // namespace tsattn
