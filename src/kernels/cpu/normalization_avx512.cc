// Layer norm 16 floats a block (AVX-512): layer_norm_rows.h on 8-lane vectors of doubles; softmax
// on 16 lanes.
#include "kernels/cpu/normalization_avx2.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <array>
#include <cmath>

#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/vec_math_avx512.h"
#pragma GCC diagnostic ignored "-Wpsabi"  // see layer_norm_rows.h
#include "kernels/cpu/layer_norm_rows.h"

namespace kiln::cpu::avx512 {

namespace {

// The zero-masked forms throughout: GCC 12 warns of the plain ones' undefined pass-through.
struct DoubleLanes {
  using Doubles = __m512d;
  using Lanes = __mmask8;
  static constexpr int64_t kFloats = 16;

  KILN_TARGET_AVX512 static Doubles splat(double v) { return _mm512_set1_pd(v); }
  KILN_TARGET_AVX512 static Doubles zero() { return _mm512_setzero_pd(); }
  KILN_TARGET_AVX512 static Doubles add(Doubles a, Doubles b) { return _mm512_add_pd(a, b); }
  KILN_TARGET_AVX512 static Doubles mul(Doubles a, Doubles b) { return _mm512_mul_pd(a, b); }
  KILN_TARGET_AVX512 static Doubles fma(Doubles a, Doubles b, Doubles c) {
    return _mm512_fmadd_pd(a, b, c);
  }
  KILN_TARGET_AVX512 static Doubles sub(Doubles a, Doubles b) { return _mm512_sub_pd(a, b); }
  KILN_TARGET_AVX512 static Doubles sub_within(Doubles a, Doubles b, Lanes lanes) {
    return _mm512_maskz_sub_pd(lanes, a, b);
  }
  KILN_TARGET_AVX512 static Doubles load(const double* p) { return _mm512_loadu_pd(p); }
  KILN_TARGET_AVX512 static Doubles load_within(const double* p, Lanes lanes) {
    return _mm512_maskz_loadu_pd(lanes, p);
  }
  KILN_TARGET_AVX512 static double sum(Doubles v) {
    const __m256d s = _mm256_add_pd(_mm512_maskz_extractf64x4_pd(0xF, v, 0),
                                    _mm512_maskz_extractf64x4_pd(0xF, v, 1));
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
  }
  KILN_TARGET_AVX512 static void widen_bits(__m512 v, Doubles& lo, Doubles& hi) {
    const __m512d bits = _mm512_castps_pd(v);
    lo = _mm512_maskz_cvtps_pd(0xFF, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, bits, 0)));
    hi = _mm512_maskz_cvtps_pd(0xFF, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, bits, 1)));
  }
  KILN_TARGET_AVX512 static __m512 narrow_bits(Doubles lo, Doubles hi) {
    const __m512d low_half = _mm512_maskz_insertf64x4(
        0x0F, _mm512_setzero_pd(), _mm256_castps_pd(_mm512_maskz_cvtpd_ps(0xFF, lo)), 0);
    return _mm512_castpd_ps(_mm512_maskz_insertf64x4(
        0xFF, low_half, _mm256_castps_pd(_mm512_maskz_cvtpd_ps(0xFF, hi)), 1));
  }
  KILN_TARGET_AVX512 static __mmask16 tail_lanes(int64_t count) {
    return static_cast<__mmask16>((1u << count) - 1);
  }
  KILN_TARGET_AVX512 static void widen(const float* x, Doubles& lo, Doubles& hi) {
    widen_bits(_mm512_loadu_ps(x), lo, hi);
  }
  KILN_TARGET_AVX512 static void widen_tail(const float* x, int64_t count, Doubles& lo,
                                            Doubles& hi, Lanes& lo_lanes, Lanes& hi_lanes) {
    const __mmask16 lanes = tail_lanes(count);
    widen_bits(_mm512_maskz_loadu_ps(lanes, x), lo, hi);
    lo_lanes = static_cast<Lanes>(lanes);
    hi_lanes = static_cast<Lanes>(lanes >> 8);
  }
  KILN_TARGET_AVX512 static void narrow_store(float* y, Doubles lo, Doubles hi) {
    _mm512_storeu_ps(y, narrow_bits(lo, hi));
  }
  KILN_TARGET_AVX512 static void narrow_store_tail(float* y, int64_t count, Doubles lo,
                                                   Doubles hi) {
    _mm512_mask_storeu_ps(y, tail_lanes(count), narrow_bits(lo, hi));
  }
};

