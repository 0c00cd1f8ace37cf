// error.hpp - raising the one exception type of tsattn (tsattn::Error, kind + message) with a
// formatted message. Every stage reports failures through this.
#pragma once

#include <tsattn/tsattn.hpp>

#include <fmt/format.h>

#include <utility>

namespace tsattn {

template <class... Args>
[[noreturn]] void raise(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tsattn
