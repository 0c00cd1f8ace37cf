// parse_ptxas_report: the numbers ptxas --verbose prints, read from an NVRTC program log. The
// lines look like (CUDA 13.0):
//   ptxas info    : Function properties for k
//   ptxas         .     280 bytes stack frame, 304 bytes spill stores, 364 bytes spill loads
//   ptxas info    : Used 24 registers, used 0 barriers, 280 bytes cumulative stack size, 4096 bytes smem, ...
//   ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized ...
// Parsing is by phrase, not by column, so reordered or extra fields do not break it.
#include "jit/nvrtc/compiler.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tsattn::nvrtc {

namespace {

// The integer written just before `phrase` in line ("304 bytes spill stores" -> 304), or -1.
int number_before(std::string_view line, std::string_view phrase) {
  const size_t at = line.find(phrase);
  if (at == std::string_view::npos || at == 0) return -1;
  size_t begin = line.find_last_not_of(' ', at - 1);
  if (begin == std::string_view::npos || !std::isdigit(static_cast<unsigned char>(line[begin]))) return -1;
  const size_t end = begin + 1;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  int value = -1;
  std::from_chars(line.data() + begin, line.data() + end, value);
  return value;
}

// ptxas diagnostics codes are C followed by four digits; C75xx are the wgmma/TMA serialization and
// performance-loss family the architecture treats as errors.
bool has_c75xx_code(std::string_view line) {
  for (size_t at = line.find("C75"); at != std::string_view::npos; at = line.find("C75", at + 1)) {
    const bool digits = at + 5 <= line.size() && std::isdigit(static_cast<unsigned char>(line[at + 3])) &&
                        std::isdigit(static_cast<unsigned char>(line[at + 4]));
    const bool alone_before = at == 0 || !std::isalnum(static_cast<unsigned char>(line[at - 1]));
    const bool alone_after = at + 5 == line.size() || !std::isalnum(static_cast<unsigned char>(line[at + 5]));
    if (digits && alone_before && alone_after) return true;
  }
  return false;
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

}  // namespace

PtxasReport parse_ptxas_report(std::string_view log) {
  PtxasReport report;
  for (size_t begin = 0; begin < log.size();) {
    const size_t end = std::min(log.find('\n', begin), log.size());
    const std::string_view line = trim(log.substr(begin, end - begin));
    begin = end + 1;
    if (!line.starts_with("ptxas")) continue;

    if (const int registers = number_before(line, " registers"); registers >= 0 && line.find("Used ") != line.npos) {
      report.registers = std::max(report.registers, registers);
      report.shared_bytes = std::max(report.shared_bytes, std::max(0, number_before(line, " bytes smem")));
    }
    if (const int stack = number_before(line, " bytes stack frame"); stack >= 0) {
      report.stack_frame_bytes = std::max(report.stack_frame_bytes, stack);
      report.spill_store_bytes += std::max(0, number_before(line, " bytes spill stores"));
      report.spill_load_bytes += std::max(0, number_before(line, " bytes spill loads"));
    }
    if (has_c75xx_code(line)) report.serialization_notes.emplace_back(line);
  }
  return report;
}

}  // namespace tsattn::nvrtc
