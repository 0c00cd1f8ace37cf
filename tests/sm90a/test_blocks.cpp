// test_blocks.cpp - the bottom-up building blocks of the sm90a (Hopper) family, each on its own:
// "codegen/sm90a_blocks" compiles the test kernels of tests/sm90a/kernels/*.cuh with NVRTC (no
// GPU needed) and holds them to the family's rules (no spills, no C75xx wgmma notes, sm_90a
// only); "gpu/sm90a_blocks" runs them on a compute capability 9.0 device: SS- and RS-wgmma GEMMs
// (16-bit and e4m3) against a CPU GEMM, a TMA load/store round trip with out-of-bounds tiles, and
// a 2-stage TMA + mbarrier ring with a dummy consumer. The kernels bound every mbarrier wait and
// report a timeout flag.
#include <doctest/doctest.h>

#include <cuda.h>
#include <dlfcn.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "codegen/embedded_files.hpp"
#include "jit/nvrtc/compiler.hpp"
#include "prefill_params.h"
#include "ref/float_formats.hpp"
#include "sm90a/test_kernels.hpp"
#include "support/gpu.hpp"

namespace tsattn::test {
namespace {

struct TestKernels {
  const char* header;  // tests/sm90a/kernels/<header>.cuh
  std::vector<const char*> symbols;
};

const std::vector<TestKernels>& test_kernels() {
  static const std::vector<TestKernels> all = {
      {"test_wgmma_gemm",
       {"tsattn_test_wgmma_bf16_n64", "tsattn_test_wgmma_bf16_n128", "tsattn_test_wgmma_bf16_n256",
        "tsattn_test_wgmma_f16_n64"}},
      {"test_wgmma_pv",
       {"tsattn_test_wgmma_pv_bf16_n128", "tsattn_test_wgmma_pv_bf16_n256", "tsattn_test_wgmma_pv_f16_n128"}},
      {"test_wgmma_fp8",
       {"tsattn_test_wgmma_e4m3_ss_n128", "tsattn_test_wgmma_e4m3_ss_n256", "tsattn_test_wgmma_e4m3_pv_n128",
        "tsattn_test_wgmma_e4m3_pv_n256"}},
      {"test_tma_roundtrip", {"tsattn_test_tma_roundtrip"}},
      {"test_mbarrier_ring", {"tsattn_test_mbarrier_ring"}},
  };
  return all;
}

nvrtc::CompileResult compile_test_kernel(const std::string& header, const std::string& arch) {
  nvrtc::CompileRequest request;
  request.name = fmt::format("sm90a_blocks.{}", header);
  request.source = fmt::format("#include \"{}.cuh\"\n", header);
  for (const auto files : {embedded_templates(), embedded_sm90a_test_kernels()}) {
    for (const EmbeddedFile& file : files) request.headers.push_back({std::string(file.name), file.text});
  }
  request.arch = arch;
  return nvrtc::compile_to_cubin(request);
}

// sm_90a cubins, compiled once per process.
const std::vector<uint8_t>& sm90a_cubin(const std::string& header) {
  static std::map<std::string, std::vector<uint8_t>> cubins;
  auto found = cubins.find(header);
  if (found == cubins.end()) found = cubins.emplace(header, compile_test_kernel(header, "sm_90a").cubin).first;
  return found->second;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// The "Used N registers ..." lines of a ptxas log, one per entry function, for the test output.
std::string register_lines(const std::string& log) {
  std::string lines;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    if (contains(line, "Compiling entry function") || contains(line, "Used ") || contains(line, "spill"))
      lines += line + "\n";
    start = end + 1;
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// GPU helpers.

const driver::Api& cu() { return driver::api(); }

// Why the current device cannot run sm_90a cubins, or empty.
std::string not_sm90_reason() {
  CUdevice device = 0;
  driver::check(cu().cuCtxGetDevice(&device), "cuCtxGetDevice");
  int major = 0, minor = 0;
  driver::check(cu().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cc major");
  driver::check(cu().cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cc minor");
  if (major == 9 && minor == 0) return "";
  return fmt::format("device 0 has compute capability {}.{}; sm_90a cubins need 9.0", major, minor);
}

#define TSATTN_REQUIRE_SM90()                                                                       \
  TSATTN_REQUIRE_GPU();                                                                             \
  do {                                                                                              \
    const std::string tsattn_why_not_sm90 = not_sm90_reason();                                      \
    if (!tsattn_why_not_sm90.empty()) {                                                             \
      MESSAGE("skipped: no CUDA device of compute capability 9.0 (" << tsattn_why_not_sm90 << ")"); \
      return;                                                                                       \
    }                                                                                               \
  } while (false)

class Module {
 public:
  explicit Module(const std::vector<uint8_t>& cubin) {
    driver::check(cu().cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData (sm90a test kernels)");
  }
  ~Module() {
    if (module_ != nullptr) cu().cuModuleUnload(module_);
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const char* symbol) const {
    CUfunction f = nullptr;
    driver::check(cu().cuModuleGetFunction(&f, module_, symbol), fmt::format("cuModuleGetFunction {}", symbol));
    return f;
  }

 private:
  CUmodule module_ = nullptr;
};

void launch(CUfunction f, unsigned grid, unsigned block, void** params, const Stream& stream, const char* what) {
  driver::check(cu().cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream.get(), params, nullptr),
                fmt::format("cuLaunchKernel {}", what));
  driver::check(cu().cuStreamSynchronize(stream.get()), fmt::format("{} (the kernel failed?)", what));
}

// cuTensorMapEncodeTiled is not in the library's driver table: bound here by its exact symbol from
// the libcuda.so.1 that driver::api() already loaded.
using EncodeTiled = decltype(&::cuTensorMapEncodeTiled);

EncodeTiled encode_tiled() {
  static const EncodeTiled fn = []() -> EncodeTiled {
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return nullptr;
    return reinterpret_cast<EncodeTiled>(dlsym(handle, "cuTensorMapEncodeTiled"));
  }();
  const bool found = fn != nullptr;
  REQUIRE_MESSAGE(found, "libcuda.so.1 has no cuTensorMapEncodeTiled");
  return fn;
}

// A 2D row-major bf16 tensor [rows][cols] (row stride in bytes), 64x64 boxes, 128B swizzle,
// out-of-bounds elements read as zero.
CUtensorMap bf16_tensor_map(CUdeviceptr base, uint64_t cols, uint64_t rows, uint64_t row_stride_bytes) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {64, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  driver::check(encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, reinterpret_cast<void*>(base), dims, strides,
                               box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                "cuTensorMapEncodeTiled");
  return map;
}

// TsattnTmaDescriptor (templates/prefill_params.h) mirrors CUDA 13's CUtensorMap: 128 bytes,
// 128-byte aligned.
static_assert(sizeof(CUtensorMap) == sizeof(TsattnTmaDescriptor) &&
                  alignof(CUtensorMap) == alignof(TsattnTmaDescriptor),
              "TsattnTmaDescriptor mirrors CUtensorMap");

// ---------------------------------------------------------------------------------------------
// wgmma GEMMs: C (64 x n fp32) = A (64 x K) times B, one warpgroup, against a double-precision
// CPU GEMM of the same (decoded) 16-bit or e4m3 values.

struct WgmmaCase {
  const char* symbol;
  int n;
  bool bf16;
};

uint16_t encode16(bool bf16, float v) { return bf16 ? ref::float_to_bfloat16(v) : ref::float_to_half(v); }
float decode16(bool bf16, uint16_t b) { return bf16 ? ref::bfloat16_to_float(b) : ref::half_to_float(b); }

// grid_values: multiples of 1/8 in [-2, 2] (exact in bf16, f16 and e4m3; every partial sum exact
// in fp32, so the GPU must match exactly); otherwise uniform in [-1, 1]. Encoded by `encode`.
template <class T, class Encode>
std::vector<T> random_values(size_t count, bool grid_values, std::mt19937_64& rng, Encode encode) {
  std::uniform_int_distribution<int> grid(-16, 16);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<T> values(count);
  for (T& x : values) x = encode(grid_values ? grid(rng) / 8.0f : uniform(rng));
  return values;
}

std::vector<uint16_t> random16(size_t count, bool bf16, bool grid_values, std::mt19937_64& rng) {
  return random_values<uint16_t>(count, grid_values, rng, [bf16](float v) { return encode16(bf16, v); });
}

std::vector<uint8_t> random_e4m3(size_t count, bool grid_values, std::mt19937_64& rng) {
  return random_values<uint8_t>(count, grid_values, rng, ref::float_to_e4m3);
}

template <class T, class Decode>
std::vector<float> decode_all(const std::vector<T>& bits, Decode decode) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = decode(bits[i]);
  return values;
}

// m (rows x cols, row-major) transposed.
std::vector<float> transpose(const std::vector<float>& m, int rows, int cols) {
  std::vector<float> t(m.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c) * rows + r] = m[size_t(r) * cols + c];
  return t;
}

// Runs kernel(a, b, c, extra...) on one warpgroup and returns C (64 x n), poisoned with NaN
// first so that an element no thread wrote stays NaN.
template <class A, class B, class... Extra>
std::vector<float> run_wgmma_kernel(const Module& module, const char* symbol, int n, const std::vector<A>& a,
                                    const std::vector<B>& b, Extra... extra) {
  DeviceBuffer da(a.size() * sizeof(A)), db(b.size() * sizeof(B)), dc(size_t(64) * n * 4);
  da.upload(a.data(), a.size() * sizeof(A));
  db.upload(b.data(), b.size() * sizeof(B));
  dc.fill_bytes(0xFF);
  Stream stream;
  CUdeviceptr pa = da.address(), pb = db.address(), pc = dc.address();
  void* params[] = {&pa, &pb, &pc, &extra...};
  launch(module.function(symbol), 1, 128, params, stream, symbol);
  std::vector<float> c(size_t(64) * n);
  dc.download(c.data(), c.size() * 4);
  return c;
}

// The SS tests' accumulator start value (kWgmmaTestGarbage, kernels/test_common.cuh).
constexpr double kWgmmaTestGarbage = 12345.0;

struct GemmMismatches {
  int bad = 0;
  int off_by_garbage = 0;  // off by exactly kWgmmaTestGarbage
  std::string first;       // the first few, described
};

// C (64 x n) against A times B^T, where a is 64 x K and bt is n x K (row-major, decoded values).
// relative_tolerance 0: exact; otherwise that fraction of the sum of |products| (plus 1e-6):
// any layout or descriptor error is off by O(1) of it.
GemmMismatches compare_gemm(const std::vector<float>& c, const std::vector<float>& a, const std::vector<float>& bt,
                            int n, double relative_tolerance) {
  const int m = 64, k = static_cast<int>(a.size() / m);
  GemmMismatches result;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double expected = 0, magnitude = 0;
      for (int kk = 0; kk < k; ++kk) {
        const double p = double(a[size_t(i) * k + kk]) * double(bt[size_t(j) * k + kk]);
        expected += p;
        magnitude += std::fabs(p);
      }
      const double got = c[static_cast<size_t>(i) * n + j];
      const double tolerance = relative_tolerance == 0 ? 0.0 : relative_tolerance * magnitude + 1e-6;
      if (!(std::fabs(got - expected) <= tolerance)) {
        ++result.bad;
        if (std::fabs(got - expected - kWgmmaTestGarbage) < 1.0) ++result.off_by_garbage;
        if (result.bad <= 8) result.first += fmt::format(" ({},{}): got {} expected {};", i, j, got, expected);
      }
    }
  }
  return result;
}

// 16-bit operands: A 64 x 64; B(kk, j) is b[j * 64 + kk] when b_is_n_by_k (the K-major B of
// S = Q K^T) and b[kk * n + j] otherwise (V in O = P V). Random values: 1e-4 (fp32 sums of 64 terms).
GemmMismatches compare_gemm16(const std::vector<float>& c, const std::vector<uint16_t>& a,
                              const std::vector<uint16_t>& b, int n, bool b_is_n_by_k, bool bf16, bool grid_values) {
  const auto decode = [bf16](uint16_t x) { return decode16(bf16, x); };
  const std::vector<float> b_values = decode_all(b, decode);
  return compare_gemm(c, decode_all(a, decode), b_is_n_by_k ? b_values : transpose(b_values, 64, n), n,
                      grid_values ? 0.0 : 1e-4);
}

void check_no_mismatches(const GemmMismatches& result) {
  INFO("first mismatches:" << result.first);
  INFO(result.off_by_garbage << " mismatches are off by the initial accumulator value (scale-d ignored?)");
  CHECK(result.bad == 0);
}

// S-style GEMM: C = A * B^T (B: n x 64), both K-major in swizzled shared memory.
void check_wgmma_gemm(const Module& module, const WgmmaCase& g, bool grid_values, std::mt19937_64& rng) {
  CAPTURE(g.symbol);
  CAPTURE(grid_values);
  const std::vector<uint16_t> a = random16(64 * 64, g.bf16, grid_values, rng);
  const std::vector<uint16_t> b = random16(size_t(g.n) * 64, g.bf16, grid_values, rng);
  check_no_mismatches(
      compare_gemm16(run_wgmma_kernel(module, g.symbol, g.n, a, b), a, b, g.n, true, g.bf16, grid_values));
}

// ---------------------------------------------------------------------------------------------
// O = P V through RS wgmma with V MN-major (the attention's second GEMM).

// Runs one PV kernel (P: 64 x 64, V: 64 x n) with the descriptor variant of test_wgmma_pv.cuh.
GemmMismatches run_wgmma_pv(const Module& module, const WgmmaCase& g, int variant, bool grid_values,
                            std::mt19937_64& rng) {
  const std::vector<uint16_t> p = random16(64 * 64, g.bf16, grid_values, rng);
  const std::vector<uint16_t> v = random16(size_t(64) * g.n, g.bf16, grid_values, rng);
  return compare_gemm16(run_wgmma_kernel(module, g.symbol, g.n, p, v, variant), p, v, g.n, false, g.bf16, grid_values);
}

void check_wgmma_pv(const Module& module, const WgmmaCase& g, bool grid_values, std::mt19937_64& rng) {
  CAPTURE(g.symbol);
  CAPTURE(grid_values);
  const GemmMismatches result = run_wgmma_pv(module, g, 0, grid_values, rng);
  INFO("first mismatches:" << result.first);
  if (result.bad != 0) {
    // Diagnosis only: does the descriptor work with its two byte offsets swapped?
    const GemmMismatches swapped = run_wgmma_pv(module, g, 1, grid_values, rng);
    MESSAGE(g.symbol << ": with leading/stride byte offsets swapped, " << swapped.bad << " mismatches");
  }
  CHECK(result.bad == 0);
}

// ---------------------------------------------------------------------------------------------
// e4m3 wgmmas, m64nNk32 x4 (K = 128), test_wgmma_fp8.cuh.

// The fp8 wgmma does not accumulate in full fp32: it keeps about 13 fraction bits (products aligned
// to the largest, results truncated), so random values get 2^-9 of the sum of |products| rather
// than 1e-4 (a model of that truncation errs by up to 3.3e-4 of it; a layout error by O(1)). Grid
// values stay exact: products are multiples of 2^-6 (SS) or 2^-7 (PV), which 13 fraction bits hold
// below 256 or 128, and these sums stay below about 70 or 40.
constexpr double kE4m3RelativeTolerance = 1.0 / 512;

// e4m3_key_of_slot of sm90a/wgmma.cuh, spelled from its comment: slot 4c + e + 16h of a 32-key
// group holds key 2c + e % 2 + 8 (e / 2) + 16h.
int e4m3_key_of_slot(int slot) {
  const int h = slot / 16, c = slot % 16 / 4, e = slot % 4;
  return 16 * h + 2 * c + e % 2 + 8 * (e / 2);
}

// SS: C = A * B^T, A 64 x 128 and B n x 128 e4m3, both K-major in swizzled shared memory.
void check_wgmma_e4m3_ss(const Module& module, int n, bool grid_values, std::mt19937_64& rng) {
  const std::string symbol = fmt::format("tsattn_test_wgmma_e4m3_ss_n{}", n);
  CAPTURE(symbol);
  CAPTURE(grid_values);
  const std::vector<uint8_t> a = random_e4m3(64 * 128, grid_values, rng);
  const std::vector<uint8_t> b = random_e4m3(size_t(n) * 128, grid_values, rng);
  const std::vector<float> c = run_wgmma_kernel(module, symbol.c_str(), n, a, b);
  check_no_mismatches(compare_gemm(c, decode_all(a, ref::e4m3_to_float), decode_all(b, ref::e4m3_to_float), n,
                                   grid_values ? 0.0 : kE4m3RelativeTolerance));
}

// RS: O = P V, P 64 x 128 fp32 in [0, 1] (grid values: multiples of 1/16) converted by the kernel
// from its accumulator fragment, V 128 x n e4m3 (read as V^T with permuted keys).
void check_wgmma_e4m3_pv(const Module& module, int n, bool grid_values, std::mt19937_64& rng) {
  const std::string symbol = fmt::format("tsattn_test_wgmma_e4m3_pv_n{}", n);
  CAPTURE(symbol);
  CAPTURE(grid_values);
  std::uniform_int_distribution<int> sixteenths(0, 16);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> p(64 * 128);
  for (float& x : p) x = grid_values ? sixteenths(rng) / 16.0f : unit(rng);
  const std::vector<uint8_t> v = random_e4m3(size_t(128) * n, grid_values, rng);
  const std::vector<float> c = run_wgmma_kernel(module, symbol.c_str(), n, p, v);

  // What the wgmma multiplies: P rounded to e4m3 (cvt.rn.satfinite: nearest even, as
  // float_to_e4m3; P never saturates) and V decoded; the key permutation cancels out.
  const std::vector<float> p8 = decode_all(p, [](float x) { return ref::e4m3_to_float(ref::float_to_e4m3(x)); });
  const std::vector<float> vt = transpose(decode_all(v, ref::e4m3_to_float), 128, n);
  const double tolerance = grid_values ? 0.0 : kE4m3RelativeTolerance;
  const GemmMismatches result = compare_gemm(c, p8, vt, n, tolerance);
  if (result.bad != 0) {
    // Diagnosis only. V^T in shared memory has the SS test's layout: if that test passes, the fault
    // is in P's A fragment. The likeliest wrong assumption: the hardware reads A's bytes in
    // accumulator key order (A column s = key s), so V^T would need no permutation; then
    // C = sum_s P(:, s) V(e4m3_key_of_slot(s), :).
    std::vector<float> vt_permuted(vt.size());
    for (size_t i = 0; i < vt.size(); ++i) vt_permuted[i] = vt[(i & ~size_t(31)) + e4m3_key_of_slot(int(i % 32))];
    MESSAGE(symbol << ": " << result.bad << " mismatches; if the A fragment held P in accumulator key order (no "
                   << "permutation needed), " << compare_gemm(c, p8, vt_permuted, n, tolerance).bad << " would remain");
  }
  check_no_mismatches(result);
}

// Runs check (one of the two above) for N = 128 and 256, grid values first, then random ones.
void check_wgmma_e4m3(void (*check)(const Module&, int, bool, std::mt19937_64&), uint64_t seed) {
  const Module module(sm90a_cubin("test_wgmma_fp8"));
  std::mt19937_64 rng(seed);
  for (const int n : {128, 256}) {
    check(module, n, true, rng);
    check(module, n, false, rng);
  }
}

// ---------------------------------------------------------------------------------------------
// TMA round trip.

// flags: kTmaTestPrefetch / kTmaTestStore of test_tma_roundtrip.cuh; coords: (column, row) pairs.
constexpr int kTmaTestPrefetch = 1;
constexpr int kTmaTestStore = 2;

void check_tma_roundtrip(const Module& module, int flags, const std::vector<int>& coords, std::mt19937_64& rng) {
  CAPTURE(flags);
  const int rows = 150, cols = 120;  // row stride 240 B: a multiple of 16
  const size_t tensor_bytes = size_t(rows) * cols * 2;
  const size_t guard = 8192;  // bytes before and after the TMA store target, must stay untouched
  std::vector<uint16_t> in(size_t(rows) * cols);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (uint16_t& x : in) x = static_cast<uint16_t>(bits(rng));
  const int tiles = static_cast<int>(coords.size() / 2);

  DeviceBuffer din(tensor_bytes), dout(guard + tensor_bytes + guard), dcoords(coords.size() * 4),
      dtiles(size_t(tiles) * 64 * 64 * 2), dstatus(size_t(tiles) * 4);
  din.upload(in.data(), tensor_bytes);
  dout.fill_bytes(0xAB);
  dcoords.upload(coords.data(), coords.size() * 4);
  dtiles.fill_bytes(0xCD);
  dstatus.fill_bytes(0x7F);
  const CUtensorMap in_map = bf16_tensor_map(din.address(), cols, rows, cols * 2);
  const CUtensorMap out_map = bf16_tensor_map(dout.address() + guard, cols, rows, cols * 2);
  CUdeviceptr pcoords = dcoords.address(), ptiles = dtiles.address(), pstatus = dstatus.address();
  void* params[] = {
      const_cast<CUtensorMap*>(&in_map), const_cast<CUtensorMap*>(&out_map), &pcoords, &flags, &ptiles, &pstatus};
  Stream stream;
  launch(module.function("tsattn_test_tma_roundtrip"), tiles, 128, params, stream, "tsattn_test_tma_roundtrip");

  std::vector<int> status(tiles);
  dstatus.download(status.data(), status.size() * 4);
  std::vector<uint16_t> got(size_t(tiles) * 64 * 64);
  dtiles.download(got.data(), got.size() * 2);
  for (int t = 0; t < tiles; ++t) {
    const int c0 = coords[2 * t], c1 = coords[2 * t + 1];
    CAPTURE(c0);
    CAPTURE(c1);
    CHECK_MESSAGE(status[t] == 0, "the TMA load's mbarrier wait timed out (status " << status[t] << ")");
    int bad = 0, bad_zero_fill = 0;
    std::string first;
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < 64; ++c) {
        const int gr = c1 + r, gc = c0 + c;
        const bool inside = gr >= 0 && gr < rows && gc >= 0 && gc < cols;
        const uint16_t expected = inside ? in[size_t(gr) * cols + gc] : 0;
        const uint16_t value = got[size_t(t) * 4096 + r * 64 + c];
        if (value != expected) {
          ++bad;
          if (!inside) ++bad_zero_fill;
          if (bad <= 6) first += fmt::format(" ({},{}): got {:#06x} expected {:#06x};", r, c, value, expected);
        }
      }
    }
    INFO("first mismatches:" << first);
    INFO(bad_zero_fill << " of them out of bounds (zero fill)");
    CHECK(bad == 0);
  }

