// test_attention.cpp - batch_prefill on the GPU against the CPU oracle: a fixed matrix over
// every mode, a seeded randomized sweep, strided inputs, streams and back-to-back specs.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_spec.hpp"
#include "common/knobs.hpp"
#include "common/log.hpp"
#include "gpu/attention_case.hpp"
#include "jit/driver/device_context.hpp"
#include "support/scoped_env.hpp"

namespace tsattn::test {
namespace {

uint64_t test_seed() {
  const std::string configured = knob_string(Knob::test_seed);
  return configured.empty() ? std::random_device{}() : std::stoull(configured);
}

// Largest error seen per input/output dtype pair, printed at the end of a suite.
struct ErrorSummary {
  std::map<std::string, std::pair<double, double>> worst;  // pair -> (max abs, rel norm)
  int cases = 0;

  void add(const AttentionCase& c, const CaseOutcome& o) {
    ++cases;
    auto& [abs_error, rel_error] =
        worst[fmt::format("{}->{}", dtype_short(c.input_dtype), dtype_short(c.output_dtype))];
    abs_error = std::max(abs_error, o.comparison.max_abs_error);
    rel_error = std::max(rel_error, o.comparison.rel_norm_error);
  }
  static const char* dtype_short(tsattn_dtype d) {
    return d == TSATTN_DTYPE_FLOAT16 ? "f16" : (d == TSATTN_DTYPE_BFLOAT16 ? "bf16" : "e4m3");
  }
  std::string text() const {
    std::string s = fmt::format("{} cases; worst errors per dtype pair:", cases);
    for (const auto& [pair, e] : worst)
      s += fmt::format(" {} max_abs={:.3g} rel_norm={:.3g};", pair, e.first, e.second);
    return s;
  }
};

void check_case(const AttentionCase& c, std::mt19937_64& rng, ErrorSummary& summary, CUstream stream = nullptr) {
  const CaseOutcome o = run_attention_case(c, rng, stream);
  INFO(c.describe());
  INFO(o.message);
  INFO(o.comparison.first_problem);
  CHECK(o.status == TSATTN_OK);
  CHECK(o.comparison.unwritten == 0);
  CHECK(o.comparison.outside_tolerance == 0);
  if (o.status == TSATTN_OK) summary.add(c, o);
}

struct HeadConfig {
  int hq, hkv;
};
constexpr HeadConfig kHeadConfigs[] = {{4, 4}, {8, 2}, {8, 1}, {6, 3}};
constexpr tsattn_dtype kDtypes[] = {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN};

// Lengths (q_lens, kv_lens) per layout; causal masks need Sq <= Sk in every request.
struct Lengths {
  std::vector<int32_t> q, kv;
  bool causal_ok;
};
std::vector<Lengths> matrix_lengths(bool packed) {
  if (!packed)
    return {
        {{1, 1}, {1, 1}, true},         {{17}, {17}, true},     {{127, 127}, {127, 127}, true}, {{128}, {128}, true},
        {{129, 129}, {129, 129}, true}, {{1000}, {1000}, true}, {{100, 100}, {333, 333}, true}, {{300}, {77}, false}};
  return {{{5, 0, 129, 1}, {9, 0, 200, 1}, true},
          {{128, 127, 0}, {128, 1000, 7}, false},
          {{1, 17, 300}, {1, 17, 300}, true},
          {{0, 0}, {0, 0}, true},
          {{64, 0, 33}, {0, 40, 33}, false}};
}

// prepared.call() captured into a CUDA graph on its own stream, ready to replay.
class CapturedCall {
 public:
  explicit CapturedCall(PreparedCase& prepared) {
    const driver::Api& cu = driver::api();
    std::string message;
    driver::check(cu.cuStreamBeginCapture(stream_.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    const tsattn_status status = prepared.call(stream_.get(), &message);
    driver::check(cu.cuStreamEndCapture(stream_.get(), &graph_), "cuStreamEndCapture");
    INFO(message);
    REQUIRE(status == TSATTN_OK);
    driver::check(cu.cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  ~CapturedCall() {
    if (exec_) driver::api().cuGraphExecDestroy(exec_);
    if (graph_) driver::api().cuGraphDestroy(graph_);
  }
  CapturedCall(const CapturedCall&) = delete;
  CapturedCall& operator=(const CapturedCall&) = delete;

  // Replays the graph and waits for it (throws if a kernel faulted).
  void replay() {
    driver::check(driver::api().cuGraphLaunch(exec_, stream_.get()), "cuGraphLaunch");
    stream_.synchronize();
  }

 private:
  Stream stream_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// Captures prepared.call(), then replays it `replays` times, each time with fresh inputs (and,
// with resplit, new request lengths) written in place, checking every replay.
void check_graph_replays(PreparedCase& prepared, std::mt19937_64& rng, int replays, bool resplit) {
  CapturedCall captured(prepared);
  for (int replay = 0; replay < replays; ++replay) {
    if (replay > 0) prepared.refresh(rng, resplit);
    prepared.poison_output();
    captured.replay();
    const ref::Comparison cmp = prepared.check();
    INFO(prepared.current().describe(), " replay ", replay);
    INFO(cmp.first_problem);
    CHECK(cmp.passed());
  }
}

std::string last_kernel() { return tsattn_last_kernel_name(); }

// The family this process picks on device 0 by itself, or nullptr when TSATTN_KERNEL_FAMILY forces one.
const char* automatic_family() {
  if (knob_string(Knob::kernel_family) != "auto") return nullptr;
  return driver::device_info(0).cc_major == 9 ? "sm90a" : "sm80";
}

// True when device 0 picks the sm90a family by itself; otherwise says why the test is skipped.
bool hopper_family_selected() {
  const char* family = automatic_family();
  if (family != nullptr && std::string(family) == "sm90a") return true;
  MESSAGE("skipped: needs a compute capability 9.x device 0 and no TSATTN_KERNEL_FAMILY");
  return false;
}

// The canonical name of a D128 bf16 -> bf16 causal kernel of `family` for device 0's arch.
std::string causal_bf16_d128(const char* family, const char* layout) {
  const std::optional<Arch> arch = arch_for_compute_capability(driver::device_info(0).cc_major);
  return fmt::format("prefill.{}.{}.d128.bf16_bf16.causal.{}", family, arch ? arch_name(*arch) : "?", layout);
}

// Log lines at `threshold` and above while alive; restores stderr and the previous level after.
class CapturedLog {
 public:
  explicit CapturedLog(LogLevel threshold = LogLevel::info) : previous_(log_level()) {
    set_log_level(threshold);
    set_log_sink([this](LogLevel level, std::string_view message) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(level, std::string(message));
    });
  }
  ~CapturedLog() {
    set_log_sink({});
    set_log_level(previous_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  // The messages starting with `prefix`, in order.
  std::vector<std::string> lines_with_prefix(const std::string& prefix) {
    std::lock_guard lock(mutex_);
    std::vector<std::string> found;
    for (const auto& entry : lines_)
      if (entry.second.rfind(prefix, 0) == 0) found.push_back(entry.second);
    return found;
  }
  // The levels at which a message starting with `prefix` was logged, in order.
  std::vector<LogLevel> levels_of_prefix(const std::string& prefix) {
    std::lock_guard lock(mutex_);
    std::vector<LogLevel> levels;
    for (const auto& [level, line] : lines_)
      if (line.rfind(prefix, 0) == 0) levels.push_back(level);
    return levels;
  }

 private:
  LogLevel previous_;
  std::mutex mutex_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
};

TEST_SUITE("gpu/attention") {
  TEST_CASE("kernel families: Hopper runs sm90a (fixed, packed, odd size-1 strides), other GPUs sm80") {
    TSATTN_REQUIRE_GPU();
    const char* family = automatic_family();
    if (family == nullptr) {
      MESSAGE("skipped: TSATTN_KERNEL_FAMILY forces a kernel family");
      return;
    }
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    AttentionCase fixed;
    fixed.q_lens = {300, 300};
    fixed.kv_lens = {300, 300};
    fixed.num_qo_heads = 8;
    fixed.num_kv_heads = 2;
    fixed.mask = TSATTN_MASK_CAUSAL;
    check_case(fixed, rng, summary);
    CHECK(last_kernel() == causal_bf16_d128(family, "fixed"));

    AttentionCase packed = fixed;
    packed.packed = true;
    packed.q_lens = {70, 0, 129, 1};
    packed.kv_lens = {100, 5, 129, 1};
    check_case(packed, rng, summary);
    CHECK(last_kernel() == causal_bf16_d128(family, "packed"));

    // B = 1 and one head: batch and head strides are odd (valid per the contract for size-1 dimensions);
    // the TMA descriptors never use them, so Hopper stays on sm90a.
    AttentionCase odd = fixed;
    odd.q_lens = {200};
    odd.kv_lens = {256};
    odd.num_qo_heads = 1;
    odd.num_kv_heads = 1;
    odd.odd_unit_strides = true;
    check_case(odd, rng, summary);
    CHECK(last_kernel() == causal_bf16_d128(family, "fixed"));
    MESSAGE(summary.text());
  }

  TEST_CASE("Hopper: fp8 inputs run on sm90a (V^T workspace), fixed and packed, with no fallback logged") {
    TSATTN_REQUIRE_GPU();
    if (!hopper_family_selected()) return;
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    CapturedLog log;
    AttentionCase fp8;
    fp8.q_lens = {129};
    fp8.kv_lens = {129};
    fp8.mask = TSATTN_MASK_CAUSAL;
    fp8.input_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;
    fp8.output_dtype = TSATTN_DTYPE_BFLOAT16;
    check_case(fp8, rng, summary);
    CHECK(last_kernel() == "prefill.sm90a.sm_90a.d128.e4m3_bf16.causal.fixed");
    // Packed with an empty request and request ends inside V^T's 32-key groups.
    AttentionCase packed = fp8;
    packed.packed = true;
    packed.q_lens = {1, 0, 127, 40};
    packed.kv_lens = {33, 7, 200, 40};
    packed.head_dim = 256;
    packed.output_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;
    check_case(packed, rng, summary);
    CHECK(last_kernel() == "prefill.sm90a.sm_90a.d256.e4m3_e4m3.causal.packed");
    CHECK(log.levels_of_prefix("sm90a path not usable").empty());
    MESSAGE(summary.text());
  }

  TEST_CASE("Hopper: CTA pairs (K/V multicast) along heads for even GQA groups, along query tiles otherwise") {
    TSATTN_REQUIRE_GPU();
    if (!hopper_family_selected()) return;
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    CapturedLog log(LogLevel::debug);
    // Pairs wherever the module can: these requests are short enough for "auto" to run single CTAs
    // (head_pairs_waste, query_tile_pairs_waste), and the paired paths are what this test checks.
    testing::ScopedEnv env;
    env.set("TSATTN_CTA_PAIRS", "on");
    size_t launches_seen = 0;
    // check_case launches the kernel once: its launch line says how (plan/cta_pairs.hpp).
    // `axis`: "heads", "query tiles", or "" for one CTA per item.
    auto run = [&](const AttentionCase& c, const std::string& axis) {
      check_case(c, rng, summary);
      const std::vector<std::string> launches = log.lines_with_prefix("launching prefill.");
      INFO(c.describe());
      REQUIRE(launches.size() == launches_seen + 1);
      launches_seen = launches.size();
      const std::string expected =
          "launching " + last_kernel() + (axis.empty() ? ": one CTA per" : " in CTA pairs along " + axis + ":");
      CHECK(launches.back().rfind(expected, 0) == 0);
    };
    AttentionCase c;  // group 2, odd lengths, dense D128 (127 keys: the 128-key short_keys variant)
    c.q_lens = {129};
    c.kv_lens = {127};
    c.num_qo_heads = 6;
    c.num_kv_heads = 3;
    run(c, "heads");
    c.num_qo_heads = 3;  // group 1 (MHA): 2 query tiles, one pair
    run(c, "query tiles");
    c.num_qo_heads = 9;  // group 3
    c.q_lens = {300};    // 3 query tiles: the second pair's second tile lies past q_len; 160-key tiles
    c.kv_lens = {300};
    run(c, "query tiles");
    // Causal MHA, B3, fp16: the first tile of a pair walks one key tile it masks entirely.
    AttentionCase causal = c;
    causal.mask = TSATTN_MASK_CAUSAL;
    causal.num_qo_heads = causal.num_kv_heads = 2;
    causal.q_lens = {385, 385, 385};
    causal.kv_lens = {500, 500, 500};
    causal.input_dtype = causal.output_dtype = TSATTN_DTYPE_FLOAT16;
    run(causal, "query tiles");
    // D256 kernels have no pairs, whatever the knob says (sm90a/kernel_traits.h).
    causal.head_dim = 256;
    run(causal, "");
    causal.num_qo_heads = 8;  // group 4
    run(causal, "");
    // With a window a pair would walk a second extra key tile: one CTA per item.
    causal.head_dim = 128;
    causal.num_qo_heads = 2;
    causal.window_left = 100;
    run(causal, "");
    // Packed, causal with a window, fp16, empty and 1-row requests, indptrs on the GPU.
    AttentionCase packed;
    packed.packed = true;
    packed.device_indptr = true;
    packed.q_lens = {1, 0, 200, 129};
    packed.kv_lens = {1, 9, 300, 129};
    packed.mask = TSATTN_MASK_CAUSAL;
    packed.window_left = 100;
    packed.input_dtype = packed.output_dtype = TSATTN_DTYPE_FLOAT16;
    packed.num_qo_heads = 8;
    packed.num_kv_heads = 2;
    run(packed, "heads");
    // A request's NaN V rows must not reach its neighbours through the paired, multicast tiles.
    packed.device_indptr = false;
    packed.window_left = -1;
    packed.nan_v_request = 2;
    run(packed, "heads");
    // The same along query tiles (MHA): host-planned and device-planned lists of 256-row tiles,
    // with requests of 1, 0, 129 (a pair with a 1-row second tile) and 300 rows.
    packed.num_qo_heads = packed.num_kv_heads = 3;
    packed.q_lens = {1, 0, 300, 129};
    packed.kv_lens = {1, 9, 420, 129};
    run(packed, "query tiles");
    packed.device_indptr = true;
    packed.mask = TSATTN_MASK_DENSE;
    run(packed, "query tiles");
    // Variable windows; fp8 inputs are never paired (one slab per K row).
    AttentionCase vwin;
    vwin.packed = true;
    vwin.q_lens = {70, 130};
    vwin.kv_lens = {90, 130};
    vwin.mask = TSATTN_MASK_VARIABLE_WINDOW;
    vwin.num_qo_heads = 4;
    vwin.num_kv_heads = 2;
    run(vwin, "heads");
    vwin.num_qo_heads = 2;  // MHA: unknown unions, one CTA per item
    run(vwin, "");
    vwin.num_qo_heads = 4;
    vwin.input_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;
    run(vwin, "");
    // Chunks of the work list (plan/work_order.hpp): a dense list is one chunk of all its tiles,
    // except for kernels that decode one tile per chunk (e4m3: tsattn_chunked_order = 0).
    AttentionCase chunks;  // 3 query tiles, group 2
    chunks.q_lens = {300};
    chunks.kv_lens = {200};
    chunks.num_qo_heads = 4;
    chunks.num_kv_heads = 2;
    run(chunks, "heads");
    // Items of a fixed dense call all cost the same: static turns (plan/work_order.hpp).
    CHECK(log.lines_with_prefix("launching prefill.").back().ends_with(", 3 tiles per chunk, static order"));
    chunks.input_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;
    run(chunks, "");
    CHECK(log.lines_with_prefix("launching prefill.").back().ends_with(", 1 tiles per chunk, static order"));
    MESSAGE(summary.text());
  }

  TEST_CASE("Hopper: short keys: the 128-key variant of 16-bit D128 dense kernels, forced and by the auto rule") {
    TSATTN_REQUIRE_GPU();
    if (!hopper_family_selected()) return;
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    CapturedLog log;
    testing::ScopedEnv env;
    const auto name = [](tsattn_dtype in, tsattn_dtype out, const char* layout, bool short_keys) {
      return fmt::format("prefill.sm90a.sm_90a.d128.{}_{}.dense.{}{}", ErrorSummary::dtype_short(in),
                         ErrorSummary::dtype_short(out), layout, short_keys ? ".short_keys" : "");
    };
    // TSATTN_SHORT_KEYS=on: the variant at every size, on fresh inputs with out poisoned (check_case).
    env.set("TSATTN_SHORT_KEYS", "on");
    for (tsattn_dtype input : {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16}) {
      AttentionCase c;
      c.input_dtype = c.output_dtype = input;
      c.num_qo_heads = 8;
      c.num_kv_heads = 2;
      // Fixed: 1, 127, 129, 256 and 512 keys (one key tile partly filled, one or two crossed, whole
      // tiles), with as many or fewer queries.
      for (int32_t s : {1, 127, 129, 256, 512})
        for (int32_t q : {s, std::max(1, s / 3)}) {
          c.q_lens = {q, q};
          c.kv_lens = {s, s};
          check_case(c, rng, summary);
          CHECK(last_kernel() == name(input, input, "fixed", true));
        }
      // Packed, ragged, with an empty request, host and GPU indptrs; a NaN V request whose
      // neighbours' tiles cross into it.
      AttentionCase packed = c;
      packed.packed = true;
      packed.q_lens = {1, 127, 0, 129, 256, 300};
      packed.kv_lens = {1, 127, 40, 129, 512, 300};
      for (bool device_indptr : {false, true}) {
        packed.device_indptr = device_indptr;
        check_case(packed, rng, summary);
        CHECK(last_kernel() == name(input, input, "packed", true));
      }
      packed.device_indptr = false;
      packed.nan_v_request = 3;
      check_case(packed, rng, summary);
      // Other outputs of 16-bit inputs: the other 16-bit dtype (staged O), e4m3 (stores from registers).
      for (tsattn_dtype output :
           {input == TSATTN_DTYPE_FLOAT16 ? TSATTN_DTYPE_BFLOAT16 : TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN}) {
        c.output_dtype = output;
        c.q_lens = {200, 200, 200};
        c.kv_lens = {333, 333, 333};
        check_case(c, rng, summary);
        CHECK(last_kernel() == name(input, output, "fixed", true));
      }
    }
    // Kinds without a variant keep their one kernel, forced or not.
    AttentionCase causal;
    causal.mask = TSATTN_MASK_CAUSAL;
    causal.kv_lens = causal.q_lens = {512};
    check_case(causal, rng, summary);
    CHECK(last_kernel() == "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed");
    // TSATTN_SHORT_KEYS=off: the 160-key kernel even where the rule would take the variant.
    AttentionCase dense;
    dense.q_lens = dense.kv_lens = {512, 512};
    env.set("TSATTN_SHORT_KEYS", "off");
    check_case(dense, rng, summary);
    CHECK(last_kernel() == name(TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, "fixed", false));
    // auto (unset): the padded-key rule (plan/short_keys.hpp). 512 keys: the variant; 8192: 160-key
    // tiles; packed with host indptrs by every request's keys; GPU indptrs: no lengths, 160.
    env.set("TSATTN_SHORT_KEYS", nullptr);
    check_case(dense, rng, summary);
    CHECK(last_kernel() == name(TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, "fixed", true));
    dense.q_lens = {64};
    dense.kv_lens = {8192};
    check_case(dense, rng, summary);
    CHECK(last_kernel() == name(TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, "fixed", false));
    AttentionCase ragged;
    ragged.packed = true;
    ragged.q_lens = {100, 0, 256};
    ragged.kv_lens = {500, 7, 512};
    check_case(ragged, rng, summary);
    CHECK(last_kernel() == name(TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, "packed", true));
    ragged.device_indptr = true;
    check_case(ragged, rng, summary);
    CHECK(last_kernel() == name(TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, "packed", false));
    CHECK(log.levels_of_prefix("sm90a path not usable").empty());
    MESSAGE(summary.text());
  }

  TEST_CASE("matrix: layouts x masks x head dims x dtypes x GQA ratios x odd lengths") {
    TSATTN_REQUIRE_GPU();
    const uint64_t seed = test_seed();
    MESSAGE("seed ", seed, " (set TSATTN_TEST_SEED to replay)");
    std::mt19937_64 rng(seed);
    ErrorSummary summary;
    int rotation = 0;
    for (bool packed : {false, true})
      for (tsattn_mask_type mask : {TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL, TSATTN_MASK_VARIABLE_WINDOW})
        for (bool window : {false, true}) {
          if (window && mask != TSATTN_MASK_CAUSAL) continue;
          for (int head_dim : {128, 256})
            for (tsattn_dtype input : kDtypes)
              for (const Lengths& lengths : matrix_lengths(packed)) {
                if (mask == TSATTN_MASK_CAUSAL && !lengths.causal_ok) continue;
                ++rotation;
                AttentionCase c;
                c.packed = packed;
                c.q_lens = lengths.q;
                c.kv_lens = lengths.kv;
                c.mask = mask;
                c.window_left = window ? 1 + rotation % 200 : -1;
                c.head_dim = head_dim;
                c.input_dtype = input;
                c.output_dtype = kDtypes[rotation % 3];
                c.num_qo_heads = kHeadConfigs[rotation % 4].hq;
                c.num_kv_heads = kHeadConfigs[rotation % 4].hkv;
                if (rotation % 5 == 0) c.sm_scale = 0.05;
                if (rotation % 7 == 0) c.output_scale = 1.75;
                check_case(c, rng, summary);
              }
        }
    MESSAGE(summary.text());
  }

  TEST_CASE("randomized sweep: 500 valid configurations") {
    TSATTN_REQUIRE_GPU();
    const uint64_t seed = test_seed();
    MESSAGE("seed ", seed, " (set TSATTN_TEST_SEED to replay)");
    std::mt19937_64 rng(seed);
    ErrorSummary summary;
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int i = 0; i < 500; ++i) {
      AttentionCase c;
      c.packed = uniform(0, 1) == 1;
      c.device_indptr = c.packed && uniform(0, 1) == 1;
      const int masks = uniform(0, 3);
      c.mask = masks == 0 ? TSATTN_MASK_DENSE : (masks == 3 ? TSATTN_MASK_VARIABLE_WINDOW : TSATTN_MASK_CAUSAL);
      if (masks == 2) c.window_left = uniform(1, 600);
      c.head_dim = uniform(0, 1) ? 256 : 128;
      c.input_dtype = kDtypes[uniform(0, 2)];
      c.output_dtype = kDtypes[uniform(0, 2)];
      const int hkv = uniform(1, 4);
      c.num_kv_heads = hkv;
      c.num_qo_heads = hkv * uniform(1, 4);
      const int batch = c.packed ? uniform(1, 5) : uniform(1, 3);
      c.q_lens.clear();
      c.kv_lens.clear();
      // Fixed layout: one (Sq, Sk) for all requests; Sq > Sk only where the mask allows it.
      const int fixed_q = uniform(1, 400);
      const int fixed_kv = c.mask == TSATTN_MASK_CAUSAL ? fixed_q + uniform(0, 300) : uniform(1, 500);
      for (int b = 0; b < batch; ++b) {
        int q = fixed_q, kv = fixed_kv;
        if (c.packed) {
          q = uniform(0, 5) == 0 ? 0 : uniform(1, 400);
          kv = uniform(0, 6) == 0 ? 0 : uniform(1, 500);
          if (c.mask == TSATTN_MASK_CAUSAL && kv < q) kv = q + uniform(0, 100);
        }
        c.q_lens.push_back(q);
        c.kv_lens.push_back(kv);
      }
      if (uniform(0, 3) == 0) c.sm_scale = 0.02 + uniform(0, 100) / 500.0;
      if (uniform(0, 3) == 0) c.output_scale = 0.5 + uniform(0, 100) / 50.0;
      check_case(c, rng, summary);
    }
    MESSAGE(summary.text());
  }

  TEST_CASE("strided inputs: q, k, v as slices of one fused QKV projection") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    // e4m3 too: on Hopper its V^T pre-pass reads v through the same strides.
    for (tsattn_dtype input : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN})
      for (bool packed : {false, true})
        for (int head_dim : {128, 256}) {
          AttentionCase c;
          c.packed = packed;
          c.fused_qkv = true;
          c.q_lens = packed ? std::vector<int32_t>{70, 0, 129} : std::vector<int32_t>{129, 129};
          c.kv_lens = c.q_lens;
          c.num_qo_heads = 8;
          c.num_kv_heads = 2;
          c.head_dim = head_dim;
          c.mask = TSATTN_MASK_CAUSAL;
          c.input_dtype = input;
          c.output_dtype = input;
          check_case(c, rng, summary);
        }
    MESSAGE(summary.text());
  }

  TEST_CASE("a side stream, and back-to-back calls with different specs") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    Stream stream;
    AttentionCase a;
    a.q_lens = {300};
    a.kv_lens = {700};
    a.mask = TSATTN_MASK_CAUSAL;
    AttentionCase b = a;
    b.head_dim = 256;
    b.input_dtype = TSATTN_DTYPE_FLOAT16;
    b.output_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;
    b.mask = TSATTN_MASK_DENSE;
    for (int round = 0; round < 3; ++round) {
      check_case(a, rng, summary, stream.get());
      check_case(b, rng, summary, stream.get());
      check_case(a, rng, summary);
    }
    MESSAGE(summary.text());
  }

  TEST_CASE("packed layout with indptrs on the GPU: the device planner") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    for (tsattn_mask_type mask : {TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL, TSATTN_MASK_VARIABLE_WINDOW})
      for (int head_dim : {128, 256}) {
        AttentionCase c;
        c.packed = true;
        c.device_indptr = true;
        c.q_lens = {300, 0, 1, 129, 0};
        c.kv_lens = {1000, 5, 1, 129, 0};
        c.mask = mask;
        c.head_dim = head_dim;
        c.num_qo_heads = 6;
        c.num_kv_heads = 2;
        check_case(c, rng, summary);
        c.window_left = mask == TSATTN_MASK_CAUSAL ? 100 : -1;
        if (mask == TSATTN_MASK_CAUSAL) check_case(c, rng, summary);
      }
    MESSAGE(summary.text());
  }

  TEST_CASE("packed layout: NaN in one request's V never reaches its neighbours' outputs") {
    // Key tiles that cross a request's end read the next request's rows in both families (sm90a's
    // TMA boxes span the packed tensor); their weights are 0, and 0 * NaN is NaN unless those rows
    // are cleared first. Request 1's V is all NaN; requests 0 and 2 must match the oracle.
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    ErrorSummary summary;
    for (tsattn_dtype input : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN})
      for (tsattn_mask_type mask : {TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL, TSATTN_MASK_VARIABLE_WINDOW})
        for (int head_dim : {128, 256}) {
          AttentionCase c;
          c.packed = true;
          c.q_lens = {150, 70, 129};
          c.kv_lens = {150, 90, 200};  // 150 and 200 keys end inside a key tile of every width
          c.input_dtype = input;
          c.mask = mask;
          c.head_dim = head_dim;
          c.num_qo_heads = 4;
          c.num_kv_heads = 2;
          c.nan_v_request = 1;
          check_case(c, rng, summary);
        }
    MESSAGE(summary.text());
  }

