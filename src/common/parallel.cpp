#include "common/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tsattn {

void for_each_parallel(size_t count, int jobs, const std::function<bool(size_t)>& body) {
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  auto worker = [&] {
    for (size_t i = next++; i < count && !stop; i = next++)
      if (!body(i)) stop = true;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(jobs, 1); ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
}

}  // namespace tsattn
