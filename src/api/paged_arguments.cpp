#include "api/paged_arguments.hpp"

#include <limits>

#include "api/dtype.hpp"
#include "api/tensor_checks.hpp"
#include "api/validate.hpp"
#include "common/error.hpp"

namespace tsattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

const char* const kTableNames[] = {"qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len"};

int head_axis(PageLayout layout) { return layout == PageLayout::hnd ? 1 : 2; }

// The structure of a table, wherever it lives: int32 (TypeError otherwise, as for batch_prefill's
// indptrs) and 1-D.
void check_table_structure(const CheckedTensor& t) {
  if (t.view->dtype != TSATTN_DTYPE_INT32)
    raise(ErrorKind::type, "{} has dtype {}; expected int32", t.name, dtype_name(t.view->dtype));
  if (t.ndim() != 1) raise(ErrorKind::value, "{} must be 1-D (got shape {})", t.name, t.shape_text());
}

// A GPU-resident table: on q's device, contiguous (the gather reads it as a plain array), aligned.
void check_device_table(const CheckedTensor& t, int device_id) {
  check_residency(t, Residency::cuda, device_id, "q");
  if (t.shape[0] > 1 && t.strides[0] != 1)
    raise(ErrorKind::value, "{} on the GPU must be contiguous (got stride {})", t.name, t.strides[0]);
  if (t.numel > 0 && reinterpret_cast<uintptr_t>(t.view->data) % alignof(int32_t) != 0)
    raise(ErrorKind::value, "{}.data is not 4-byte aligned", t.name);
}

void check_causal(const PagedKv& kv) {
  for (int64_t b = 0; b < kv.batch; ++b) {
    const int64_t q_len = int64_t{kv.host.qo_indptr[b + 1]} - kv.host.qo_indptr[b];
    const int64_t kv_len = kv.lengths.kv_len[static_cast<size_t>(b)];
    if (q_len > kv_len)
      raise(ErrorKind::value, "mask_type='causal' needs Sq <= Sk in every request; request {} has Sq={} > Sk={}", b,
            q_len, kv_len);
  }
}

}  // namespace

void check_paged_options(const tsattn_prefill_options* options) {
  if (options == nullptr) return;
  check_struct_size(options->struct_size, sizeof(tsattn_prefill_options), "options", "tsattn_prefill_options");
  if (options->mask_type == TSATTN_MASK_VARIABLE_WINDOW)
    raise(ErrorKind::value,
          "mask_type='variable_window' is not available with a paged KV cache; use 'dense' or 'causal'");
  if (options->variable_window_token_starts != nullptr || options->variable_window_token_ends != nullptr)
    raise(ErrorKind::value, "variable_window_token_starts and _ends are not available with a paged KV cache");
}

MaskMode paged_mask(const tsattn_prefill_options* options) {
  return options != nullptr && options->mask_type == TSATTN_MASK_CAUSAL ? MaskMode::causal : MaskMode::dense;
}