  TEST_CASE("malformed GPU indptrs: rejected in eager calls, clamped inside the tensors under capture") {
    // Eager calls read GPU indptrs back and reject bad values like host ones. Under graph capture
    // nothing can be read: the planner and the kernel clamp every value, so garbage may give
    // garbage rows but never a fault. Run under compute-sanitizer memcheck to see that no access
    // leaves q, k, v or out.
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const std::vector<std::vector<int32_t>> garbage = {
        {0, 500, 10, -7, 200}, {5, 4, 3, 2, 1}, {-100, 0, 2147483647, 40, 200}, {0, 0, 0, 0, 1000000}};
    // e4m3: on Hopper its V^T transpose reads the indptrs too.
    for (tsattn_dtype input : {TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN})
      for (tsattn_mask_type mask : {TSATTN_MASK_DENSE, TSATTN_MASK_CAUSAL, TSATTN_MASK_VARIABLE_WINDOW}) {
        CAPTURE(input);
        CAPTURE(mask);
        AttentionCase c;
        c.packed = true;
        c.device_indptr = true;
        c.q_lens = {100, 50, 30, 20};
        c.kv_lens = {120, 60, 60, 20};
        c.mask = mask;
        c.input_dtype = input;
        c.output_dtype = input;
        PreparedCase prepared(c, rng);
        for (const auto& values : garbage) {
          prepared.write_device_indptrs(values, values);
          std::string message;
          CHECK(prepared.call(nullptr, &message) == TSATTN_ERROR_VALUE);
          CHECK(message.find("indptr") != std::string::npos);
        }
        if (mask == TSATTN_MASK_CAUSAL) {  // valid indptrs, but a request with Sq > Sk
          prepared.write_device_indptrs({0, 100, 150, 180, 200}, {0, 50, 150, 240, 260});
          std::string message;
          CHECK(prepared.call(nullptr, &message) == TSATTN_ERROR_VALUE);
          CHECK(message.find("request 0 has Sq=100 > Sk=50") != std::string::npos);
        }

        prepared.refresh(rng, false);  // valid indptrs again
        CapturedCall captured(prepared);
        for (const auto& values : garbage) {
          prepared.write_device_indptrs(values, values);
          captured.replay();  // throws if the kernel faulted
        }
        // The context is intact, and the same graph with valid indptrs is right again.
        prepared.refresh(rng, false);
        prepared.poison_output();
        captured.replay();
        const ref::Comparison cmp = prepared.check();
        INFO(cmp.first_problem);
        CHECK(cmp.passed());
      }
  }

