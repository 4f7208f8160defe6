// 16-lane versions of vec_math_avx2.h's functions, for AVX-512 kernels (included only by
// *_avx512.cc files, whose functions all carry KILN_TARGET_AVX512). Each gives the AVX2
// function's bits on each half of the vector: a vector that the AVX2 function would take down
// its fast path in both halves takes the same arithmetic here on 16 lanes, and any other vector
// is handed to the AVX2 function half by half. So accuracy is vec_math_avx2.h's (docs/ops.md),
// but for gelu's own 16-lane fast paths (gelu_pieces32_result), which 8 lanes could not afford.
#pragma once

#include "kernels/cpu/vec_math_avx2.h"

#ifdef KILN_X86
#include <immintrin.h>

namespace kiln::cpu::avx512 {

#define KILN_VEC16 KILN_TARGET_AVX512 inline

// Every lane. Where an intrinsic has a zero-masked form this code takes it: GCC 12 warns of the
// unmasked forms' undefined passthrough operand as maybe uninitialized.
constexpr __mmask16 kAllLanes = 0xFFFF;

KILN_VEC16 __m512 splat(float v) { return _mm512_set1_ps(v); }
KILN_VEC16 __m512 sign_bits(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_maskz_and_epi32(kAllLanes, _mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}
KILN_VEC16 __m512 abs(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_maskz_and_epi32(kAllLanes, _mm512_castps_si512(x), _mm512_set1_epi32(INT32_MAX)));
}
KILN_VEC16 __m512 or_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(
      _mm512_maskz_or_epi32(kAllLanes, _mm512_castps_si512(a), _mm512_castps_si512(b)));
}
KILN_VEC16 __m512 xor_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(
      _mm512_maskz_xor_epi32(kAllLanes, _mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// The lanes of the 16 elements from j on that lie below n: a row's tail.
inline __mmask16 lanes_from(int64_t j, int64_t n) {
  return n - j >= 16 ? kAllLanes
         : n > j     ? static_cast<__mmask16>((1u << (n - j)) - 1)
                     : __mmask16(0);
}

// The lanes of x within [-bound, bound] (not NaNs).
KILN_VEC16 __mmask16 lanes_within(__m512 x, float bound) {
  return _mm512_cmp_ps_mask(abs(x), splat(bound), _CMP_LE_OQ);
}
// All lanes within (avx2::all_within true on both halves).
KILN_VEC16 bool all_within(__m512 x, float bound) { return lanes_within(x, bound) == kAllLanes; }
// Neither half all within (avx2::all_within false on both halves).
KILN_VEC16 bool neither_half_within(__m512 x, float bound) {
  const __mmask16 within = lanes_within(x, bound);
  return (within & 0xFF) != 0xFF && (within >> 8) != 0xFF;
}

// x's lanes 0-7 and 8-15.
KILN_VEC16 __m256 low_half(__m512 x) {
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(x), 0));
}
KILN_VEC16 __m256 high_half(__m512 x) {
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(x), 1));
}

// Lanes 0-7 from `low`, 8-15 from `high`.
KILN_VEC16 __m512 from_halves(__m256 low, __m256 high) {
  const __m512d low_only =
      _mm512_maskz_insertf64x4(0x0F, _mm512_setzero_pd(), _mm256_castps_pd(low), 0);
  return _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xFF, low_only, _mm256_castps_pd(high), 1));
}

// The AVX2 function F on each half of x.
template <__m256 (*F)(__m256)>
KILN_VEC16 __m512 by_halves(__m512 x) {
  return from_halves(F(low_half(x)), F(high_half(x)));
}

// The largest and the sum of x's lanes, halving x four times.
KILN_VEC16 float max_lanes(__m512 x) {
  return avx2::max_lanes(_mm256_max_ps(low_half(x), high_half(x)));
}
KILN_VEC16 float sum_lanes(__m512 x) {
  return avx2::sum_lanes(_mm256_add_ps(low_half(x), high_half(x)));
}

template <int N>
KILN_VEC16 __m512 polynomial(__m512 x, const float (&c)[N]) {
  __m512 p = splat(c[N - 1]);
  for (int i = N - 2; i >= 0; --i) p = _mm512_fmadd_ps(p, x, splat(c[i]));
  return p;
}

