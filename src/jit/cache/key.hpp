// key.hpp - the content key of one compiled kernel in the on-disk cache.
//
// The key names *what went into the compiler*, never where it came from: two builds hit the same
// entry only when every byte NVRTC saw, the toolchain and the code-changing environment agree.
// Names alone and mtimes are never part of it (docs/architecture.md, "The on-disk cache").
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/sha256.hpp"

namespace tsattn::jit {

// Bump when the set, order, labels or encoding of the fields hashed by compute_cache_key change,
// so that no old entry can be mistaken for a new one.
inline constexpr uint32_t kCacheKeySchemaVersion = 1;

struct KeyIngredients {
  std::string canonical_name;  // prefill.sm90a.d128.bf16_bf16.causal.win
  std::string source;          // the final generated translation unit, exactly as given to NVRTC
  // Every header the source may include, as handed to nvrtcCreateProgram: name, text. Their
  // order is significant (it is the order NVRTC sees them in).
  std::vector<std::pair<std::string, std::string_view>> headers;
  std::string arch;                  // the full arch string: sm_90a, not 90
  std::string nvrtc_version;         // as precise as the library can learn it (major.minor[.build])
  std::vector<std::string> options;  // normalized NVRTC options, in the order passed
  std::string environment;           // knobs' cache_key_environment(): every code-changing TSATTN_* value
};

// SHA-256 over labelled, length-prefixed fields: the schema version, the library version
// (TSATTN_VERSION_STRING), then every ingredient. Length prefixes and counts make the encoding
// injective: no two different ingredient sets produce the same hashed byte stream.
Digest compute_cache_key(const KeyIngredients& ingredients);

}  // namespace tsattn::jit