  if ((flags & kTmaTestStore) == 0) return;
  // The TMA stores: every element covered by a tile written back, nothing outside the tensor.
  std::vector<uint8_t> out(guard + tensor_bytes + guard);
  dout.download(out.data(), out.size());
  int guard_bytes_changed = 0;
  for (size_t i = 0; i < guard; ++i) guard_bytes_changed += (out[i] != 0xAB) + (out[guard + tensor_bytes + i] != 0xAB);
  CHECK_MESSAGE(guard_bytes_changed == 0, "TMA stores wrote outside the tensor");
  CHECK_MESSAGE(std::memcmp(out.data() + guard, in.data(), tensor_bytes) == 0, "TMA store round trip differs");
}

// ---------------------------------------------------------------------------------------------
// mbarrier ring.

void check_mbarrier_ring(const Module& module, int num_tiles, int rows, std::mt19937_64& rng) {
  CAPTURE(num_tiles);
  CAPTURE(rows);
  std::vector<uint16_t> in(size_t(rows) * 64);
  std::uniform_int_distribution<int> values(-8, 8);
  for (uint16_t& x : in) x = ref::float_to_bfloat16(float(values(rng)));
  DeviceBuffer din(in.size() * 2), dpartials(size_t(num_tiles) * 128 * 4), dstatus(8);
  din.upload(in.data(), in.size() * 2);
  dpartials.fill_bytes(0xFF);
  dstatus.fill_bytes(0);
  const CUtensorMap map = bf16_tensor_map(din.address(), 64, rows, 128);
  CUdeviceptr ppartials = dpartials.address(), pstatus = dstatus.address();
  void* params[] = {const_cast<CUtensorMap*>(&map), &num_tiles, &ppartials, &pstatus};
  Stream stream;
  launch(module.function("tsattn_test_mbarrier_ring"), 1, 256, params, stream, "tsattn_test_mbarrier_ring");

  int status[2] = {-1, -1};
  dstatus.download(status, sizeof status);
  CHECK_MESSAGE(status[0] == 0, "the producer timed out waiting for an empty stage");
  CHECK_MESSAGE(status[1] == 0, "a consumer timed out waiting for a full stage");
  std::vector<float> partials(size_t(num_tiles) * 128);
  dpartials.download(partials.data(), partials.size() * 4);
  int bad = 0;
  double total = 0, expected_total = 0;
  std::string first;
  for (int t = 0; t < num_tiles; ++t) {
    for (int ct = 0; ct < 128; ++ct) {
      const int row = 64 * t + ct / 2, col0 = 32 * (ct % 2);
      float expected = 0;  // small integers: exact in any order
      if (row < rows) {
        for (int c = col0; c < col0 + 32; ++c)
          expected += ref::bfloat16_to_float(in[size_t(row) * 64 + c]) * float(c + 1);
      }
      const float got = partials[size_t(t) * 128 + ct];
      total += got;
      expected_total += expected;
      if (got != expected) {
        ++bad;
        if (bad <= 6) first += fmt::format(" tile {} thread {}: got {} expected {};", t, ct, got, expected);
      }
    }
  }
  INFO("first mismatches:" << first);
  CHECK(bad == 0);
  CHECK(total == expected_total);
}

}  // namespace

