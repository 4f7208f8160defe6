// Layer norm 16 floats a block (AVX-512): layer_norm_rows.h on 8-lane vectors of doubles.
#include "kernels/cpu/normalization_avx2.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <array>

#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/bf16_rows.h"
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

}  // namespace

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
