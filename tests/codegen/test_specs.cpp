// test_specs.cpp - the table of truth and what derives from it: names, ids, sources, manifests,
// and NVRTC compiling every kernel in the table with zero spills and no serialization notes.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include "codegen/embedded_files.hpp"
#include "codegen/kernel_source.hpp"
#include "codegen/manifest.hpp"
#include "codegen/spec_table.hpp"
#include "jit/driver/module_table.hpp"
#include "jit/nvrtc/compiler.hpp"

namespace tsattn::test {
namespace {

// The sm90a family: the 288 specs of every axis but short_keys and paged_kv, the short-key variants
// of the 16-bit D128 dense and D256 dense and causal ones (3 kinds x 2 inputs x 3 outputs x 2
// layouts x with and without lse), and the paged variants of the 16-bit D128 packed ones (2 inputs x
// 3 outputs x 4 masks x with and without lse; dense: of its short-key variant).
constexpr size_t kShortKeysVariantsPerKind = 2 * 3 * 2 * 2;
constexpr size_t kShortKeysVariants = 3 * kShortKeysVariantsPerKind;
constexpr size_t kPagedVariants = 2 * 3 * 4 * 2;
constexpr size_t kSm90aSpecs = 288 + kShortKeysVariants + kPagedVariants;

std::vector<KernelSpec> every_spec() {
  std::vector<KernelSpec> specs;
  for (const FamilyAxes& family : kernel_families())
    for (Arch arch : family.archs)
      for (const KernelSpec& spec : all_specs(family.family, arch)) specs.push_back(spec);
  return specs;
}

TEST_SUITE("codegen/specs") {
  TEST_CASE("every spec has a unique id, canonical name and C symbol") {
    std::set<uint32_t> ids;
    std::set<std::string> names;
    for (const KernelSpec& spec : every_spec()) {
      CAPTURE(canonical_name(spec));
      CHECK(is_supported(spec));
      CHECK(ids.insert(spec.id()).second);
      CHECK(names.insert(canonical_name(spec)).second);
      const std::string symbol = kernel_symbol(spec);
      CHECK(symbol.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos);
      const TileConfig tile = tile_config(spec);
      CHECK(tile.block_m > 0);
    }
    // sm80: 2 head dims x 3 x 3 dtype pairs x 4 masks x 2 layouts x with and without lse, on 4
    // archs; sm90a: the same 288 on sm_90a, the 72 short-key variants and the 48 paged ones.
    CHECK(names.size() == 4 * 288 + kSm90aSpecs);
  }

  TEST_CASE("the lse axis: a suffix on the name only when true, and the same kernel otherwise") {
    size_t twins = 0;
    for (const KernelSpec& spec : every_spec()) {
      if (!spec.lse) continue;
      CAPTURE(canonical_name(spec));
      KernelSpec plain = spec;
      plain.lse = false;
      REQUIRE(is_supported(plain));
      ++twins;
      // Names of kernels without lse are the names they had before the axis existed.
      const std::string name = fmt::format(
          "prefill.{}.{}.d{}.{}_{}.{}.{}{}{}", family_name(plain.family), arch_name(plain.arch), plain.head_dim,
          short_dtype_name(plain.input_dtype), short_dtype_name(plain.output_dtype), mask_variant_name(plain.mask),
          layout_name(plain.layout), plain.paged_kv ? ".paged" : "", plain.short_keys ? ".short_keys" : "");
      CHECK(canonical_name(plain) == name);
      CHECK(canonical_name(spec) == name + ".lse");
      CHECK(kernel_symbol(spec) == kernel_symbol(plain) + "_lse");
      CHECK(spec.id() != plain.id());
      // The twins share every setting the host reads and every generated line but TSATTN_LSE and
      // the kernel's name.
      CHECK(kernel_traits(spec) == kernel_traits(plain));
      CHECK(transposes_v(spec) == transposes_v(plain));
      std::string with = generate_source(spec).text, without = generate_source(plain).text;
      CHECK(with.find("#define TSATTN_LSE 1\n") != std::string::npos);
      CHECK(without.find("#define TSATTN_LSE 0\n") != std::string::npos);
      for (std::string* text : {&with, &without}) {
        const std::string& own = text == &with ? canonical_name(spec) : canonical_name(plain);
        const std::string& symbol = text == &with ? kernel_symbol(spec) : kernel_symbol(plain);
        for (const std::string& part : {own, symbol}) text->replace(text->find(part), part.size(), "NAME");
        text->replace(text->find("#define TSATTN_LSE "), std::string("#define TSATTN_LSE 0").size(), "LSE");
      }
      CHECK(with == without);
    }
    CHECK(twins == (4 * 288 + kSm90aSpecs) / 2);
  }

  TEST_CASE("the short_keys axis: sm90a 16-bit D128 dense and D256 dense and causal, a suffix before .lse") {
    size_t variants = 0;
    for (const FamilyAxes& family : kernel_families())
      for (Arch arch : family.archs)
        for (int head_dim : family.head_dims)
          for (tsattn_dtype input : family.input_dtypes)
            for (tsattn_dtype output : family.output_dtypes)
              for (MaskVariant mask : family.masks)
                for (Layout layout : family.layouts)
                  for (bool lse : family.lse) {
                    const KernelSpec usual{family.family, arch, mask, head_dim, input, output, layout, lse};
                    KernelSpec variant = usual;
                    variant.short_keys = true;
                    CAPTURE(canonical_name(variant));
                    const bool kind = head_dim == 128 ? mask == MaskVariant::dense
                                                      : mask == MaskVariant::dense || mask == MaskVariant::causal;
                    const bool expected =
                        family.family == KernelFamily::sm90a && kind && input != TSATTN_DTYPE_FLOAT8_E4M3FN;
                    CHECK(has_short_keys_variant(usual) == expected);
                    CHECK(has_short_keys_variant(variant) == expected);
                    CHECK(is_supported(usual));
                    CHECK(is_supported(variant) == expected);
                    if (!expected) {
                      CHECK_THROWS_AS(generate_source(variant), Error);
                      continue;
                    }
                    ++variants;
                    // The name: the usual kernel's, then ".short_keys", then ".lse" when it writes lse.
                    KernelSpec usual_plain = usual;
                    usual_plain.lse = false;
                    CHECK(canonical_name(variant) == canonical_name(usual_plain) + ".short_keys" + (lse ? ".lse" : ""));
                    CHECK(kernel_symbol(variant) == kernel_symbol(usual_plain) + "_short_keys" + (lse ? "_lse" : ""));
                    CHECK(variant.id() != usual.id());
                    CHECK_FALSE(variant == usual);
                    // 128 keys per step instead of 160 (D256: 64 instead of 80), and only what follows
                    // from the width: the K/V stages' shared memory (registers are checked where the
                    // traits are made); D128 dense fixed-layout variants also walk without the
                    // scheduler's ring (five barriers and its two entries fewer) and its split tail.
                    const KernelTraits a = kernel_traits(usual), b = kernel_traits(variant);
                    const bool static_walk = head_dim == 128 && mask == MaskVariant::dense && layout == Layout::fixed;
                    CHECK(a.dynamic_order);
                    CHECK(b.dynamic_order == !static_walk);
                    CHECK(b.narrow_walk);
                    CHECK(b.split_partial_bytes == (static_walk ? 0 : a.split_partial_bytes));
                    const int ring_bytes = static_walk ? 5 * 8 + 2 * 8 : 0;
                    const int usual_n = head_dim == 128 ? 160 : 80, short_n = head_dim == 128 ? 128 : 64;
                    CHECK(a.tile.block_n == usual_n);
                    CHECK(b.tile.block_n == short_n);
                    CHECK(b.tile.block_m == a.tile.block_m);
                    CHECK(b.tile.num_warps == a.tile.num_warps);
                    // two stages of K and V, head_dim elements of 2 bytes, per key
                    const int k_and_v_bytes = 2 * 2 * head_dim * 2;
                    CHECK(a.dynamic_smem_bytes - b.dynamic_smem_bytes ==
                          (usual_n - short_n) * k_and_v_bytes + ring_bytes);
                    KernelTraits same = b;
                    same.tile = a.tile;
                    same.dynamic_smem_bytes = a.dynamic_smem_bytes;
                    same.dynamic_order = a.dynamic_order;
                    same.split_partial_bytes = a.split_partial_bytes;
                    CHECK(same == a);
                    CHECK(transposes_v(variant) == transposes_v(usual));
                    // The sources differ in the name, TSATTN_SHORT_KEYS and TSATTN_BLOCK_N only.
                    std::string with = generate_source(variant).text, without = generate_source(usual).text;
                    CHECK(with.find("#define TSATTN_SHORT_KEYS 1\n") != std::string::npos);
                    CHECK(without.find("#define TSATTN_SHORT_KEYS 0\n") != std::string::npos);
                    CHECK(with.find(fmt::format("#define TSATTN_BLOCK_N {}\n", short_n)) != std::string::npos);
                    CHECK(without.find(fmt::format("#define TSATTN_BLOCK_N {}\n", usual_n)) != std::string::npos);
                    for (std::string* text : {&with, &without}) {
                      const KernelSpec& own = text == &with ? variant : usual;
                      for (const std::string& part : {canonical_name(own), kernel_symbol(own)})
                        text->replace(text->find(part), part.size(), "NAME");
                      for (const char* define : {"#define TSATTN_SHORT_KEYS ", "#define TSATTN_BLOCK_N "}) {
                        const size_t at = text->find(define);
                        text->replace(at, text->find('\n', at) - at, "DEFINE");
                      }
                    }
                    CHECK(with == without);
                  }
    CHECK(variants == kShortKeysVariants);
    // Every other kind keeps its one width; the portable family has no variant at all.
    size_t listed = 0;
    for (const KernelSpec& spec : all_specs(KernelFamily::sm90a, Arch::sm_90a))
      listed += spec.short_keys && !spec.paged_kv ? 1 : 0;
    CHECK(listed == kShortKeysVariants);
    for (const KernelSpec& spec : every_spec()) CHECK((spec.short_keys ? has_short_keys_variant(spec) : true));
    KernelSpec sm80{KernelFamily::sm80,    Arch::sm_90a,          MaskVariant::dense, 128,
                    TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, Layout::fixed};
    CHECK(generate_source(sm80).text.find("#define TSATTN_SHORT_KEYS 0\n") != std::string::npos);
    sm80.short_keys = true;
    CHECK_FALSE(is_supported(sm80));
    KernelSpec named{KernelFamily::sm90a,
                     Arch::sm_90a,
                     MaskVariant::dense,
                     128,
                     TSATTN_DTYPE_BFLOAT16,
                     TSATTN_DTYPE_BFLOAT16,
                     Layout::packed,
                     true,
                     true};
    CHECK(canonical_name(named) == "prefill.sm90a.sm_90a.d128.bf16_bf16.dense.packed.short_keys.lse");
    CHECK(kernel_symbol(named) == "prefill_sm90a_sm_90a_d128_bf16_bf16_dense_packed_short_keys_lse");
  }

  TEST_CASE("the paged_kv axis: sm90a 16-bit D128 packed kernels of 128-key tiles, the same kernel but its loads") {
    size_t variants = 0;
    for (const KernelSpec& usual : every_spec()) {
      if (usual.paged_kv) continue;
      KernelSpec paged = usual;
      paged.paged_kv = true;
      CAPTURE(canonical_name(paged));
      // Dense kernels page only in their short-key variant: the producer needs the 40 registers
      // that kernels of 128-key tiles give it.
      const bool expected = usual.family == KernelFamily::sm90a && usual.layout == Layout::packed &&
                            usual.head_dim == 128 && usual.input_dtype != TSATTN_DTYPE_FLOAT8_E4M3FN &&
                            (usual.mask != MaskVariant::dense || usual.short_keys);
      CHECK(has_paged_kv_variant(usual) == expected);
      CHECK(is_supported(paged) == expected);
      if (!expected) {
        CHECK_THROWS_AS(generate_source(paged), Error);
        continue;
      }
      ++variants;
      // ".paged" right after the layout, before ".short_keys" and ".lse".
      const std::string name = canonical_name(usual);
      const size_t after_layout = name.find(".packed") + std::string(".packed").size();
      CHECK(canonical_name(paged) == name.substr(0, after_layout) + ".paged" + name.substr(after_layout));
      CHECK(paged.id() != usual.id());
      // Every setting the host reads is the twin's, and the sources differ in the name and
      // TSATTN_PAGED_KV only.
      CHECK(kernel_traits(paged) == kernel_traits(usual));
      CHECK(kernel_traits(paged).tile.block_n == 128);
      std::string with = generate_source(paged).text, without = generate_source(usual).text;
      CHECK(with.find("#define TSATTN_PAGED_KV 1\n") != std::string::npos);
      CHECK(without.find("#define TSATTN_PAGED_KV 0\n") != std::string::npos);
      for (std::string* text : {&with, &without}) {
        const KernelSpec& own = text == &with ? paged : usual;
        for (const std::string& part : {canonical_name(own), kernel_symbol(own)})
          text->replace(text->find(part), part.size(), "NAME");
        text->replace(text->find("#define TSATTN_PAGED_KV "), std::string("#define TSATTN_PAGED_KV 0").size(), "PAGED");
      }
      CHECK(with == without);
    }
    CHECK(variants == kPagedVariants);
    KernelSpec named{KernelFamily::sm90a,
                     Arch::sm_90a,
                     MaskVariant::dense,
                     128,
                     TSATTN_DTYPE_BFLOAT16,
                     TSATTN_DTYPE_FLOAT16,
                     Layout::packed,
                     true,
                     true,
                     true};
    CHECK(canonical_name(named) == "prefill.sm90a.sm_90a.d128.bf16_f16.dense.packed.paged.short_keys.lse");
    CHECK(kernel_symbol(named) == "prefill_sm90a_sm_90a_d128_bf16_f16_dense_packed_paged_short_keys_lse");
  }

  TEST_CASE("the sm90a rows: sm_90a only, every dtype pair, 128-row tiles of 12 warps") {
    KernelSpec spec{KernelFamily::sm90a,   Arch::sm_90a,          MaskVariant::causal, 128,
                    TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_BFLOAT16, Layout::fixed};
    CHECK(canonical_name(spec) == "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed");
    for (tsattn_dtype input : {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN})
      for (tsattn_dtype output : {TSATTN_DTYPE_FLOAT16, TSATTN_DTYPE_BFLOAT16, TSATTN_DTYPE_FLOAT8_E4M3FN})
        for (MaskVariant mask :
             {MaskVariant::dense, MaskVariant::causal, MaskVariant::causal_window, MaskVariant::variable_window})
          for (Layout layout : {Layout::fixed, Layout::packed})
            for (int head_dim : {128, 256}) {
              KernelSpec s{KernelFamily::sm90a, Arch::sm_90a, mask, head_dim, input, output, layout};
              CAPTURE(canonical_name(s));
              CHECK(is_supported(s));
              // Only e4m3 inputs need V^T: 8-bit wgmma reads B K-major.
              CHECK(transposes_v(s) == (input == TSATTN_DTYPE_FLOAT8_E4M3FN));
              // O staged in shared memory: D128 with 16-bit outputs (D256 has no room left).
              const bool out_8bit = output == TSATTN_DTYPE_FLOAT8_E4M3FN;
              CHECK(stages_output(s) == (head_dim == 128 && !out_8bit));
              // Unstaged 16-bit outputs of 16-bit inputs go out as 16-byte chunks from registers.
              const bool quad_stores = !stages_output(s) && !out_8bit && input != TSATTN_DTYPE_FLOAT8_E4M3FN;
              CHECK(output_store_bytes(s) == (stages_output(s) || quad_stores ? 16 : out_8bit ? 2 : 4));
              CHECK(stores_output_by_tma(s) ==
                    (stages_output(s) && input != TSATTN_DTYPE_FLOAT8_E4M3FN && mask != MaskVariant::dense));
              // e4m3 tiles: whole 32-key V^T groups. D128: dense 256 keys, variable windows 128,
              // the rest 192; D256: 128, variable windows 64 (sm90a/kernel_traits.h says why).
              if (input == TSATTN_DTYPE_FLOAT8_E4M3FN) {
                const bool varwin = mask == MaskVariant::variable_window;
                const int expected = head_dim == 128 ? (varwin                       ? 128
                                                        : mask == MaskVariant::dense ? 256
                                                                                     : 192)
                                                     : (varwin ? 64 : 128);
                CHECK(tile_config(s).block_n == expected);
              }
            }
    for (Arch arch : {Arch::sm_80, Arch::sm_100, Arch::sm_120}) {
      spec.arch = arch;
      CHECK_FALSE(is_supported(spec));
      CHECK(all_specs(KernelFamily::sm90a, arch).empty());
    }
    spec.arch = Arch::sm_90a;
    spec.mask = MaskVariant::causal;
    const TileConfig d128 = tile_config(spec);
    CHECK(d128.block_m == 128);
    CHECK(d128.block_n == 128);
    CHECK(d128.num_warps == 12);
    spec.mask = MaskVariant::dense;  // dense D128 takes longer key steps
    CHECK(tile_config(spec).block_n == 160);
    spec.head_dim = 256;
    const TileConfig d256 = tile_config(spec);
    CHECK(d256.block_m == 128);
    CHECK(d256.block_n == 80);  // dense and causal D256: 80 keys per step
    CHECK(d256.num_warps == 12);
    spec.mask = MaskVariant::causal_window;  // windows keep 64
    CHECK(tile_config(spec).block_n == 64);
    spec.mask = MaskVariant::dense;
    CHECK(all_specs(KernelFamily::sm90a, Arch::sm_90a).size() == kSm90aSpecs);
    spec.family = KernelFamily::sm80;  // the portable family never transposes
    spec.input_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;
    CHECK_FALSE(transposes_v(spec));
    spec.input_dtype = TSATTN_DTYPE_BFLOAT16;
    spec.head_dim = 128;
    CHECK_FALSE(stages_output(spec));
    // The portable family keeps its own tiles on the same arch.
    spec.family = KernelFamily::sm80;
    CHECK(tile_config(spec).num_warps == 8);
  }

  TEST_CASE("kernel traits: the settings the host reads are the sm90a kernel's own") {
    KernelSpec spec{KernelFamily::sm90a,   Arch::sm_90a,  MaskVariant::variable_window, 128, TSATTN_DTYPE_BFLOAT16,
                    TSATTN_DTYPE_BFLOAT16, Layout::packed};
    KernelTraits t = kernel_traits(spec);
    CHECK(t.staged_output);
    CHECK(t.tma_output);  // variable windows hand staged O to TMA stores
    CHECK(t.dynamic_order);
    CHECK(t.chunked_order);
    CHECK(t.pairs);
    CHECK_FALSE(t.pairs_along_tiles);   // a variable window's union is unknown
    CHECK(t.split_partial_bytes == 0);  // packed: no split tail
    spec.mask = MaskVariant::dense;
    spec.layout = Layout::fixed;
    t = kernel_traits(spec);
    CHECK_FALSE(t.tma_output);  // O staged in the Q buffer, stored by the consumer warps
    CHECK(t.pairs_along_tiles);
    CHECK(t.split_partial_bytes == (128 / 2 + 4) * 256 * 4);  // O, m[2], l[2] per consumer thread
    spec.output_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;           // 8-bit out: element pairs from registers
    t = kernel_traits(spec);
    CHECK_FALSE(t.staged_output);
    CHECK(t.output_store_bytes == 2);
    spec.output_dtype = TSATTN_DTYPE_BFLOAT16;
    spec.input_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;  // e4m3 inputs: the simplest walk, no pairs
    t = kernel_traits(spec);
    CHECK(t.staged_output);
    CHECK_FALSE(t.tma_output);
    CHECK_FALSE(t.dynamic_order);
    CHECK_FALSE(t.chunked_order);
    CHECK_FALSE(t.pairs);
    CHECK(t.split_partial_bytes == 0);
    // Every sm90a kernel asks for at most the 227 KB a Hopper CTA may have, and each layout holds
    // at least its Q tile and two K and V stages.
    for (const KernelSpec& s : all_specs(KernelFamily::sm90a, Arch::sm_90a)) {
      CAPTURE(canonical_name(s));
      const KernelTraits k = kernel_traits(s);
      const int bytes = s.input_dtype == TSATTN_DTYPE_FLOAT8_E4M3FN ? 1 : 2;
      CHECK(k.dynamic_smem_bytes <= 232448);
      CHECK(k.dynamic_smem_bytes >= 128 * s.head_dim * bytes + 4 * k.tile.block_n * s.head_dim * bytes);
    }
    // The portable family derives nothing beyond its tile: the module reports its launch shape.
    spec.family = KernelFamily::sm80;
    t = kernel_traits(spec);
    CHECK(t.dynamic_smem_bytes == 0);
    CHECK(t.chunked_order);
    CHECK_FALSE(t.dynamic_order);
    CHECK_FALSE(t.pairs);
    CHECK(t.tile.num_warps == 8);
  }

  TEST_CASE("canonical names read back into their parts") {
    KernelSpec spec{KernelFamily::sm80,    Arch::sm_90a,  MaskVariant::causal_window, 256, TSATTN_DTYPE_FLOAT8_E4M3FN,
                    TSATTN_DTYPE_BFLOAT16, Layout::packed};
    CHECK(canonical_name(spec) == "prefill.sm80.sm_90a.d256.e4m3_bf16.causal_win.packed");
    CHECK(kernel_symbol(spec) == "prefill_sm80_sm_90a_d256_e4m3_bf16_causal_win_packed");
    spec.lse = true;
    CHECK(canonical_name(spec) == "prefill.sm80.sm_90a.d256.e4m3_bf16.causal_win.packed.lse");
    CHECK(kernel_symbol(spec) == "prefill_sm80_sm_90a_d256_e4m3_bf16_causal_win_packed_lse");
    CHECK(parse_mask_variant("causal_win") == MaskVariant::causal_window);
    CHECK(parse_arch("sm_90a") == Arch::sm_90a);
    CHECK_FALSE(parse_arch("sm_90").has_value());
    CHECK(arch_for_compute_capability(9) == Arch::sm_90a);
    CHECK(arch_for_compute_capability(8) == Arch::sm_80);
    CHECK_FALSE(arch_for_compute_capability(7).has_value());
  }

  TEST_CASE("generated sources pin the spec and include only embedded templates") {
    KernelSpec spec;
    spec.layout = Layout::packed;
    spec.mask = MaskVariant::variable_window;
    const GeneratedSource source = generate_source(spec);
    CHECK(source.text.find("#define TSATTN_MASK 2") != std::string::npos);
    CHECK(source.text.find("#define TSATTN_PACKED 1") != std::string::npos);
    CHECK(source.text.find("plan/device_plan.cuh") != std::string::npos);
    spec.layout = Layout::fixed;
    CHECK(generate_source(spec).text.find("plan/device_plan.cuh") == std::string::npos);
    std::set<std::string> embedded;
    for (const EmbeddedFile& f : embedded_templates()) embedded.insert(std::string(f.name));
    CHECK(embedded.count("sm80/prefill_sm80.cuh") == 1);
    CHECK(embedded.count("prefill_params.h") == 1);
    CHECK(source.text.find("TSATTN_STAGED_OUTPUT") == std::string::npos);  // an sm90a macro only
    spec.family = KernelFamily::sm90a;
    const GeneratedSource hopper = generate_source(spec);
    CHECK(hopper.text.find("#include \"sm90a/prefill_sm90a.cuh\"") != std::string::npos);
    CHECK(hopper.text.find("#define TSATTN_NUM_WARPS 12") != std::string::npos);
    CHECK(hopper.text.find("#define TSATTN_BLOCK_N 128") != std::string::npos);
    CHECK(hopper.text.find("sm90a/transpose_v.cuh") == std::string::npos);
    CHECK(hopper.text.find("TSATTN_STAGED_OUTPUT") == std::string::npos);  // the kernel's traits decide
    spec.input_dtype = TSATTN_DTYPE_FLOAT8_E4M3FN;  // V^T: the module carries the transpose kernel
    CHECK(generate_source(spec).text.find("#include \"sm90a/transpose_v.cuh\"") != std::string::npos);
    spec.head_dim = 64;  // not in the table
    CHECK_THROWS_AS(generate_source(spec), Error);
  }

  TEST_CASE("manifests expand against the table, with path-qualified errors") {
    const std::vector<Arch> hopper{Arch::sm_90a};
    // Hopper: every sm80 and sm90a kernel; other archs: the sm80 kernels only.
    // Each with and without lse: an axis left out means both.
    // The Hopper family's short-key variants too: an axis left out means every value.
    CHECK(load_manifest(TSATTN_SOURCE_DIR "/cache/manifests/all.json", hopper).size() == 288 + kSm90aSpecs);
    CHECK(load_manifest(TSATTN_SOURCE_DIR "/cache/manifests/default.json", hopper).size() == 288 + kSm90aSpecs);
    CHECK(load_manifest(TSATTN_SOURCE_DIR "/cache/manifests/default.json", {Arch::sm_80}).size() == 288);
    const nlohmann::json narrow = {{"schema", 1},
                                   {"kernels",
                                    {{{"family", "sm80"},
                                      {"head_dim", {128}},
                                      {"input_dtype", {"bf16", "f16"}},
                                      {"output_dtype", "bf16"},
                                      {"mask", {"causal", "causal_win"}},
                                      {"lse", false},
                                      {"exclude", {{{"input_dtype", "f16"}, {"mask", "causal_win"}}}}}}}};
    CHECK(expand_manifest(narrow, hopper, "m.json").size() == 2 * 2 * 2 - 2);
    CHECK(expand_manifest(narrow, {Arch::sm_90a, Arch::sm_80}, "m.json").size() == 12);
    // The lse axis: a boolean or a list of them, both when left out, and in excludes.
    nlohmann::json lse = narrow;
    lse["kernels"][0]["lse"] = true;
    for (const KernelSpec& spec : expand_manifest(lse, hopper, "m.json")) CHECK(spec.lse);
    lse["kernels"][0]["lse"] = {false, true};
    const std::vector<KernelSpec> both = expand_manifest(lse, hopper, "m.json");
    REQUIRE(both.size() == 12);
    CHECK_FALSE(both[0].lse);  // each kernel, then its lse twin
    CHECK(both[1].lse);
    lse["kernels"][0].erase("lse");
    CHECK(expand_manifest(lse, hopper, "m.json").size() == 12);
    lse["kernels"][0]["exclude"].push_back({{"lse", true}, {"mask", "causal"}});
    CHECK(expand_manifest(lse, hopper, "m.json").size() == 12 - 4);
    auto error_of = [&](nlohmann::json manifest) {
      try {
        expand_manifest(manifest, hopper, "m.json");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::value);
        return std::string(e.what());
      }
      return std::string("no error");
    };
    nlohmann::json bad = narrow;
    bad["kernels"][0]["head_dim"] = {128, 96};
    CHECK(error_of(bad) == "m.json.kernels[0].head_dim[1]: 96 is not supported (supported: 128, 256)");
    bad = narrow;
    bad["kernels"][0]["colour"] = "red";
    CHECK(error_of(bad).find("m.json.kernels[0]: unknown key \"colour\"") == 0);
    bad = narrow;
    bad["schema"] = 2;
    CHECK(error_of(bad).find("m.json.schema: must be 1") == 0);
    bad = narrow;
    bad["kernels"][0]["mask"] = "sliding";
    CHECK(error_of(bad).find("m.json.kernels[0].mask: \"sliding\" is not supported") == 0);
    bad = narrow;
    bad["kernels"][0]["lse"] = {false, "yes"};
    CHECK(error_of(bad) == "m.json.kernels[0].lse[1]: \"yes\" is not supported (supported: false, true)");
    bad = narrow;
    bad["kernels"][0]["exclude"] = {{{"lse", 1}}};
    CHECK(error_of(bad) == "m.json.kernels[0].exclude[0].lse: 1 is not a boolean");
    // The portable family has no short-key variants: only false.
    bad = narrow;
    bad["kernels"][0]["short_keys"] = true;
    CHECK(error_of(bad) == "m.json.kernels[0].short_keys: true is not supported (supported: false)");
    bad = narrow;
    bad["kernels"][0]["exclude"] = {{{"short_keys", "no"}}};
    CHECK(error_of(bad) == "m.json.kernels[0].exclude[0].short_keys: \"no\" is not a boolean");
    CHECK_THROWS_WITH_AS(parse_arch_list("sm_90a,sm_75"), doctest::Contains("sm_75"), Error);
    // The sm90a family takes every dtype, and expands for sm_90a only.
    const nlohmann::json hopper_fp8 = {{"schema", 1}, {"kernels", {{{"family", "sm90a"}, {"input_dtype", "e4m3"}}}}};
    // 2 head dims x 3 outputs x 4 masks x 2 layouts x with and without lse
    CHECK(expand_manifest(hopper_fp8, hopper, "m.json").size() == 96);
    // ... and has no short-key variants: "short_keys": true builds nothing for it.
    nlohmann::json fp8_short = hopper_fp8;
    fp8_short["kernels"][0]["short_keys"] = true;
    CHECK(expand_manifest(fp8_short, hopper, "m.json").empty());
    nlohmann::json hopper_family = {{"schema", 1}, {"kernels", {{{"family", "sm90a"}, {"head_dim", 128}}}}};
    // D128 only: its dense kernels' short-key variants.
    CHECK(expand_manifest(hopper_family, hopper, "m.json").size() == 144 + kShortKeysVariantsPerKind + kPagedVariants);
    CHECK(expand_manifest(hopper_family, {Arch::sm_80, Arch::sm_100}, "m.json").empty());
    // The paged_kv axis: false builds the kernels that read packed K and V only, true the paged
    // variants only (packed specs that have one).
    hopper_family["kernels"][0]["paged_kv"] = true;
    const std::vector<KernelSpec> paged = expand_manifest(hopper_family, hopper, "m.json");
    CHECK(paged.size() == kPagedVariants);
    for (const KernelSpec& spec : paged) CHECK((spec.paged_kv && spec.layout == Layout::packed));
    hopper_family["kernels"][0]["exclude"] = {{{"paged_kv", true}, {"mask", "dense"}}};
    CHECK(expand_manifest(hopper_family, hopper, "m.json").size() == kPagedVariants - 12);
    hopper_family["kernels"][0].erase("exclude");
    hopper_family["kernels"][0]["paged_kv"] = false;
    CHECK(expand_manifest(hopper_family, hopper, "m.json").size() == 144 + kShortKeysVariantsPerKind);
    // The short_keys axis: a boolean or a list, both when left out, and in excludes.
    hopper_family["kernels"][0]["mask"] = "dense";
    hopper_family["kernels"][0]["input_dtype"] = {"f16", "bf16"};
    hopper_family["kernels"][0]["output_dtype"] = "bf16";
    hopper_family["kernels"][0]["lse"] = false;
    const std::vector<KernelSpec> dense = expand_manifest(hopper_family, hopper, "m.json");
    REQUIRE(dense.size() == 2 * 2 * 2);  // 2 inputs x 2 layouts x both widths
    CHECK_FALSE(dense[0].short_keys);    // each kernel, then its short-key variant
    CHECK(dense[1].short_keys);
    CHECK(canonical_name(dense[1]) == "prefill.sm90a.sm_90a.d128.f16_bf16.dense.fixed.short_keys");
    hopper_family["kernels"][0]["short_keys"] = true;
    for (const KernelSpec& spec : expand_manifest(hopper_family, hopper, "m.json")) CHECK(spec.short_keys);
    CHECK(expand_manifest(hopper_family, hopper, "m.json").size() == 4);
    hopper_family["kernels"][0]["short_keys"] = {false};
    CHECK(expand_manifest(hopper_family, hopper, "m.json").size() == 4);
    hopper_family["kernels"][0].erase("short_keys");
    hopper_family["kernels"][0]["exclude"] = {{{"short_keys", true}, {"layout", "packed"}}};
    CHECK(expand_manifest(hopper_family, hopper, "m.json").size() == 8 - 2);
    hopper_family["kernels"][0]["short_keys"] = {true, "yes"};
    CHECK(error_of(hopper_family) ==
          "m.json.kernels[0].short_keys[1]: \"yes\" is not supported (supported: false, true)");
  }

