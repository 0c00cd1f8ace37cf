// Logging: level filtering, the callback sink, the stderr sink's prefix, warn_once's dedupe across
// threads, and TSATTN_LOG_LEVEL parsing. Each test restores the sink and level it found.
#include <doctest/doctest.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "support/scoped_env.hpp"

namespace {

using tsattn::LogLevel;

// Installs a capturing sink and a level; restores stderr and the previous level afterwards.
class CapturedLog {
 public:
  explicit CapturedLog(LogLevel level) : previous_(tsattn::log_level()) {
    tsattn::set_log_level(level);
    tsattn::set_log_sink([this](LogLevel l, std::string_view message) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(l, std::string(message));
    });
  }
  ~CapturedLog() {
    tsattn::set_log_sink({});
    tsattn::set_log_level(previous_);
  }
  std::vector<std::pair<LogLevel, std::string>> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  LogLevel previous_;
  std::mutex mutex_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
};

// A key no other test (or earlier run of this one in the process) has used.
std::string fresh_key(const char* what) {
  static std::atomic<int> counter{0};
  return std::string("test_log.") + what + "." + std::to_string(counter++);
}

// Counts how often fmt formats it, to show that a disabled logf builds no text.
struct FormatCounter {
  int* count;
};

}  // namespace

template <>
struct fmt::formatter<FormatCounter> : fmt::formatter<std::string_view> {
  auto format(const FormatCounter& counter, fmt::format_context& context) const {
    ++*counter.count;
    return fmt::formatter<std::string_view>::format("counted", context);
  }
};

TEST_SUITE("common/log") {
  TEST_CASE("messages at or above the level's severity reach the sink, others do not") {
    CapturedLog captured(LogLevel::warn);
    tsattn::log(LogLevel::error, "e");
    tsattn::log(LogLevel::warn, "w");
    tsattn::log(LogLevel::info, "i");
    tsattn::log(LogLevel::debug, "d");
    tsattn::log(LogLevel::off, "never");
    const auto lines = captured.lines();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == std::pair{LogLevel::error, std::string("e")});
    CHECK(lines[1] == std::pair{LogLevel::warn, std::string("w")});
    CHECK(tsattn::log_enabled(LogLevel::warn));
    CHECK(!tsattn::log_enabled(LogLevel::info));
    CHECK(!tsattn::log_enabled(LogLevel::off));
  }

  TEST_CASE("level off silences everything, debug lets everything through") {
    {
      CapturedLog captured(LogLevel::off);
      tsattn::log(LogLevel::error, "e");
      tsattn::warn_once(fresh_key("off"), "w");
      CHECK(captured.lines().empty());
    }
    CapturedLog captured(LogLevel::debug);
    tsattn::log(LogLevel::debug, "d");
    tsattn::log(LogLevel::info, "i");
    CHECK(captured.lines().size() == 2);
    CHECK(tsattn::log_level() == LogLevel::debug);
  }

  TEST_CASE("logf formats only when enabled") {
    CapturedLog captured(LogLevel::info);
    int formatted = 0;
    tsattn::logf(LogLevel::info, "{} of {} ({})", 3, "four", FormatCounter{&formatted});
    CHECK(formatted == 1);
    tsattn::logf(LogLevel::debug, "{}", FormatCounter{&formatted});
    CHECK(formatted == 1);  // disabled: the argument was never formatted
    const auto lines = captured.lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].second == "3 of four (counted)");
  }

  TEST_CASE("warn_once emits once per key, across threads") {
    CapturedLog captured(LogLevel::warn);
    const std::string key = fresh_key("threads"), other = fresh_key("other");
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) tsattn::warn_once(key, "the cache directory is read-only");
      });
    }
    for (auto& thread : threads) thread.join();
    CHECK(tsattn::warn_once(other, "another condition"));
    CHECK_FALSE(tsattn::warn_once(other, "another condition"));  // said already: the caller may log it quieter
    const auto lines = captured.lines();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == std::pair{LogLevel::warn, std::string("the cache directory is read-only")});
    CHECK(lines[1].second == "another condition");
  }

  TEST_CASE("a warn_once key is not spent while warnings are disabled") {
    const std::string key = fresh_key("disabled");
    {
      CapturedLog captured(LogLevel::error);
      CHECK_FALSE(tsattn::warn_once(key, "hidden"));
      CHECK(captured.lines().empty());
    }
    CapturedLog captured(LogLevel::warn);
    tsattn::warn_once(key, "shown");
    tsattn::warn_once(key, "shown");
    CHECK(captured.lines().size() == 1);
  }

  TEST_CASE("concurrent logging delivers every message, and a sink may log") {
    CapturedLog captured(LogLevel::info);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 250; ++i) tsattn::logf(LogLevel::info, "thread {} message {}", t, i);
      });
    }
    for (auto& thread : threads) thread.join();
    CHECK(captured.lines().size() == 1000);

    // A sink that logs must not deadlock (the sink is not called under a lock).
    std::atomic<int> depth{0}, calls{0};
    tsattn::set_log_sink([&](LogLevel, std::string_view) {
      ++calls;
      if (depth++ == 0) tsattn::log(LogLevel::info, "from inside the sink");
    });
    tsattn::log(LogLevel::info, "outer");
    CHECK(calls == 2);
  }

  TEST_CASE("the default sink writes one prefixed line to stderr") {
    const LogLevel previous = tsattn::log_level();
    tsattn::set_log_sink({});
    tsattn::set_log_level(LogLevel::info);

    char path[] = "/tmp/tsattn_test_log_XXXXXX";
    const int file = ::mkstemp(path);
    REQUIRE(file >= 0);
    std::fflush(stderr);
    const int saved = ::dup(STDERR_FILENO);
    ::dup2(file, STDERR_FILENO);
    tsattn::log(LogLevel::warn, "cache at /x is group-writable");
    tsattn::log(LogLevel::info, "compiled k");
    tsattn::log(LogLevel::debug, "not shown");
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(file);
    tsattn::set_log_level(previous);

    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    ::unlink(path);
    CHECK(text.str() == "[tsattn warn] cache at /x is group-writable\n[tsattn info] compiled k\n");
  }

  TEST_CASE("TSATTN_LOG_LEVEL parsing") {
    tsattn::testing::ScopedEnv env;
    env.set("TSATTN_LOG_LEVEL", nullptr);
    CHECK(tsattn::log_level_from_environment() == LogLevel::off);  // silent unless asked
    for (const auto& [text, level] :
         {std::pair{"error", LogLevel::error}, std::pair{"WARN", LogLevel::warn}, std::pair{"info", LogLevel::info},
          std::pair{"Debug", LogLevel::debug}, std::pair{"off", LogLevel::off}}) {
      env.set("TSATTN_LOG_LEVEL", text);
      CHECK_MESSAGE(tsattn::log_level_from_environment() == level, text);
    }
    env.set("TSATTN_LOG_LEVEL", "chatty");
    CHECK(tsattn::log_level_from_environment() == LogLevel::warn);  // so the mistake can be reported
    CHECK(std::string(tsattn::log_level_name(LogLevel::warn)) == "warn");
  }
}
