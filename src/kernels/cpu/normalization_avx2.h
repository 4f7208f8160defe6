// AVX2+FMA kernels for softmax, layer norm and RMS norm (f32 and bf16); x86 only, call
// them only when has_avx2_fma(). Sums run in double, so the results stay within a few ULP of the
// reference kernels however long the rows are.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"

namespace kiln::cpu {

#ifdef KILN_X86
namespace avx2 {

// Softmax of each of `rows` contiguous rows of n elements.
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n);
// Softmax down `count` (1..kSoftmaxColumns) adjacent columns of an [n, stride] block: element k
// of column c is at x[k * stride + c].
inline constexpr int64_t kSoftmaxColumns = 32;
void softmax_columns(const float* x, float* y, int64_t n, int64_t stride, int64_t count);
// The same in bf16, the bits of the f32 kernel between casts: each row widened into a buffer,
// the f32 kernel run there and its results rounded; columns widened as they are read, their
// exps kept in an f32 buffer.
void softmax_rows(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n);
void softmax_columns(const BFloat16* x, BFloat16* y, int64_t n, int64_t stride, int64_t count);

// Layer norm of `rows` rows of n elements: y = (x - mean) / sqrt(var + eps) * weight + bias, the
// weight and bias (n elements each) optional (null). In bf16 the result is the f32 one rounded
// to bf16, the bits of the f32 kernel between casts. The algorithm is layer_norm_rows.h's,
// 8 floats a block.
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                int64_t n, double eps);
void layer_norm(const BFloat16* x, const BFloat16* weight, const BFloat16* bias, BFloat16* y,
                int64_t rows, int64_t n, double eps);

// RMS norm of `rows` rows of n elements: y = x / sqrt(mean(x²) + eps) * weight, the weight (n
// elements) optional (null). One pass for the sum of squares, one to scale.
void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, double eps);
// In bf16 likewise the f32 result rounded to bf16.
void rms_norm(const BFloat16* x, const BFloat16* weight, BFloat16* y, int64_t rows, int64_t n,
              double eps);

}  // namespace avx2

// avx2::layer_norm's algorithm 16 floats a block, and avx2::softmax_rows on 16 lanes with the
// same bits (the same exp, the same order of its f64 sums) (normalization_avx512.cc); call only
// when has_avx512f(). bf16 rows are widened into a buffer, run in f32 and rounded.
namespace avx512 {
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n);
void softmax_rows(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n);
// log_softmax of rows: softmax_rows's maximum and f64 sum of exp(x - max), then
// x - (max + log(sum)) in f64, rounded once.
void log_softmax_rows(const float* x, float* y, int64_t rows, int64_t n);
void log_softmax_rows(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n);
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                int64_t n, double eps);
void layer_norm(const BFloat16* x, const BFloat16* weight, const BFloat16* bias, BFloat16* y,
                int64_t rows, int64_t n, double eps);
}  // namespace avx512
#endif

}  // namespace kiln::cpu