  TEST_CASE("CUDA graph capture with GPU indptrs, replayed with new lengths and inputs") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const std::pair<tsattn_mask_type, tsattn_dtype> configs[] = {{TSATTN_MASK_DENSE, TSATTN_DTYPE_BFLOAT16},
                                                                 {TSATTN_MASK_VARIABLE_WINDOW, TSATTN_DTYPE_BFLOAT16},
                                                                 {TSATTN_MASK_DENSE, TSATTN_DTYPE_FLOAT8_E4M3FN}};
    for (const auto& [mask, input] : configs) {
      CAPTURE(mask);
      CAPTURE(input);
      AttentionCase c;
      c.packed = true;
      c.device_indptr = true;
      c.q_lens = {200, 0, 333, 17};
      c.kv_lens = {100, 400, 300, 0};
      c.mask = mask;
      c.input_dtype = input;
      c.output_dtype = input;
      c.num_qo_heads = 8;
      c.num_kv_heads = 2;
      PreparedCase prepared(c, rng);
      check_graph_replays(prepared, rng, 3, /*resplit=*/true);
    }
  }

  TEST_CASE("CUDA graph capture of the fixed layout, and host indptrs are refused while capturing") {
    TSATTN_REQUIRE_GPU();
    std::mt19937_64 rng(test_seed());
    const driver::Api& cu = driver::api();
    AttentionCase fixed;
    fixed.q_lens = {129, 129};
    fixed.kv_lens = {300, 300};
    fixed.mask = TSATTN_MASK_CAUSAL;
    PreparedCase prepared(fixed, rng);
    check_graph_replays(prepared, rng, 2, /*resplit=*/false);

    AttentionCase host_indptr;
    host_indptr.packed = true;
    host_indptr.q_lens = {10, 20};
    host_indptr.kv_lens = {10, 20};
    PreparedCase refused(host_indptr, rng);
    Stream stream;
    std::string message;
    driver::check(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    const tsattn_status refused_status = refused.call(stream.get(), &message);
    CUgraph empty = nullptr;
    driver::check(cu.cuStreamEndCapture(stream.get(), &empty), "cuStreamEndCapture");
    if (empty) cu.cuGraphDestroy(empty);
    CHECK(refused_status == TSATTN_ERROR_VALUE);
    CHECK(message.find("capturing") != std::string::npos);
  }
}

}  // namespace
}  // namespace tsattn::test
