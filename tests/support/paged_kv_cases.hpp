// paged_kv_cases.hpp - paged KV caches for tests: random page tables and page pools in several
// stride styles, with every slot no request reads filled with NaN.
//
// The tables record, beside the int32 arrays, each request's page ids as a plain list, so that a
// test can find key j of request b (page_ids[b][j / page_size], slot j % page_size) without the
// indptr arithmetic the library does.
#pragma once

#include <tsattn/tsattn.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "api/dtype.hpp"
#include "api/paged_kv.hpp"
#include "ref/float_formats.hpp"
#include "support/tensors.hpp"

namespace tsattn::test {

// One request's query and key counts.
struct RequestLengths {
  int64_t q_len = 0, kv_len = 0;
};

struct PageTableValues {
  int64_t page_size = 16;
  int64_t num_pages = 0;
  std::vector<int32_t> qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len;
  std::vector<std::vector<int32_t>> page_ids;  // [b]: request b's pages, in order
  std::vector<int64_t> kv_len;                 // [b]: Sk_b as asked for

  int64_t batch() const { return static_cast<int64_t>(kv_len.size()); }
  int64_t total_q() const { return qo_indptr.back(); }

  // Views into this object: keep it alive while they are used.
  PagedKvTables tables() const {
    auto array = [](const std::vector<int32_t>& v) {
      return HostInt32Array{v.data(), static_cast<int64_t>(v.size()), 1};
    };
    return {page_size,
            num_pages,
            total_q(),
            array(qo_indptr),
            array(paged_kv_indptr),
            array(paged_kv_indices),
            array(paged_kv_last_page_len)};
  }
};

// Tables for the given requests: page ids drawn from a shuffled pool with a few spare pages, some
// ids reused (within a request and across requests) when `repeats`, garbage last_page_len for
// requests without pages (it is unread), and a few garbage entries past the last used index.
inline PageTableValues random_page_tables(const std::vector<RequestLengths>& requests, int64_t page_size,
                                          std::mt19937_64& rng, bool repeats = true) {
  PageTableValues t;
  t.page_size = page_size;
  int64_t needed = 0;
  for (const RequestLengths& r : requests) needed += (r.kv_len + page_size - 1) / page_size;
  t.num_pages = needed + static_cast<int64_t>(rng() % 4);
  std::vector<int32_t> fresh(static_cast<size_t>(t.num_pages));
  std::iota(fresh.begin(), fresh.end(), 0);
  std::shuffle(fresh.begin(), fresh.end(), rng);

  std::vector<int32_t> used;  // the fresh ids handed out so far
  bool repeated = false;
  for (const RequestLengths& r : requests) {
    std::vector<int32_t> ids;
    for (int64_t p = 0; p < (r.kv_len + page_size - 1) / page_size; ++p) {
      const bool reuse = repeats && !used.empty() && rng() % 4 == 0;
      const int32_t id = reuse ? used[rng() % used.size()] : fresh[used.size()];
      if (!reuse) used.push_back(id);
      repeated |= reuse;
      ids.push_back(id);
    }
    t.page_ids.push_back(std::move(ids));
  }
  // Where chance reused nothing, the last page of the last request with pages takes the id of the
  // first page: every table of two pages or more then repeats one.
  if (repeats && !repeated && used.size() >= 2)
    for (auto ids = t.page_ids.rbegin(); ids != t.page_ids.rend(); ++ids)
      if (!ids->empty()) {
        ids->back() = used.front();
        break;
      }

  t.qo_indptr = {0};
  t.paged_kv_indptr = {0};
  for (size_t b = 0; b < requests.size(); ++b) {
    const int64_t kv_len = requests[b].kv_len, pages = std::ssize(t.page_ids[b]);
    t.paged_kv_indices.insert(t.paged_kv_indices.end(), t.page_ids[b].begin(), t.page_ids[b].end());
    t.paged_kv_indptr.push_back(static_cast<int32_t>(t.paged_kv_indices.size()));
    t.qo_indptr.push_back(static_cast<int32_t>(t.qo_indptr.back() + requests[b].q_len));
    const int32_t garbage[] = {0, -3, static_cast<int32_t>(page_size) + 1, std::numeric_limits<int32_t>::min()};
    t.paged_kv_last_page_len.push_back(pages > 0 ? static_cast<int32_t>(kv_len - (pages - 1) * page_size)
                                                 : garbage[rng() % 4]);
    t.kv_len.push_back(kv_len);
  }
  for (uint64_t spare = rng() % 3; spare > 0; --spare) t.paged_kv_indices.push_back(rng() % 2 ? -1 : 1 << 30);
  return t;
}

// How the pool views lie in memory.
enum class PoolStyle {
  compact,      // each pool its own compact tensor
  padded,       // every axis (D included) padded in the storage: larger strides
  permuted,     // stored in the other layout's axis order: HND views over NHD storage and back
  interleaved,  // K and V halves of one [num_pages, 2, ...] buffer, as some engines keep them
};

inline const char* pool_style_name(PoolStyle s) {
  switch (s) {
    case PoolStyle::compact: return "compact";
    case PoolStyle::padded: return "padded";
    case PoolStyle::permuted: return "permuted";
    case PoolStyle::interleaved: return "interleaved";
  }
  return "?";
}

// The views' shape in a layout: HND [N, H, ps, D], NHD [N, ps, H, D].
inline std::vector<int64_t> pool_shape(PageLayout layout, int64_t pages, int64_t page_size, int64_t heads, int64_t d) {
  return layout == PageLayout::hnd ? std::vector<int64_t>{pages, heads, page_size, d}
                                   : std::vector<int64_t>{pages, page_size, heads, d};
}

// k_cache and v_cache views with their storage.
struct PagePoolTensors {
  PageLayout layout = PageLayout::hnd;
  HostTensor k_mem, v_mem;  // interleaved: k_mem holds both
  Tensor k, v;