TEST_SUITE("codegen/sm90a_blocks") {
  TEST_CASE("each sm90a test kernel compiles with NVRTC for sm_90a: no spills, no C75xx notes") {
    for (const TestKernels& kernels : test_kernels()) {
      const std::string header = kernels.header;
      CAPTURE(header);
      const nvrtc::CompileResult result = compile_test_kernel(header, "sm_90a");
      MESSAGE(header << " (" << result.compile_ms << " ms):\n" << register_lines(result.log));
      REQUIRE(result.cubin.size() > 64);
      CHECK(result.ptxas.registers > 0);
      CHECK(result.ptxas.spill_store_bytes == 0);
      CHECK(result.ptxas.spill_load_bytes == 0);
      CHECK(result.ptxas.stack_frame_bytes == 0);
      CHECK_MESSAGE(result.ptxas.serialization_notes.empty(), result.log);
      const std::string cubin(result.cubin.begin(), result.cubin.end());
      for (const char* symbol : kernels.symbols) CHECK_MESSAGE(contains(cubin, symbol), symbol);
    }
  }

  TEST_CASE("the sm90a test kernels refuse sm_80 and sm_90 (no 'a') with a clear message") {
    for (const TestKernels& kernels : test_kernels()) {
      for (const std::string arch : {"sm_80", "sm_90"}) {
        const std::string header = kernels.header;
        CAPTURE(header);
        CAPTURE(arch);
        std::string message;
        try {
          compile_test_kernel(kernels.header, arch);
        } catch (const Error& error) {
          message = error.what();
        }
        CHECK_MESSAGE(contains(message, "templates/sm90a needs --gpu-architecture=sm_90a"), message);
      }
    }
  }
}