PagedKv inspect_paged_kv(const PagedViews& views, int64_t page_size, PageLayout layout, MaskMode mask,
                         TableValues values) {
  check_page_size(page_size);
  const CheckedTensor q = inspect_tensor(views.q, "q");
  if (q.ndim() != 3) raise(ErrorKind::value, "q must be 3-D [total_q, Hq, D] (got shape {})", q.shape_text());
  PagedKv kv;
  kv.pools = check_page_pools(views.k_cache, views.v_cache, layout, page_size, Residency::cuda);
  const PagePool& pool = kv.pools.k;
  kv.device_id = views.k_cache->device_id;
  check_residency(q, Residency::cuda, kv.device_id, "k_cache");

  // q against the pools, named as the caller knows them (validate_arguments would say k).
  if (!is_attention_dtype(q.view->dtype))
    raise(ErrorKind::not_implemented, "q has dtype {}; supported: {}", dtype_name(q.view->dtype), supported_dtypes());
  if (q.view->dtype != pool.dtype)
    raise(ErrorKind::not_implemented, "q, k_cache and v_cache must share one dtype (got q={}, k_cache={})",
          dtype_name(q.view->dtype), dtype_name(pool.dtype));
  if (pool.head_dim != q.shape[2])
    raise(ErrorKind::value, "head dims differ: q.shape[-1]={} but k_cache.shape[-1]={}", q.shape[2], pool.head_dim);
  if (pool.num_kv_heads < 1 || q.shape[1] % pool.num_kv_heads != 0)
    raise(ErrorKind::value, "Hq=q.shape[1]={} must be a multiple of Hkv=k_cache.shape[{}]={}", q.shape[1],
          head_axis(layout), pool.num_kv_heads);
  kv.total_q = q.shape[0];

  // The tables: structure first, then one side for all four.
  const tsattn_tensor_view* table_views[] = {views.qo_indptr, views.paged_kv_indptr, views.paged_kv_indices,
                                             views.paged_kv_last_page_len};
  CheckedTensor tables[4];
  for (int i = 0; i < 4; ++i) {
    tables[i] = inspect_tensor(table_views[i], kTableNames[i]);
    check_table_structure(tables[i]);
  }
  for (int i = 1; i < 4; ++i)
    if (tables[i].on_host() != tables[0].on_host())
      raise(ErrorKind::value,
            "the page tables must all be on the host or all on the GPU, but qo_indptr is on {} and {} on {}",
            tables[0].device_text(), tables[i].name, tables[i].device_text());
  const CheckedTensor &qo = tables[0], &indptr = tables[1], &indices = tables[2], &last = tables[3];
  if (qo.shape[0] < 1) raise(ErrorKind::value, "qo_indptr must have B+1 >= 1 entries (got 0)");
  kv.batch = qo.shape[0] - 1;
  if (kv.batch > kInt32Max) raise(ErrorKind::value, "batch size {} is too large (int32)", kv.batch);
  if (indptr.shape[0] != qo.shape[0])
    raise(ErrorKind::value, "qo_indptr has {} entries but paged_kv_indptr has {}; both need B+1", qo.shape[0],
          indptr.shape[0]);
  if (last.shape[0] != kv.batch)
    raise(ErrorKind::value, "paged_kv_last_page_len has {} entries but needs B={} (qo_indptr has B+1={} entries)",
          last.shape[0], kv.batch, qo.shape[0]);
  if (indices.shape[0] > kInt32Max)
    raise(ErrorKind::value, "paged_kv_indices has {} entries; at most 2^31-1", indices.shape[0]);

  kv.tables_on_host = qo.on_host();
  if (kv.tables_on_host) {
    kv.host = {page_size,
               pool.num_pages,
               kv.total_q,
               host_int32_array(views.qo_indptr, "qo_indptr"),
               host_int32_array(views.paged_kv_indptr, "paged_kv_indptr"),
               host_int32_array(views.paged_kv_indices, "paged_kv_indices"),
               host_int32_array(views.paged_kv_last_page_len, "paged_kv_last_page_len")};
    if (values == TableValues::checked) {
      kv.lengths = check_paged_kv_tables(kv.host);
      if (mask == MaskMode::causal) check_causal(kv);
    }
  } else {
    for (const CheckedTensor& t : tables) check_device_table(t, kv.device_id);
    kv.device = {static_cast<const int32_t*>(indptr.view->data), static_cast<const int32_t*>(indices.view->data),
                 static_cast<const int32_t*>(last.view->data), kv.batch, indices.shape[0]};
  }

  // What the call writes must not be what it reads (q is validate_arguments').
  if (values == TableValues::checked) {
    const CheckedTensor pools[] = {inspect_tensor(views.k_cache, "k_cache"), inspect_tensor(views.v_cache, "v_cache")};
    for (const tsattn_tensor_view* written : {views.out, views.lse}) {
      if (written == nullptr) continue;
      const CheckedTensor w = inspect_tensor(written, written == views.out ? "out" : "lse");
      for (const CheckedTensor& t : pools) check_disjoint(w, t);
      for (const CheckedTensor& t : tables) check_disjoint(w, t);
    }
  }
  return kv;
}

PageLayout page_layout(int32_t kv_layout) {
  if (kv_layout == TSATTN_KV_LAYOUT_HND) return PageLayout::hnd;
  if (kv_layout == TSATTN_KV_LAYOUT_NHD) return PageLayout::nhd;
  raise(ErrorKind::value, "kv_layout={} is not one of HND (0), NHD (1)", kv_layout);
}