KILN_VEC16 __m512 round_nearest(__m512 x) {
  return _mm512_maskz_roundscale_ps(kAllLanes, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// avx2::exp_reduce, exp_polynomial and pow2.
struct ExpReduced {
  __m512 r, n;
};
KILN_VEC16 ExpReduced exp_reduce(__m512 x) {
  const __m512 n = round_nearest(_mm512_mul_ps(x, splat(1.44269504088896341f)));
  __m512 r = _mm512_fnmadd_ps(n, splat(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, splat(-2.12194440e-4f), r);
  return {r, n};
}
KILN_VEC16 __m512 exp_polynomial_minus_one(__m512 r) {
  return _mm512_fmadd_ps(polynomial(r, avx2::kExpP), _mm512_mul_ps(r, r), r);
}
KILN_VEC16 __m512 exp_polynomial(__m512 r) {
  return _mm512_add_ps(exp_polynomial_minus_one(r), splat(1.0f));
}
KILN_VEC16 __m512 pow2(__m512 n) {
  const __m512i e = _mm512_maskz_cvtps_epi32(kAllLanes, n);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
      kAllLanes, _mm512_maskz_add_epi32(kAllLanes, e, _mm512_set1_epi32(127)), 23));
}

// avx2::exp_hilo(hi, lo) and avx2::exp_minus(x, shift), the same bits: exp_hilo's fast path on 16
// lanes where all of hi is within [-87, 87], else avx2's on each half.
KILN_VEC16 __m512 exp_hilo(__m512 hi, __m512 lo) {
  if (all_within(hi, 87.0f)) [[likely]] {
    const ExpReduced e = exp_reduce(hi);
    return _mm512_mul_ps(exp_polynomial(_mm512_add_ps(e.r, lo)), pow2(e.n));
  }
  return from_halves(avx2::exp_hilo(low_half(hi), low_half(lo)),
                     avx2::exp_hilo(high_half(hi), high_half(lo)));
}
KILN_VEC16 __m512 exp_minus(__m512 x, __m512 shift) {
  const __m512 neg_shift = xor_bits(shift, splat(-0.0f));
  const __m512 d = _mm512_add_ps(x, neg_shift);
  const __m512 b = _mm512_sub_ps(d, x);
  const __m512 err =
      _mm512_add_ps(_mm512_sub_ps(x, _mm512_sub_ps(d, b)), _mm512_sub_ps(neg_shift, b));
  return exp_hilo(d, err);
}

// exp for vectors all within [-87, 87] (avx2::exp's fast path).
KILN_VEC16 __m512 exp_in_range(__m512 x) {
  const ExpReduced e = exp_reduce(x);
  return _mm512_mul_ps(exp_polynomial(e.r), pow2(e.n));
}

KILN_VEC16 __m512 exp(__m512 x) {
  if (!all_within(x, 87.0f)) [[unlikely]]
    return by_halves<avx2::exp>(x);
  return exp_in_range(x);
}

// avx2::sigmoid_in_range(hi, lo), for vectors all within [-87, 87]: e = exp(-|hi + lo|), then
// e / (1 + e) or 1 / (1 + e).
KILN_VEC16 __m512 sigmoid_in_range(__m512 hi, __m512 lo) {
  const __m512 neg_lo = _mm512_sub_ps(_mm512_setzero_ps(), lo);
  const ExpReduced e = exp_reduce(or_bits(hi, splat(-0.0f)));
  const __m512 m = exp_polynomial(_mm512_add_ps(e.r, xor_bits(neg_lo, sign_bits(hi))));
  const __m512 ex = _mm512_mul_ps(m, pow2(e.n));
  const __mmask16 non_negative = _mm512_cmp_ps_mask(hi, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_div_ps(_mm512_mask_blend_ps(non_negative, ex, splat(1.0f)),
                       _mm512_add_ps(splat(1.0f), ex));
}

// avx2::one_plus_exp_minus.
KILN_VEC16 __m512 one_plus_exp_minus(__m512 x) {
  return _mm512_add_ps(splat(1.0f), exp_in_range(xor_bits(x, splat(-0.0f))));
}

KILN_VEC16 __m512 sigmoid(__m512 x) {
  if (!all_within(x, 87.0f)) [[unlikely]]
    return by_halves<avx2::sigmoid>(x);
  return _mm512_div_ps(splat(1.0f), one_plus_exp_minus(x));
}

KILN_VEC16 __m512 silu(__m512 x) {
  if (!all_within(x, 87.0f)) [[unlikely]]
    return by_halves<avx2::silu>(x);
  return _mm512_div_ps(x, one_plus_exp_minus(x));
}

// avx2::tanh.
KILN_VEC16 __m512 tanh(__m512 x) {
  const __m512 two_ax =
      _mm512_maskz_min_ps(kAllLanes, splat(18.25f), _mm512_add_ps(abs(x), abs(x)));
  const ExpReduced e = exp_reduce(two_ax);
  const __m512 scale = pow2(e.n);
  const __m512 expm1 = _mm512_fmadd_ps(scale, exp_polynomial_minus_one(e.r),
                                       _mm512_sub_ps(scale, splat(1.0f)));
  const __m512 magnitude = _mm512_div_ps(expm1, _mm512_add_ps(expm1, splat(2.0f)));
  return or_bits(magnitude, sign_bits(x));
}

// avx2::expm1: exp's reduction of x clamped to [-18, 80], exp itself above 80.
KILN_VEC16 __m512 expm1(__m512 x) {
  const __m512 clamped = _mm512_maskz_min_ps(
      kAllLanes, splat(80.0f), _mm512_maskz_max_ps(kAllLanes, splat(-18.0f), x));
  const ExpReduced e = exp_reduce(clamped);
  const __m512 scale = pow2(e.n);
  __m512 result = _mm512_fmadd_ps(scale, exp_polynomial_minus_one(e.r),
                                  _mm512_sub_ps(scale, splat(1.0f)));
  const __mmask16 large = _mm512_cmp_ps_mask(x, splat(80.0f), _CMP_GT_OQ);
  if (large) [[unlikely]]
    result = _mm512_mask_mov_ps(result, large, exp(x));
  return or_bits(result, sign_bits(x));
}

// avx2::log_parts_of, avx2::log_parts and avx2::log_of_parts: log(2^e m) for m in
// [sqrt(1/2), sqrt(2)).
struct LogParts {
  __m512 e, f, f2, cubic;  // cubic = f^3 P(f)
};
KILN_VEC16 LogParts log_parts_of(__m512 e, __m512 m) {
  const __m512 f = _mm512_sub_ps(m, splat(1.0f));
  const __m512 f2 = _mm512_mul_ps(f, f);
  return {e, f, f2, _mm512_mul_ps(_mm512_mul_ps(f, f2), polynomial(f, avx2::kLogPolynomial))};
}
// x = 2^e m with m in [sqrt(1/2), sqrt(2)), subnormals scaled by 2^23 first.
KILN_VEC16 LogParts log_parts(__m512 x) {
  const __mmask16 subnormal = _mm512_cmp_ps_mask(x, splat(1.17549435e-38f), _CMP_LT_OQ);
  const __m512i bits = _mm512_castps_si512(_mm512_mask_mul_ps(x, subnormal, x, splat(8388608.0f)));
  __m512i exponent =
      _mm512_sub_epi32(_mm512_maskz_srli_epi32(kAllLanes, bits, 23), _mm512_set1_epi32(127));
  exponent = _mm512_mask_sub_epi32(exponent, subnormal, exponent, _mm512_set1_epi32(23));
  __m512 m = _mm512_castsi512_ps(_mm512_maskz_or_epi32(
      kAllLanes, _mm512_maskz_and_epi32(kAllLanes, bits, _mm512_set1_epi32(0x007FFFFF)),
      _mm512_set1_epi32(0x3F800000)));
  const __mmask16 high = _mm512_cmp_ps_mask(m, splat(1.41421356f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, high, m, splat(0.5f));
  exponent = _mm512_mask_add_epi32(exponent, high, exponent, _mm512_set1_epi32(1));
  return log_parts_of(_mm512_maskz_cvtepi32_ps(kAllLanes, exponent), m);
}
KILN_VEC16 __m512 log_of_parts(const LogParts& p) {
  __m512 y = _mm512_fmadd_ps(p.e, splat(-2.12194440e-4f), p.cubic);
  y = _mm512_fnmadd_ps(p.f2, splat(0.5f), y);
  const __m512 t = _mm512_mul_ps(p.e, splat(0.693359375f));
  const __m512 sum = _mm512_add_ps(t, p.f);
  const __m512 sum_error = _mm512_add_ps(_mm512_sub_ps(t, sum), p.f);
  return _mm512_add_ps(sum, _mm512_add_ps(sum_error, y));
}
// avx2::with_log_specials: 0 gives -inf, negative inputs NaN, +inf and NaN themselves.
KILN_VEC16 __m512 with_log_specials(__m512 result, __m512 x) {
  const __m512 zero = _mm512_setzero_ps();
  result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, zero, _CMP_EQ_OQ),
                              splat(-__builtin_inff()));
  result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ),
                              splat(__builtin_nanf("")));
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, splat(3.40282347e+38f), _CMP_NLE_UQ),
                            x);
}

