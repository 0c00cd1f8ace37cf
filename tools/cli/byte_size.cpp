#include "tools/cli/byte_size.hpp"

#include <fmt/format.h>

#include <charconv>
#include <limits>

namespace tsattn::tools {

std::optional<uint64_t> parse_byte_size(std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [rest, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || rest == text.data()) return std::nullopt;
  std::string suffix(rest, end);
  for (char& c : suffix)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  // "2G", "2GB" and "2GIB" all mean 2 GiB: cache sizes are never meant in powers of 1000.
  if (suffix.size() == 3 && suffix.ends_with("IB"))
    suffix.resize(1);
  else if (suffix.size() == 2 && suffix.back() == 'B')
    suffix.pop_back();
  int shift = 0;
  if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else if (!suffix.empty() && suffix != "B")
    return std::nullopt;
  if (value > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

}  // namespace tsattn::tools
