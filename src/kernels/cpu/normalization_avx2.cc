#include "kernels/cpu/normalization_avx2.h"

#ifdef KILN_X86
#include <array>
#include <cmath>
#include <vector>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/vec_math_avx2.h"
#pragma GCC diagnostic ignored "-Wpsabi"  // see layer_norm_rows.h
#include "kernels/cpu/layer_norm_rows.h"

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

// layer_norm_rows.h's lanes: 8 floats a block, as two vectors of 4 doubles.
struct DoubleLanes {
  using Doubles = __m256d;
  using Lanes = __m256i;  // all ones in the lanes that lie in the row
  static constexpr int64_t kFloats = 8;

  KILN_TARGET_AVX2 static Doubles splat(double v) { return _mm256_set1_pd(v); }
  KILN_TARGET_AVX2 static Doubles zero() { return _mm256_setzero_pd(); }
  KILN_TARGET_AVX2 static Doubles add(Doubles a, Doubles b) { return _mm256_add_pd(a, b); }
  KILN_TARGET_AVX2 static Doubles sub(Doubles a, Doubles b) { return _mm256_sub_pd(a, b); }
  KILN_TARGET_AVX2 static Doubles mul(Doubles a, Doubles b) { return _mm256_mul_pd(a, b); }
  KILN_TARGET_AVX2 static Doubles fma(Doubles a, Doubles b, Doubles c) {
    return _mm256_fmadd_pd(a, b, c);
  }
  KILN_TARGET_AVX2 static Doubles sub_within(Doubles a, Doubles b, Lanes lanes) {
    return _mm256_and_pd(_mm256_sub_pd(a, b), _mm256_castsi256_pd(lanes));
  }
  KILN_TARGET_AVX2 static Doubles load(const double* p) { return _mm256_loadu_pd(p); }
  KILN_TARGET_AVX2 static Doubles load_within(const double* p, Lanes lanes) {
    return _mm256_maskload_pd(p, lanes);
  }
  KILN_TARGET_AVX2 static double sum(Doubles v) { return sum_lanes(v); }
  KILN_TARGET_AVX2 static void widen_bits(__m256 v, Doubles& lo, Doubles& hi) {
    lo = low_half(v);
    hi = high_half(v);
  }
  KILN_TARGET_AVX2 static void widen(const float* x, Doubles& lo, Doubles& hi) {
    widen_bits(_mm256_loadu_ps(x), lo, hi);
  }
  KILN_TARGET_AVX2 static void widen_tail(const float* x, int64_t count, Doubles& lo,
                                          Doubles& hi, Lanes& lo_lanes, Lanes& hi_lanes) {
    widen_bits(_mm256_maskload_ps(x, tail_mask(count)), lo, hi);
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    lo_lanes = _mm256_cmpgt_epi64(_mm256_set1_epi64x(count), lane);
    hi_lanes = _mm256_cmpgt_epi64(_mm256_set1_epi64x(count - 4), lane);
  }
  KILN_TARGET_AVX2 static void narrow_store(float* y, Doubles lo, Doubles hi) {
    _mm256_storeu_ps(y, to_float(lo, hi));
  }
  KILN_TARGET_AVX2 static void narrow_store_tail(float* y, int64_t count, Doubles lo,
                                                 Doubles hi) {
    _mm256_maskstore_ps(y, tail_mask(count), to_float(lo, hi));
  }
};

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

// 8 lanes of x's type at p as f32 (`count` < 8: the first count of them, the rest unspecified),
// and the f32 lanes stored back as that type.
KILN_TARGET_AVX2 inline __m256 load_lanes(const float* p, int64_t count) {
  return count == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(count));
}
KILN_TARGET_AVX2 inline __m256 load_lanes(const BFloat16* p, int64_t count) {
  return count == 8 ? load_bf16(p) : load_bf16_tail(p, count);
}
KILN_TARGET_AVX2 inline void store_lanes(float* p, int64_t count, __m256 v) {
  if (count == 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, tail_mask(count), v);
}
KILN_TARGET_AVX2 inline void store_lanes(BFloat16* p, int64_t count, __m256 v) {
  if (count == 8) store_bf16(p, v);
  else store_bf16_tail(p, count, v);
}

