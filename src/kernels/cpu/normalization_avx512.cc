// Layer norm 16 lanes at a time (AVX-512), in double as the AVX2 kernel, with one pass fewer:
// the AVX2 kernel's three passes over a row, each converting every element to double, left it
// compute-bound (ViT-B/16's [1576, 768] at 26 GB/s where memcpy streams 44; docs/ops.md).
//  * Statistics in one pass: with d = x - c (c = the row's first element, so d is exact in
//    double), mean = c + sum(d)/n and var = sum(d^2)/n - (sum(d)/n)^2. The sums' rounding
//    grows with |c - mean|, and the subtraction cancels log2(r) bits of double's 53,
//    r = sum(d^2) / (n var) = 1 + (c - mean)^2 / var. Rows with r above 256 (c more than 16
//    standard deviations out) take a second pass over x - mean that corrects both, as do NaN
//    and infinite rows.
//  * The normalization with weight and bias widened to double once per call, not per row.
// Within 1 ULP of the reference like the AVX2 kernel (docs/ops.md); the two differ in the last
// bit only where a double result rounds to f32 near a tie.
#include "kernels/cpu/normalization_avx2.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <array>
#include <cmath>
#include <vector>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/bf16_rows.h"

namespace kiln::cpu::avx512 {

namespace {

// The zero-masked forms throughout: GCC 12 warns of the plain ones' undefined pass-through.
struct Wide {
  __m512d lo, hi;  // lanes 0-7 and 8-15 as doubles
};
KILN_TARGET_AVX512 inline Wide widen(__m512 v) {
  const __m512d bits = _mm512_castps_pd(v);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, bits, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, bits, 1));
  return {_mm512_maskz_cvtps_pd(0xFF, lo), _mm512_maskz_cvtps_pd(0xFF, hi)};
}
KILN_TARGET_AVX512 inline __m512 narrow(Wide w) {
  const __m256 lo = _mm512_maskz_cvtpd_ps(0xFF, w.lo), hi = _mm512_maskz_cvtpd_ps(0xFF, w.hi);
  const __m512d low_half =
      _mm512_maskz_insertf64x4(0x0F, _mm512_setzero_pd(), _mm256_castps_pd(lo), 0);
  return _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xFF, low_half, _mm256_castps_pd(hi), 1));
}
KILN_TARGET_AVX512 inline double sum_lanes(__m512d v) {
  const __m256d s = _mm256_add_pd(_mm512_maskz_extractf64x4_pd(0xF, v, 0),
                                  _mm512_maskz_extractf64x4_pd(0xF, v, 1));
  const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}
KILN_TARGET_AVX512 inline __mmask16 tail_lanes(int64_t count) {
  return static_cast<__mmask16>((1u << count) - 1);
}

// Weight and bias as doubles (null where absent), in a buffer each thread keeps.
struct DoubleParams {
  const double* weight = nullptr;
  const double* bias = nullptr;
};
inline double as_double(float v) { return v; }
inline double as_double(BFloat16 v) { return to_float(v); }

template <typename T>
DoubleParams widen_params(const T* weight, const T* bias, int64_t n) {
  thread_local std::vector<double> buffer;
  buffer.resize(2 * static_cast<size_t>(n));
  DoubleParams p;
  if (weight) {
    for (int64_t i = 0; i < n; ++i) buffer[static_cast<size_t>(i)] = as_double(weight[i]);
    p.weight = buffer.data();
  }
  if (bias) {
    for (int64_t i = 0; i < n; ++i) buffer[static_cast<size_t>(n + i)] = as_double(bias[i]);
    p.bias = buffer.data() + n;
  }
  return p;
}

struct Moments {
  double mean, var;
};

// fn(half, lanes) for each 8-lane half of the row's elements as doubles, `lanes` the half's
// lanes that lie in the row.
template <typename Fn>
KILN_TARGET_AVX512 inline void each_half(const float* x, int64_t n, Fn fn) {
  const int64_t full = n - n % 16;
  for (int64_t i = 0; i < full; i += 16) {
    const Wide w = widen(_mm512_loadu_ps(x + i));
    fn(w.lo, __mmask8(0xFF));
    fn(w.hi, __mmask8(0xFF));
  }
  if (full < n) {
    const __mmask16 lanes = tail_lanes(n - full);
    const Wide w = widen(_mm512_maskz_loadu_ps(lanes, x + full));
    fn(w.lo, static_cast<__mmask8>(lanes));
    fn(w.hi, static_cast<__mmask8>(lanes >> 8));
  }
}

