// reference.hpp - the CPU oracle: exact batch_prefill on host memory, read through a Problem.
//
// O[i, h] = output_scale * sum_j softmax_j(sm_scale * q_i.k_j over visible j) * v_j, with the
// masks of docs/contract.md. The result is unquantized; write_output() rounds it into p.out the way the
// kernels must (round to nearest even, e4m3 saturating), so tests can compare either form.
#pragma once

#include <cstdint>
#include <vector>

#include "api/problem.hpp"

namespace tsattn::ref {

// fp64: decode, dot products, softmax and PV all in double (the ground truth).
// fp32: the same algorithm in float, the precision the contract promises for the kernels.
enum class Accumulation { fp32, fp64 };

// Query rows of the result: request by request (fixed layout b*Sq + i, packed qo_indptr[b] + i).
int64_t output_rows(const Problem& p);
int64_t output_row(const Problem& p, int64_t b, int64_t i);

// Compact [output_rows][Hq][D]; rows that see no key are exactly 0. Needs p.residency == host
// (tsattn::Error of kind value otherwise). Runs on all hardware threads.
std::vector<float> reference_prefill(const Problem& p, Accumulation acc = Accumulation::fp64);

// Encodes values (as returned by reference_prefill) into p.out in p.output_dtype, through out's
// strides. Touches exactly the elements the kernel must write.
void write_output(const Problem& p, const std::vector<float>& values);

}  // namespace tsattn::ref
