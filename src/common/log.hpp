// log.hpp - the library's only way to say something. It prints nothing unless asked
// (docs/architecture.md, style rule 5): the level comes from TSATTN_LOG_LEVEL (default off), read once on
// first use, or from set_log_level (the CLI's -v). Messages at or above the level's severity go to
// one sink: stderr with a "[tsattn warn] " prefix, or a callback (tests, Python). Thread-safe.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string_view>
#include <utility>

namespace tsattn {

// Ordered by verbosity: a level lets through itself and everything before it.
enum class LogLevel { off, error, warn, info, debug };

const char* log_level_name(LogLevel level);  // "off", "error", ...

using LogSink = std::function<void(LogLevel, std::string_view)>;

// Replaces the sink; an empty function restores stderr. The sink may be called from any thread,
// concurrently, and may itself log.
void set_log_sink(LogSink sink);

void set_log_level(LogLevel level);
LogLevel log_level();

// TSATTN_LOG_LEVEL as it is now (re-read at each call; log_level() reads it only once). An
// invalid value gives warn, so the mistake itself can be reported.
LogLevel log_level_from_environment();

// True when a message at this level would reach the sink: check before building costly text.
bool log_enabled(LogLevel level);

// Sends the message to the sink when enabled; LogLevel::off is never emitted.
void log(LogLevel level, std::string_view message);

// A warning emitted at most once per process for each dedupe_key (e.g. one per cache directory),
// so a persistent condition does not flood the log on every call. A key is spent only when the
// warning is actually emitted. Returns whether it was (callers may say it again at a quieter level).
bool warn_once(std::string_view dedupe_key, std::string_view message);

// log() with fmt formatting, skipped entirely (no formatting) when the level is disabled.
template <class... Args>
void logf(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tsattn
