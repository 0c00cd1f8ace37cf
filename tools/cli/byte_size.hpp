// byte_size.hpp - byte counts as people type and read them (`--max-bytes 2G`, "41.2 MiB").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tsattn::tools {

// "1048576", "512K", "300M", "2G", "1T" (powers of 1024; the suffix may be followed by "B" or
// "iB" and is case-insensitive). nullopt for anything else, including overflow.
std::optional<uint64_t> parse_byte_size(std::string_view text);

// "812 B", "41.2 KiB", "3.0 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace tsattn::tools
