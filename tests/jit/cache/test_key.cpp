// Cache key: equal ingredients give equal keys, any single change (one byte of source or a
// header, a name, the arch, the toolchain, option order, the environment) gives a new key, and
// the length-prefixed encoding keeps field boundaries from being ambiguous.
#include <doctest/doctest.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/sha256.hpp"
#include "jit/cache/key.hpp"

namespace {

using tsattn::Digest;
using tsattn::to_hex;
using tsattn::jit::compute_cache_key;
using tsattn::jit::KeyIngredients;

// Header texts live outside the ingredients (they are views into the embedded templates).
const std::string kParamsHeader = "struct Params { int n; };\n";
const std::string kMmaHeader = "__device__ void mma() {}\n";

KeyIngredients base_ingredients() {
  KeyIngredients in;
  in.canonical_name = "prefill.sm90a.d128.bf16_bf16.causal.win";
  in.source = "#include \"params.h\"\n#include \"mma.cuh\"\nextern \"C\" __global__ void k() {}\n";
  in.headers = {{"params.h", kParamsHeader}, {"mma.cuh", kMmaHeader}};
  in.arch = "sm_90a";
  in.nvrtc_version = "13.0.48";
  in.options = {"--std=c++17", "-arch=sm_90a", "--use_fast_math"};
  in.environment = "TSATTN_LINEINFO=0\n";
  return in;
}

}  // namespace

TEST_SUITE("jit/cache/key") {
  TEST_CASE("equal ingredients give the same key") {
    const KeyIngredients a = base_ingredients();
    const KeyIngredients b = base_ingredients();
    CHECK(to_hex(compute_cache_key(a)) == to_hex(compute_cache_key(b)));
    // A header with equal text at another address is the same header.
    const std::string params_copy = kParamsHeader;
    KeyIngredients c = base_ingredients();
    c.headers[0].second = params_copy;
    CHECK(to_hex(compute_cache_key(c)) == to_hex(compute_cache_key(a)));
    CHECK(compute_cache_key(a) != tsattn::sha256(""));
  }

  TEST_CASE("any single changed ingredient changes the key") {
    const std::string params_edited = "struct Params { int m; };\n";
    const std::string params_longer = kParamsHeader + " ";
    const std::vector<std::pair<const char*, std::function<void(KeyIngredients&)>>> edits = {
        {"canonical name", [](KeyIngredients& in) { in.canonical_name += "2"; }},
        {"one source byte", [](KeyIngredients& in) { in.source[in.source.size() - 3] = ' '; }},
        {"source grows by a newline", [](KeyIngredients& in) { in.source += "\n"; }},
        {"one header byte", [&](KeyIngredients& in) { in.headers[0].second = params_edited; }},
        {"header text grows", [&](KeyIngredients& in) { in.headers[0].second = params_longer; }},
        {"header name", [](KeyIngredients& in) { in.headers[1].first = "mma2.cuh"; }},
        {"header order", [](KeyIngredients& in) { std::swap(in.headers[0], in.headers[1]); }},
        {"header dropped", [](KeyIngredients& in) { in.headers.pop_back(); }},
        {"arch suffix", [](KeyIngredients& in) { in.arch = "sm_90"; }},
        {"nvrtc build", [](KeyIngredients& in) { in.nvrtc_version = "13.0.49"; }},
        {"option order", [](KeyIngredients& in) { std::swap(in.options[0], in.options[2]); }},
        {"option content", [](KeyIngredients& in) { in.options[2] = "--ftz=true"; }},
        {"option added", [](KeyIngredients& in) { in.options.push_back("-lineinfo"); }},
        {"environment", [](KeyIngredients& in) { in.environment = "TSATTN_LINEINFO=1\n"; }},
    };
    const Digest base = compute_cache_key(base_ingredients());
    std::set<std::string> seen = {to_hex(base)};
    for (const auto& [what, edit] : edits) {
      CAPTURE(what);
      KeyIngredients in = base_ingredients();
      edit(in);
      const std::string key = to_hex(compute_cache_key(in));
      CHECK(key != to_hex(base));
      CHECK(seen.insert(key).second);  // and differs from every other single edit
    }
  }

  TEST_CASE("moving bytes across a field boundary changes the key") {
    KeyIngredients a = base_ingredients(), b = base_ingredients();
    a.canonical_name = "ab";
    a.source = "c";
    b.canonical_name = "a";
    b.source = "bc";
    CHECK(compute_cache_key(a) != compute_cache_key(b));

    a = base_ingredients();
    b = base_ingredients();
    a.options = {"-a", "-b"};
    b.options = {"-a-b"};
    CHECK(compute_cache_key(a) != compute_cache_key(b));

    // A header name that swallows the start of its text.
    const std::string text = "xy", tail = "y";
    a = base_ingredients();
    b = base_ingredients();
    a.headers = {{"h", text}};
    b.headers = {{"hx", tail}};
    CHECK(compute_cache_key(a) != compute_cache_key(b));

    // An empty option is still an option.
    a = base_ingredients();
    b = base_ingredients();
    b.options.push_back("");
    CHECK(compute_cache_key(a) != compute_cache_key(b));
  }
}
