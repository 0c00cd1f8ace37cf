// scoped_env.hpp - set or unset environment variables for one test and put back what was there.
// Knobs are read at each call, so this is all a test needs to exercise them.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tsattn::testing {

class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  // value == nullptr unsets the variable.
  ScopedEnv& set(const std::string& name, const char* value) {
    const bool seen = std::any_of(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == name; });
    if (!seen) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    }
    if (value) {
      ::setenv(name.c_str(), value, 1);
    } else {
      ::unsetenv(name.c_str());
    }
    return *this;
  }
  ScopedEnv& set(const std::string& name, const std::string& value) { return set(name, value.c_str()); }

  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace tsattn::testing
