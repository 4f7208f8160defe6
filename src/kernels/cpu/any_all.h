// any and all over x viewed as [outer, n, inner] (src/ops/reduction.cc's "bits" kernel), for
// every dtype: an element is zero when its bits under the dtype's value mask are (floats drop
// the sign bit, so -0 is zero and a NaN is not), so the kernels read bits, never values, and
// vectorize as integer ORs and compares.
#pragma once

#include <cstdint>

#include "kernels/cpu/reduction_avx2.h"

namespace kiln::cpu {

// y[o, i] = 1 when any (`any`) or all of x[o, :, i] is nonzero, else 0; elements of `bytes`
// (1, 2, 4 or 8) bytes, `value_bits` the mask of the bits that decide. y has a byte per result.
// AVX2 loops where the CPU has them; up to `threads` threads.
void any_all(bool any, const void* x, int bytes, uint64_t value_bits, const ReduceExtents& e,
             uint8_t* y, int threads);

}  // namespace kiln::cpu
