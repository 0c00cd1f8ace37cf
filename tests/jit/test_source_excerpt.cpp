// excerpt_errors: which log lines count as errors, which file they point into, and the window of
// numbered lines shown around each.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "jit/nvrtc/source_excerpt.hpp"

namespace {

using tsattn::nvrtc::excerpt_errors;
using tsattn::nvrtc::SourceText;

std::string numbered_lines(int count) {
  std::string text;
  for (int i = 1; i <= count; ++i) text += "line" + std::to_string(i) + "\n";
  return text;
}

}  // namespace

TEST_SUITE("jit/nvrtc/source_excerpt") {
  TEST_CASE("three lines either side, the error line marked") {
    const std::string source = numbered_lines(20);
    const std::vector<SourceText> files{{"k.cu", source}};
    const std::string out = excerpt_errors("k.cu(10): error: identifier \"x\" is undefined\n", files);
    CHECK(out ==
          "k.cu:10: error: identifier \"x\" is undefined\n"
          "      7 | line7\n"
          "      8 | line8\n"
          "      9 | line9\n"
          ">    10 | line10\n"
          "     11 | line11\n"
          "     12 | line12\n"
          "     13 | line13\n");
  }

  TEST_CASE("windows are clipped at both ends of the file") {
    const std::string source = numbered_lines(3);
    const std::vector<SourceText> files{{"k.cu", source}};
    CHECK(excerpt_errors("k.cu(1): catastrophic error: cannot open source file\n", files, 1) ==
          "k.cu:1: catastrophic error: cannot open source file\n>     1 | line1\n      2 | line2\n");
    CHECK(excerpt_errors("k.cu(3): error: x\n", files, 1) == "k.cu:3: error: x\n      2 | line2\n>     3 | line3\n");
  }

  TEST_CASE("only errors in known files, each site once, headers matched on a path boundary") {
    const std::string source = numbered_lines(5), header = numbered_lines(5);
    const std::vector<SourceText> files{{"k.cu", source}, {"detail/mma.cuh", header}};
    const std::string log =
        "k.cu(2): warning #177-D: variable \"y\" was declared but never referenced\n"
        "other.cu(1): error: not ours\n"
        "ptxas application ptx input, line 28; error   : Instruction 'wgmma.fence' not supported\n"
        "/abs/include/detail/mma.cuh(4): error: expected a \";\"\n"
        "/abs/include/detail/mma.cuh(4): error: the same site again\n"
        "xdetail/mma.cuh(5): error: not a path boundary\n";
    const std::string out = excerpt_errors(log, files, 0);
    CHECK(out == "detail/mma.cuh:4: error: expected a \";\"\n>     4 | line4\n");
    CHECK(excerpt_errors("no errors at all\n", files).empty());
  }
}
