#include "kernels/cpu/normalization_avx2.h"

#ifdef KILN_X86
#include <array>
#include <cmath>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

namespace {

KILN_TARGET_AVX2 inline __m256d low_half(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
KILN_TARGET_AVX2 inline __m256d high_half(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
KILN_TARGET_AVX2 inline __m256 to_float(__m256d lo, __m256d hi) {
  return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}
KILN_TARGET_AVX2 inline double sum_lanes(__m256d v) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, v);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}
KILN_TARGET_AVX2 inline float max_lanes(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float m = lanes[0];
  for (float l : lanes) m = std::fmax(m, l);
  return m;
}

// exp(x - max) with the rounding error of the subtraction carried into exp (TwoSum): x - max
// reaches -100 before exp underflows, and its rounding would cost many ULP of the result.
KILN_TARGET_AVX2 inline __m256 exp_minus(__m256 x, __m256 max) {
  const __m256 neg_max = _mm256_xor_ps(max, splat(-0.0f));
  const __m256 d = _mm256_add_ps(x, neg_max);
  const __m256 b = _mm256_sub_ps(d, x);
  const __m256 err =
      _mm256_add_ps(_mm256_sub_ps(x, _mm256_sub_ps(d, b)), _mm256_sub_ps(neg_max, b));
  return exp_hilo(d, err);
}

// Reads 8 lanes of a row at i, or the first `count` of them with the rest `fill`.
struct RowLoader {
  const float* p;
  KILN_TARGET_AVX2 __m256 full(int64_t i) const { return _mm256_loadu_ps(p + i); }
  KILN_TARGET_AVX2 __m256 tail(int64_t i, __m256i mask, __m256 fill) const {
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p + i, mask), _mm256_castsi256_ps(mask));
  }
};

KILN_TARGET_AVX2 void softmax_row(const float* x, float* y, int64_t n) {
  const int64_t full = n - n % 8;
  const __m256i mask = tail_mask(n - full);
  const __m256 neg_inf = splat(-INFINITY);
  RowLoader in{x};
  __m256 vmax = neg_inf;
  for (int64_t i = 0; i < full; i += 8) vmax = _mm256_max_ps(vmax, in.full(i));
  if (full < n) vmax = _mm256_max_ps(vmax, in.tail(full, mask, neg_inf));
  const __m256 max = splat(max_lanes(vmax));

  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  auto accumulate = [&](__m256 e) KILN_TARGET_AVX2 {
    sum_lo = _mm256_add_pd(sum_lo, low_half(e));
    sum_hi = _mm256_add_pd(sum_hi, high_half(e));
  };
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 e = exp_minus(in.full(i), max);
    _mm256_storeu_ps(y + i, e);
    accumulate(e);
  }
  if (full < n) {
    const __m256 e = _mm256_and_ps(exp_minus(in.tail(full, mask, neg_inf), max),
                                   _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(y + full, mask, e);
    accumulate(e);
  }
  const __m256 inv = splat(static_cast<float>(1.0 / sum_lanes(_mm256_add_pd(sum_lo, sum_hi))));
  for (int64_t i = 0; i < full; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  if (full < n)
    _mm256_maskstore_ps(y + full, mask, _mm256_mul_ps(_mm256_maskload_ps(y + full, mask), inv));
}

template <bool kWeight, bool kBias>
KILN_TARGET_AVX2 void layer_norm_row(const float* x, const float* weight, const float* bias,
                                     float* y, int64_t n, double eps) {
  const int64_t full = n - n % 8;
  const __m256i mask = tail_mask(n - full);
  __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc_lo = _mm256_add_pd(acc_lo, low_half(v));
    acc_hi = _mm256_add_pd(acc_hi, high_half(v));
  }
  double sum = sum_lanes(_mm256_add_pd(acc_lo, acc_hi));
  for (int64_t i = full; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);

  const __m256d vmean = _mm256_set1_pd(mean);
  acc_lo = acc_hi = _mm256_setzero_pd();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d d_lo = _mm256_sub_pd(low_half(v), vmean);
    const __m256d d_hi = _mm256_sub_pd(high_half(v), vmean);
    acc_lo = _mm256_fmadd_pd(d_lo, d_lo, acc_lo);
    acc_hi = _mm256_fmadd_pd(d_hi, d_hi, acc_hi);
  }
  double squares = sum_lanes(_mm256_add_pd(acc_lo, acc_hi));
  for (int64_t i = full; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const __m256d rstd = _mm256_set1_pd(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));

  // y = (x - mean) * rstd * weight + bias in double, rounded to f32 once.
  auto normalize = [&](__m256 v, __m256 w, __m256 b) KILN_TARGET_AVX2 {
    __m256d lo = _mm256_mul_pd(_mm256_sub_pd(low_half(v), vmean), rstd);
    __m256d hi = _mm256_mul_pd(_mm256_sub_pd(high_half(v), vmean), rstd);
    if constexpr (kWeight) {
      lo = _mm256_mul_pd(lo, low_half(w));
      hi = _mm256_mul_pd(hi, high_half(w));
    }
    if constexpr (kBias) {
      lo = _mm256_add_pd(lo, low_half(b));
      hi = _mm256_add_pd(hi, high_half(b));
    }
    return to_float(lo, hi);
  };
  const __m256 none = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8)
    _mm256_storeu_ps(y + i, normalize(_mm256_loadu_ps(x + i),
                                      kWeight ? _mm256_loadu_ps(weight + i) : none,
                                      kBias ? _mm256_loadu_ps(bias + i) : none));
  if (full < n)
    _mm256_maskstore_ps(y + full, mask,
                        normalize(_mm256_maskload_ps(x + full, mask),
                                  kWeight ? _mm256_maskload_ps(weight + full, mask) : none,
                                  kBias ? _mm256_maskload_ps(bias + full, mask) : none));
}