TEST_SUITE("gpu/sm90a_blocks") {
  TEST_CASE("SS-wgmma m64nNk16 x4 (K = 64) from 128B-swizzled smem matches a CPU GEMM") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_wgmma_gemm"));
    std::mt19937_64 rng(0x5eed90a1);
    const WgmmaCase cases[] = {{"tsattn_test_wgmma_bf16_n64", 64, true},
                               {"tsattn_test_wgmma_bf16_n128", 128, true},
                               {"tsattn_test_wgmma_bf16_n256", 256, true},
                               {"tsattn_test_wgmma_f16_n64", 64, false}};
    for (const WgmmaCase& g : cases) {
      check_wgmma_gemm(module, g, true, rng);
      check_wgmma_gemm(module, g, false, rng);
    }
  }

  TEST_CASE("SS-wgmma e4m3 m64nNk32 x4 (K = 128) from 128B-swizzled 8-bit K-major smem matches a CPU GEMM") {
    TSATTN_REQUIRE_SM90();
    check_wgmma_e4m3(check_wgmma_e4m3_ss, 0x5eed90a9);
  }

  TEST_CASE("RS-wgmma O = P V with P from registers and V MN-major (transposed) from swizzled smem") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_wgmma_pv"));
    std::mt19937_64 rng(0x5eed90a4);
    const WgmmaCase cases[] = {{"tsattn_test_wgmma_pv_bf16_n128", 128, true},
                               {"tsattn_test_wgmma_pv_bf16_n256", 256, true},
                               {"tsattn_test_wgmma_pv_f16_n128", 128, false}};
    for (const WgmmaCase& g : cases) {
      check_wgmma_pv(module, g, true, rng);
      check_wgmma_pv(module, g, false, rng);
    }
  }

  // (No comma in test case names: tools/dev/gpu_check.sh passes each name to -tc, which splits at commas.)
  TEST_CASE(
      "RS-wgmma e4m3 O = P V with P from fp32 accumulators (e4m3_a_operand) and V^T K-major with keys permuted "
      "by e4m3_key_of_slot") {
    TSATTN_REQUIRE_SM90();
    check_wgmma_e4m3(check_wgmma_e4m3_pv, 0x5eed90aa);
  }

  // The TMA pieces run as separate test cases (tools/dev/gpu_check.sh runs each in its own process):
  // a faulting instruction poisons the CUDA context and would hide the others.
  TEST_CASE("TMA load: 64x64 bf16 boxes inside the tensor with 128B swizzle") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_tma_roundtrip"));
    std::mt19937_64 rng(0x5eed90a2);
    check_tma_roundtrip(module, 0, {0, 0, 56, 0, 0, 64, 40, 80}, rng);
  }

  TEST_CASE("TMA load: boxes crossing the tensor's edges are zero-filled outside it") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_tma_roundtrip"));
    std::mt19937_64 rng(0x5eed90a5);
    check_tma_roundtrip(module, 0, {64, 0, 0, 128, 64, 128, 56, 100, 96, 140}, rng);
  }

  TEST_CASE("TMA load: boxes at negative coordinates are zero-filled outside the tensor") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_tma_roundtrip"));
    std::mt19937_64 rng(0x5eed90a8);
    check_tma_roundtrip(module, 0, {-16, -5, -64, 0, 0, -64}, rng);
  }

  TEST_CASE("TMA load after prefetch.tensormap of the __grid_constant__ descriptors") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_tma_roundtrip"));
    std::mt19937_64 rng(0x5eed90a6);
    check_tma_roundtrip(module, kTmaTestPrefetch, {0, 0, 64, 128}, rng);
  }

  TEST_CASE("TMA store round trip: six boxes cover the tensor and stores clip at its edges") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_tma_roundtrip"));
    std::mt19937_64 rng(0x5eed90a7);
    check_tma_roundtrip(module, kTmaTestStore, {0, 0, 64, 0, 0, 64, 64, 64, 0, 128, 64, 128}, rng);
  }

  TEST_CASE("mbarrier ring: one TMA producer warp and a consumer warpgroup over 2 stages") {
    TSATTN_REQUIRE_SM90();
    const Module module(sm90a_cubin("test_mbarrier_ring"));
    std::mt19937_64 rng(0x5eed90a3);
    check_mbarrier_ring(module, 1, 64, rng);   // one use of one stage
    check_mbarrier_ring(module, 2, 100, rng);  // the second tile half out of bounds
    for (int repeat = 0; repeat < 4; ++repeat) check_mbarrier_ring(module, 33, 32 * 64 + 37, rng);  // 16 reuses
  }
}

}  // namespace tsattn::test
