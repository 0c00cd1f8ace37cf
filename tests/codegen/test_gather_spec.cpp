// test_gather_spec.cpp - the page gather modules: names, ids, generated sources, the manifests'
// "gather_pages" flag, and NVRTC compiling both kernels of every module for sm_80 and sm_90a with no
// spills and no stack.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include "codegen/embedded_files.hpp"
#include "codegen/gather_spec.hpp"
#include "codegen/manifest.hpp"
#include "jit/nvrtc/compiler.hpp"

namespace tsattn::test {
namespace {

std::vector<std::string> names(const std::vector<GatherSpec>& specs) {
  std::vector<std::string> out;
  for (const GatherSpec& spec : specs) out.push_back(canonical_name(spec));
  return out;
}

TEST_SUITE("codegen/gather_spec") {
  TEST_CASE("one module per arch, with unique ids, names and symbols") {
    std::set<uint32_t> ids;
    std::set<std::string> symbols;
    for (Arch arch : {Arch::sm_80, Arch::sm_90a, Arch::sm_100, Arch::sm_120}) {
      const GatherSpec spec{arch};
      CHECK(is_supported(spec));
      CHECK(ids.insert(spec.id()).second);
      CHECK(symbols.insert(kernel_symbol(spec)).second);
      CHECK(scan_symbol(spec) == kernel_symbol(spec) + "_scan");
    }
    CHECK(canonical_name(GatherSpec{Arch::sm_90a}) == "gather_pages.sm_90a");
    CHECK(kernel_symbol(GatherSpec{Arch::sm_80}) == "gather_pages_sm_80");
    CHECK(names(gather_specs({Arch::sm_90a, Arch::sm_80, Arch::sm_90a})) ==
          std::vector<std::string>{"gather_pages.sm_90a", "gather_pages.sm_80"});
  }

  TEST_CASE("the generated source names the kernel and includes only the embedded gather template") {
    const GeneratedSource source = generate_source(GatherSpec{Arch::sm_90a});
    CHECK(source.name == "gather_pages.sm_90a");
    CHECK(source.symbol == "gather_pages_sm_90a");
    CHECK(source.text.find("#define TSATTN_GATHER_KERNEL_NAME gather_pages_sm_90a\n") != std::string::npos);
    CHECK(source.text.find("#include \"paged/gather_pages.cuh\"") != std::string::npos);
    std::set<std::string> embedded;
    for (const EmbeddedFile& f : embedded_templates()) embedded.insert(std::string(f.name));
    CHECK(embedded.count("paged/gather_pages.cuh") == 1);
    CHECK(embedded.count("paged/gather_params.h") == 1);
  }

  TEST_CASE("a manifest's \"gather_pages\" flag builds the module of every arch, with path-qualified errors") {
    const nlohmann::json manifest = {{"schema", 1}, {"gather_pages", true}, {"kernels", nlohmann::json::array()}};
    CHECK(names(expand_manifest_gathers(manifest, {Arch::sm_90a, Arch::sm_80}, "m.json")) ==
          std::vector<std::string>{"gather_pages.sm_90a", "gather_pages.sm_80"});
    CHECK(expand_manifest(manifest, {Arch::sm_90a}, "m.json").empty());  // the key is allowed
    CHECK(expand_manifest_gathers({{"schema", 1}, {"gather_pages", false}}, {Arch::sm_90a}, "m.json").empty());
    CHECK(expand_manifest_gathers({{"schema", 1}}, {Arch::sm_90a}, "m.json").empty());
    try {
      expand_manifest_gathers({{"gather_pages", "yes"}}, {Arch::sm_90a}, "m.json");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::value);
      CHECK(std::string(e.what()) == "m.json.gather_pages: \"yes\" is not a bool (true builds the page gather module)");
    }
    for (const std::string name : {"default", "all", "llama3", "gemma"})
      CHECK(names(load_manifest_modules(name, {Arch::sm_90a}).gathers) ==
            std::vector<std::string>{"gather_pages.sm_90a"});
  }

  TEST_CASE("NVRTC compiles the gather module for sm_80 and sm_90a: both kernels, no spills, no stack") {
    std::vector<nvrtc::NvrtcHeader> headers;
    for (const EmbeddedFile& f : embedded_templates()) headers.push_back({std::string(f.name), f.text});
    for (Arch arch : {Arch::sm_80, Arch::sm_90a}) {
      const GatherSpec spec{arch};
      const GeneratedSource source = generate_source(spec);
      INFO(source.name);
      const nvrtc::CompileResult r = nvrtc::compile_to_cubin({source.name, source.text, headers, arch_name(arch), {}});
      CHECK(!r.cubin.empty());
      CHECK(r.ptxas.spill_store_bytes == 0);
      CHECK(r.ptxas.spill_load_bytes == 0);
      CHECK(r.ptxas.stack_frame_bytes == 0);
      // Both entry points are in the cubin under the names the loader asks for.
      const std::string cubin(r.cubin.begin(), r.cubin.end());
      CHECK(cubin.find(kernel_symbol(spec)) != std::string::npos);
      CHECK(cubin.find(scan_symbol(spec)) != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace tsattn::test