// avx2::log, avx2::log2 and avx2::log1p.
KILN_VEC16 __m512 log(__m512 x) { return with_log_specials(log_of_parts(log_parts(x)), x); }
KILN_VEC16 __m512 log2(__m512 x) {
  const LogParts p = log_parts(x);
  const __m512 y = _mm512_fnmadd_ps(p.f2, splat(0.5f), p.cubic);
  const __m512 log2_e_hi = splat(1.44269502162933349609f), log2_e_lo = splat(1.92596303e-8f);
  const __m512 log2_m = _mm512_fmadd_ps(
      p.f, log2_e_hi, _mm512_fmadd_ps(y, log2_e_hi, _mm512_mul_ps(p.f, log2_e_lo)));
  return with_log_specials(_mm512_add_ps(p.e, log2_m), x);
}
KILN_VEC16 __m512 log1p(__m512 x) {
  const __m512 u = _mm512_add_ps(splat(1.0f), x);
  const __m512 d = _mm512_sub_ps(u, splat(1.0f));
  __m512 result = _mm512_mul_ps(log(u), _mm512_div_ps(x, d));
  result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_EQ_OQ), x);
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(u, splat(__builtin_inff()), _CMP_EQ_OQ), u);
}

// avx2::log1p_exp(hi, lo).
KILN_VEC16 __m512 log1p_exp(__m512 hi, __m512 lo) {
  const __m512 e = exp(or_bits(abs(hi), splat(-0.0f)));
  const __m512 v = _mm512_fnmadd_ps(e, xor_bits(lo, sign_bits(hi)), e);
  const __m512 u = _mm512_add_ps(splat(1.0f), v);
  const __m512 c = _mm512_sub_ps(v, _mm512_sub_ps(u, splat(1.0f)));
  const __mmask16 high = _mm512_cmp_ps_mask(u, splat(1.41421356f), _CMP_GT_OQ);
  const __m512 log_u = log_of_parts(log_parts_of(_mm512_maskz_mov_ps(high, splat(1.0f)),
                                                 _mm512_mask_mul_ps(u, high, u, splat(0.5f))));
  const __m512 positive_lo =
      _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(hi, _mm512_setzero_ps(), _CMP_GT_OQ), lo);
  const __m512 log1p_v = _mm512_add_ps(log_u, _mm512_div_ps(c, u));
  const __m512 small = _mm512_add_ps(positive_lo, log1p_v);
  return _mm512_add_ps(_mm512_maskz_max_ps(kAllLanes, _mm512_setzero_ps(), hi), small);
}

// avx2::mish: vectors all within [-17, 17] here (the AVX2 function's x e^x branch lies below).
KILN_VEC16 __m512 mish(__m512 x) {
  if (!all_within(x, 17.0f)) [[unlikely]]
    return by_halves<avx2::mish>(x);
  return _mm512_mul_ps(x, tanh(log1p_exp(x, _mm512_setzero_ps())));
}

