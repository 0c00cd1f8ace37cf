// test_kernel_cache.cpp - spec -> cubin through memory, disk and NVRTC, asserted with counters:
// a miss compiles, the next call is a memory hit, a new process is a disk hit; concurrent callers
// of one spec share one compile; TSATTN_DISABLE_JIT turns a miss into an error naming the kernel.
#include <doctest/doctest.h>

#include <tsattn/tsattn.hpp>

#include <future>
#include <thread>

#include "common/knobs.hpp"
#include "jit/cache/cache_test_support.hpp"
#include "jit/kernel_cache.hpp"
#include "support/scoped_env.hpp"

namespace tsattn::test {
namespace {

jit::DiskCacheConfig writable_at(const std::string& root) {
  jit::DiskCacheConfig config;
  config.writable_root = root;
  return config;
}

KernelSpec small_spec(Layout layout = Layout::fixed) {
  return {KernelFamily::sm80,    Arch::sm_90a, MaskVariant::causal, 128, TSATTN_DTYPE_BFLOAT16,
          TSATTN_DTYPE_BFLOAT16, layout};
}

TEST_SUITE("jit/kernel_cache") {
  TEST_CASE("miss compiles, then memory hit, then a disk hit in a new process") {
    TempDir dir;
    jit::KernelCache cache(writable_at(dir.path()), true);
    const auto first = cache.get(small_spec());
    CHECK(first->origin == jit::KernelOrigin::compiled);
    CHECK(first->cubin.size() > 1000);
    CHECK(first->metadata.at("name") == "prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed");
    CHECK(first->metadata.at("spec").at("lse") == false);
    jit::KernelCacheCounters c = cache.counters();
    CHECK(c.compiles == 1);
    CHECK(c.memory_misses == 1);
    CHECK(c.disk.misses == 1);
    CHECK(c.disk.writes == 1);

    const auto second = cache.get(small_spec());
    CHECK(second.get() == first.get());
    c = cache.counters();
    CHECK(c.memory_hits == 1);
    CHECK(c.compiles == 1);
    CHECK(c.disk.lookups == 1);

    // A new process finds the published entry on disk and compiles nothing.
    const int child = run_in_child([&] {
      jit::KernelCache fresh(writable_at(dir.path()), /*jit_enabled=*/false);
      const auto kernel = fresh.get(small_spec());
      const jit::KernelCacheCounters fc = fresh.counters();
      const bool ok = kernel->origin == jit::KernelOrigin::writable_layer && fc.compiles == 0 &&
                      fc.disk.writable_hits == 1 && kernel->cubin == first->cubin;
      return ok ? 0 : 1;
    });
    CHECK(child == 0);
  }

  TEST_CASE("concurrent callers of one spec share one compile") {
    TempDir dir;
    jit::KernelCache cache(writable_at(dir.path()), true);
    std::vector<std::future<std::shared_ptr<const jit::CompiledKernel>>> callers;
    for (int i = 0; i < 6; ++i)
      callers.push_back(std::async(std::launch::async, [&] { return cache.get(small_spec(Layout::packed)); }));
    std::vector<const jit::CompiledKernel*> results;
    for (auto& f : callers) results.push_back(f.get().get());
    for (const jit::CompiledKernel* k : results) CHECK(k == results.front());
    const jit::KernelCacheCounters c = cache.counters();
    CHECK(c.compiles == 1);
    CHECK(c.memory_misses == 1);
    CHECK(c.memory_hits == 5);
  }

  TEST_CASE("a read-only layer is served first and never written") {
    TempDir ro, rw;
    {
      jit::KernelCache builder(writable_at(ro.path()), true);
      builder.get(small_spec());
    }
    const std::vector<std::string> before = tree_snapshot(ro.path());
    jit::DiskCacheConfig config = writable_at(rw.path());
    config.read_only_roots = {ro.path()};
    jit::KernelCache cache(config, false);
    CHECK(cache.get(small_spec())->origin == jit::KernelOrigin::read_only_layer);
    CHECK(cache.counters().disk.read_only_hits == 1);
    CHECK(tree_snapshot(ro.path()) == before);
    CHECK(count_files(rw.path(), ".tsk") == 0);
  }

  TEST_CASE("TSATTN_DISABLE_JIT: a miss names the kernel and the manifest entry that builds it") {
    TempDir dir;
    jit::KernelCache cache(writable_at(dir.path()), false);
    try {
      cache.get(small_spec());
      FAIL("a miss compiled although JIT is disabled");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(e.kind() == ErrorKind::runtime);
      CHECK(message.find("prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed") != std::string::npos);
      CHECK(message.find("TSATTN_DISABLE_JIT") != std::string::npos);
      CHECK(message.find("\"mask\":[\"causal\"]") != std::string::npos);
      CHECK(message.find("\"lse\":[false]") != std::string::npos);  // the entry builds this twin only
    }
    CHECK(cache.counters().compiles == 0);
    // A failed lookup is not remembered: the next call tries the layers again.
    CHECK_THROWS_AS(cache.get(small_spec()), Error);
    CHECK(cache.counters().memory_misses == 2);
  }

  TEST_CASE("merge modules share the layers and counters, in slots of their own") {
    TempDir dir;
    jit::KernelCache cache(writable_at(dir.path()), true);
    const MergeSpec merge{Arch::sm_80, TSATTN_DTYPE_FLOAT16};
    const auto first = cache.get(merge);
    CHECK(first->origin == jit::KernelOrigin::compiled);
    CHECK(first->name == "merge.sm_80.f16");
    CHECK(first->symbol == "merge_sm_80_f16");
    CHECK(first->metadata.at("name") == "merge.sm_80.f16");
    CHECK(first->metadata.at("spec").at("kind") == "merge");
    CHECK(cache.get(merge).get() == first.get());
    jit::KernelCacheCounters c = cache.counters();
    CHECK(c.compiles == 1);
    CHECK(c.memory_hits == 1);
    CHECK(c.disk.writes == 1);
    CHECK(count_files(dir.path(), ".tsk") == 1);
    // A new cache (a new process) finds it on disk, with JIT off.
    jit::KernelCache fresh(writable_at(dir.path()), /*jit_enabled=*/false);
    const auto again = fresh.get(merge);
    CHECK(again->origin == jit::KernelOrigin::writable_layer);
    CHECK(again->cubin == first->cubin);
    CHECK(fresh.counters().compiles == 0);
    // Another dtype is another module; its miss names the manifest's "merge" entry.
    try {
      fresh.get(MergeSpec{Arch::sm_80, TSATTN_DTYPE_BFLOAT16});
      FAIL("a miss compiled although JIT is disabled");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(message.find("merge.sm_80.bf16 is not in any cache layer") != std::string::npos);
      CHECK(message.find("where M.json has \"merge\": [\"bf16\"]") != std::string::npos);
    }
  }

  TEST_CASE("the key follows the code-changing environment") {
    TempDir dir;
    jit::KernelCache plain(writable_at(dir.path()), true);
    const auto a = plain.get(small_spec());
    testing::ScopedEnv env;
    env.set("TSATTN_LINEINFO", "1");
    jit::KernelCache lineinfo(writable_at(dir.path()), true);
    const auto b = lineinfo.get(small_spec());
    CHECK(a->key != b->key);
    CHECK(b->origin == jit::KernelOrigin::compiled);
  }

  TEST_CASE("unknown TSATTN_ variables are warned about once") {
    LogCapture log;
    testing::ScopedEnv env;
    env.set("TSATTN_CACHE_DIRR", "/tmp/typo");
    warn_about_unknown_variables();
    warn_about_unknown_variables();
    int warnings = 0;
    for (const std::string& m : log.messages()) warnings += m.find("TSATTN_CACHE_DIRR") != std::string::npos;
    CHECK(warnings == 1);
  }
}

}  // namespace
}  // namespace tsattn::test
