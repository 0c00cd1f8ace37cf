// The TSATTN_* registry: parsing of each knob type, defaults, error messages that name the
// variable and the value, unknown-variable detection and the cache-key text. Each test sets the
// variables it needs through ScopedEnv, which restores the previous environment on exit.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <tsattn/tsattn.hpp>

#include "common/knobs.hpp"
#include "support/scoped_env.hpp"

namespace {

using tsattn::Knob;

using tsattn::testing::ScopedEnv;

std::string value_error(Knob knob) {
  try {
    (void)tsattn::knob_text(knob);
  } catch (const tsattn::Error& error) {
    CHECK(error.kind() == tsattn::ErrorKind::value);
    return error.what();
  }
  FAIL("no error was raised");
  return {};
}

}  // namespace

TEST_SUITE("common/knobs") {
  TEST_CASE("the table registers every knob once, in enum order, with a doc") {
    const auto knobs = tsattn::all_knobs();
    std::set<std::string_view> names;
    for (size_t i = 0; i < knobs.size(); ++i) {
      CAPTURE(knobs[i].name);
      CHECK(static_cast<size_t>(knobs[i].knob) == i);
      CHECK(&tsattn::knob_info(knobs[i].knob) == &knobs[i]);
      CHECK(knobs[i].name.starts_with("TSATTN_"));
      CHECK(!knobs[i].doc.empty());
      CHECK(names.insert(knobs[i].name).second);
    }
    for (const char* expected :
         {"TSATTN_CACHE_DIR", "TSATTN_CACHE_RO_PATH", "TSATTN_CACHE_DISABLE", "TSATTN_ALWAYS_COMPILE",
          "TSATTN_DISABLE_JIT", "TSATTN_LOG_LEVEL", "TSATTN_DUMP_DIR", "TSATTN_LINEINFO", "TSATTN_COMPILE_THREADS",
          "TSATTN_KERNEL_FAMILY", "TSATTN_WORK_ORDER", "TSATTN_LIBRARY"}) {
      CHECK_MESSAGE(names.count(expected) == 1, expected);
    }
    CHECK(tsattn::knob_info(Knob::lineinfo).affects_cache_key);
    CHECK(!tsattn::knob_info(Knob::cache_dir).affects_cache_key);
    CHECK(tsattn::knob_info(Knob::log_level).type == tsattn::KnobType::enumeration);
    CHECK(tsattn::knob_info(Knob::cache_ro_path).type == tsattn::KnobType::path_list);
  }

  TEST_CASE("booleans: every accepted spelling, any case, and unset or empty is the default") {
    ScopedEnv env;
    for (const char* yes : {"1", "true", "TRUE", "On", "yes", " yes "}) {
      env.set("TSATTN_DISABLE_JIT", yes);
      CHECK_MESSAGE(tsattn::knob_bool(Knob::disable_jit), yes);
    }
    for (const char* no : {"0", "false", "False", "OFF", "no", "NO"}) {
      env.set("TSATTN_DISABLE_JIT", no);
      CHECK_MESSAGE(!tsattn::knob_bool(Knob::disable_jit), no);
    }
    env.set("TSATTN_DISABLE_JIT", "");
    CHECK(!tsattn::knob_bool(Knob::disable_jit));
    env.set("TSATTN_DISABLE_JIT", nullptr);
    CHECK(!tsattn::knob_bool(Knob::disable_jit));
  }

  TEST_CASE("an invalid value names the variable and the value") {
    ScopedEnv env;
    env.set("TSATTN_DISABLE_JIT", "maybe");
    CHECK(value_error(Knob::disable_jit) == "TSATTN_DISABLE_JIT='maybe' is not a boolean (use 1/0/true/false/on/off)");
    CHECK_THROWS_AS(tsattn::knob_bool(Knob::disable_jit), tsattn::Error);

    env.set("TSATTN_LOG_LEVEL", "loud");
    CHECK(value_error(Knob::log_level) == "TSATTN_LOG_LEVEL='loud' is not one of off|error|warn|info|debug");

    for (const char* bad : {"0", "-3", "four", "8x", "99999999999999999999999"}) {
      env.set("TSATTN_COMPILE_THREADS", bad);
      CAPTURE(bad);
      const std::string message = value_error(Knob::compile_threads);
      CHECK(message.find("TSATTN_COMPILE_THREADS='" + std::string(bad) + "'") != std::string::npos);
      CHECK(message.find(">= 1") != std::string::npos);
    }
  }

  TEST_CASE("integers: explicit values and the hardware-thread default") {
    ScopedEnv env;
    env.set("TSATTN_COMPILE_THREADS", "7");
    CHECK(tsattn::knob_int(Knob::compile_threads) == 7);
    env.set("TSATTN_COMPILE_THREADS", " 12 ");
    CHECK(tsattn::knob_int(Knob::compile_threads) == 12);
    env.set("TSATTN_COMPILE_THREADS", nullptr);
    CHECK(tsattn::knob_int(Knob::compile_threads) == std::max<int64_t>(1, std::thread::hardware_concurrency()));
  }

  TEST_CASE("enums come back lowercase and default when unset") {
    ScopedEnv env;
    env.set("TSATTN_KERNEL_FAMILY", nullptr);
    CHECK(tsattn::knob_string(Knob::kernel_family) == "auto");
    env.set("TSATTN_KERNEL_FAMILY", "SM90A");
    CHECK(tsattn::knob_string(Knob::kernel_family) == "sm90a");
    env.set("TSATTN_WORK_ORDER", nullptr);
    CHECK(tsattn::knob_string(Knob::work_order) == "auto");
    env.set("TSATTN_WORK_ORDER", " Dynamic ");
    CHECK(tsattn::knob_string(Knob::work_order) == "dynamic");
    env.set("TSATTN_LOG_LEVEL", "Debug");
    CHECK(tsattn::knob_string(Knob::log_level) == "debug");
    env.set("TSATTN_LOG_LEVEL", "");
    CHECK(tsattn::knob_string(Knob::log_level) == "off");
  }

  TEST_CASE("paths and path lists") {
    ScopedEnv env;
    env.set("TSATTN_CACHE_RO_PATH", "/opt/a::/opt/b:");
    CHECK(tsattn::knob_path_list(Knob::cache_ro_path) == std::vector<std::string>{"/opt/a", "/opt/b"});
    CHECK(tsattn::knob_text(Knob::cache_ro_path) == "/opt/a:/opt/b");
    env.set("TSATTN_CACHE_RO_PATH", nullptr);
    CHECK(tsattn::knob_path_list(Knob::cache_ro_path).empty());

    env.set("TSATTN_DUMP_DIR", " /tmp/with space ");  // paths are verbatim
    CHECK(tsattn::knob_string(Knob::dump_dir) == " /tmp/with space ");
    env.set("TSATTN_DUMP_DIR", nullptr);
    CHECK(tsattn::knob_string(Knob::dump_dir).empty());

    env.set("TSATTN_CACHE_DIR", "/srv/kernels");
    CHECK(tsattn::knob_string(Knob::cache_dir) == "/srv/kernels");
    env.set("TSATTN_CACHE_DIR", nullptr).set("XDG_CACHE_HOME", "/xdg");
    CHECK(tsattn::knob_string(Knob::cache_dir) == "/xdg/tsattn");
  }

  TEST_CASE("default_cache_dir follows XDG, then HOME") {
    ScopedEnv env;
    env.set("XDG_CACHE_HOME", "/var/cache/me").set("HOME", "/home/me");
    CHECK(tsattn::default_cache_dir() == "/var/cache/me/tsattn");
    env.set("XDG_CACHE_HOME", "relative/cache");  // the XDG spec says to ignore relative paths
    CHECK(tsattn::default_cache_dir() == "/home/me/.cache/tsattn");
    env.set("XDG_CACHE_HOME", nullptr);
    CHECK(tsattn::default_cache_dir() == "/home/me/.cache/tsattn");
    env.set("HOME", nullptr);  // the password database still knows a home, or the call explains itself
    try {
      CHECK(tsattn::default_cache_dir().ends_with("/.cache/tsattn"));
    } catch (const tsattn::Error& error) {
      CHECK(std::string(error.what()).find("TSATTN_CACHE_DIR") != std::string::npos);
    }
  }

  TEST_CASE("getters refuse knobs of another type") {
    CHECK_THROWS_AS(tsattn::knob_bool(Knob::cache_dir), tsattn::Error);
    CHECK_THROWS_AS(tsattn::knob_int(Knob::lineinfo), tsattn::Error);
    CHECK_THROWS_AS(tsattn::knob_string(Knob::cache_ro_path), tsattn::Error);
    CHECK_THROWS_AS(tsattn::knob_path_list(Knob::dump_dir), tsattn::Error);
  }

  TEST_CASE("unknown TSATTN_* variables are reported, known ones are not") {
    ScopedEnv env;
    env.set("TSATTN_CACHE_DIRR", "/typo").set("TSATTN_ZZ_REMOVED", "1").set("TSATTN_LINEINFO", "1");
    env.set("NOT_TSATTN_THING", "1");
    const std::vector<std::string> unknown = tsattn::unknown_tsattn_variables();
    CHECK(std::count(unknown.begin(), unknown.end(), "TSATTN_CACHE_DIRR") == 1);
    CHECK(std::count(unknown.begin(), unknown.end(), "TSATTN_ZZ_REMOVED") == 1);
    CHECK(std::is_sorted(unknown.begin(), unknown.end()));
    for (const tsattn::KnobInfo& info : tsattn::all_knobs()) {
      CHECK(std::count(unknown.begin(), unknown.end(), std::string(info.name)) == 0);
    }
    CHECK(std::count(unknown.begin(), unknown.end(), "NOT_TSATTN_THING") == 0);
    env.set("TSATTN_CACHE_DIRR", nullptr).set("TSATTN_ZZ_REMOVED", nullptr);
    const std::vector<std::string> after = tsattn::unknown_tsattn_variables();
    CHECK(std::count(after.begin(), after.end(), "TSATTN_CACHE_DIRR") == 0);
  }

  TEST_CASE("cache_key_environment changes with key-affecting knobs only") {
    ScopedEnv env;
    env.set("TSATTN_LINEINFO", nullptr);
    const std::string unset = tsattn::cache_key_environment();
    CHECK(unset == "TSATTN_LINEINFO=0\n");
    env.set("TSATTN_LINEINFO", "off");
    CHECK(tsattn::cache_key_environment() == unset);  // an explicit default is the same key
    env.set("TSATTN_LINEINFO", "");
    CHECK(tsattn::cache_key_environment() == unset);

    // Every knob that does not affect the key, set to a value other than its default, leaves the
    // text alone (derived from the table, so a new knob is covered when it is registered).
    for (const tsattn::KnobInfo& info : tsattn::all_knobs()) {
      if (info.affects_cache_key) continue;
      const std::string name(info.name);
      switch (info.type) {
        case tsattn::KnobType::boolean: env.set(name, "1"); break;
        case tsattn::KnobType::integer: env.set(name, "3"); break;
        case tsattn::KnobType::string: env.set(name, "12345"); break;
        case tsattn::KnobType::path: env.set(name, "/elsewhere"); break;
        case tsattn::KnobType::path_list: env.set(name, "/ro1:/ro2"); break;
        case tsattn::KnobType::enumeration: env.set(name, std::string(info.choices.back())); break;
      }
      CHECK_MESSAGE(tsattn::knob_text(info.knob) != "", name);
    }
    CHECK(tsattn::cache_key_environment() == unset);

    env.set("TSATTN_LINEINFO", "YES");
    CHECK(tsattn::cache_key_environment() == "TSATTN_LINEINFO=1\n");
    env.set("TSATTN_LINEINFO", "1");
    CHECK(tsattn::cache_key_environment() == "TSATTN_LINEINFO=1\n");

    env.set("TSATTN_LINEINFO", "sometimes");
    CHECK_THROWS_AS(tsattn::cache_key_environment(), tsattn::Error);
  }
}