// avx2::sin_cos: the reduction x - j pi/2 in double, 8 lanes at a time, for vectors all within
// 2^20; any other vector (a lane beyond, inf, NaN) goes to avx2::sin_cos half by half.
KILN_VEC16 __m256 reduced_eight(__m256 x, __m256 j) {
  const __m512d jd = _mm512_maskz_cvtps_pd(0xFF, j);
  __m512d r = _mm512_fnmadd_pd(jd, _mm512_set1_pd(1.57079632673412561417e+00),
                               _mm512_maskz_cvtps_pd(0xFF, x));
  r = _mm512_fnmadd_pd(jd, _mm512_set1_pd(6.07710050650619224932e-11), r);
  return _mm512_maskz_cvtpd_ps(0xFF, r);
}
template <bool kCos>
KILN_VEC16 __m512 sin_cos(__m512 x) {
  if (!all_within(x, 1048576.0f)) [[unlikely]]
    return by_halves<avx2::sin_cos<kCos>>(x);
  const __m512 j = round_nearest(_mm512_mul_ps(x, splat(0.636619772367581343f)));
  const __m512 r = from_halves(reduced_eight(low_half(x), low_half(j)),
                               reduced_eight(high_half(x), high_half(j)));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 sin_r =
      _mm512_fmadd_ps(_mm512_mul_ps(r2, r), polynomial(r2, avx2::kSinPolynomial), r);
  const __m512 cos_r = _mm512_fmadd_ps(_mm512_mul_ps(r2, r2), polynomial(r2, avx2::kCosPolynomial),
                                       _mm512_fnmadd_ps(r2, splat(0.5f), splat(1.0f)));
  __m512i quadrant = _mm512_maskz_cvtps_epi32(kAllLanes, j);
  if constexpr (kCos) quadrant = _mm512_add_epi32(quadrant, _mm512_set1_epi32(1));
  // Bit 0 of the quadrant picks cos r, bit 1 negates.
  __m512 y =
      _mm512_mask_blend_ps(_mm512_test_epi32_mask(quadrant, _mm512_set1_epi32(1)), sin_r, cos_r);
  const __m512i y_bits = _mm512_castps_si512(y);
  y = _mm512_castsi512_ps(_mm512_mask_xor_epi32(
      y_bits, _mm512_test_epi32_mask(quadrant, _mm512_set1_epi32(2)), y_bits,
      _mm512_set1_epi32(INT32_MIN)));
  if constexpr (!kCos)  // sin(-0) = -0, where r came out +0
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), x);
  return y;
}
KILN_VEC16 __m512 sin(__m512 x) { return sin_cos<false>(x); }
KILN_VEC16 __m512 cos(__m512 x) { return sin_cos<true>(x); }

// A coefficient per lane from an 8-entry row, by the low 3 bits of `piece` (as
// _mm256_permutevar8x32_ps picks). The row is broadcast to both halves, so the permute's fourth
// index bit picks the same entry: one load and one permute (port 5), no masking of the index.
KILN_VEC16 __m512 pick8(const float (&row)[8], __m512i piece) {
  const __m512 table = _mm512_castpd_ps(
      _mm512_maskz_broadcast_f64x4(0xFF, _mm256_castps_pd(_mm256_load_ps(row))));
  return _mm512_maskz_permutexvar_ps(kAllLanes, piece, table);
}

// avx2::piecewise_degree7.
KILN_VEC16 __m512 piecewise_degree7(const float (&C)[8][8], __m512i piece, __m512 v) {
  __m512 p = pick8(C[7], piece);
  for (int i = 6; i >= 0; --i) p = _mm512_fmadd_ps(p, v, pick8(C[i], piece));
  return p;
}

// avx2::gelu_erf_tail_factor.
KILN_VEC16 __m512 gelu_erf_tail_factor(__m512 z) {
  const __m512i piece = _mm512_maskz_srli_epi32(
      kAllLanes, _mm512_castps_si512(_mm512_add_ps(z, splat(1.0f))), 22);
  const __m512 v = _mm512_fmadd_ps(z, pick8(avx2::kGeluErfTailScale, piece),
                                   pick8(avx2::kGeluErfTailOffset, piece));
  return piecewise_degree7(avx2::kGeluErfTail, piece, v);
}

// x sign-blended as avx2's blendv(a, b, x) does: b where x's sign bit is set (-0 included).
KILN_VEC16 __m512 by_sign(__m512 x, __m512 non_negative, __m512 negative) {
  const __mmask16 sign =
      _mm512_test_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_mask_blend_ps(sign, non_negative, negative);
}

// A coefficient per lane from a 32-entry row, by the low 5 bits of `piece`: one two-table
// permute (vpermt2ps), where 8 lanes would need four permutes and three blends.
KILN_VEC16 __m512 pick32(const float (&row)[32], __m512i piece) {
  return _mm512_permutex2var_ps(_mm512_load_ps(row), piece, _mm512_load_ps(row + 16));
}

// p(z) for z in [0, 7] from 32 pieces, each a degree-6 polynomial in v = z - c (c the piece's
// centre, picked with its coefficients) evaluated by Horner's scheme: its last step adds the
// constant term, so p rounds once at the top where Estrin's scheme would round three times.
// `piece` holds the lane's piece in its low 5 bits.
KILN_VEC16 __m512 pieces32_degree6(const float (&C)[7][32], const float (&centers)[32],
                                   __m512i piece, __m512 z) {
  const __m512 v = _mm512_sub_ps(z, pick32(centers, piece));
  __m512 p = pick32(C[6], piece);
#pragma GCC unroll 6
  for (int i = 5; i >= 0; --i) p = _mm512_fmadd_ps(p, v, pick32(C[i], piece));
  return p;
}

