#include "ref/reference.hpp"

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "ref/float_formats.hpp"

namespace tsattn::ref {

namespace {

// The hot loops work on 32-byte vectors (GCC/Clang vector extensions): pairs of SSE2 operations on
// baseline x86-64, single AVX operations in the avx2 clone of run_item below. Arithmetic is
// lane-wise, so every sum keeps its program order and both clones give the same bits.
typedef double f64x4 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
template <class T>
struct Simd;
template <>
struct Simd<double> {
  using Vec = f64x4;
};
template <>
struct Simd<float> {
  using Vec = f32x8;
};
template <class T>
constexpr int64_t kLanes = 32 / sizeof(T);
// Four vectors of accumulators per micro-kernel: four independent add chains, and eight SSE
// registers, leaving room for the operands.
constexpr int kAccumulators = 4;

// Keys per tile (16 in double, 32 in float). K is stored so that, for each d, the keys of a tile
// sit side by side: one query's scores for the tile then accumulate lane-wise in registers, with
// no horizontal reduction, and every score is still a sequential sum over d. QK and PV walk the
// keys tile by tile with every query vector of a work item inside, so a tile of K or V (16 KiB
// for D 128) comes from memory once per item and then from L1.
template <class T>
constexpr int64_t kKeyTile = kAccumulators* kLanes<T>;
// Output columns one PV pass keeps in registers while streaming over keys.
template <class T>
constexpr int64_t kColumnChunk = kAccumulators* kLanes<T>;
// Query vectors (rows times the heads of one GQA group) per work item: they share one K/V pass,
// and their score rows (32 x Sk) stay small enough to live in cache.
constexpr int64_t kVectorsPerItem = 32;

// run_item is compiled for baseline x86-64 and for AVX2 and picked at load time, so the binary
// runs on any x86-64 machine and uses wide vectors where they exist. FMA is left out on purpose:
// contracting a * b + c would make results depend on the machine.
// The kernels it calls are forced inline so that they are compiled into each clone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TSATTN_REF_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TSATTN_REF_CLONES
#endif
#define TSATTN_REF_KERNEL [[gnu::always_inline]] inline

struct WorkItem {
  int64_t request;
  int kv_head;
  int64_t row_begin, row_end;
};

// Per-worker buffers. The decoded K/V of the last (request, kv head) are kept: the shared work
// counter hands consecutive items, which mostly share them, to the same few workers.
template <class T>
struct Workspace {
  int64_t request = -1;
  int kv_head = -1;
  std::vector<T> k_tiles;        // [ceil(Sk / tile)][D][tile], zero padded
  std::vector<T> v;              // [Sk][D]
  std::vector<T> q;              // [vectors][D]
  std::vector<T> scores;         // [vectors][Sk rounded up to a whole tile]
  std::vector<T> out;            // [vectors][D]
  std::vector<T> sums;           // [vectors]
  std::vector<KeyRange> ranges;  // per query row of the item
  std::vector<float> row;        // one row before widening to T
};

void require_host(const Problem& p, const char* what) {
  if (p.residency != Residency::host)
    throw Error(ErrorKind::value, fmt::format("{} reads host memory; the Problem was validated "
                                              "for CUDA tensors",
                                              what));
  if (p.layout == Layout::packed &&
      (std::ssize(p.qo_indptr_host) != p.batch + 1 || std::ssize(p.kv_indptr_host) != p.batch + 1))
    throw Error(ErrorKind::value, fmt::format("{} needs the packed indptrs on the host", what));
  if (p.head_dim % kColumnChunk<float> != 0)
    throw Error(ErrorKind::not_implemented, fmt::format("{} handles head dims that are multiples of {}, not {}", what,
                                                        kColumnChunk<float>, p.head_dim));
}

int64_t element_offset(const TokenTensor& t, int64_t b, int64_t token, int64_t head) {
  return b * t.batch_stride + token * t.token_stride + head * t.head_stride;
}

KeyRange visible_keys(const Problem& p, int64_t b, int64_t i, int64_t q_len, int64_t kv_len) {
  switch (p.mask) {
    case MaskMode::dense: return {0, kv_len - 1};
    case MaskMode::causal: return causal_key_range(i, q_len, kv_len, p.window_left);
    case MaskMode::variable_window:
      return variable_key_range(p.window_bound(p.window_starts, b, i), p.window_bound(p.window_ends, b, i), kv_len);
  }
  return {0, -1};
}

template <class T>
void decode_row(const Problem& p, const TokenTensor& t, int64_t offset, Workspace<T>& ws, T* dst) {
  ws.row.resize(static_cast<size_t>(p.head_dim));
  load_elements(p.input_dtype, t.data, offset, p.head_dim, ws.row.data());
  std::copy(ws.row.begin(), ws.row.end(), dst);
}

template <class T>
void decode_kv(const Problem& p, int64_t b, int kv_head, Workspace<T>& ws) {
  if (ws.request == b && ws.kv_head == kv_head) return;
  const int64_t d_count = p.head_dim, kv_len = p.kv_len(b), first_token = p.kv_token_offset(b);
  constexpr int64_t tile = kKeyTile<T>;
  const int64_t tiles = (kv_len + tile - 1) / tile;
  ws.k_tiles.assign(static_cast<size_t>(tiles * tile * d_count), T{0});
  ws.v.resize(static_cast<size_t>(kv_len * d_count));
  std::vector<T> key(static_cast<size_t>(d_count));
  for (int64_t j = 0; j < kv_len; ++j) {
    decode_row(p, p.k, element_offset(p.k, b, first_token + j, kv_head), ws, key.data());
    T* column = ws.k_tiles.data() + (j / tile) * tile * d_count + j % tile;
    for (int64_t d = 0; d < d_count; ++d) column[d * tile] = key[static_cast<size_t>(d)];
    decode_row(p, p.v, element_offset(p.v, b, first_token + j, kv_head), ws, ws.v.data() + j * d_count);
  }
  ws.request = b;
  ws.kv_head = kv_head;
}

// scores[u] = q . k_u for the keys of one tile.
template <class T>
TSATTN_REF_KERNEL void score_tile(const T* q, const T* k_tile, int64_t d_count, T* scores) {
  using Vec = typename Simd<T>::Vec;
  Vec acc[kAccumulators] = {};
  for (int64_t d = 0; d < d_count; ++d) {
    const T qd = q[d];
    const T* k = k_tile + d * kKeyTile<T>;
    for (int u = 0; u < kAccumulators; ++u) {
      Vec keys;
      std::memcpy(&keys, k + u * kLanes<T>, sizeof keys);
      acc[u] += qd * keys;
    }
  }
  for (int u = 0; u < kAccumulators; ++u) std::memcpy(scores + u * kLanes<T>, &acc[u], sizeof acc[u]);
}

// Turns scores[first..last] into unnormalized softmax weights in place; returns their sum.
template <class T>
TSATTN_REF_KERNEL T softmax_weights(T* scores, int64_t first, int64_t last, T scale) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = first; j <= last; ++j) {
    scores[j] *= scale;
    max = std::max(max, scores[j]);
  }
  // Eight partial sums: in fp32 the rounding error then grows far slower with Sk.
  constexpr int kPartials = 8;
  T partial[kPartials] = {};
  int64_t j = first;
  for (; j + kPartials <= last + 1; j += kPartials) {
    for (int u = 0; u < kPartials; ++u) {
      scores[j + u] = std::exp(scores[j + u] - max);
      partial[u] += scores[j + u];
    }
  }
  for (; j <= last; ++j) {
    scores[j] = std::exp(scores[j] - max);
    partial[0] += scores[j];
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

// out += sum_{j in [first, last]} weights[j] * v[j].
template <class T>
TSATTN_REF_KERNEL void accumulate_pv(const T* weights, const T* v, int64_t first, int64_t last, int64_t d_count,
                                     T* out) {
  using Vec = typename Simd<T>::Vec;
  for (int64_t c = 0; c < d_count; c += kColumnChunk<T>) {
    // Accumulators copied one by one, so that they live in registers, not in memory.
    Vec acc[kAccumulators];
    for (int u = 0; u < kAccumulators; ++u) std::memcpy(&acc[u], out + c + u * kLanes<T>, sizeof acc[u]);
    for (int64_t j = first; j <= last; ++j) {
      const T w = weights[j];
      const T* row = v + j * d_count + c;
      for (int u = 0; u < kAccumulators; ++u) {
        Vec values;
        std::memcpy(&values, row + u * kLanes<T>, sizeof values);
        acc[u] += w * values;
      }
    }
    for (int u = 0; u < kAccumulators; ++u) std::memcpy(out + c + u * kLanes<T>, &acc[u], sizeof acc[u]);
  }
}

template <class T>
TSATTN_REF_CLONES void run_item(const Problem& p, const WorkItem& item, Workspace<T>& ws, float* result) {
  const int64_t b = item.request, q_len = p.q_len(b), kv_len = p.kv_len(b);
  const int64_t group = p.group_size(), d_count = p.head_dim;
  const int64_t rows = item.row_end - item.row_begin, vectors = rows * group;

  ws.ranges.resize(static_cast<size_t>(rows));
  int64_t lo = kv_len, hi = -1;
  for (int64_t r = 0; r < rows; ++r) {
    const KeyRange range = visible_keys(p, b, item.row_begin + r, q_len, kv_len);
    ws.ranges[static_cast<size_t>(r)] = range;
    if (!range.empty()) {
      lo = std::min(lo, range.first);
      hi = std::max(hi, range.last);
    }
  }
  if (hi < lo) return;  // no row sees a key: the result already holds zeros

  decode_kv(p, b, item.kv_head, ws);
  constexpr int64_t tile = kKeyTile<T>;
  const int64_t padded_keys = (kv_len + tile - 1) / tile * tile;
  ws.q.resize(static_cast<size_t>(vectors * d_count));
  ws.scores.resize(static_cast<size_t>(vectors * padded_keys));
  ws.out.assign(static_cast<size_t>(vectors * d_count), T{0});
  ws.sums.resize(static_cast<size_t>(vectors));
  // Vector r * group + g is query row row_begin + r of query head kv_head * group + g.
  const int64_t first_q_token = p.q_token_offset(b);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < group; ++g)
      decode_row(p, p.q, element_offset(p.q, b, first_q_token + item.row_begin + r, item.kv_head * group + g), ws,
                 ws.q.data() + (r * group + g) * d_count);

  auto range_of = [&](int64_t vec) { return ws.ranges[static_cast<size_t>(vec / group)]; };
  const int64_t first_tile = lo / tile * tile;

  for (int64_t t = first_tile; t <= hi; t += tile) {
    for (int64_t vec = 0; vec < vectors; ++vec) {
      const KeyRange range = range_of(vec);
      if (range.first <= t + tile - 1 && t <= range.last)
        score_tile(ws.q.data() + vec * d_count, ws.k_tiles.data() + t * d_count, d_count,
                   ws.scores.data() + vec * padded_keys + t);
    }
  }

  const T sm_scale = static_cast<T>(p.sm_scale);
  for (int64_t vec = 0; vec < vectors; ++vec) {
    const KeyRange range = range_of(vec);
    if (!range.empty())
      ws.sums[static_cast<size_t>(vec)] =
          softmax_weights(ws.scores.data() + vec * padded_keys, range.first, range.last, sm_scale);
  }

  for (int64_t t = first_tile; t <= hi; t += tile) {
    for (int64_t vec = 0; vec < vectors; ++vec) {
      const KeyRange range = range_of(vec);
      const int64_t first = std::max(range.first, t);
      const int64_t last = std::min(range.last, t + tile - 1);
      if (first <= last)
        accumulate_pv(ws.scores.data() + vec * padded_keys, ws.v.data(), first, last, d_count,
                      ws.out.data() + vec * d_count);
    }
  }

  const T output_scale = static_cast<T>(p.output_scale);
  const int64_t heads = p.num_qo_heads;
  for (int64_t vec = 0; vec < vectors; ++vec) {
    if (range_of(vec).empty()) continue;
    const T factor = output_scale / ws.sums[static_cast<size_t>(vec)];
    const int64_t row = output_row(p, b, item.row_begin + vec / group);
    const int64_t head = item.kv_head * group + vec % group;
    float* dst = result + (row * heads + head) * d_count;
    const T* src = ws.out.data() + vec * d_count;
    for (int64_t d = 0; d < d_count; ++d) dst[d] = static_cast<float>(src[d] * factor);
  }
}

std::vector<WorkItem> make_work_items(const Problem& p) {
  const int64_t rows_per_item = std::max<int64_t>(1, kVectorsPerItem / p.group_size());
  std::vector<WorkItem> items;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q_len = p.q_len(b);
    if (p.kv_len(b) == 0) continue;  // every row of the request outputs 0
    for (int kv_head = 0; kv_head < p.num_kv_heads; ++kv_head)
      for (int64_t r = 0; r < q_len; r += rows_per_item)
        items.push_back({b, kv_head, r, std::min(q_len, r + rows_per_item)});
  }
  return items;
}