  TEST_CASE("NVRTC compiles every spec in the table: no spills, no serialization notes, every module global") {
    // Two archs of the table are compiled (Ampere's sm_80 and Hopper's sm_90a); sm_100/sm_120
    // cubins share their source and are covered by the same templates.
    std::vector<nvrtc::NvrtcHeader> headers;
    std::set<std::string> embedded;
    for (const EmbeddedFile& f : embedded_templates()) {
      headers.push_back({std::string(f.name), f.text});
      embedded.insert(std::string(f.name));
    }
    // A family whose entry template is missing from the build fails once, not once per spec.
    std::vector<KernelSpec> specs;
    std::set<std::string> missing;
    for (const KernelSpec& spec : every_spec()) {
      if (spec.arch != Arch::sm_80 && spec.arch != Arch::sm_90a) continue;
      const std::string entry = fmt::format("{0}/prefill_{0}.cuh", family_name(spec.family));
      if (embedded.count(entry) == 0) {
        missing.insert(entry);
        continue;
      }
      specs.push_back(spec);
    }
    for (const std::string& entry : missing)
      FAIL_CHECK(fmt::format("templates/{} is not in this build: none of its kernels was compiled", entry));
    std::atomic<size_t> next{0};
    std::mutex mutex;
    std::vector<std::string> problems;
    int max_registers = 0;
    auto worker = [&] {
      for (size_t i = next++; i < specs.size(); i = next++) {
        const GeneratedSource source = generate_source(specs[i]);
        std::string problem;
        int registers = 0;
        try {
          const nvrtc::CompileResult r =
              nvrtc::compile_to_cubin({source.name, source.text, headers, arch_name(specs[i].arch), {}});
          registers = r.ptxas.registers;
          if (r.ptxas.spill_store_bytes || r.ptxas.spill_load_bytes || r.ptxas.stack_frame_bytes)
            problem = fmt::format("{}: spills {}+{} bytes, stack {}", source.name, r.ptxas.spill_store_bytes,
                                  r.ptxas.spill_load_bytes, r.ptxas.stack_frame_bytes);
          if (!r.ptxas.serialization_notes.empty())
            problem = fmt::format("{}: {}", source.name, r.ptxas.serialization_notes.front());
          const std::string_view elf(reinterpret_cast<const char*>(r.cubin.data()), r.cubin.size());
          for (const char* global : driver::kAttentionModuleGlobals)
            if (elf.find(std::string(global) + '\0') == std::string_view::npos)
              problem = fmt::format("{}: no module global {}", source.name, global);
        } catch (const Error& e) {
          problem = e.what();
        }
        std::lock_guard lock(mutex);
        max_registers = std::max(max_registers, registers);
        if (!problem.empty()) problems.push_back(problem);
      }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
    MESSAGE(specs.size(), " kernels compiled; at most ", max_registers, " registers");
    for (const std::string& p : problems) FAIL_CHECK(p);
    CHECK(problems.empty());
  }
}

}  // namespace
}  // namespace tsattn::test
