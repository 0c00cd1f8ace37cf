#include "ref/paged_reference.hpp"

#include <cstring>
#include <limits>

#include "api/dtype.hpp"
#include "api/paged_arguments.hpp"
#include "api/tensor_checks.hpp"
#include "api/validate.hpp"
#include "common/checked_int.hpp"

namespace tsattn::ref {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The options a paged call takes, less lse (the oracle computes no log-sum-exp).
void check_oracle_options(const tsattn_prefill_options* options) {
  check_paged_options(options);
  if (options != nullptr && options->lse != nullptr)
    raise(ErrorKind::value, "lse: the paged CPU reference computes no log-sum-exp");
}

}  // namespace

GatheredPagedProblem::GatheredPagedProblem(const PagedArguments& args) {
  check_oracle_options(args.options);
  const CheckedTensor q = inspect_tensor(args.q, "q");
  if (q.ndim() != 3) raise(ErrorKind::value, "q must be 3-D [total_q, Hq, D] (got shape {})", q.shape_text());

  const PagePools pools = check_page_pools(args.k_cache, args.v_cache, args.kv_layout, args.page_size, Residency::host);
  const PagedKvTables tables{
      .page_size = args.page_size,
      .num_pages = pools.k.num_pages,
      .total_q = q.shape[0],
      .qo_indptr = host_int32_array(args.qo_indptr, "qo_indptr"),
      .paged_kv_indptr = host_int32_array(args.paged_kv_indptr, "paged_kv_indptr"),
      .paged_kv_indices = host_int32_array(args.paged_kv_indices, "paged_kv_indices"),
      .paged_kv_last_page_len = host_int32_array(args.paged_kv_last_page_len, "paged_kv_last_page_len"),
  };
  lengths_ = check_paged_kv_tables(tables);

  // The pools' heads and head dim against q's, named as the caller knows them.
  const int head_axis = args.kv_layout == PageLayout::hnd ? 1 : 2;
  if (pools.k.head_dim != q.shape[2])
    raise(ErrorKind::value, "head dims differ: q.shape[-1]={} but k_cache.shape[-1]={}", q.shape[2], pools.k.head_dim);
  if (pools.k.num_kv_heads < 1 || q.shape[1] % pools.k.num_kv_heads != 0)
    raise(ErrorKind::value, "Hq=q.shape[1]={} must be a multiple of Hkv=k_cache.shape[{}]={}", q.shape[1], head_axis,
          pools.k.num_kv_heads);
  const int64_t total_k = lengths_.kv_indptr.back();
  if (total_k > kInt32Max)
    raise(ErrorKind::value, "the CPU reference packs the requests' {} keys into one array; at most 2^31-1", total_k);

  // Out is written by write_output: it must not overlap what the call reads.
  if (args.out != nullptr) {
    const CheckedTensor out = inspect_tensor(args.out, "out");
    for (auto [view, name] :
         {std::pair{args.k_cache, "k_cache"}, std::pair{args.v_cache, "v_cache"},
          std::pair{args.paged_kv_indptr, "paged_kv_indptr"}, std::pair{args.paged_kv_indices, "paged_kv_indices"},
          std::pair{args.paged_kv_last_page_len, "paged_kv_last_page_len"}})
      check_disjoint(out, inspect_tensor(view, name));
  }

  // Gather: key j of request b, head h, becomes row kv_indptr[b] + j of the packed copies.
  const int64_t element_bytes = dtype_size(pools.k.dtype);
  const int64_t heads = pools.k.num_kv_heads, row_bytes = pools.k.head_dim * element_bytes;
  const int64_t bytes = (Checked<int64_t>(total_k) * heads * row_bytes).value();
  k_.resize(static_cast<size_t>((bytes + 15) / 16));
  v_.resize(k_.size());
  auto* k_rows = reinterpret_cast<std::byte*>(k_.data());
  auto* v_rows = reinterpret_cast<std::byte*>(v_.data());
  for (int64_t b = 0; b < tables.batch(); ++b) {
    const int64_t first_row = lengths_.kv_indptr[static_cast<size_t>(b)];
    for (int64_t j = 0; j < lengths_.kv_len[static_cast<size_t>(b)]; ++j) {
      const KeySlot key = locate_key(tables, b, j);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t dst = ((first_row + j) * heads + h) * row_bytes;
        std::memcpy(k_rows + dst,
                    static_cast<const std::byte*>(pools.k.data) +
                        pools.k.element_offset(key.page_id, key.slot, h, 0) * element_bytes,
                    static_cast<size_t>(row_bytes));
        std::memcpy(v_rows + dst,
                    static_cast<const std::byte*>(pools.v.data) +
                        pools.v.element_offset(key.page_id, key.slot, h, 0) * element_bytes,
                    static_cast<size_t>(row_bytes));
      }
    }
  }

  kv_indptr_.assign(lengths_.kv_indptr.begin(), lengths_.kv_indptr.end());  // each <= total_k <= 2^31-1
  packed_shape_[0] = total_k;
  packed_shape_[1] = heads;
  packed_shape_[2] = pools.k.head_dim;
  indptr_shape_[0] = static_cast<int64_t>(kv_indptr_.size());
  const tsattn_tensor_view k_view{k_.data(), pools.k.dtype, TSATTN_DEVICE_CPU, 0, 3, packed_shape_, nullptr};
  const tsattn_tensor_view v_view{v_.data(), pools.k.dtype, TSATTN_DEVICE_CPU, 0, 3, packed_shape_, nullptr};
  const tsattn_tensor_view kv_indptr_view{
      kv_indptr_.data(), TSATTN_DTYPE_INT32, TSATTN_DEVICE_CPU, 0, 1, indptr_shape_, nullptr};
  const Arguments packed{args.q, &k_view, &v_view, args.qo_indptr, &kv_indptr_view, args.options, args.out};
  problem_ = validate_arguments(packed, Residency::host);
}

std::vector<float> reference_paged_prefill(const PagedArguments& args, Accumulation acc) {
  const GatheredPagedProblem gathered(args);
  return reference_prefill(gathered.problem(), acc);
}

}  // namespace tsattn::ref
