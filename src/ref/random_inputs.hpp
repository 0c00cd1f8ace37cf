// random_inputs.hpp - test and demo inputs as docs/contract.md asks: 0.2*randn (0.125*randn for fp8),
// fresh per case, never zeros.
#pragma once

#include <tsattn/tsattn.h>

#include <cstdint>
#include <random>

namespace tsattn::ref {

// The contract's standard deviation for inputs of this dtype.
double input_stddev(tsattn_dtype dtype);

// count elements of dtype at base, drawn from N(0, stddev^2) and rounded to the dtype.
void fill_normal(tsattn_dtype dtype, void* base, int64_t count, double stddev, std::mt19937_64& rng);

}  // namespace tsattn::ref
