// Vectorized f32 math for AVX2+FMA kernels: included only by *_avx2.cc files, whose functions
// all carry KILN_TARGET_AVX2. Each function handles NaN, +-inf, denormals and overflow as the
// libm function does; accuracy (measured against libm in double) is in docs/ops.md.
#pragma once

#include "kernels/cpu/cpu_features.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <cstdint>

namespace kiln::cpu::avx2 {

#define KILN_VEC KILN_TARGET_AVX2 inline

KILN_VEC __m256 splat(float v) { return _mm256_set1_ps(v); }
KILN_VEC __m256 sign_bits(__m256 x) { return _mm256_and_ps(x, splat(-0.0f)); }
KILN_VEC __m256 abs(__m256 x) { return _mm256_andnot_ps(splat(-0.0f), x); }

// A mask selecting the first `count` (0..8) lanes, for loads and stores of a tail.
KILN_VEC __m256i tail_mask(int64_t count) {
  alignas(32) static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                          0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ones_then_zeros + 8 - count));
}

// Polynomial c[0] + c[1] x + ... by Horner's rule with FMA.
template <int N>
KILN_VEC __m256 polynomial(__m256 x, const float (&c)[N]) {
  __m256 p = splat(c[N - 1]);
  for (int i = N - 2; i >= 0; --i) p = _mm256_fmadd_ps(p, x, splat(c[i]));
  return p;
}

// 2^e for integer lanes e in [-126, 127].
KILN_VEC __m256 pow2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

// v * 2^n for |v| in [2^-10, 2^10] and n in [-226, 228], rounded once: in two steps, as no
// single f32 holds 2^n over that range, the first exact and the second rounding a subnormal or
// overflowing result correctly.
KILN_VEC __m256 ldexp(__m256 v, __m256i n) {
  const __m256i n1 = _mm256_min_epi32(_mm256_set1_epi32(100),
                                      _mm256_max_epi32(_mm256_set1_epi32(-100), n));
  return _mm256_mul_ps(_mm256_mul_ps(v, pow2(n1)), pow2(_mm256_sub_epi32(n, n1)));
}

// exp(hi + lo) as m * 2^n, where lo is a small correction to hi (|lo| <= ulp(hi)): callers pass
// the rounding error of an argument they computed, which keeps the relative error at a few ULP
// where exp's argument is large (erfc's exp(-z^2), gelu's tails). Callers multiply m by their
// other factors before ldexp, so a result in the subnormal range is rounded only once.
struct ExpParts {
  __m256 m;   // in [0.7, 1.42]; 0 where hi < -150 (the result underflows whatever multiplies it)
  __m256i n;  // in [-216, 128]
};

