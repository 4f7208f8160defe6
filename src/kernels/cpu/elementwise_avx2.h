// AVX2+FMA array kernels for f32 elementwise ops (x86 only; call them only when
// has_avx2_fma()). Transcendental functions are vectorized and accurate to a few ULP; the
// bounds are measured by tests/cpp/test_ops_elementwise.cc and listed in docs/ops.md.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"

namespace kiln::cpu {

// out[i] = f(in[i]) for i < n.
using UnaryArrayFn = void (*)(const float* in, float* out, int64_t n);
// out[i] = a[i * a_step] op b[i * b_step] for i < n; each step is 1 or 0 (broadcast).
using BinaryArrayFn = void (*)(const float* a, int64_t a_step, const float* b, int64_t b_step,
                               float* out, int64_t n);

#ifdef KILN_X86
namespace avx2 {

void relu(const float* in, float* out, int64_t n);
void neg(const float* in, float* out, int64_t n);
void exp(const float* in, float* out, int64_t n);
void sigmoid(const float* in, float* out, int64_t n);
void tanh(const float* in, float* out, int64_t n);
void gelu_erf(const float* in, float* out, int64_t n);   // x * Phi(x)
void gelu_tanh(const float* in, float* out, int64_t n);  // PyTorch's approximate="tanh"
void sqrt(const float* in, float* out, int64_t n);
void rsqrt(const float* in, float* out, int64_t n);

void add(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void sub(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void mul(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void div(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);

}  // namespace avx2
#endif

}  // namespace kiln::cpu