// The row's largest element (two chains, as a max's latency would pace one).
KILN_TARGET_AVX512 float row_max(const float* x, int64_t n) {
  const __m512 neg_inf = splat(-INFINITY);
  __m512 m0 = neg_inf, m1 = neg_inf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_maskz_max_ps(kAllLanes, m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_maskz_max_ps(kAllLanes, m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16)
    m0 = _mm512_maskz_max_ps(kAllLanes, m0,
                             _mm512_mask_loadu_ps(neg_inf, lanes_from(i, n), x + i));
  return max_lanes(_mm512_maskz_max_ps(kAllLanes, m0, m1));
}

// The sum of exp(x - max) over the row, its terms written to y (kStore). avx2's softmax row
// (normalization_avx2.cc) 16 lanes a step, with its bits: its exp (exp_minus, the same on 16
// lanes; a vector past the row's end filled with -inf as avx2's tail), and its f64 sums in its
// order: lanes 0-3 of the accumulator are avx2's sum_lo, 4-7 its sum_hi, and each 16 floats
// add as two of avx2's vectors, one after the other (zeros past the end add nothing).
template <bool kStore>
KILN_TARGET_AVX512 double exp_sum(const float* x, float* y, int64_t n, float max) {
  const __m512 neg_inf = splat(-INFINITY), shift = splat(max);
  __m512d sum = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_from(i, n);
    const __m512 e = _mm512_maskz_mov_ps(
        lanes, exp_minus(_mm512_mask_loadu_ps(neg_inf, lanes, x + i), shift));
    if constexpr (kStore) _mm512_mask_storeu_ps(y + i, lanes, e);
    sum = _mm512_add_pd(sum, _mm512_maskz_cvtps_pd(0xFF, low_half(e)));
    sum = _mm512_add_pd(sum, _mm512_maskz_cvtps_pd(0xFF, high_half(e)));
  }
  alignas(64) double l[8];
  _mm512_store_pd(l, sum);
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

// 1.36x the avx2 kernel on a Zen 4, whose 512-bit vectors take two passes of its 256-bit units
// ([1576, 3072], 1 thread: 2.65 against 3.61 ms).
KILN_TARGET_AVX512 void softmax_row(const float* x, float* y, int64_t n) {
  const double total = exp_sum<true>(x, y, n, row_max(x, n));
  const __m512 inv = splat(static_cast<float>(1.0 / total));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_from(i, n);
    _mm512_mask_storeu_ps(y + i, lanes, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, y + i), inv));
  }
}

// y = x - (max + log(sum)), the sum as the softmax's (f64) and the subtraction in f64, rounded
// once. A NaN, a +inf, or a row of -inf alone gives NaN throughout, as the reference.
KILN_TARGET_AVX512 void log_softmax_row(const float* x, float* y, int64_t n) {
  const float max = row_max(x, n);
  const __m512d shift =
      _mm512_set1_pd(static_cast<double>(max) + std::log(exp_sum<false>(x, nullptr, n, max)));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_from(i, n);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
    const __m256 low = _mm512_maskz_cvtpd_ps(
        0xFF, _mm512_sub_pd(_mm512_maskz_cvtps_pd(0xFF, low_half(v)), shift));
    const __m256 high = _mm512_maskz_cvtpd_ps(
        0xFF, _mm512_sub_pd(_mm512_maskz_cvtps_pd(0xFF, high_half(v)), shift));
    _mm512_mask_storeu_ps(y + i, lanes, from_halves(low, high));
  }
}

// f32 rows, or bf16 rows widened into a buffer per thread and rounded (bf16_rows.h).
template <void (*Row)(const float*, float*, int64_t)>
KILN_TARGET_AVX512 void rows_of(const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) Row(x + r * n, y + r * n, n);
}
template <void (*Row)(const float*, float*, int64_t)>
KILN_TARGET_AVX512 void rows_of(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n) {
  bf16_rows_through_f32<0>(
      x, {}, y, rows, n,
      [&](const float* row, std::array<const float*, 0>, float* out) KILN_TARGET_AVX512 {
        Row(row, out, n);
      },
      avx512::widen_bf16_row, avx512::narrow_to_bf16_row);
}

}  // namespace

void softmax_rows(const float* x, float* y, int64_t rows, int64_t n) {
  rows_of<softmax_row>(x, y, rows, n);
}
void softmax_rows(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n) {
  rows_of<softmax_row>(x, y, rows, n);
}
void log_softmax_rows(const float* x, float* y, int64_t rows, int64_t n) {
  rows_of<log_softmax_row>(x, y, rows, n);
}
void log_softmax_rows(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n) {
  rows_of<log_softmax_row>(x, y, rows, n);
}

KILN_TARGET_AVX512 void layer_norm(const float* x, const float* weight, const float* bias,
                                   float* y, int64_t rows, int64_t n, double eps) {
  if (rows == 0 || n == 0) return;
  layer_norm_rows::normalize_rows<DoubleLanes>(
      x, layer_norm_rows::widen_params(weight, bias, n), y, rows, n, eps);
}

KILN_TARGET_AVX512 void layer_norm(const BFloat16* x, const BFloat16* weight,
                                   const BFloat16* bias, BFloat16* y, int64_t rows, int64_t n,
                                   double eps) {
  if (rows == 0 || n == 0) return;
  const layer_norm_rows::DoubleParams p = layer_norm_rows::widen_params(weight, bias, n);
  bf16_rows_through_f32<0>(
      x, {}, y, rows, n,
      [&](const float* row, std::array<const float*, 0>, float* out) KILN_TARGET_AVX512 {
        layer_norm_rows::normalize_rows<DoubleLanes>(row, p, out, 1, n, eps);
      },
      avx512::widen_bf16_row, avx512::narrow_to_bf16_row);
}

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