KILN_VEC ExpParts exp_parts(__m256 hi, __m256 lo) {
  // Constants first: max/min return their second operand on NaN, so NaN passes through.
  const __m256 x = _mm256_min_ps(splat(89.0f), _mm256_max_ps(splat(-150.0f), hi));
  lo = _mm256_and_ps(lo, _mm256_cmp_ps(x, hi, _CMP_EQ_OQ));  // a clamped hi drops lo
  // x = n ln2 + r, |r| <= ln2 / 2; ln2 in two parts so that n * ln2_hi is exact (Cody-Waite).
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, splat(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, splat(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, splat(-2.12194440e-4f), r);
  r = _mm256_add_ps(r, lo);
  // e^r = 1 + r + r^2 P(r) (Cephes expf).
  static constexpr float P[] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  __m256 m = _mm256_fmadd_ps(polynomial(r, P), _mm256_mul_ps(r, r), r);
  m = _mm256_add_ps(m, splat(1.0f));
  m = _mm256_andnot_ps(_mm256_cmp_ps(hi, splat(-150.0f), _CMP_LT_OQ), m);
  return {m, _mm256_cvtps_epi32(n)};
}

KILN_VEC __m256 exp_hilo(__m256 hi, __m256 lo) {
  const ExpParts e = exp_parts(hi, lo);
  return ldexp(e.m, e.n);
}

KILN_VEC __m256 exp(__m256 x) { return exp_hilo(x, _mm256_setzero_ps()); }

// sigmoid(hi + lo) = m * 2^n (see ExpParts), as e / (1 + e) or 1 / (1 + e) with
// e = exp(-|hi + lo|) <= 1: no overflow, and results near or below the subnormals stay accurate.
struct SigmoidParts {
  __m256 m;
  __m256i n;
};

KILN_VEC SigmoidParts sigmoid_parts(__m256 hi, __m256 lo) {
  // e = exp(-|hi + lo|): -|hi|, and lo with the sign flipped where hi is positive.
  const __m256 neg_lo = _mm256_sub_ps(_mm256_setzero_ps(), lo);
  const ExpParts e =
      exp_parts(_mm256_or_ps(hi, splat(-0.0f)), _mm256_xor_ps(neg_lo, sign_bits(hi)));
  const __m256 non_negative = _mm256_cmp_ps(hi, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 numerator = _mm256_blendv_ps(e.m, splat(1.0f), non_negative);
  const __m256 m = _mm256_div_ps(numerator, _mm256_add_ps(splat(1.0f), ldexp(e.m, e.n)));
  const __m256i n = _mm256_andnot_si256(_mm256_castps_si256(non_negative), e.n);
  return {m, n};
}

KILN_VEC __m256 sigmoid(__m256 x) {
  const SigmoidParts s = sigmoid_parts(x, _mm256_setzero_ps());
  return ldexp(s.m, s.n);
}

// tanh on |x|, the sign restored last (keeps -0): an odd polynomial below 0.625 (Cephes tanhf),
// 1 - 2 / (exp(2|x|) + 1) above, which saturates to 1 for large |x| as exp overflows.
KILN_VEC __m256 tanh(__m256 x) {
  const __m256 ax = abs(x);
  const __m256 z = _mm256_mul_ps(ax, ax);
  static constexpr float P[] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f,
                                2.06390887954e-2f, -5.70498872745e-3f};
  const __m256 small = _mm256_fmadd_ps(ax, _mm256_mul_ps(z, polynomial(z, P)), ax);
  const __m256 e = exp(_mm256_add_ps(ax, ax));
  const __m256 large = _mm256_sub_ps(
      splat(1.0f), _mm256_div_ps(splat(2.0f), _mm256_add_ps(e, splat(1.0f))));
  const __m256 is_small = _mm256_cmp_ps(ax, splat(0.625f), _CMP_LT_OQ);
  return _mm256_or_ps(_mm256_blendv_ps(large, small, is_small), sign_bits(x));
}

// erfcx(z) = exp(z^2) erfc(z) for z >= 0.5, as h(t) / s with s = 1 + z, t = 1 / s - 0.378 and h
// a polynomial fitted over z in [0.5, 10.1] (where exp(-z^2) erfcx(z) still matters in f32).
KILN_VEC __m256 erfcx_times_s(__m256 s) {
  static constexpr float H[] = {7.919958234e-01f, 5.601648092e-01f, -3.006552458e-01f,
                                -3.467647731e-01f, 5.365545750e-01f, -4.119012505e-02f,
                                -7.592864037e-01f, 1.005879641e+00f, 3.429900706e-01f,
                                -1.779327512e+00f};
  const __m256 t = _mm256_sub_ps(_mm256_div_ps(splat(1.0f), s), splat(0.37837839f));
  return polynomial(t, H);
}

// gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2.
//  * |x| < 1/sqrt 2: Phi = (1 + erf(x / sqrt 2)) / 2 with erf(x / sqrt 2) = x Q(x^2).
//  * otherwise E = erfc(|x| / sqrt 2) = exp(-x^2 / 2) * erfcx(|x| / sqrt 2), with x^2 split into
//    hi + lo exactly (FMA) and erfcx as above; Phi = 1 - E/2 for x > 0, E/2 for x < 0 (no
//    cancellation: the tail keeps its relative accuracy down to the subnormals).
KILN_VEC __m256 gelu_erf(__m256 x) {
  const __m256 ax = abs(x);
  const __m256 half_x = _mm256_mul_ps(x, splat(0.5f));
  const __m256 x2 = _mm256_mul_ps(x, x);
  static constexpr float Q[] = {7.978845835e-01f, -1.329806596e-01f, 1.994539611e-02f,
                                -2.365004504e-03f, 2.084890002e-04f};
  const __m256 erf = _mm256_mul_ps(x, polynomial(x2, Q));
  const __m256 small = _mm256_fmadd_ps(half_x, erf, half_x);

  const __m256 x2_lo = _mm256_fmsub_ps(x, x, x2);
  const ExpParts e = exp_parts(_mm256_mul_ps(x2, splat(-0.5f)), _mm256_mul_ps(x2_lo, splat(-0.5f)));
  const __m256 s = _mm256_fmadd_ps(ax, splat(0.70710677f), splat(1.0f));
  // E/2 = m * 2^n * h(t) / (2s); for x < 0 the result x E/2 is scaled by 2^n last.
  const __m256 half_erfc_m =
      _mm256_mul_ps(e.m, _mm256_div_ps(erfcx_times_s(s), _mm256_add_ps(s, s)));
  const __m256 positive = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 scaled =
      ldexp(_mm256_blendv_ps(_mm256_mul_ps(x, half_erfc_m), half_erfc_m, positive), e.n);
  const __m256 large =
      _mm256_blendv_ps(scaled, _mm256_mul_ps(x, _mm256_sub_ps(splat(1.0f), scaled)), positive);
  return _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, splat(0.70710678f), _CMP_LT_OQ));
}