// Calls body(index, state) for every index in [0, count) on all hardware threads, each worker
// with its own default-constructed State; indexes are handed out in order. The first exception
// stops the remaining work and is rethrown here.
template <class State, class Body>
void parallel_for(size_t count, const Body& body) {
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      State state;
      for (size_t i = next++; i < count; i = next++) body(i, state);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };

  const size_t workers = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), count);
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // fewer threads only cost time
    }
  }
  worker();
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
}

template <class T>
void run_items(const Problem& p, const std::vector<WorkItem>& items, float* result) {
  parallel_for<Workspace<T>>(items.size(), [&](size_t i, Workspace<T>& ws) { run_item(p, items[i], ws, result); });
}

struct NoState {};

}  // namespace

int64_t output_rows(const Problem& p) { return p.layout == Layout::fixed ? p.batch * p.q_tokens : p.q_tokens; }

int64_t output_row(const Problem& p, int64_t b, int64_t i) {
  return p.layout == Layout::fixed ? b * p.q_tokens + i : p.q_token_offset(b) + i;
}

std::vector<float> reference_prefill(const Problem& p, Accumulation acc) {
  require_host(p, "reference_prefill");
  std::vector<float> result(static_cast<size_t>(output_rows(p) * p.num_qo_heads * p.head_dim), 0.0f);
  const std::vector<WorkItem> items = make_work_items(p);
  if (acc == Accumulation::fp64)
    run_items<double>(p, items, result.data());
  else
    run_items<float>(p, items, result.data());
  return result;
}

