#include "common/log.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <tsattn/tsattn.hpp>

#include "common/knobs.hpp"

namespace tsattn {

namespace {

// -1 until the first read resolves TSATTN_LOG_LEVEL. An atomic rather than a once_flag so that
// set_log_level before first use simply wins, and the hot "is it enabled" check is one load.
constexpr int kUnresolved = -1;
std::atomic<int> g_level{kUnresolved};

// The sink is shared, not locked while called: a sink that logs (or a slow one) must not deadlock
// or serialize other threads' logging behind it. Function-local so that logging from another
// translation unit's static initializer finds it constructed.
struct Shared {
  std::mutex sink_mutex;
  std::shared_ptr<const LogSink> sink;
  std::mutex once_mutex;
  std::set<std::string, std::less<>> once_keys;
};

Shared& shared() {
  static Shared instance;
  return instance;
}

void write_to_stderr(LogLevel level, std::string_view message) {
  // One fwrite per line: stdio locks the stream per call, so lines from threads do not interleave.
  const std::string line = fmt::format("[tsattn {}] {}\n", log_level_name(level), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void emit(LogLevel level, std::string_view message) {
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lock(shared().sink_mutex);
    sink = shared().sink;
  }
  if (sink) {
    (*sink)(level, message);
  } else {
    write_to_stderr(level, message);
  }
}

struct EnvironmentLevel {
  LogLevel level = LogLevel::warn;
  std::string problem;  // why TSATTN_LOG_LEVEL was not usable; empty when it was
};

EnvironmentLevel read_environment_level() {
  EnvironmentLevel result;
  try {
    const std::string name = knob_string(Knob::log_level);
    for (LogLevel level : {LogLevel::off, LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug}) {
      if (name == log_level_name(level)) result.level = level;
    }
  } catch (const Error& error) {
    result.problem = error.what();
  }
  return result;
}

LogLevel resolve_level() {
  const int current = g_level.load(std::memory_order_acquire);
  if (current != kUnresolved) return static_cast<LogLevel>(current);
  const EnvironmentLevel from_env = read_environment_level();
  int expected = kUnresolved;
  if (!g_level.compare_exchange_strong(expected, static_cast<int>(from_env.level), std::memory_order_acq_rel)) {
    return static_cast<LogLevel>(expected);  // another thread or set_log_level got there first
  }
  // Only the thread that settled the level reports a bad value, so it is reported once.
  if (!from_env.problem.empty()) {
    emit(LogLevel::warn, fmt::format("{}; logging warnings and errors", from_env.problem));
  }
  return from_env.level;
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::off: return "off";
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "unknown";
}

void set_log_sink(LogSink sink) {
  auto sink_pointer = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard lock(shared().sink_mutex);
  shared().sink = std::move(sink_pointer);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_release); }

LogLevel log_level() { return resolve_level(); }

LogLevel log_level_from_environment() { return read_environment_level().level; }

bool log_enabled(LogLevel level) {
  return level != LogLevel::off && static_cast<int>(level) <= static_cast<int>(resolve_level());
}

void log(LogLevel level, std::string_view message) {
  if (log_enabled(level)) emit(level, message);
}

bool warn_once(std::string_view dedupe_key, std::string_view message) {
  if (!log_enabled(LogLevel::warn)) return false;
  {
    std::lock_guard lock(shared().once_mutex);
    if (!shared().once_keys.emplace(dedupe_key).second) return false;
  }
  emit(LogLevel::warn, message);
  return true;
}

}  // namespace tsattn