template <bool kWeight>
KILN_TARGET_AVX2 void rms_norm_row(const float* x, const float* weight, float* y, int64_t n,
                                   double eps) {
  const int64_t full = n - n % 8;
  const __m256i mask = tail_mask(n - full);
  __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = low_half(v), hi = high_half(v);
    acc_lo = _mm256_fmadd_pd(lo, lo, acc_lo);
    acc_hi = _mm256_fmadd_pd(hi, hi, acc_hi);
  }
  double squares = sum_lanes(_mm256_add_pd(acc_lo, acc_hi));
  for (int64_t i = full; i < n; ++i) squares += double(x[i]) * double(x[i]);
  const __m256d rstd = _mm256_set1_pd(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));

  // y = x * rstd * weight in double, rounded to f32 once (the reference's order).
  auto scale = [&](__m256 v, __m256 w) KILN_TARGET_AVX2 {
    __m256d lo = _mm256_mul_pd(low_half(v), rstd);
    __m256d hi = _mm256_mul_pd(high_half(v), rstd);
    if constexpr (kWeight) {
      lo = _mm256_mul_pd(lo, low_half(w));
      hi = _mm256_mul_pd(hi, high_half(w));
    }
    return to_float(lo, hi);
  };
  const __m256 none = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8)
    _mm256_storeu_ps(y + i,
                     scale(_mm256_loadu_ps(x + i), kWeight ? _mm256_loadu_ps(weight + i) : none));
  if (full < n)
    _mm256_maskstore_ps(y + full, mask,
                        scale(_mm256_maskload_ps(x + full, mask),
                              kWeight ? _mm256_maskload_ps(weight + full, mask) : none));
}

}  // namespace

KILN_TARGET_AVX2 void softmax_rows(const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) softmax_row(x + r * n, y + r * n, n);
}

KILN_TARGET_AVX2 void softmax_columns(const float* x, float* y, int64_t n, int64_t stride,
                                      int64_t count) {
  const __m256i mask = tail_mask(count);
  const __m256 neg_inf = splat(-INFINITY);
  auto load = [&](int64_t k) KILN_TARGET_AVX2 {
    return RowLoader{x + k * stride}.tail(0, mask, neg_inf);
  };
  __m256 max = neg_inf;
  for (int64_t k = 0; k < n; ++k) max = _mm256_max_ps(max, load(k));
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  for (int64_t k = 0; k < n; ++k) {
    const __m256 e = exp_minus(load(k), max);
    _mm256_maskstore_ps(y + k * stride, mask, e);
    sum_lo = _mm256_add_pd(sum_lo, low_half(e));
    sum_hi = _mm256_add_pd(sum_hi, high_half(e));
  }
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256 inv = to_float(_mm256_div_pd(one, sum_lo), _mm256_div_pd(one, sum_hi));
  for (int64_t k = 0; k < n; ++k)
    _mm256_maskstore_ps(y + k * stride, mask,
                        _mm256_mul_ps(_mm256_maskload_ps(y + k * stride, mask), inv));
}

KILN_TARGET_AVX2 void layer_norm(const float* x, const float* weight, const float* bias,
                                 float* y, int64_t rows, int64_t n, double eps) {
  auto each_row = [&](auto row_fn) {
    for (int64_t r = 0; r < rows; ++r) row_fn(x + r * n, weight, bias, y + r * n, n, eps);
  };
  if (weight && bias) each_row(layer_norm_row<true, true>);
  else if (weight) each_row(layer_norm_row<true, false>);
  else if (bias) each_row(layer_norm_row<false, true>);
  else each_row(layer_norm_row<false, false>);
}

// bf16 through bf16_rows_through_f32: widening in each of the row's three passes instead cost
// 1.6x the f32 kernel's time ([197, 768], 2 threads: 71 against 44 us).
KILN_TARGET_AVX2 void layer_norm(const BFloat16* x, const BFloat16* weight, const BFloat16* bias,
                                 BFloat16* y, int64_t rows, int64_t n, double eps) {
  bf16_rows_through_f32<2>(
      x, {weight, bias}, y, rows, n,
      [&](const float* row, std::array<const float*, 2> params, float* out) {
        layer_norm(row, params[0], params[1], out, 1, n, eps);
      },
      avx2::widen_bf16_row, avx2::narrow_to_bf16_row);
}

KILN_TARGET_AVX2 void rms_norm(const float* x, const float* weight, float* y, int64_t rows,
                               int64_t n, double eps) {
  for (int64_t r = 0; r < rows; ++r)
    (weight ? rms_norm_row<true> : rms_norm_row<false>)(x + r * n, weight, y + r * n, n, eps);
}

KILN_TARGET_AVX2 void rms_norm(const BFloat16* x, const BFloat16* weight, BFloat16* y,
                               int64_t rows, int64_t n, double eps) {
  bf16_rows_through_f32<1>(
      x, {weight}, y, rows, n,
      [&](const float* row, std::array<const float*, 1> params, float* out) {
        rms_norm(row, params[0], out, 1, n, eps);
      },
      avx2::widen_bf16_row, avx2::narrow_to_bf16_row);
}

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