  // Element (page, slot, head, d) of a view, from its strides and the layout's axis order.
  int64_t offset(const Tensor& t, int64_t page, int64_t slot, int64_t head, int64_t d) const {
    const std::vector<int64_t>& s = t.strides;
    const int64_t head_part = head * s[layout == PageLayout::hnd ? 1 : 2];
    const int64_t slot_part = slot * s[layout == PageLayout::hnd ? 2 : 1];
    return page * s[0] + head_part + slot_part + d * s[3];
  }
};

inline PagePoolTensors make_page_pools(tsattn_dtype dtype, PageLayout layout, int64_t pages, int64_t page_size,
                                       int64_t heads, int64_t d, PoolStyle style) {
  PagePoolTensors p;
  p.layout = layout;
  const std::vector<int64_t> shape = pool_shape(layout, pages, page_size, heads, d);
  auto view_of = [&](const HostTensor& mem, std::vector<int64_t> strides, int64_t first_element) {
    Tensor t = mem.tensor;
    t.data = static_cast<std::byte*>(mem.tensor.data) + first_element * dtype_size(dtype);
    t.shape = shape;
    t.strides = std::move(strides);
    return t;
  };
  switch (style) {
    case PoolStyle::compact: {
      p.k_mem = HostTensor(dtype, shape);
      p.v_mem = HostTensor(dtype, shape);
      p.k = view_of(p.k_mem, compact_strides(shape), 0);
      p.v = view_of(p.v_mem, compact_strides(shape), 0);
      break;
    }
    case PoolStyle::padded: {
      // 16 more elements of D keep every stride a multiple of 16 bytes, whatever the dtype.
      const std::vector<int64_t> storage = {shape[0] + 1, shape[1] + 1, shape[2] + 3, shape[3] + 16};
      p.k_mem = HostTensor(dtype, storage);
      p.v_mem = HostTensor(dtype, storage);
      p.k = view_of(p.k_mem, compact_strides(storage), 0);
      p.v = view_of(p.v_mem, compact_strides(storage), 0);
      break;
    }
    case PoolStyle::permuted: {
      const std::vector<int64_t> storage = {shape[0], shape[2], shape[1], shape[3]};  // axes 1 and 2 swapped
      const std::vector<int64_t> s = compact_strides(storage);
      p.k_mem = HostTensor(dtype, storage);
      p.v_mem = HostTensor(dtype, storage);
      p.k = view_of(p.k_mem, {s[0], s[2], s[1], s[3]}, 0);
      p.v = view_of(p.v_mem, {s[0], s[2], s[1], s[3]}, 0);
      break;
    }
    case PoolStyle::interleaved: {
      const std::vector<int64_t> storage = {shape[0], 2, shape[1], shape[2], shape[3]};
      const std::vector<int64_t> s = compact_strides(storage);
      p.k_mem = HostTensor(dtype, storage);
      p.k = view_of(p.k_mem, {s[0], s[2], s[3], s[4]}, 0);
      p.v = view_of(p.k_mem, {s[0], s[2], s[3], s[4]}, s[1]);
      break;
    }
  }
  for (HostTensor* mem : {&p.k_mem, &p.v_mem})
    if (mem->storage) std::memset(mem->storage.get(), 0xFF, mem->bytes);  // NaN in every attention dtype
  return p;
}

// A random value of the contract's test inputs (0.2 randn, 0.125 for fp8), never 0 once rounded.
inline void store_random(tsattn_dtype dtype, void* base, int64_t offset, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, dtype == TSATTN_DTYPE_FLOAT8_E4M3FN ? 0.125f : 0.2f);
  do {
    ref::store_element(dtype, base, offset, normal(rng));
  } while (ref::load_element(dtype, base, offset) == 0.0f);
}

// Fresh random values in every slot some request reads, in both pools; the rest stays NaN.
inline void fill_read_slots(PagePoolTensors& p, const PageTableValues& t, std::mt19937_64& rng) {
  const int64_t heads = p.k.shape[p.layout == PageLayout::hnd ? 1 : 2], d_count = p.k.shape[3];
  std::vector<int64_t> slots_read(static_cast<size_t>(t.num_pages), 0);
  for (int64_t b = 0; b < t.batch(); ++b) {
    const std::vector<int32_t>& ids = t.page_ids[static_cast<size_t>(b)];
    for (size_t n = 0; n < ids.size(); ++n) {
      const int64_t first_key = static_cast<int64_t>(n) * t.page_size;
      const int64_t used = n + 1 == ids.size() ? t.kv_len[static_cast<size_t>(b)] - first_key : t.page_size;
      int64_t& slots = slots_read[static_cast<size_t>(ids[n])];
      slots = std::max(slots, used);
    }
  }
  for (int64_t page = 0; page < t.num_pages; ++page)
    for (int64_t slot = 0; slot < slots_read[static_cast<size_t>(page)]; ++slot)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < d_count; ++d) {
          store_random(p.k.dtype, p.k.data, p.offset(p.k, page, slot, h, d), rng);
          store_random(p.v.dtype, p.v.data, p.offset(p.v, page, slot, h, d), rng);
        }
}

}  // namespace tsattn::test
