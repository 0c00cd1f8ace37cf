// parallel.hpp - a work queue over [0, count) on `jobs` threads (AOT precompile, cache warming).
#pragma once

#include <cstddef>
#include <functional>

namespace tsattn {

// Calls body(i) for every i in [0, count), `jobs` threads taking the next index as they free
// up. When body returns false, no new index is started (the ones running finish).
void for_each_parallel(size_t count, int jobs, const std::function<bool(size_t)>& body);

}  // namespace tsattn
