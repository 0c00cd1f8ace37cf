// `tsattn run` on a machine without a GPU, as README's first command runs it there: it says so and
// precompiles a built-in manifest into the user cache, whatever the working directory. (On a GPU
// machine it runs attention instead; tools/dev/gpu_check.sh runs its presets there.)
#include <doctest/doctest.h>

#include <string>

#include "support/gpu.hpp"
#include "tools/cli_support.hpp"

using namespace tsattn::test;

TEST_SUITE("tools/run") {
  TEST_CASE("without a GPU, run precompiles a built-in manifest into the user cache") {
    if (gpu_unavailable_reason().empty()) {
      MESSAGE("a CUDA device is present: run takes the GPU path here, which gpu_check.sh demo checks");
      return;
    }
    CliSandbox box;
    const CliResult r = box.run({"run", "--manifest", "llama3"});
    CHECK(r.code == 0);
    CHECK(r.out.find("tsattn run: no GPU to run on") != std::string::npos);
    CHECK(r.out.find("Precompiling llama3 for sm_90a into the user cache instead") != std::string::npos);
    // llama3: two families, fixed and packed, with and without lse, and the Hopper family's paged
    // variants of the packed kernels; its bf16 merge module; the page gather module.
    CHECK(count_files(box.user_cache, ".tsk") == 12);
    CHECK(box.run({"run", "--manifest", "nosuch"}).code == 2);
  }
}