KILN_TARGET_AVX512 Moments moments(const float* x, int64_t n) {
  const double count = static_cast<double>(n);
  const __m512d c = _mm512_set1_pd(x[0]);
  __m512d sum = _mm512_setzero_pd(), squares = _mm512_setzero_pd();
  each_half(x, n, [&](__m512d v, __mmask8 lanes) KILN_TARGET_AVX512 {
    const __m512d d = _mm512_maskz_sub_pd(lanes, v, c);
    sum = _mm512_add_pd(sum, d);
    squares = _mm512_fmadd_pd(d, d, squares);
  });
  const double mean_d = sum_lanes(sum) / count;
  const double sum_squares = sum_lanes(squares);
  const double var = sum_squares / count - mean_d * mean_d;
  const double mean = x[0] + mean_d;
  constexpr double kMaxCancellation = 256;  // 8 of double's 53 bits
  if (sum_squares <= kMaxCancellation * count * var) return {mean, var};
  // False for NaN too. Shifted by the first estimate of the mean, r is about 1.
  const __m512d m = _mm512_set1_pd(mean);
  sum = squares = _mm512_setzero_pd();
  each_half(x, n, [&](__m512d v, __mmask8 lanes) KILN_TARGET_AVX512 {
    const __m512d d = _mm512_maskz_sub_pd(lanes, v, m);
    sum = _mm512_add_pd(sum, d);
    squares = _mm512_fmadd_pd(d, d, squares);
  });
  const double correction = sum_lanes(sum) / count;
  return {mean + correction, sum_lanes(squares) / count - correction * correction};
}

// y = (x - mean) * rstd * weight + bias for one row, in double, rounded to f32 once.
template <bool kWeight, bool kBias>
KILN_TARGET_AVX512 void normalize_row(const float* x, DoubleParams p, float* y, int64_t n,
                                      double eps) {
  const Moments mo = moments(x, n);
  const __m512d mean = _mm512_set1_pd(mo.mean);
  const __m512d rstd = _mm512_set1_pd(1.0 / std::sqrt(mo.var + eps));
  auto half = [&](__m512d v, int64_t i, __mmask8 lanes) KILN_TARGET_AVX512 {
    __m512d t = _mm512_mul_pd(_mm512_sub_pd(v, mean), rstd);
    if constexpr (kWeight) t = _mm512_mul_pd(t, _mm512_maskz_loadu_pd(lanes, p.weight + i));
    if constexpr (kBias) t = _mm512_add_pd(t, _mm512_maskz_loadu_pd(lanes, p.bias + i));
    return t;
  };
  const int64_t full = n - n % 16;
  for (int64_t i = 0; i < full; i += 16) {
    const Wide w = widen(_mm512_loadu_ps(x + i));
    _mm512_storeu_ps(y + i, narrow({half(w.lo, i, 0xFF), half(w.hi, i + 8, 0xFF)}));
  }
  if (full < n) {
    const __mmask16 lanes = tail_lanes(n - full);
    const Wide w = widen(_mm512_maskz_loadu_ps(lanes, x + full));
    const Wide t = {half(w.lo, full, static_cast<__mmask8>(lanes)),
                    half(w.hi, full + 8, static_cast<__mmask8>(lanes >> 8))};
    _mm512_mask_storeu_ps(y + full, lanes, narrow(t));
  }
}

KILN_TARGET_AVX512 void normalize_rows(const float* x, DoubleParams p, float* y, int64_t rows,
                                       int64_t n, double eps) {
  auto each_row = [&](auto row_fn) {
    for (int64_t r = 0; r < rows; ++r) row_fn(x + r * n, p, y + r * n, n, eps);
  };
  if (p.weight && p.bias) each_row(normalize_row<true, true>);
  else if (p.weight) each_row(normalize_row<true, false>);
  else if (p.bias) each_row(normalize_row<false, true>);
  else each_row(normalize_row<false, false>);
}

}  // namespace

KILN_TARGET_AVX512 void layer_norm(const float* x, const float* weight, const float* bias,
                                   float* y, int64_t rows, int64_t n, double eps) {
  if (rows == 0 || n == 0) return;
  normalize_rows(x, widen_params(weight, bias, n), y, rows, n, eps);
}

KILN_TARGET_AVX512 void layer_norm(const BFloat16* x, const BFloat16* weight,
                                   const BFloat16* bias, BFloat16* y, int64_t rows, int64_t n,
                                   double eps) {
  if (rows == 0 || n == 0) return;
  const DoubleParams p = widen_params(weight, bias, n);
  bf16_rows_through_f32<0>(
      x, {}, y, rows, n,
      [&](const float* row, std::array<const float*, 0>, float* out) {
        normalize_rows(row, p, out, 1, n, eps);
      },
      avx2::widen_bf16_row, avx2::narrow_to_bf16_row);
}

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
