// AVX2+FMA kernels for statistics and affine maps of f32 channels, computed in double and rounded
// once: global average pooling, batch norm and group norm (x86 only; call them only when
// has_avx2_fma()).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"

namespace kiln::cpu {

#ifdef KILN_X86
namespace avx2 {

// The sum of x[0..n), in double.
double sum(const float* x, int64_t n);
// The sum of (x[i] - mean)^2 over i < n, in double.
double squared_deviations(const float* x, int64_t n, double mean);
// y[i] = fma(x[i] - mean, scale, shift) in double, rounded once to f32, for i < n: bit for bit
// what std::fma gives on the same doubles.
void affine(const float* x, float* y, int64_t n, double mean, double scale, double shift);
// The same with parameters per element: fma(x[i] - mean[i], scale[i], shift[i]).
void affine_elementwise(const float* x, float* y, int64_t n, const double* mean,
                        const double* scale, const double* shift);

}  // namespace avx2
#endif

}  // namespace kiln::cpu