// The 16-lane fast paths of gelu (both forms) for vectors all within [-7, 7]: x p below 0 and
// x - x p above (rounded once), p = Phi(-|x|) or sigmoid(-2u(|x|)) with a relative error below
// 2.3 * 2^-24 (f32 evaluation included), from pieces32_degree6. The pieces are uniform in a
// variable that grows with p's rate of decay, so each is as wide as its accuracy allows: in
// z (z + 1) for Phi(-z) (k = round(z (z + 1) / D), D = 56 / 31.4; the + 1 narrows the first
// pieces), in 2u(z) = z (k0 + k1 z^2) for the tanh form (D = 2u(7) / 31.4); 31.4, not 31.5, so
// that k stays below 32 after the roundings. Each piece's polynomial is fitted (f32
// coefficients, weighted least squares iterated towards minimax relative error) over its
// interval widened by a thousandth, as a rounding of the variable may pick a neighbour. The
// first piece is centred on 0 with its constant term 1/2 exactly, so that tiny |x| give
// x/2 + x^2 c1 and round as the reference does. These paths give other bits than the 8-lane
// functions, whose fast paths stop at 3.74 and 3.6 (docs/ops.md): every caller picks its gelu
// through cpu::widest, so an op's bits depend only on the CPU.
KILN_VEC16 __m512 gelu_pieces32_result(__m512 x, __m512 p) {
  return by_sign(x, _mm512_fnmadd_ps(x, p, x), _mm512_mul_ps(x, p));
}
alignas(64) inline constexpr float kGeluErfCenters32[32] = {
    0.000000000e+00f, 8.894112706e-01f, 1.440120101e+00f, 1.858939171e+00f,
    2.212330341e+00f, 2.524146318e+00f, 2.806426048e+00f, 3.066293001e+00f,
    3.308386803e+00f, 3.535932541e+00f, 3.751281738e+00f, 3.956211805e+00f,
    4.152105808e+00f, 4.340065002e+00f, 4.520982742e+00f, 4.695597172e+00f,
    4.864524364e+00f, 5.028287888e+00f, 5.187333584e+00f, 5.342048168e+00f,
    5.492766857e+00f, 5.639784813e+00f, 5.783361435e+00f, 5.923728943e+00f,
    6.061091900e+00f, 6.195636749e+00f, 6.327529907e+00f, 6.456921577e+00f,
    6.583949566e+00f, 6.708739281e+00f, 6.831404209e+00f, 6.952049732e+00f};
