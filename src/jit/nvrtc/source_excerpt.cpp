#include "jit/nvrtc/source_excerpt.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>

#include <fmt/format.h>

namespace tsattn::nvrtc {

namespace {

struct ErrorSite {
  std::string_view file;
  int line = 0;
  std::string_view what;  // the rest of the log line: "error: expected a \";\""
};

// NVRTC (EDG) writes "file(line): error: ..." and "file(line): catastrophic error: ...".
bool parse_error_site(std::string_view log_line, ErrorSite& site) {
  const size_t close = log_line.find("): ");
  if (close == std::string_view::npos) return false;
  const std::string_view rest = log_line.substr(close + 3);
  if (!rest.starts_with("error") && !rest.starts_with("catastrophic error")) return false;
  const size_t open = log_line.rfind('(', close);
  if (open == std::string_view::npos || open == 0) return false;
  int line = 0;
  const auto [end, error] = std::from_chars(log_line.data() + open + 1, log_line.data() + close, line);
  if (error != std::errc{} || end != log_line.data() + close || line < 1) return false;
  site = {log_line.substr(0, open), line, rest};
  return true;
}

// The log names a header as it was #included, which may carry a directory prefix the registered
// name lacks (or the other way round), so fall back to matching on a path-component boundary.
const SourceText* find_file(std::span<const SourceText> files, std::string_view name) {
  for (const SourceText& file : files) {
    if (file.name == name) return &file;
  }
  const auto is_suffix = [](std::string_view longer, std::string_view shorter) {
    return longer.size() > shorter.size() && longer.ends_with(shorter) &&
           longer[longer.size() - shorter.size() - 1] == '/';
  };
  for (const SourceText& file : files) {
    if (is_suffix(name, file.name) || is_suffix(file.name, name)) return &file;
  }
  return nullptr;
}

}  // namespace

std::string excerpt_errors(std::string_view log, std::span<const SourceText> files, int context) {
  std::string out;
  std::set<std::pair<const SourceText*, int>> shown;
  for (size_t begin = 0; begin < log.size();) {
    const size_t end = std::min(log.find('\n', begin), log.size());
    const std::string_view log_line = log.substr(begin, end - begin);
    begin = end + 1;
    ErrorSite site;
    if (!parse_error_site(log_line, site)) continue;
    const SourceText* file = find_file(files, site.file);
    if (file == nullptr || !shown.emplace(file, site.line).second) continue;

    out += fmt::format("{}:{}: {}\n", file->name, site.line, site.what);
    int number = 1;
    for (size_t at = 0; at < file->text.size() && number <= site.line + context; ++number) {
      const size_t eol = std::min(file->text.find('\n', at), file->text.size());
      if (number >= site.line - context) {
        out += fmt::format("{} {:>5} | {}\n", number == site.line ? '>' : ' ', number, file->text.substr(at, eol - at));
      }
      at = eol + 1;
    }
  }
  return out;
}

}  // namespace tsattn::nvrtc
