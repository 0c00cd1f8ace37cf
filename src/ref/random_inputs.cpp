#include "ref/random_inputs.hpp"

#include "ref/float_formats.hpp"

namespace tsattn::ref {

double input_stddev(tsattn_dtype dtype) { return dtype == TSATTN_DTYPE_FLOAT8_E4M3FN ? 0.125 : 0.2; }

void fill_normal(tsattn_dtype dtype, void* base, int64_t count, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(stddev));
  for (int64_t i = 0; i < count; ++i) store_element(dtype, base, i, normal(rng));
}

}  // namespace tsattn::ref