void write_output(const Problem& p, const std::vector<float>& values) {
  require_host(p, "write_output");
  const int64_t heads = p.num_qo_heads, d_count = p.head_dim;
  if (std::ssize(values) != output_rows(p) * heads * d_count)
    throw Error(ErrorKind::value, fmt::format("write_output: {} values for an output of {} rows x {} heads x {}",
                                              values.size(), output_rows(p), heads, d_count));
  // Encoding is slow enough per element (~20 ns) to be worth all threads on large outputs.
  std::vector<std::pair<int64_t, int64_t>> rows;  // (request, row)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.q_len(b); ++i) rows.emplace_back(b, i);
  constexpr size_t kRowsPerTask = 16;
  const size_t tasks = (rows.size() + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for<NoState>(tasks, [&](size_t task, NoState&) {
    const size_t end = std::min(rows.size(), (task + 1) * kRowsPerTask);
    for (size_t n = task * kRowsPerTask; n < end; ++n) {
      const auto [b, i] = rows[n];
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t dst = element_offset(p.out, b, p.q_token_offset(b) + i, h);
        const float* src = values.data() + (output_row(p, b, i) * heads + h) * d_count;
        for (int64_t d = 0; d < d_count; ++d) store_element(p.output_dtype, p.out.data, dst + d, src[d]);
      }
    }
  });
}

}  // namespace tsattn::ref
