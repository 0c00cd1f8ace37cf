// knobs.hpp - every TSATTN_* environment variable, registered once (docs/architecture.md,
// "Style rules": one registry of environment variables).
//
// The table in knobs.cpp is the one place a variable is declared: its type, default, one-line doc
// and whether it changes generated code or compile options (and so belongs in the cache key).
// Getters read the environment at each call and keep no state: callers cache what they need, and
// tests can setenv/unsetenv freely. Unset and empty both mean "the default". Invalid values throw
// tsattn::Error(ErrorKind::value) naming the variable and the value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tsattn {

enum class Knob {
  cache_dir,
  cache_ro_path,
  cache_disable,
  always_compile,
  disable_jit,
  log_level,
  dump_dir,
  lineinfo,
  compile_threads,
  kernel_family,
  work_order,
  split_tail,
  cta_pairs,
  short_keys,
  paged_kv,
  library,
  nvrtc_library,
  test_seed,
};

enum class KnobType { boolean, integer, string, path, path_list, enumeration };

struct KnobInfo {
  Knob knob;
  std::string_view name;  // "TSATTN_CACHE_DIR"
  KnobType type;
  // The default as documented. For most knobs this is also the value used when unset; the cache
  // directory and the thread count are resolved when read (default_cache_dir(), hardware threads).
  std::string_view default_text;
  std::string_view doc;
  bool affects_cache_key;                     // changes generated code or compile options
  std::span<const std::string_view> choices;  // enumeration: allowed values, lowercase
  int64_t minimum = 0;                        // integer: smallest accepted value
};

const KnobInfo& knob_info(Knob knob);
std::span<const KnobInfo> all_knobs();
const char* knob_type_name(KnobType type);  // "bool", "int", "string", "path", "path list", "enum"

// Typed getters; each throws ErrorKind::runtime when asked for a knob of another type.
bool knob_bool(Knob knob);  // 1/0/true/false/on/off/yes/no, any case
int64_t knob_int(Knob knob);
std::string knob_string(Knob knob);                  // string, path and enum knobs; enums lowercase
std::vector<std::string> knob_path_list(Knob knob);  // ':'-separated; empty entries dropped

// Any knob's resolved value as canonical text: bools "1"/"0", ints in decimal, enums lowercase,
// path lists joined with ':'. Unset and an explicit default give the same text.
std::string knob_text(Knob knob);

// TSATTN_* names in the environment that the table does not know (typos, removed knobs), sorted.
std::vector<std::string> unknown_tsattn_variables();

// Warns once per process (through the log) about every TSATTN_* variable the table does not
// know: a misspelt variable silently doing nothing is a classic deployment bug.
void warn_about_unknown_variables();

// "NAME=value\n" for every key-affecting knob, in table order, from resolved values: the
// environment's contribution to the cache key.
std::string cache_key_environment();

// $XDG_CACHE_HOME/tsattn when XDG_CACHE_HOME is an absolute path (the XDG spec ignores relative
// ones), else $HOME/.cache/tsattn, else the password database's home directory.
std::string default_cache_dir();

}  // namespace tsattn