// PyTorch's tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as
// x sigmoid(2u). 2u is computed in double and split into hi + lo: for x << 0 the result is about
// x exp(2u), whose relative error is |2u| times that of 2u.
KILN_VEC __m256 gelu_tanh(__m256 x) {
  const __m256d k0 = _mm256_set1_pd(1.5957691216057308);  // 2 sqrt(2/pi)
  const __m256d k1 = _mm256_set1_pd(1.5957691216057308 * 0.044715);
  const __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  const __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  const __m256d v0 = _mm256_mul_pd(x0, _mm256_fmadd_pd(k1, _mm256_mul_pd(x0, x0), k0));
  const __m256d v1 = _mm256_mul_pd(x1, _mm256_fmadd_pd(k1, _mm256_mul_pd(x1, x1), k0));
  const __m128 hi0 = _mm256_cvtpd_ps(v0), hi1 = _mm256_cvtpd_ps(v1);
  const __m128 lo0 = _mm256_cvtpd_ps(_mm256_sub_pd(v0, _mm256_cvtps_pd(hi0)));
  const __m128 lo1 = _mm256_cvtpd_ps(_mm256_sub_pd(v1, _mm256_cvtps_pd(hi1)));
  const SigmoidParts sig = sigmoid_parts(_mm256_set_m128(hi1, hi0), _mm256_set_m128(lo1, lo0));
  return ldexp(_mm256_mul_ps(x, sig.m), sig.n);
}

// erf(x), the sign restored last (keeps -0):
//  * |x| < 0.875: x (c0 + x^2 Q(x^2)) with c0 = 2/sqrt(pi) in two parts, the large product
//    x * c0_hi rounded only once (FMA);
//  * otherwise 1 - erfc(|x|), erfc(z) = exp(-z^2) erfcx(z) with z^2 split into hi + lo
//    exactly (FMA); erfc < 0.22 there, a quarter of erf's ULP, so its error shrinks in the
//    difference.
KILN_VEC __m256 erf(__m256 x) {
  const __m256 ax = abs(x);
  const __m256 x2 = _mm256_mul_ps(x, x);
  static constexpr float Q[] = {-3.7612637877e-01f, 1.1283791065e-01f, -2.6866106316e-02f,
                                5.2234716713e-03f,  -8.5291708820e-04f, 1.1678778537e-04f,
                                -1.1152082152e-05f};
  const __m256 tail = _mm256_fmadd_ps(x2, polynomial(x2, Q), splat(-5.8635383e-08f));
  const __m256 small = _mm256_fmadd_ps(ax, splat(1.1283792f), _mm256_mul_ps(ax, tail));

  const __m256 x2_lo = _mm256_fmsub_ps(x, x, x2);
  const ExpParts e = exp_parts(_mm256_sub_ps(_mm256_setzero_ps(), x2),
                               _mm256_sub_ps(_mm256_setzero_ps(), x2_lo));
  const __m256 s = _mm256_add_ps(ax, splat(1.0f));
  const __m256 erfc = ldexp(_mm256_mul_ps(e.m, _mm256_div_ps(erfcx_times_s(s), s)), e.n);
  const __m256 large = _mm256_sub_ps(splat(1.0f), erfc);
  const __m256 magnitude =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, splat(0.875f), _CMP_LT_OQ));
  return _mm256_or_ps(magnitude, sign_bits(x));
}

