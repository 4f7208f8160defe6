// 16-lane versions of vec_math_avx2.h's functions, for AVX-512 kernels (included only by
// *_avx512.cc files, whose functions all carry KILN_TARGET_AVX512). Each gives the AVX2
// function's bits on each half of the vector: a vector that the AVX2 function would take down
// its fast path in both halves takes the same arithmetic here on 16 lanes, and any other vector
// is handed to the AVX2 function half by half. So accuracy is vec_math_avx2.h's (docs/ops.md).
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

// The AVX2 function F on each half of x.
template <__m256 (*F)(__m256)>
KILN_VEC16 __m512 by_halves(__m512 x) {
  const __m512d wide = _mm512_castps_pd(x);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, wide, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, wide, 1));
  const __m512d low_half =
      _mm512_maskz_insertf64x4(0x0F, _mm512_setzero_pd(), _mm256_castps_pd(F(lo)), 0);
  return _mm512_castpd_ps(
      _mm512_maskz_insertf64x4(0xFF, low_half, _mm256_castps_pd(F(hi)), 1));
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

KILN_VEC16 __m512 sigmoid(__m512 x) {
  if (!all_within(x, 87.0f)) [[unlikely]]
    return by_halves<avx2::sigmoid>(x);
  return sigmoid_in_range(x, _mm512_setzero_ps());
}

KILN_VEC16 __m512 silu(__m512 x) {
  if (!all_within(x, 87.0f)) [[unlikely]]
    return by_halves<avx2::silu>(x);
  return _mm512_mul_ps(x, sigmoid_in_range(x, _mm512_setzero_ps()));
}

// avx2::tanh where exp(2|x|) takes its fast path (|x| <= 43.5, as 2|x| is exact).
KILN_VEC16 __m512 tanh(__m512 x) {
  if (!all_within(x, 43.5f)) [[unlikely]]
    return by_halves<avx2::tanh>(x);
  const __m512 ax = abs(x);
  const __m512 z = _mm512_mul_ps(ax, ax);
  const __m512 small = _mm512_fmadd_ps(ax, _mm512_mul_ps(z, polynomial(z, avx2::kTanhP)), ax);
  const __m512 e = exp_in_range(_mm512_add_ps(ax, ax));
  const __m512 large =
      _mm512_sub_ps(splat(1.0f), _mm512_div_ps(splat(2.0f), _mm512_add_ps(e, splat(1.0f))));
  const __mmask16 is_small = _mm512_cmp_ps_mask(ax, splat(0.625f), _CMP_LT_OQ);
  return or_bits(_mm512_mask_blend_ps(is_small, large, small), sign_bits(x));
}

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
  const auto c = [&](int i) KILN_TARGET_AVX512 { return pick8(C[i], piece); };
  const __m512 v2 = _mm512_mul_ps(v, v);
  const __m512 p01 = _mm512_fmadd_ps(c(1), v, c(0)), p23 = _mm512_fmadd_ps(c(3), v, c(2));
  const __m512 p45 = _mm512_fmadd_ps(c(5), v, c(4)), p67 = _mm512_fmadd_ps(c(7), v, c(6));
  const __m512 p03 = _mm512_fmadd_ps(p23, v2, p01), p47 = _mm512_fmadd_ps(p67, v2, p45);
  return _mm512_fmadd_ps(p47, _mm512_mul_ps(v2, v2), p03);
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

// avx2::gelu_erf's first two paths on 16 lanes: the first where every lane is within 3.74, the
// second where neither half is (but all lanes are within 13); other vectors half by half.
KILN_VEC16 __m512 gelu_erf(__m512 x) {
  if (!all_within(x, 3.74f)) [[unlikely]] {
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
  const __m512 z = abs(x);
  const __m512 magic = splat(12582912.0f);
  const __m512 shifted = _mm512_fmadd_ps(z, splat(2.0f), magic);
  const __m512 v = _mm512_fmsub_ps(z, splat(2.0f), _mm512_sub_ps(shifted, magic));
  const __m512 p = piecewise_degree7(avx2::kNormalCdfMinus, _mm512_castps_si512(shifted), v);
  return by_sign(x, _mm512_fnmadd_ps(x, p, x), _mm512_mul_ps(x, p));
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

// avx2::gelu_tanh's first two paths on 16 lanes, as gelu_erf above (bounds 4 and 8); in the
// first, its 16 pieces are one permute of a 16-entry row.
KILN_VEC16 __m512 gelu_tanh(__m512 x) {
  if (!all_within(x, 4.0f)) [[unlikely]] {
    if (!neither_half_within(x, 4.0f) || !all_within(x, 8.0f))
      return by_halves<avx2::gelu_tanh>(x);
    const GeluTanhArgument u2 = gelu_tanh_argument(x);
    return _mm512_mul_ps(x, sigmoid_in_range(u2.hi, u2.lo));
  }
  const __m512 t = _mm512_mul_ps(abs(x), splat(4.0f));
  const __m512 k = _mm512_maskz_min_ps(
      kAllLanes, splat(15.0f),
      _mm512_maskz_roundscale_ps(kAllLanes, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  const __m512 v = _mm512_sub_ps(t, _mm512_add_ps(k, splat(0.5f)));
  const __m512i piece = _mm512_maskz_cvtps_epi32(kAllLanes, k);
  const auto c = [&](int i) KILN_TARGET_AVX512 {
    return _mm512_maskz_permutexvar_ps(kAllLanes, piece,
                                       _mm512_load_ps(avx2::kGeluTanhSigmoidMinus[i]));
  };
  __m512 s = c(6);
#pragma GCC unroll 6
  for (int i = 5; i >= 0; --i) s = _mm512_fmadd_ps(s, v, c(i));
  return by_sign(x, _mm512_fnmadd_ps(x, s, x), _mm512_mul_ps(x, s));
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