alignas(64) inline constexpr float kGeluErfPieces32[7][32] = {
    {5.000000000e-01f, 1.868910491e-01f, 7.491671294e-02f, 3.151788190e-02f,
     1.347192377e-02f, 5.798981991e-03f, 2.504720585e-03f, 1.083654119e-03f,
     4.691755457e-04f, 2.031692275e-04f, 8.796643669e-05f, 3.807382745e-05f,
     1.647149475e-05f, 7.122028819e-06f, 3.077660267e-06f, 1.329144766e-06f,
     5.736618505e-07f, 2.474392602e-07f, 1.066632009e-07f, 4.595111136e-08f,
     1.978425068e-08f, 8.513140415e-09f, 3.661125181e-09f, 1.573610242e-09f,
     6.760027538e-10f, 2.902493246e-10f, 1.245583497e-10f, 5.342711690e-11f,
     2.290562878e-11f, 9.815652631e-12f, 4.204371660e-12f, 1.800082110e-12f},
    {-3.989425898e-01f, -2.686181068e-01f, -1.414355040e-01f, -7.088007778e-02f,
     -3.452259302e-02f, -1.649668440e-02f, -7.774143014e-03f, -3.624587087e-03f,
     -1.675489126e-03f, -7.690550992e-04f, -3.509047092e-04f, -1.592963235e-04f,
     -7.199385436e-05f, -3.241074228e-05f, -1.454037920e-05f, -6.502948054e-06f,
     -2.900181471e-06f, -1.290116529e-06f, -5.725570986e-07f, -2.535568342e-07f,
     -1.120654929e-07f, -4.943906973e-08f, -2.177347547e-08f, -9.573941639e-09f,
     -4.203467796e-09f, -1.842954345e-09f, -8.069528934e-10f, -3.528928538e-10f,
     -1.541439060e-10f, -6.725498630e-11f, -2.931328444e-11f, -1.276343961e-11f},
    {1.015681846e-05f, 1.194554195e-01f, 1.018416211e-01f, 6.588030607e-02f,
     3.818786889e-02f, 2.082018927e-02f, 1.090868935e-02f, 5.556993652e-03f,
     2.771587577e-03f, 1.359654590e-03f, 6.581677590e-04f, 3.151032433e-04f,
     1.494615717e-04f, 7.033217844e-05f, 3.286852370e-05f, 1.526766573e-05f,
     7.054043635e-06f, 3.243540050e-06f, 1.485030339e-06f, 6.772594361e-07f,
     3.077732345e-07f, 1.394128333e-07f, 6.296202315e-08f, 2.835680313e-08f,
     1.273880823e-08f, 5.709163364e-09f, 2.553009582e-09f, 1.139299988e-09f,
     5.074379250e-10f, 2.255984288e-10f, 1.001252414e-10f, 4.436619128e-11f},
    {6.637751311e-02f, 9.359105490e-03f, -2.531478740e-02f, -2.900832146e-02f,
     -2.240768075e-02f, -1.476839278e-02f, -8.908991702e-03f, -5.075676367e-03f,
     -2.777240938e-03f, -1.474353252e-03f, -7.645024452e-04f, -3.889851505e-04f,
     -1.948583085e-04f, -9.634663002e-05f, -4.710910071e-05f, -2.281304660e-05f,
     -1.095490734e-05f, -5.221388165e-06f, -2.472339020e-06f, -1.163717798e-06f,
     -5.448258662e-07f, -2.538418755e-07f, -1.177482716e-07f, -5.439675022e-08f,
     -2.503604257e-08f, -1.148345508e-08f, -5.250154089e-09f, -2.393272691e-09f,
     -1.087947177e-09f, -4.932826925e-10f, -2.231125285e-10f, -1.006844469e-10f},
    {5.858324002e-04f, -2.197483368e-02f, -7.838899270e-03f, 2.536302200e-03f,
     6.012413185e-03f, 5.831166171e-03f, 4.443306942e-03f, 2.968992339e-03f,
     1.834313385e-03f, 1.078339177e-03f, 6.080142339e-04f, 3.326181904e-04f,
     1.777315483e-04f, 9.287250577e-05f, 4.773376349e-05f, 2.422043872e-05f,
     1.213430278e-05f, 6.022689831e-06f, 2.955895980e-06f, 1.440186793e-06f,
     6.975790825e-07f, 3.346817437e-07f, 1.597276480e-07f, 7.579803452e-08f,
     3.581179087e-08f, 1.682395201e-08f, 7.879665809e-09f, 3.673858107e-09f,
     1.706227937e-09f, 7.895987753e-10f, 3.644878288e-10f, 1.675151268e-10f},
    {-1.153977681e-02f, 2.405508887e-03f, 6.012536585e-03f, 3.386284458e-03f,
     7.093703025e-04f, -7.181726978e-04f, -1.161005115e-03f, -1.059553819e-03f,
     -7.974423934e-04f, -5.431437166e-04f, -3.421848814e-04f, -2.054330689e-04f,
     -1.188150636e-04f, -6.629763084e-05f, -3.618268602e-05f, -1.937183697e-05f,
     -1.017530212e-05f, -5.296034033e-06f, -2.704989583e-06f, -1.368638777e-06f,
     -6.871708251e-07f, -3.410930276e-07f, -1.676266663e-07f, -8.192823486e-08f,
     -3.984952812e-08f, -1.918717452e-08f, -9.232776321e-09f, -4.406908172e-09f,
     -2.092863216e-09f, -9.891868435e-10f, -4.661845354e-10f, -2.186140158e-10f},
    {2.118918346e-03f, 2.444302896e-03f, -6.448701606e-04f, -1.937594381e-03f,
     -6.934168050e-04f, 2.358665006e-05f, -3.850239154e-04f, -1.242851340e-05f,
     2.304554509e-04f, 9.843656153e-05f, 9.266015695e-05f, 6.693260366e-05f,
     3.453021418e-05f, 3.116624794e-05f, 2.318141742e-05f, 1.303227964e-05f,
     7.613188245e-06f, 3.658314654e-06f, 2.198449920e-06f, 1.128021268e-06f,
     4.528663453e-07f, 2.739645595e-07f, 1.418768818e-07f, 7.422280390e-08f,
     3.551767946e-08f, 1.888571077e-08f, 8.652983219e-09f, 4.180313429e-09f,
     2.051023351e-09f, 1.011842388e-09f, 4.596711622e-10f, 2.418689415e-10f},
};  // C[degree][piece]

// x Phi(x): the 32-piece path for vectors within 7; beyond, avx2::gelu_erf's paths: its wide one
// on 16 lanes where neither half is within 3.74 (but all lanes are within 13), other vectors
// half by half.
KILN_VEC16 __m512 gelu_erf(__m512 x) {
  if (all_within(x, 7.0f)) [[likely]] {
    const __m512 z = abs(x);
    // 1.5 * 2^23 + k: k = round(z (z + 1) / D) (0.5607143 = 1 / D) lands in the low mantissa
    // bits, which the permutes read.
    const __m512 scaled = _mm512_fmadd_ps(z, splat(0.5607143f), splat(0.5607143f));
    const __m512 shifted = _mm512_fmadd_ps(z, scaled, splat(12582912.0f));
    return gelu_pieces32_result(x, pieces32_degree6(kGeluErfPieces32, kGeluErfCenters32,
                                                    _mm512_castps_si512(shifted), z));
  }
  if (!neither_half_within(x, 3.74f) || !all_within(x, 13.0f))
    return by_halves<avx2::gelu_erf>(x);
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 x2_lo = _mm512_fmsub_ps(x, x, x2);
  const ExpReduced e = exp_reduce(_mm512_mul_ps(x2, splat(-0.5f)));
  const __m512 q = exp_polynomial_minus_one(_mm512_fmadd_ps(x2_lo, splat(-0.5f), e.r));
  const __m512 s = gelu_erf_tail_factor(abs(x));
  const __m512 t = _mm512_mul_ps(_mm512_fmadd_ps(s, q, s), pow2(e.n));
  return by_sign(x, _mm512_sub_ps(x, t), or_bits(t, splat(-0.0f)));
}

