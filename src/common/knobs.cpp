#include "common/knobs.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <tsattn/tsattn.hpp>

#include "common/error.hpp"
#include "common/log.hpp"

extern "C" char** environ;

namespace tsattn {

namespace {

constexpr std::array<std::string_view, 5> kLogLevels = {"off", "error", "warn", "info", "debug"};
constexpr std::array<std::string_view, 3> kKernelFamilies = {"auto", "sm80", "sm90a"};
constexpr std::array<std::string_view, 3> kWorkOrders = {"auto", "static", "dynamic"};
constexpr std::array<std::string_view, 3> kSplitTails = {"auto", "off", "on"};
constexpr std::array<std::string_view, 3> kCtaPairs = {"auto", "off", "on"};
constexpr std::array<std::string_view, 3> kShortKeys = {"auto", "off", "on"};
constexpr std::array<std::string_view, 3> kPagedKv = {"auto", "gather", "kernel"};

using enum KnobType;

// One row per variable, in the order of enum Knob (checked below). Only knobs that change the
// bytes NVRTC produces for a given spec affect the cache key. TSATTN_KERNEL_FAMILY, TSATTN_SHORT_KEYS and
// TSATTN_PAGED_KV do not: they change which spec is chosen, and the spec's name and source are in the
// key already.
constexpr std::array kKnobs = {
    KnobInfo{Knob::cache_dir,
             "TSATTN_CACHE_DIR",
             path,
             "$XDG_CACHE_HOME/tsattn, else ~/.cache/tsattn",
             "writable on-disk cubin cache root",
             false,
             {}},
    KnobInfo{Knob::cache_ro_path,
             "TSATTN_CACHE_RO_PATH",
             path_list,
             "",
             "':'-separated read-only cache layers, searched in order before the writable cache",
             false,
             {}},
    KnobInfo{Knob::cache_disable,
             "TSATTN_CACHE_DISABLE",
             boolean,
             "0",
             "no disk cache at all: compiled kernels live in memory only",
             false,
             {}},
    KnobInfo{Knob::always_compile,
             "TSATTN_ALWAYS_COMPILE",
             boolean,
             "0",
             "ignore cache reads and always compile (results are still written)",
             false,
             {}},
    KnobInfo{Knob::disable_jit,
             "TSATTN_DISABLE_JIT",
             boolean,
             "0",
             "never compile: a kernel missing from every cache layer is an error",
             false,
             {}},
    KnobInfo{Knob::log_level, "TSATTN_LOG_LEVEL", enumeration, "off",
             "messages to stderr at this level and above; the library prints nothing by default", false, kLogLevels},
    KnobInfo{Knob::dump_dir,
             "TSATTN_DUMP_DIR",
             path,
             "",
             "write each generated source (<name>.<arch>.cu) and its NVRTC log (.log) here",
             false,
             {}},
    KnobInfo{Knob::lineinfo,
             "TSATTN_LINEINFO",
             boolean,
             "0",
             "compile kernels with -lineinfo (for profilers and compute-sanitizer)",
             true,
             {}},
    KnobInfo{Knob::compile_threads,
             "TSATTN_COMPILE_THREADS",
             integer,
             "hardware threads",
             "how many NVRTC compiles may run at once",
             false,
             {},
             1},
    KnobInfo{Knob::kernel_family, "TSATTN_KERNEL_FAMILY", enumeration, "auto",
             "force a kernel family instead of choosing by compute capability", false, kKernelFamilies},
    KnobInfo{Knob::work_order, "TSATTN_WORK_ORDER", enumeration, "auto",
             "how sm90a CTAs take work items: static turns, or dynamic claims from a counter (auto: dynamic "
             "where items differ in cost and each CTA has at least 256 key tiles of work; e4m3 kernels and the "
             "128-key dense fixed-layout kernels always take static turns)",
             false, kWorkOrders},
    KnobInfo{Knob::split_tail, "TSATTN_SPLIT_TAIL", enumeration, "auto",
             "whether sm90a 16-bit D128 dense fixed-layout calls of 160-key tiles in static order split their last "
             "two rounds of work items by key tiles so that every CTA ends together (auto: where the cost model "
             "predicts a gain)",
             false, kSplitTails},
    KnobInfo{Knob::cta_pairs, "TSATTN_CTA_PAIRS", enumeration, "auto",
             "whether sm90a 16-bit launches run in CTA pairs that share each K/V tile (auto: where the module can, "
             "except for short requests; on: wherever the module can; off: single CTAs)",
             false, kCtaPairs},
    KnobInfo{Knob::short_keys, "TSATTN_SHORT_KEYS", enumeration, "auto",
             "whether sm90a 16-bit D128 dense calls run the kernel's variant of 128-key tiles instead of 160, and "
             "D256 dense and causal calls 64 instead of 80 (auto: where it pads less key work, by 3% or more at "
             "D128 and 13% at D256; on: always; off: never)",
             false, kShortKeys},
    KnobInfo{Knob::paged_kv, "TSATTN_PAGED_KV", enumeration, "auto",
             "how paged calls read the KV cache (auto: sm90a 16-bit D128 kernels read pages of 32 keys or more "
             "through TMA, other calls get the pages gathered into packed K and V first; gather: always gather; "
             "kernel: the kernel reads pages of every size wherever it can)",
             false, kPagedKv},
    KnobInfo{Knob::library,
             "TSATTN_LIBRARY",
             path,
             "",
             "where the Python package loads libtsattn from (read by Python only)",
             false,
             {}},
    KnobInfo{Knob::nvrtc_library,
             "TSATTN_NVRTC_LIBRARY",
             path,
             "",
             "the libnvrtc.so.13 to compile with, instead of searching the pip package, the toolkit and the "
             "system (a path that does not load is an error)",
             false,
             {}},
    KnobInfo{Knob::test_seed,
             "TSATTN_TEST_SEED",
             string,
             "",
             "fixed decimal seed for the test suites' random inputs (read by tests only)",
             false,
             {}},
};

constexpr bool table_matches_enum() {
  for (size_t i = 0; i < kKnobs.size(); ++i) {
    if (static_cast<size_t>(kKnobs[i].knob) != i) return false;
    if (kKnobs[i].name.substr(0, 7) != "TSATTN_") return false;
    if ((kKnobs[i].type == enumeration) == kKnobs[i].choices.empty()) return false;
  }
  return true;
}
static_assert(table_matches_enum(), "kKnobs must list every Knob once, in enum order, with valid rows");

const KnobInfo& checked(Knob knob, std::initializer_list<KnobType> accepted, const char* getter) {
  const KnobInfo& info = knob_info(knob);
  if (std::find(accepted.begin(), accepted.end(), info.type) == accepted.end()) {
    raise(ErrorKind::runtime, "internal error: {}() called for {}, which is a {} knob", getter, info.name,
          knob_type_name(info.type));
  }
  return info;
}

// The variable's text, or nothing when unset or empty (both mean "the default").
std::optional<std::string_view> raw_value(const KnobInfo& info) {
  const char* value = std::getenv(std::string(info.name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string_view(value);
}

// Surrounding blanks are forgiven for bools, ints and enums (an easy slip in a shell or a
// Dockerfile); paths are taken verbatim.
std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

std::string lowercase(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return lower;
}

bool parse_bool(const KnobInfo& info, std::string_view text) {
  const std::string word = lowercase(trim(text));
  if (word == "1" || word == "true" || word == "on" || word == "yes") return true;
  if (word == "0" || word == "false" || word == "off" || word == "no") return false;
  raise(ErrorKind::value, "{}='{}' is not a boolean (use 1/0/true/false/on/off)", info.name, text);
}

int64_t parse_int(const KnobInfo& info, std::string_view text) {
  const std::string_view digits = trim(text);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc{} || end != digits.data() + digits.size() || value < info.minimum) {
    raise(ErrorKind::value, "{}='{}' is not an integer >= {}", info.name, text, info.minimum);
  }
  return value;
}

std::string parse_enum(const KnobInfo& info, std::string_view text) {
  std::string word = lowercase(trim(text));
  if (std::find(info.choices.begin(), info.choices.end(), word) == info.choices.end()) {
    raise(ErrorKind::value, "{}='{}' is not one of {}", info.name, text, fmt::join(info.choices, "|"));
  }
  return word;
}

std::string home_directory() {
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return home;
  // No $HOME (some daemons and containers): ask the password database, reentrantly.
  std::array<char, 4096> scratch;
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(getuid(), &entry, scratch.data(), scratch.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && *found->pw_dir != '\0') {
    return found->pw_dir;
  }
  raise(ErrorKind::runtime,
        "cannot place the kernel cache: neither XDG_CACHE_HOME nor HOME is set and the user has no home "
        "directory; set TSATTN_CACHE_DIR");
}

}  // namespace

const KnobInfo& knob_info(Knob knob) { return kKnobs.at(static_cast<size_t>(knob)); }

std::span<const KnobInfo> all_knobs() { return kKnobs; }

const char* knob_type_name(KnobType type) {
  switch (type) {
    case boolean: return "bool";
    case integer: return "int";
    case string: return "string";
    case path: return "path";
    case path_list: return "path list";
    case enumeration: return "enum";
  }
  return "unknown";
}

bool knob_bool(Knob knob) {
  const KnobInfo& info = checked(knob, {boolean}, "knob_bool");
  return parse_bool(info, raw_value(info).value_or(info.default_text));
}

int64_t knob_int(Knob knob) {
  const KnobInfo& info = checked(knob, {integer}, "knob_int");
  if (const auto value = raw_value(info)) return parse_int(info, *value);
  // hardware_concurrency() may report 0 when it cannot tell.
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

std::string knob_string(Knob knob) {
  const KnobInfo& info = checked(knob, {string, path, enumeration}, "knob_string");
  const auto value = raw_value(info);
  if (info.type == enumeration) return parse_enum(info, value.value_or(info.default_text));
  if (value) return std::string(*value);
  if (knob == Knob::cache_dir) return default_cache_dir();
  return std::string(info.default_text);
}

std::vector<std::string> knob_path_list(Knob knob) {
  const KnobInfo& info = checked(knob, {path_list}, "knob_path_list");
  std::vector<std::string> paths;
  const std::string_view text = raw_value(info).value_or(info.default_text);
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(':', begin), text.size());
    if (end > begin) paths.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return paths;
}

std::string knob_text(Knob knob) {
  switch (knob_info(knob).type) {
    case boolean: return knob_bool(knob) ? "1" : "0";
    case integer: return std::to_string(knob_int(knob));
    case path_list: return fmt::format("{}", fmt::join(knob_path_list(knob), ":"));
    case string:
    case path:
    case enumeration: return knob_string(knob);
  }
  return {};
}

void warn_about_unknown_variables() {
  for (const std::string& name : unknown_tsattn_variables())
    warn_once("knobs.unknown:" + name,
              fmt::format("{} is set but is not a tsattn variable (`tsattn env` lists them); it has no effect", name));
}

std::vector<std::string> unknown_tsattn_variables() {
  std::vector<std::string> unknown;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view assignment(*entry);
    const std::string_view name = assignment.substr(0, assignment.find('='));
    if (!name.starts_with("TSATTN_")) continue;
    const bool known = std::any_of(kKnobs.begin(), kKnobs.end(), [&](const KnobInfo& k) { return k.name == name; });
    if (!known) unknown.emplace_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

std::string cache_key_environment() {
  std::string text;
  for (const KnobInfo& info : kKnobs) {
    if (info.affects_cache_key) text += fmt::format("{}={}\n", info.name, knob_text(info.knob));
  }
  return text;
}

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/tsattn";
  }
  return home_directory() + "/.cache/tsattn";
}

}  // namespace tsattn
