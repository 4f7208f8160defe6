#include "kernels/cpu/channel_stats_avx2.h"

#ifdef KILN_X86
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

namespace {

KILN_TARGET_AVX2 inline __m256d low_half(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
KILN_TARGET_AVX2 inline __m256d high_half(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

KILN_TARGET_AVX2 inline double horizontal_sum(__m256d v) {
  __m128d half = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(half, _mm_unpackhi_pd(half, half)));
}

// Terms of the sums, on four widened lanes.
struct Identity {
  KILN_TARGET_AVX2 __m256d operator()(__m256d v) const { return v; }
};
struct SquaredDeviation {
  __m256d mean;
  KILN_TARGET_AVX2 __m256d operator()(__m256d v) const {
    const __m256d d = _mm256_sub_pd(v, mean);
    return _mm256_mul_pd(d, d);
  }
};

// The sum of term(x[i]) over i < n, with four accumulators to hide the additions' latency.
template <typename Term>
KILN_TARGET_AVX2 double accumulate(const float* x, int64_t n, Term term) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  __m256d b0 = _mm256_setzero_pd(), b1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 u = _mm256_loadu_ps(x + i), v = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_add_pd(a0, term(low_half(u)));
    a1 = _mm256_add_pd(a1, term(high_half(u)));
    b0 = _mm256_add_pd(b0, term(low_half(v)));
    b1 = _mm256_add_pd(b1, term(high_half(v)));
  }
  for (; i < n; i += 8) {
    const __m256i mask = tail_mask(n - i < 8 ? n - i : 8);
    const __m256 u = _mm256_maskload_ps(x + i, mask);
    // Lanes past the end must add exactly 0, whatever term(0) is.
    const __m256d keep_low =
        _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(mask)));
    const __m256d keep_high =
        _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(mask, 1)));
    a0 = _mm256_add_pd(a0, _mm256_and_pd(keep_low, term(low_half(u))));
    a1 = _mm256_add_pd(a1, _mm256_and_pd(keep_high, term(high_half(u))));
  }
  return horizontal_sum(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(b0, b1)));
}

KILN_TARGET_AVX2 inline __m256 affine8(__m256 x, __m256d mean_lo, __m256d mean_hi,
                                       __m256d scale_lo, __m256d scale_hi, __m256d shift_lo,
                                       __m256d shift_hi) {
  const __m128 lo = _mm256_cvtpd_ps(
      _mm256_fmadd_pd(_mm256_sub_pd(low_half(x), mean_lo), scale_lo, shift_lo));
  const __m128 hi = _mm256_cvtpd_ps(
      _mm256_fmadd_pd(_mm256_sub_pd(high_half(x), mean_hi), scale_hi, shift_hi));
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

}  // namespace

KILN_TARGET_AVX2 double sum(const float* x, int64_t n) {
  return accumulate(x, n, Identity{});
}

KILN_TARGET_AVX2 double squared_deviations(const float* x, int64_t n, double mean) {
  return accumulate(x, n, SquaredDeviation{_mm256_set1_pd(mean)});
}

KILN_TARGET_AVX2 void affine(const float* x, float* y, int64_t n, double mean, double scale,
                             double shift) {
  const __m256d m = _mm256_set1_pd(mean), s = _mm256_set1_pd(scale), b = _mm256_set1_pd(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, affine8(_mm256_loadu_ps(x + i), m, m, s, s, b, b));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, mask, affine8(_mm256_maskload_ps(x + i, mask), m, m, s, s, b, b));
  }
}

KILN_TARGET_AVX2 void affine_elementwise(const float* x, float* y, int64_t n, const double* mean,
                                         const double* scale, const double* shift) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, affine8(_mm256_loadu_ps(x + i), _mm256_loadu_pd(mean + i),
                                    _mm256_loadu_pd(mean + i + 4), _mm256_loadu_pd(scale + i),
                                    _mm256_loadu_pd(scale + i + 4), _mm256_loadu_pd(shift + i),
                                    _mm256_loadu_pd(shift + i + 4)));
  // The tail one element at a time: the parameter arrays end with x.
  for (; i < n; ++i) {
    const __m256 v = _mm256_set1_ps(x[i]);
    _mm_store_ss(y + i, _mm256_castps256_ps128(affine8(
                            v, _mm256_set1_pd(mean[i]), _mm256_set1_pd(mean[i]),
                            _mm256_set1_pd(scale[i]), _mm256_set1_pd(scale[i]),
                            _mm256_set1_pd(shift[i]), _mm256_set1_pd(shift[i]))));
  }
}

}  // namespace kiln::cpu::avx2
#endif
