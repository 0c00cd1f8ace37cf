// test_merge_spec.cpp - the merge modules: names, ids, generated sources, the manifests' "merge" list,
// and NVRTC compiling every merge module for sm_80 and sm_90a with no spills and no stack.
#include <doctest/doctest.h>

#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include "codegen/embedded_files.hpp"
#include "codegen/manifest.hpp"
#include "codegen/merge_spec.hpp"
#include "jit/nvrtc/compiler.hpp"

namespace tsattn::test {
namespace {

std::vector<std::string> names(const std::vector<MergeSpec>& specs) {
  std::vector<std::string> out;
  for (const MergeSpec& spec : specs) out.push_back(canonical_name(spec));
  return out;
}

TEST_SUITE("codegen/merge_spec") {
  TEST_CASE("one module per arch and v dtype, with unique ids, names and symbols") {
    std::set<uint32_t> ids;
    std::set<std::string> symbols;
    size_t count = 0;
    for (Arch arch : {Arch::sm_80, Arch::sm_90a, Arch::sm_100, Arch::sm_120})
      for (const MergeSpec& spec : all_merge_specs(arch)) {
        ++count;
        CHECK(is_supported(spec));
        ids.insert(spec.id());
        symbols.insert(kernel_symbol(spec));
      }
    CHECK(count == 12);
    CHECK(ids.size() == count);
    CHECK(symbols.size() == count);
    CHECK(names(all_merge_specs(Arch::sm_90a)) ==
          std::vector<std::string>{"merge.sm_90a.f16", "merge.sm_90a.bf16", "merge.sm_90a.f32"});
    CHECK(kernel_symbol({Arch::sm_80, TSATTN_DTYPE_FLOAT32}) == "merge_sm_80_f32");
    CHECK_FALSE(is_supported(MergeSpec{Arch::sm_90a, TSATTN_DTYPE_FLOAT8_E4M3FN}));
    CHECK(parse_merge_dtype("bf16") == TSATTN_DTYPE_BFLOAT16);
    CHECK_FALSE(parse_merge_dtype("e4m3").has_value());
  }

  TEST_CASE("the generated source pins the dtype and includes only the embedded merge template") {
    const GeneratedSource source = generate_source(MergeSpec{Arch::sm_90a, TSATTN_DTYPE_FLOAT32});
    CHECK(source.name == "merge.sm_90a.f32");
    CHECK(source.symbol == "merge_sm_90a_f32");
    CHECK(source.text.find("#define TSATTN_MERGE_KERNEL_NAME merge_sm_90a_f32") != std::string::npos);
    CHECK(source.text.find("#define TSATTN_MERGE_DTYPE 3") != std::string::npos);  // kernel_codes.h: float32
    CHECK(source.text.find("#include \"merge/merge_state.cuh\"") != std::string::npos);
    std::set<std::string> embedded;
    for (const EmbeddedFile& f : embedded_templates()) embedded.insert(std::string(f.name));
    CHECK(embedded.count("merge/merge_state.cuh") == 1);
    CHECK(embedded.count("merge/merge_params.h") == 1);
    CHECK_THROWS_AS(generate_source(MergeSpec{Arch::sm_90a, TSATTN_DTYPE_INT32}), Error);
  }

  TEST_CASE("a manifest's \"merge\" list expands per arch, with path-qualified errors") {
    const nlohmann::json manifest = {
        {"schema", 1}, {"merge", {"bf16", "f32", "bf16"}}, {"kernels", nlohmann::json::array()}};
    CHECK(names(expand_manifest_merges(manifest, {Arch::sm_90a, Arch::sm_80}, "m.json")) ==
          std::vector<std::string>{"merge.sm_90a.bf16", "merge.sm_90a.f32", "merge.sm_80.bf16", "merge.sm_80.f32"});
    CHECK(expand_manifest(manifest, {Arch::sm_90a}, "m.json").empty());  // the key is allowed
    CHECK(expand_manifest_merges({{"schema", 1}, {"kernels", nlohmann::json::array()}}, {Arch::sm_90a}, "m.json")
              .empty());
    CHECK(expand_manifest_merges({{"schema", 1}, {"merge", "f16"}}, {Arch::sm_80}, "m.json").size() == 1);
    auto error_of = [](const nlohmann::json& m) {
      try {
        expand_manifest_merges(m, {Arch::sm_90a}, "m.json");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::value);
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK(error_of({{"merge", {"bf16", "e4m3"}}}) ==
          "m.json.merge[1]: \"e4m3\" is not supported (supported: f16, bf16, f32)");
    CHECK(error_of({{"merge", 16}}) == "m.json.merge: 16 is not supported (supported: f16, bf16, f32)");
    CHECK(error_of({{"merge", nlohmann::json::array()}}).find("m.json.merge: the list is empty") == 0);
  }

  TEST_CASE("the shipped manifests build the merge modules their models use") {
    const ManifestModules defaults = load_manifest_modules("default", {Arch::sm_90a, Arch::sm_80});
    CHECK(names(defaults.merges) == std::vector<std::string>{"merge.sm_90a.f16", "merge.sm_90a.bf16",
                                                             "merge.sm_90a.f32", "merge.sm_80.f16", "merge.sm_80.bf16",
                                                             "merge.sm_80.f32"});
    CHECK(defaults.kernels.size() == load_manifest("default", {Arch::sm_90a, Arch::sm_80}).size());
    CHECK(defaults.size() == defaults.kernels.size() + 6 + defaults.gathers.size());
    CHECK(names(load_manifest_modules("llama3", {Arch::sm_90a}).merges) ==
          std::vector<std::string>{"merge.sm_90a.bf16"});
    CHECK(names(load_manifest_modules("gemma", {Arch::sm_90a}).merges) ==
          std::vector<std::string>{"merge.sm_90a.bf16"});
    CHECK(load_manifest_modules("all", {Arch::sm_100}).merges.size() == 3);
  }

  TEST_CASE("NVRTC compiles every merge module for sm_80 and sm_90a: no spills, no stack") {
    std::vector<nvrtc::NvrtcHeader> headers;
    for (const EmbeddedFile& f : embedded_templates()) headers.push_back({std::string(f.name), f.text});
    std::vector<MergeSpec> specs = all_merge_specs(Arch::sm_80);
    for (const MergeSpec& spec : all_merge_specs(Arch::sm_90a)) specs.push_back(spec);
    std::mutex mutex;
    std::vector<std::string> problems;
    std::vector<std::thread> threads;
    for (const MergeSpec& spec : specs)
      threads.emplace_back([&, spec] {
        const GeneratedSource source = generate_source(spec);
        std::string problem;
        try {
          const nvrtc::CompileResult r =
              nvrtc::compile_to_cubin({source.name, source.text, headers, arch_name(spec.arch), {}});
          if (r.ptxas.spill_store_bytes || r.ptxas.spill_load_bytes || r.ptxas.stack_frame_bytes)
            problem = fmt::format("{}: spills {}+{} bytes, stack {}", source.name, r.ptxas.spill_store_bytes,
                                  r.ptxas.spill_load_bytes, r.ptxas.stack_frame_bytes);
        } catch (const Error& e) {
          problem = e.what();
        }
        std::lock_guard lock(mutex);
        if (!problem.empty()) problems.push_back(problem);
      });
    for (std::thread& t : threads) t.join();
    for (const std::string& p : problems) FAIL_CHECK(p);
    CHECK(problems.empty());
  }
}

}  // namespace
}  // namespace tsattn::test