// Softmax down V vectors of 8 adjacent columns (count of them, the last vector partial when
// kMasked): every lane is one column, so a step down the block reads whole cache lines. Per
// column: the maximum, the sum of exp(x - max) in f64 with each exp kept in f32 at
// exps[k * exps_stride] (y itself for f32), then each exp times 1/sum, rounded to T.
template <int V, bool kMasked, typename T>
KILN_TARGET_AVX2 void softmax_column_block(const T* x, T* y, int64_t n, int64_t stride,
                                           int64_t count, float* exps, int64_t exps_stride) {
  auto lanes = [&](int j) { return kMasked && j == V - 1 ? count - 8 * j : int64_t{8}; };
  __m256 max[V];
  for (int j = 0; j < V; ++j) max[j] = splat(-INFINITY);
  for (int64_t k = 0; k < n; ++k)
    for (int j = 0; j < V; ++j)
      max[j] = _mm256_max_ps(max[j], load_lanes(x + k * stride + 8 * j, lanes(j)));
  __m256d sum_lo[V], sum_hi[V];
  for (int j = 0; j < V; ++j) sum_lo[j] = sum_hi[j] = _mm256_setzero_pd();
  for (int64_t k = 0; k < n; ++k) {
    for (int j = 0; j < V; ++j) {
      const __m256 e = exp_minus(load_lanes(x + k * stride + 8 * j, lanes(j)), max[j]);
      store_lanes(exps + k * exps_stride + 8 * j, lanes(j), e);
      sum_lo[j] = _mm256_add_pd(sum_lo[j], low_half(e));
      sum_hi[j] = _mm256_add_pd(sum_hi[j], high_half(e));
    }
  }
  const __m256d one = _mm256_set1_pd(1.0);
  __m256 inv[V];
  for (int j = 0; j < V; ++j)
    inv[j] = to_float(_mm256_div_pd(one, sum_lo[j]), _mm256_div_pd(one, sum_hi[j]));
  for (int64_t k = 0; k < n; ++k)
    for (int j = 0; j < V; ++j)
      store_lanes(y + k * stride + 8 * j, lanes(j),
                  _mm256_mul_ps(load_lanes(exps + k * exps_stride + 8 * j, lanes(j)), inv[j]));
}

// Blocks of 1 to kSoftmaxColumns columns, each through its instance of softmax_column_block.
template <typename T>
KILN_TARGET_AVX2 void softmax_column_blocks(const T* x, T* y, int64_t n, int64_t stride,
                                            int64_t count, float* exps, int64_t exps_stride) {
  auto run = [&]<int V, bool kMasked>() KILN_TARGET_AVX2 {
    softmax_column_block<V, kMasked>(x, y, n, stride, count, exps, exps_stride);
  };
  const bool masked = count % 8 != 0;
  switch ((count + 7) / 8) {
    case 1: return masked ? run.template operator()<1, true>() : run.template operator()<1, false>();
    case 2: return masked ? run.template operator()<2, true>() : run.template operator()<2, false>();
    case 3: return masked ? run.template operator()<3, true>() : run.template operator()<3, false>();
    default:
      return masked ? run.template operator()<4, true>() : run.template operator()<4, false>();
  }
}

}  // namespace

KILN_TARGET_AVX2 void softmax_rows(const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) softmax_row(x + r * n, y + r * n, n);
}

KILN_TARGET_AVX2 void softmax_columns(const float* x, float* y, int64_t n, int64_t stride,
                                      int64_t count) {
  softmax_column_blocks(x, y, n, stride, count, y, stride);
}

KILN_TARGET_AVX2 void softmax_rows(const BFloat16* x, BFloat16* y, int64_t rows, int64_t n) {
  bf16_rows_through_f32<0>(
      x, {}, y, rows, n,
      [&](const float* row, std::array<const float*, 0>, float* out) KILN_TARGET_AVX2 {
        softmax_row(row, out, n);
      },
      avx2::widen_bf16_row, avx2::narrow_to_bf16_row);
}

// The exps in a dense f32 [n, width] buffer: rounding them to bf16 in y would change the result.
KILN_TARGET_AVX2 void softmax_columns(const BFloat16* x, BFloat16* y, int64_t n, int64_t stride,
                                      int64_t count) {
  const int64_t width = (count + 7) / 8 * 8;
  thread_local std::vector<float> exps;
  exps.resize(static_cast<size_t>(n * width));
  softmax_column_blocks(x, y, n, stride, count, exps.data(), width);
}

KILN_TARGET_AVX2 void layer_norm(const float* x, const float* weight, const float* bias,
                                 float* y, int64_t rows, int64_t n, double eps) {
  if (rows == 0 || n == 0) return;
  layer_norm_rows::normalize_rows<DoubleLanes>(
      x, layer_norm_rows::widen_params(weight, bias, n), y, rows, n, eps);
}

// bf16 through bf16_rows_through_f32: widening in each of the row's passes instead cost 1.6x
// the f32 kernel's time ([197, 768], 2 threads: 71 against 44 us).
KILN_TARGET_AVX2 void layer_norm(const BFloat16* x, const BFloat16* weight, const BFloat16* bias,
                                 BFloat16* y, int64_t rows, int64_t n, double eps) {
  if (rows == 0 || n == 0) return;
  const layer_norm_rows::DoubleParams p = layer_norm_rows::widen_params(weight, bias, n);
  bf16_rows_through_f32<0>(
      x, {}, y, rows, n,
      [&](const float* row, std::array<const float*, 0>, float* out) KILN_TARGET_AVX2 {
        layer_norm_rows::normalize_rows<DoubleLanes>(row, p, out, 1, n, eps);
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
