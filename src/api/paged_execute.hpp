// paged_execute.hpp - the one-shot batch_prefill_with_paged_kv_cache (docs/paged_kv.md): checks,
// a stream-ordered workspace for the gather, the host tables' upload, the gather, then the
// packed-layout attention over the gathered keys (api/execute.hpp).
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>

#include "api/paged_arguments.hpp"

namespace tsattn {

struct PagedArguments {
  PagedViews views;
  int64_t page_size = 32;
  int32_t kv_layout = TSATTN_KV_LAYOUT_HND;
  const tsattn_prefill_options* options = nullptr;  // nullptr: defaults
};

// Queues the paged call on options->stream. With host tables the workspace holds exactly their
// keys; with GPU tables (never read back) as many as the tables can name,
// paged_kv_indices.shape[0] * page_size. Returns the attention kernel's canonical name, or
// nullptr when there were no query rows. Throws as execute() and the argument rules do.
const char* execute_paged(const PagedArguments& args);

}  // namespace tsattn