// log(x) (Cephes logf): x = 2^e m with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
// log(m) = f - f^2/2 + f^3 P(f), and e ln2 in two parts so that e * ln2_hi is exact. Subnormal
// inputs are scaled by 2^23 first; 0 gives -inf, negative inputs NaN, +inf and NaN themselves.
KILN_VEC __m256 log(__m256 x) {
  const __m256 subnormal = _mm256_cmp_ps(x, splat(1.17549435e-38f), _CMP_LT_OQ);
  const __m256 scaled = _mm256_blendv_ps(x, _mm256_mul_ps(x, splat(8388608.0f)), subnormal);
  const __m256i bits = _mm256_castps_si256(scaled);
  __m256i exponent = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127));
  exponent = _mm256_sub_epi32(
      exponent, _mm256_and_si256(_mm256_castps_si256(subnormal), _mm256_set1_epi32(23)));
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
      _mm256_and_si256(bits, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x3F800000)));
  // m in [1, 2); above sqrt 2 take m / 2 and e + 1.
  const __m256 high = _mm256_cmp_ps(m, splat(1.41421356f), _CMP_GT_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, splat(0.5f)), high);
  exponent = _mm256_sub_epi32(exponent, _mm256_castps_si256(high));  // mask is -1: adds 1
  const __m256 e = _mm256_cvtepi32_ps(exponent);
  const __m256 f = _mm256_sub_ps(m, splat(1.0f));
  static constexpr float P[] = {3.3333331174e-1f, -2.4999993993e-1f, 2.0000714765e-1f,
                                -1.6668057665e-1f, 1.4249322787e-1f, -1.2420140846e-1f,
                                1.1676998740e-1f, -1.1514610310e-1f, 7.0376836292e-2f};
  const __m256 f2 = _mm256_mul_ps(f, f);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(f, f2), polynomial(f, P));
  y = _mm256_fmadd_ps(e, splat(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(f2, splat(0.5f), y);
  // e ln2_hi + f with its rounding error kept (Fast2Sum: |e ln2_hi| >= |f| unless e = 0, where
  // the sum is exact), so that the result rounds once.
  const __m256 t = _mm256_mul_ps(e, splat(0.693359375f));
  const __m256 sum = _mm256_add_ps(t, f);
  const __m256 sum_error = _mm256_add_ps(_mm256_sub_ps(t, sum), f);
  __m256 result = _mm256_add_ps(sum, _mm256_add_ps(sum_error, y));
  result = _mm256_blendv_ps(result, splat(-__builtin_inff()),
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  result = _mm256_blendv_ps(result, splat(__builtin_nanf("")),
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  // +inf and NaN come back as they are.
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, splat(3.40282347e+38f), _CMP_NLE_UQ));
}

// x sigmoid(x), scaled by 2^n last: for x << 0 the result is subnormal and rounded once.
KILN_VEC __m256 silu(__m256 x) {
  const SigmoidParts s = sigmoid_parts(x, _mm256_setzero_ps());
  return ldexp(_mm256_mul_ps(x, s.m), s.n);
}

#undef KILN_VEC

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