// avx2::gelu_tanh_argument.
struct GeluTanhArgument {
  __m512 hi, lo;
};
KILN_VEC16 GeluTanhArgument gelu_tanh_argument(__m512 x) {
  const __m512 k0 = splat(1.595769167e+00f), k0_lo = splat(-4.534068054e-08f);
  const __m512 k1 = splat(7.135481387e-02f), k1_lo = splat(2.398832466e-09f);
  const __m512 x2 = _mm512_mul_ps(x, x), x2_lo = _mm512_fmsub_ps(x, x, x2);
  const __m512 p = _mm512_mul_ps(k1, x2), p_lo = _mm512_fmsub_ps(k1, x2, p);
  const __m512 big = _mm512_maskz_max_ps(kAllLanes, p, k0);
  const __m512 small = _mm512_maskz_min_ps(kAllLanes, p, k0);
  const __m512 s = _mm512_add_ps(big, small);
  const __m512 s_lo = _mm512_sub_ps(small, _mm512_sub_ps(s, big));
  const __m512 lo = _mm512_add_ps(
      _mm512_add_ps(_mm512_fmadd_ps(k1, x2_lo, p_lo), _mm512_fmadd_ps(k1_lo, x2, k0_lo)), s_lo);
  const __m512 hi = _mm512_mul_ps(x, s);
  return {hi, _mm512_fmadd_ps(x, lo, _mm512_fmsub_ps(x, s, hi))};
}

alignas(64) inline constexpr float kGeluTanhCenters32[32] = {
    0.000000000e+00f, 6.866855025e-01f, 1.308076739e+00f, 1.840596199e+00f,
    2.293036699e+00f, 2.682242155e+00f, 3.022834539e+00f, 3.325715303e+00f,
    3.598775864e+00f, 3.847770691e+00f, 4.076972961e+00f, 4.289622307e+00f,
    4.488223553e+00f, 4.674749374e+00f, 4.850780964e+00f, 5.017601967e+00f,
    5.176270008e+00f, 5.327667236e+00f, 5.472535610e+00f, 5.611505985e+00f,
    5.745120049e+00f, 5.873845100e+00f, 5.998088360e+00f, 6.118206501e+00f,
    6.234513760e+00f, 6.347287655e+00f, 6.456777096e+00f, 6.563202381e+00f,
    6.666763306e+00f, 6.767639160e+00f, 6.865992069e+00f, 6.961969852e+00f};
alignas(64) inline constexpr float kGeluTanhPieces32[7][32] = {
    {5.000000000e-01f, 2.462161183e-01f, 9.560032934e-02f, 3.285946697e-02f,
     1.077738125e-02f, 3.480175743e-03f, 1.118492568e-03f, 3.590224078e-04f,
     1.152201366e-04f, 3.698124056e-05f, 1.187152156e-05f, 3.811523356e-06f,
     1.223907134e-06f, 3.930495041e-07f, 1.262361593e-07f, 4.054646396e-08f,
     1.302416486e-08f, 4.183771107e-09f, 1.344016676e-09f, 4.317758373e-10f,
     1.387154974e-10f, 4.456605224e-11f, 1.431837461e-11f, 4.600359156e-12f,
     1.478075366e-12f, 4.749091745e-13f, 1.525905731e-13f, 4.902899105e-14f,
     1.575368288e-14f, 5.061920138e-15f, 1.626497653e-15f, 5.226301811e-16f},
    {-3.989422917e-01f, -3.148984611e-01f, -1.696404219e-01f, -7.375995815e-02f,
     -2.901265584e-02f, -1.087529212e-02f, -3.968206234e-03f, -1.422439935e-03f,
     -5.032417830e-04f, -1.762115280e-04f, -6.118374586e-05f, -2.109570778e-05f,
     -7.230731171e-06f, -2.465905027e-06f, -8.372892353e-07f, -2.832221924e-07f,
     -9.548489288e-08f, -3.209698107e-08f, -1.076115108e-08f, -3.599475829e-09f,
     -1.201451938e-09f, -4.002670695e-10f, -1.331205285e-10f, -4.420359564e-11f,
     -1.465700651e-11f, -4.853578043e-12f, -1.605270062e-12f, -5.303334811e-13f,
     -1.750238002e-13f, -5.770651833e-14f, -1.900914559e-14f, -6.256545337e-15f},
    {8.121185147e-07f, 1.083124503e-01f, 1.103911549e-01f, 6.745076180e-02f,
     3.339233249e-02f, 1.494159922e-02f, 6.308393087e-03f, 2.561316825e-03f,
     1.010117587e-03f, 3.893408575e-04f, 1.473022858e-04f, 5.487920862e-05f,
     2.018324449e-05f, 7.341920082e-06f, 2.645667109e-06f, 9.456205134e-07f,
     3.355856109e-07f, 1.183485594e-07f, 4.150612298e-08f, 1.448472187e-08f,
     5.032426476e-09f, 1.741445654e-09f, 6.004368669e-10f, 2.063445387e-10f,
     7.069874547e-11f, 2.415651359e-11f, 8.232886595e-12f, 2.799347126e-12f,
     9.497743304e-13f, 3.215963737e-13f, 1.086905834e-13f, 3.667046525e-14f},
    {6.680288166e-02f, 2.741069347e-02f, -2.012472041e-02f, -2.871141583e-02f,
     -2.034547925e-02f, -1.149938162e-02f, -5.805084947e-03f, -2.729709260e-03f,
     -1.219901373e-03f, -5.242039915e-04f, -2.182941098e-04f, -8.860227535e-05f,
     -3.520240352e-05f, -1.373665054e-05f, -5.278605840e-06f, -2.001790790e-06f,
     -7.504698942e-07f, -2.785383231e-07f, -1.024646323e-07f, -3.739717513e-08f,
     -1.355359025e-08f, -4.881002269e-09f, -1.747778478e-09f, -6.226096305e-10f,
     -2.207417166e-10f, -7.792666512e-11f, -2.740044303e-11f, -9.599470524e-12f,
     -3.351736206e-12f, -1.166645990e-12f, -4.048974968e-13f, -1.401442439e-13f},
    {1.485464309e-04f, -2.301939204e-02f, -1.151113212e-02f, 2.134836046e-03f,
     5.932760425e-03f, 5.051358603e-03f, 3.280103905e-03f, 1.862133271e-03f,
     9.684258839e-04f, 4.731853842e-04f, 2.203243494e-04f, 9.853505617e-05f,
     4.270860882e-05f, 1.801039616e-05f, 7.425659987e-06f, 3.003302481e-06f,
     1.194798529e-06f, 4.686891657e-07f, 1.814167518e-07f, 6.945187181e-08f,
     2.633204943e-08f, 9.888684538e-09f, 3.684988537e-09f, 1.363262836e-09f,
     5.009286874e-10f, 1.829841556e-10f, 6.647650486e-11f, 2.402703037e-11f,
     8.643523397e-12f, 3.096201897e-12f, 1.104535734e-12f, 3.925122759e-13f},
    {-1.086171810e-02f, -8.809000137e-04f, 6.047174800e-03f, 3.343693679e-03f,
     2.689706453e-04f, -9.257387719e-04f, -1.043583034e-03f, -7.989456062e-04f,
     -5.119127454e-04f, -2.948949696e-04f, -1.576611103e-04f, -7.917886978e-05f,
     -3.792746065e-05f, -1.748477735e-05f, -7.812031072e-06f, -3.396628244e-06f,
     -1.443025894e-06f, -6.003798489e-07f, -2.458755830e-07f, -9.918105803e-08f,
     -3.941005744e-08f, -1.550487738e-08f, -6.029821975e-09f, -2.321073556e-09f,
     -8.865504997e-10f, -3.356360467e-10f, -1.262211585e-10f, -4.713912247e-11f,
     -1.749845581e-11f, -6.455258203e-12f, -2.369749145e-12f, -8.657683945e-13f},
    {1.438700710e-03f, 3.136558924e-03f, 6.628409756e-05f, -1.309959334e-03f,
     -8.218183648e-04f, -2.488950558e-04f, 5.629542284e-05f, 1.518223144e-04f,
     1.767886570e-04f, 1.284884056e-04f, 7.432666462e-05f, 4.531450759e-05f,
     2.312506149e-05f, 1.221235016e-05f, 6.099351594e-06f, 2.906238478e-06f,
     1.329175348e-06f, 5.711758604e-07f, 2.537658759e-07f, 1.084567103e-07f,
     4.439541712e-08f, 1.879549849e-08f, 7.643488509e-09f, 3.064422494e-09f,
     1.229285007e-09f, 4.828791256e-10f, 1.876202110e-10f, 7.243840944e-11f,
     2.776373229e-11f, 1.051248411e-11f, 3.982447618e-12f, 1.508419583e-12f},
};  // C[degree][piece]