PagedPlanSettings check_paged_plan_options(const tsattn_paged_prefill_plan_options* options) {
  if (options == nullptr) raise(ErrorKind::value, "options is required (got a null pointer)");
  check_struct_size(options->struct_size, sizeof(tsattn_paged_prefill_plan_options), "options",
                    "tsattn_paged_prefill_plan_options");
  check_page_size(options->page_size);
  if (options->mask_type == TSATTN_MASK_VARIABLE_WINDOW)
    raise(ErrorKind::value,
          "mask_type='variable_window' is not available with a paged KV cache; use 'dense' or 'causal'");
  PagedPlanSettings paged;
  paged.page_size = options->page_size;
  paged.layout = page_layout(options->kv_layout);
  tsattn_prefill_plan_options& a = paged.attention;
  tsattn_prefill_plan_options_init(&a);
  a.device_id = options->device_id;
  a.layout = TSATTN_LAYOUT_PACKED;
  a.batch_size = options->batch_size;
  a.max_seq_len_q = options->max_seq_len_q;
  a.max_kv_len = options->max_kv_len;
  a.num_qo_heads = options->num_qo_heads;
  a.num_kv_heads = options->num_kv_heads;
  a.head_dim = options->head_dim;
  a.q_dtype = options->q_dtype;
  a.kv_dtype = options->kv_dtype;
  a.out_dtype = options->out_dtype;
  a.mask_type = options->mask_type;
  a.window_left = options->window_left;
  a.has_sm_scale = options->has_sm_scale;
  a.sm_scale = options->sm_scale;
  a.output_scale = options->output_scale;
  return paged;
}

void check_paged_run(const PagedKv& kv, const Problem& plan_base, const Capacity& c, TableValues values) {
  const PagePool& pool = kv.pools.k;
  const int axis = head_axis(pool.layout);
  if (pool.dtype != plan_base.input_dtype)
    raise(ErrorKind::value, "k_cache has dtype {} but the plan's kv_dtype is {}", dtype_name(pool.dtype),
          dtype_name(plan_base.input_dtype));
  if (pool.num_kv_heads != plan_base.num_kv_heads)
    raise(ErrorKind::value, "Hkv=k_cache.shape[{}]={} differs from the plan's num_kv_heads={}", axis, pool.num_kv_heads,
          plan_base.num_kv_heads);
  if (pool.head_dim != plan_base.head_dim)
    raise(ErrorKind::value, "head_dim=k_cache.shape[-1]={} differs from the plan's head_dim={}", pool.head_dim,
          plan_base.head_dim);
  if (kv.device_id != plan_base.device_id)
    raise(ErrorKind::value, "k_cache is on cuda:{} but the plan is for cuda:{}", kv.device_id, plan_base.device_id);
  if (values == TableValues::unchecked) return;
  if (kv.batch > c.batch)
    raise(ErrorKind::value, "B=qo_indptr.shape[0]-1={} exceeds the plan's batch_size={}", kv.batch, c.batch);
  if (!kv.tables_on_host) return;  // GPU values are never read back by a run
  for (int64_t b = 0; b < kv.batch; ++b) {
    const int64_t q_len = int64_t{kv.host.qo_indptr[b + 1]} - kv.host.qo_indptr[b];
    if (q_len > c.max_q_len)
      raise(ErrorKind::value, "request {} has Sq=qo_indptr[{}]-qo_indptr[{}]={}, more than the plan's max_seq_len_q={}",
            b, b + 1, b, q_len, c.max_q_len);
    const int64_t kv_len = kv.lengths.kv_len[static_cast<size_t>(b)];
    if (kv_len > c.max_kv_len)
      raise(ErrorKind::value,
            "request {} has Sk={} keys ({} pages of page_size={}, the last holding {}), more than the plan's "
            "max_kv_len={}",
            b, kv_len, kv.host.pages(b), kv.host.page_size, kv.host.paged_kv_last_page_len[b], c.max_kv_len);
  }
}

int64_t max_pages(int64_t max_kv_len, int64_t page_size) { return (max_kv_len + page_size - 1) / page_size; }

}  // namespace tsattn