// x sigmoid(2u(x)): as gelu_erf above, with avx2::gelu_tanh's paths beyond 7 (bounds 4 and 8).
KILN_VEC16 __m512 gelu_tanh(__m512 x) {
  if (all_within(x, 7.0f)) [[likely]] {
    const __m512 z = abs(x);
    // k = round(z (k0 + k1 z^2) / D) in the low mantissa bits, as in gelu_erf (k1 / D and
    // k0 / D below).
    const __m512 scaled =
        _mm512_fmadd_ps(_mm512_mul_ps(x, x), splat(0.06285694f), splat(1.4057239f));
    const __m512 shifted = _mm512_fmadd_ps(z, scaled, splat(12582912.0f));
    return gelu_pieces32_result(x, pieces32_degree6(kGeluTanhPieces32, kGeluTanhCenters32,
                                                    _mm512_castps_si512(shifted), z));
  }
  if (!neither_half_within(x, 3.6f) || !all_within(x, 8.0f))
    return by_halves<avx2::gelu_tanh>(x);
  const GeluTanhArgument u2 = gelu_tanh_argument(x);
  return _mm512_mul_ps(x, sigmoid_in_range(u2.hi, u2.lo));
}

// avx2::erf, which has no branches.
KILN_VEC16 __m512 erf(__m512 x) {
  const __m512 ax = abs(x);
  const __m512 magic = splat(12582912.0f);
  const __m512 z = _mm512_maskz_min_ps(kAllLanes, splat(4.0f), ax);
  const __m512 shifted = _mm512_fmadd_ps(z, splat(1.75f), magic);
  const __m512 k = _mm512_sub_ps(shifted, magic);
  const __m512 v = _mm512_fmsub_ps(z, splat(1.75f), k);
  const __m512 p = piecewise_degree7(avx2::kErfPieces, _mm512_castps_si512(shifted), v);
  const __m512 small = _mm512_fmadd_ps(ax, splat(1.1283792f), _mm512_mul_ps(ax, p));
  const __m512 large = _mm512_sub_ps(splat(1.0f), p);
  const __mmask16 is_small = _mm512_cmp_ps_mask(k, splat(1.5f), _CMP_LT_OQ);
  return or_bits(_mm512_mask_blend_ps(is_small, large, small), sign_bits(x));
}

#undef KILN_VEC16

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
