// Vectorized f32 math for AVX2+FMA kernels: included only by *_avx2.cc files, whose functions
// all carry KILN_TARGET_AVX2. Each function handles NaN, +-inf, denormals and overflow as the
// libm function does; accuracy (measured against libm in double) is in docs/ops.md.
#pragma once

#include "kernels/cpu/cpu_features.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace kiln::cpu::avx2 {

#define KILN_VEC KILN_TARGET_AVX2 inline

KILN_VEC __m256 splat(float v) { return _mm256_set1_ps(v); }
KILN_VEC __m256 sign_bits(__m256 x) { return _mm256_and_ps(x, splat(-0.0f)); }
KILN_VEC __m256 abs(__m256 x) { return _mm256_andnot_ps(splat(-0.0f), x); }

// The largest and the sum of x's lanes, halving x three times (a loop over the lanes would be a
// chain of 7 dependent operations).
KILN_VEC float max_lanes(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
KILN_VEC float sum_lanes(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Transposes the 8 x 8 matrix whose rows are r[0..8) in registers: afterwards r[k] holds
// element k of every input row.
KILN_VEC void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

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

// x = n ln2 + r, |r| <= ln2 / 2 (n an integer-valued float); ln2 in two parts so that
// n * ln2_hi is exact (Cody-Waite).
struct ExpReduced {
  __m256 r, n;
};
KILN_VEC ExpReduced exp_reduce(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, splat(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, splat(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, splat(-2.12194440e-4f), r);
  return {r, n};
}

// e^r = 1 + r + r^2 P(r) for |r| <= ln2 / 2 (Cephes expf), P's coefficients kExpP;
// exp_polynomial_minus_one leaves the 1 out, for callers that fold it into an FMA. (The tables
// here are shared with vec_math_avx512.h.)
inline constexpr float kExpP[] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                  8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
KILN_VEC __m256 exp_polynomial_minus_one(__m256 r) {
  return _mm256_fmadd_ps(polynomial(r, kExpP), _mm256_mul_ps(r, r), r);
}
KILN_VEC __m256 exp_polynomial(__m256 r) {
  return _mm256_add_ps(exp_polynomial_minus_one(r), splat(1.0f));
}

KILN_VEC ExpParts exp_parts(__m256 hi, __m256 lo) {
  // Constants first: max/min return their second operand on NaN, so NaN passes through.
  const __m256 x = _mm256_min_ps(splat(89.0f), _mm256_max_ps(splat(-150.0f), hi));
  lo = _mm256_and_ps(lo, _mm256_cmp_ps(x, hi, _CMP_EQ_OQ));  // a clamped hi drops lo
  const ExpReduced e = exp_reduce(x);
  __m256 m = exp_polynomial(_mm256_add_ps(e.r, lo));
  m = _mm256_andnot_ps(_mm256_cmp_ps(hi, splat(-150.0f), _CMP_LT_OQ), m);
  return {m, _mm256_cvtps_epi32(e.n)};
}

// exp_parts without its clamping, for |hi| <= 87 (callers check, with all_within): n is in
// [-126, 126], so m * 2^n rounds once in one multiply by pow2(n).
KILN_VEC ExpParts exp_parts_in_range(__m256 hi, __m256 lo) {
  const ExpReduced e = exp_reduce(hi);
  return {exp_polynomial(_mm256_add_ps(e.r, lo)), _mm256_cvtps_epi32(e.n)};
}

// True when every lane of x is within [-bound, bound] (false with a NaN): fast paths that skip
// the handling of extreme inputs take whole vectors only.
KILN_VEC bool all_within(__m256 x, float bound) {
  return _mm256_movemask_ps(_mm256_cmp_ps(abs(x), splat(bound), _CMP_LE_OQ)) == 0xFF;
}

// (Vectors all within [-87, 87] skip exp_parts' clamping and ldexp's two steps: one multiply by
// a normal 2^n rounds the same.)
KILN_VEC __m256 exp_hilo(__m256 hi, __m256 lo) {
  if (all_within(hi, 87.0f)) [[likely]] {
    const ExpParts e = exp_parts_in_range(hi, lo);
    return _mm256_mul_ps(e.m, pow2(e.n));
  }
  const ExpParts e = exp_parts(hi, lo);
  return ldexp(e.m, e.n);
}

// exp(x - shift) with the rounding error of the subtraction carried into exp (TwoSum): x - shift
// reaches -100 before exp underflows, and its rounding would cost many ULP of the term.
KILN_VEC __m256 exp_minus(__m256 x, __m256 shift) {
  const __m256 neg_shift = _mm256_xor_ps(shift, splat(-0.0f));
  const __m256 d = _mm256_add_ps(x, neg_shift);
  const __m256 b = _mm256_sub_ps(d, x);
  const __m256 err =
      _mm256_add_ps(_mm256_sub_ps(x, _mm256_sub_ps(d, b)), _mm256_sub_ps(neg_shift, b));
  return exp_hilo(d, err);
}

// exp for lanes within [-87, 87]: exp_hilo(x, 0)'s fast path without the addition of lo.
KILN_VEC __m256 exp_in_range(__m256 x) {
  const ExpReduced e = exp_reduce(x);
  return _mm256_mul_ps(exp_polynomial(e.r), pow2(_mm256_cvtps_epi32(e.n)));
}

// exp_hilo(x, 0) bit for bit.
KILN_VEC __m256 exp(__m256 x) {
  if (!all_within(x, 87.0f)) [[unlikely]]
    return exp_hilo(x, _mm256_setzero_ps());
  return exp_in_range(x);
}

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

// sigmoid(hi + lo) for |hi| <= 87 (callers check, with all_within): e = exp(-|hi + lo|) is a
// normal f32 there, so e / (1 + e) or 1 / (1 + e) in one division is sigmoid_parts' m * 2^n bit
// for bit, without its clamping and two-step scalings.
KILN_VEC __m256 sigmoid_in_range(__m256 hi, __m256 lo) {
  const __m256 neg_lo = _mm256_sub_ps(_mm256_setzero_ps(), lo);
  const ExpParts e =
      exp_parts_in_range(_mm256_or_ps(hi, splat(-0.0f)), _mm256_xor_ps(neg_lo, sign_bits(hi)));
  const __m256 ex = _mm256_mul_ps(e.m, pow2(e.n));
  const __m256 non_negative = _mm256_cmp_ps(hi, _mm256_setzero_ps(), _CMP_GE_OQ);
  return _mm256_div_ps(_mm256_blendv_ps(ex, splat(1.0f), non_negative),
                       _mm256_add_ps(splat(1.0f), ex));
}

// 1 + exp(-x), the denominator of sigmoid and silu, for lanes within [-87, 87]: three
// roundings (exp's, the sum's, then the caller's division) keep sigmoid within 2 ULP and silu
// within 2 (measured over every f32), where sigmoid_in_range's sign blends cost 16% of
// sigmoid's speed and silu's extra product an ULP.
KILN_VEC __m256 one_plus_exp_minus(__m256 x) {
  return _mm256_add_ps(splat(1.0f), exp_in_range(_mm256_xor_ps(x, splat(-0.0f))));
}

// Lanes within [-87, 87] take `in_range`; the others (results near or below the subnormals,
// +-inf, NaN) sigmoid_parts' m * 2^n scaled by `numerator` (1 or x) last: a lane's bits depend
// only on its own value.
KILN_VEC __m256 sigmoid_times(__m256 x, __m256 numerator, __m256 in_range) {
  if (all_within(x, 87.0f)) [[likely]]
    return in_range;
  const SigmoidParts s = sigmoid_parts(x, _mm256_setzero_ps());
  const __m256 within = _mm256_cmp_ps(abs(x), splat(87.0f), _CMP_LE_OQ);
  return _mm256_blendv_ps(ldexp(_mm256_mul_ps(numerator, s.m), s.n), in_range, within);
}

KILN_VEC __m256 sigmoid(__m256 x) {
  const __m256 one = splat(1.0f);
  return sigmoid_times(x, one, _mm256_div_ps(one, one_plus_exp_minus(x)));
}

// tanh(|x|) = E / (E + 2) with E = expm1(2|x|) = 2^n (1 + q) - 1 (q = e^r - 1, exp's reduction):
// 2^n - 1 is exact, so E rounds once (FMA) and keeps its relative accuracy near 0, where
// E = q. 2|x| is clamped to 18.25, where tanh already rounds to 1 (NaN passes: min returns its
// second operand), so no range check; the sign is restored last (keeps -0). 2 ULP at most over
// every f32 (0.03% of them; the rounding of E + 2 is most of it), where the former blend of
// an odd polynomial below 0.625 and 1 - 2 / (exp(2|x|) + 1) above, 1 ULP, ran a third slower.
KILN_VEC __m256 tanh(__m256 x) {
  const __m256 two_ax = _mm256_min_ps(splat(18.25f), _mm256_add_ps(abs(x), abs(x)));
  const ExpReduced e = exp_reduce(two_ax);
  const __m256 scale = pow2(_mm256_cvtps_epi32(e.n));
  const __m256 expm1 = _mm256_fmadd_ps(scale, exp_polynomial_minus_one(e.r),
                                       _mm256_sub_ps(scale, splat(1.0f)));
  const __m256 magnitude = _mm256_div_ps(expm1, _mm256_add_ps(expm1, splat(2.0f)));
  return _mm256_or_ps(magnitude, sign_bits(x));
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

// gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, for any x (gelu_erf takes the faster
// path below where it can):
//  * |x| < 1/sqrt 2: Phi = (1 + erf(x / sqrt 2)) / 2 with erf(x / sqrt 2) = x Q(x^2).
//  * otherwise E = erfc(|x| / sqrt 2) = exp(-x^2 / 2) * erfcx(|x| / sqrt 2), with x^2 split into
//    hi + lo exactly (FMA) and erfcx as above; Phi = 1 - E/2 for x > 0, E/2 for x < 0 (no
//    cancellation: the tail keeps its relative accuracy down to the subnormals).
KILN_VEC __m256 gelu_erf_any(__m256 x) {
  const __m256 ax = abs(x);
  const __m256 half_x = _mm256_mul_ps(x, splat(0.5f));
  const __m256 x2 = _mm256_mul_ps(x, x);
  static constexpr float Q[] = {7.978845835e-01f, -1.329806596e-01f, 1.994539611e-02f,
                                -2.365004504e-03f, 2.084890002e-04f};
  const __m256 erf = _mm256_mul_ps(x, polynomial(x2, Q));
  // x's sign (gelu keeps it below 1/sqrt 2), which the FMA's +0 for x = -0 would drop.
  const __m256 small = _mm256_or_ps(_mm256_fmadd_ps(half_x, erf, half_x), sign_bits(x));

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

// A degree-7 polynomial in v whose coefficients each lane picks from 8 pieces (C[degree][piece],
// by the low 3 bits of `piece`), by Horner's rule: 7 FMAs where Estrin's scheme took 9 vector
// instructions, and the throughput of these functions is their instruction count (erf 5-7%
// faster; the loops' independent vectors hide the longer dependency chain). A permute picks
// the coefficients: no gather.
KILN_VEC __m256 piecewise_degree7(const float (&C)[8][8], __m256i piece, __m256 v) {
  __m256 p = _mm256_permutevar8x32_ps(_mm256_load_ps(C[7]), piece);
  for (int i = 6; i >= 0; --i)
    p = _mm256_fmadd_ps(p, v, _mm256_permutevar8x32_ps(_mm256_load_ps(C[i]), piece));
  return p;
}

// normal_cdf_minus's coefficients, [degree][piece].
alignas(64) inline constexpr float kNormalCdfMinus[8][8] = {
    {5.000000000e-01f, 3.085375428e-01f, 1.586552560e-01f, 6.680720299e-02f, 2.275013179e-02f, 6.209665444e-03f, 1.349898055e-03f, 2.326290851e-04f},
    {-1.994711459e-01f, -1.760326624e-01f, -1.209853664e-01f, -6.475879997e-02f, -2.699548379e-02f, -8.764150552e-03f, -2.215924207e-03f, -4.363413609e-04f},
    {2.157185719e-07f, 2.200379036e-02f, 3.024618886e-02f, 2.428442799e-02f, 1.349775493e-02f, 5.477584898e-03f, 1.661940943e-03f, 3.817981342e-04f},
    {8.308549412e-03f, 5.501099862e-03f, 1.793129201e-07f, -3.372725099e-03f, -3.374430351e-03f, -1.917142305e-03f, -7.386395591e-04f, -2.045340807e-04f},
    {1.615516339e-05f, -1.257478376e-03f, -1.258620177e-03f, -3.781742998e-04f, 2.810388105e-04f, 3.709814046e-04f, 2.077742101e-04f, 7.358339644e-05f},
    {-3.598305339e-04f, -1.444202790e-04f, 1.243623410e-04f, 1.820725738e-04f, 7.032304711e-05f, -2.097754987e-05f, -3.464836846e-05f, -1.809185960e-05f},
    {7.081454532e-05f, 3.912159082e-05f, 2.696711272e-05f, -1.348120350e-05f, -2.051142656e-05f, -8.332934158e-06f, 1.595430490e-06f, 2.788806114e-06f},
    {-3.159855987e-05f, 6.017317901e-06f, -1.804403610e-06f, -8.613189948e-07f, 7.530999255e-07f, 2.430531595e-06f, 7.340395882e-07f, -1.358245214e-07f},
};  // C[degree][piece]
// A function of z in [0, 3.75) from 8 pieces centred on k / 2 (k = round(2z), 0..7), each a
// degree-7 polynomial in v = 2z - k (|v| <= 1/2, exact; C[degree][k]). 2z + 1.5 * 2^23 rounds 2z
// to k, which lands in the low mantissa bits: the lanes' permute index (a permute reads the low
// 3 bits). No exp, division or gather.
KILN_VEC __m256 half_unit_pieces(const float (&C)[8][8], __m256 z) {
  const __m256 magic = splat(12582912.0f);
  const __m256 shifted = _mm256_fmadd_ps(z, splat(2.0f), magic);
  const __m256 v = _mm256_fmsub_ps(z, splat(2.0f), _mm256_sub_ps(shifted, magic));
  return piecewise_degree7(C, _mm256_castps_si256(shifted), v);
}

// Phi(-z) = erfc(z / sqrt 2) / 2 for z in [0, 3.75) with a relative error below 3.3 * 2^-24,
// from half_unit_pieces fitted for relative error with f32 coefficients.
KILN_VEC __m256 normal_cdf_minus(__m256 z) { return half_unit_pieces(kNormalCdfMinus, z); }

// gelu from p = the gate at -|x| (Phi(-|x|) or sigmoid(-2u(|x|))): x p below 0 and x - x p
// (rounded once) above; blendv picks by x's sign bit, so -0 gives -0.
KILN_VEC __m256 gelu_from_gate_minus(__m256 x, __m256 p) {
  return _mm256_blendv_ps(_mm256_fnmadd_ps(x, p, x), _mm256_mul_ps(x, p), x);
}

// gelu_erf_tail_factor's tables: per slot, v's scale and offset, then [degree][slot].
alignas(32) inline constexpr float kGeluErfTailScale[8] = {1.0f,  1.0f,  0.5f, 0.5f,
                                                           0.25f, 0.25f, 2.0f, 2.0f};
alignas(32) inline constexpr float kGeluErfTailOffset[8] = {-1.5f,  -2.5f,  -2.0f, -3.0f,
                                                            -2.25f, -3.25f, 0.0f,  -1.5f};
alignas(64) inline constexpr float kGeluErfTail[8][8] = {
    {3.086709976e-01f, 3.533283174e-01f, 3.776425719e-01f, 3.886758983e-01f, 3.941890895e-01f, 3.966223896e-01f, 0.000000000e+00f, 2.251743525e-01f},
    {7.037373632e-02f, 2.729644626e-02f, 1.842355169e-02f, 6.361898966e-03f, 4.080644809e-03f, 1.403276110e-03f, 2.500000000e-01f, 8.495326340e-02f},
    {-3.749107942e-02f, -1.149306167e-02f, -1.150514372e-02f, -2.894609468e-03f, -2.598899882e-03f, -6.331371842e-04f, -9.973549098e-02f, -2.751343511e-02f},
    {1.644178852e-02f, 4.070568830e-03f, 6.168564316e-03f, 1.146851457e-03f, 1.456475817e-03f, 2.525031159e-04f, 3.124850430e-02f, 7.179790642e-03f},
    {-6.327510346e-03f, -1.289364183e-03f, -2.994160634e-03f, -4.146606079e-04f, -7.565570995e-04f, -9.354006761e-05f, -8.301700465e-03f, -1.618091832e-03f},
    {2.206903184e-03f, 3.726709401e-04f, 1.357854693e-03f, 1.444467780e-04f, 3.702158865e-04f, 3.337561793e-05f, 1.924251323e-03f, 3.288486623e-04f},
    {-7.430342375e-04f, -9.868678899e-05f, -6.377458340e-04f, -5.629327643e-05f, -1.917928166e-04f, -1.271428937e-05f, -3.703142575e-04f, -6.456546544e-05f},
    {2.301638451e-04f, 2.960540587e-05f, 2.637599828e-04f, 1.357711699e-05f, 9.644825332e-05f, 3.920995368e-06f, 4.416792217e-05f, 7.037152955e-06f},
};  // C[degree][slot]

// S(z) = z Phi(-z) e^(z^2 / 2) = z erfcx(z / sqrt 2) / 2 for z in [0, 13] (z / 2 near 0, then
// smooth, tending to 1 / sqrt(2 pi)) with a relative error below 0.6 * 2^-24 (fit; f32
// evaluation adds its roundings): 8 pieces whose width doubles every other piece ([0, 0.5),
// [0.5, 1), [1, 2), [2, 3), [3, 5), [5, 7), [7, 11), [11, 15)), picked by z + 1's exponent and
// top mantissa bit (bits 22 up, whose low 3 bits are the permute index: slot s holds piece
// (s + 2) mod 8); each a degree-7 polynomial in v = a z + b (a a power of two, one rounding;
// |v| <= 1/2, but v = 2z in [0, 1] in the first piece, whose coefficients 0 and 1/4 make S = z/2
// exactly for tiny z), fitted for relative error with f32 coefficients (piecewise_degree7).
KILN_VEC __m256 gelu_erf_tail_factor(__m256 z) {
  const __m256i piece =
      _mm256_srli_epi32(_mm256_castps_si256(_mm256_add_ps(z, splat(1.0f))), 22);
  const auto c = [&](const float* row) KILN_TARGET_AVX2 {
    return _mm256_permutevar8x32_ps(_mm256_load_ps(row), piece);
  };
  const __m256 v = _mm256_fmadd_ps(z, c(kGeluErfTailScale), c(kGeluErfTailOffset));
  return piecewise_degree7(kGeluErfTail, piece, v);
}

// Three paths, by the vector's largest |x|:
//  * all within [-3.74, 3.74] (most activations; below 3.75, where round(2z) would reach 8):
//    gelu_from_gate_minus with p = Phi(-|x|) (normal_cdf_minus).
//  * all within [-13, 13] (wide inputs): one formula for every lane, t = |x| Phi(-|x|) =
//    m 2^n S(|x|) with exp(-x^2 / 2) = m 2^n (x^2 split into hi + lo exactly, FMA) and
//    S = gelu_erf_tail_factor; -t below 0 and x - t above. One exp and one polynomial, where
//    the first path's p, a tail formula and a blend cost twice the polynomials; the lanes within
//    3.74 do not get the first path's bits (both are within the op's bound).
//  * otherwise (|x| > 13, where the result underflows towards the subnormals, inf, NaN):
//    gelu_erf_any.
KILN_VEC __m256 gelu_erf(__m256 x) {
  const __m256 ax = abs(x);
  if (all_within(x, 3.74f)) [[likely]]
    return gelu_from_gate_minus(x, normal_cdf_minus(ax));
  if (!all_within(x, 13.0f)) [[unlikely]]
    return gelu_erf_any(x);
  // exp(-x^2 / 2) = (1 + q) 2^n as in exp_parts_in_range, and m S = S + S q in one FMA (a
  // rounding fewer). x^2 / 2 <= 84.5 keeps 2^n and t normal, so one multiply scales.
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 x2_lo = _mm256_fmsub_ps(x, x, x2);
  const ExpReduced e = exp_reduce(_mm256_mul_ps(x2, splat(-0.5f)));
  const __m256 q = exp_polynomial_minus_one(_mm256_fmadd_ps(x2_lo, splat(-0.5f), e.r));
  const __m256 s = gelu_erf_tail_factor(ax);
  const __m256 t = _mm256_mul_ps(_mm256_fmadd_ps(s, q, s), pow2(_mm256_cvtps_epi32(e.n)));
  return _mm256_blendv_ps(_mm256_sub_ps(x, t), _mm256_or_ps(t, splat(-0.0f)), x);
}

// sigmoid(-2u) with u = sqrt(2/pi) (z + 0.044715 z^3), for z in [0, 3.6], as half_unit_pieces
// (the last piece fitted only up to 3.6) with a relative error below 2.6 * 2^-24, fitted for
// relative error with f32 coefficients: one permute per coefficient. (16 pieces of width 1/4
// and degree 6 took two permutes and a blend wherever a vector's lanes spanned both halves of
// the table, and ran 13% slower on [-1, 1].)
alignas(64) inline constexpr float kGeluTanhSigmoidMinus[8][8] = {
    {5.000000000e-01f, 3.085719943e-01f, 1.588080078e-01f, 6.695228070e-02f, 2.270115353e-02f, 6.033706479e-03f, 1.212464063e-03f, 1.760564774e-04f},
    {-1.994711459e-01f, -1.759418845e-01f, -1.208860427e-01f, -6.488768756e-02f, -2.720010281e-02f, -8.797056973e-03f, -2.132771770e-03f, -3.712429025e-04f},
    {2.154929462e-07f, 2.206415683e-02f, 3.017461114e-02f, 2.417251281e-02f, 1.354217622e-02f, 5.571677350e-03f, 1.679111272e-03f, 3.583716461e-04f},
    {8.349693380e-03f, 5.485969596e-03f, -5.156291081e-05f, -3.340672469e-03f, -3.325791331e-03f, -1.931837876e-03f, -7.637539529e-04f, -2.069818001e-04f},
    {1.608835555e-05f, -1.271251356e-03f, -1.251791138e-03f, -3.597691830e-04f, 2.692003036e-04f, 3.590686247e-04f, 2.124834282e-04f, 7.792573160e-05f},
    {-3.666714183e-04f, -1.470534189e-04f, 1.354589476e-04f, 1.801632607e-04f, 6.510348612e-05f, -1.726911978e-05f, -3.301590186e-05f, -1.915363646e-05f},
    {7.026842650e-05f, 2.143944221e-05f, 3.370507693e-05f, -9.017606317e-06f, -2.054862307e-05f, -7.659152288e-06f, 8.399076705e-07f, 2.524863930e-06f},
    {-3.077546717e-05f, 1.626424091e-05f, -9.994489119e-06f, -7.623963484e-06f, 2.430963832e-06f, 2.043380391e-06f, 7.871765320e-07f, -3.317937569e-07f},
};  // C[degree][k]

// 2u = 2 sqrt(2/pi) (x + 0.044715 x^3) = x (k0 + k1 x^2) as hi + lo for |x| <= 8, in f32
// pairs (k0, k1 and x^2 split exactly, FMA; 2Sum for k0 + k1 x^2): as accurate as the double
// evaluation below, without its conversions (products of two low parts, below 2^-46 of the
// result, are dropped).
struct GeluTanhArgument {
  __m256 hi, lo;
};
KILN_VEC GeluTanhArgument gelu_tanh_argument(__m256 x) {
  const __m256 k0 = splat(1.595769167e+00f), k0_lo = splat(-4.534068054e-08f);
  const __m256 k1 = splat(7.135481387e-02f), k1_lo = splat(2.398832466e-09f);
  const __m256 x2 = _mm256_mul_ps(x, x), x2_lo = _mm256_fmsub_ps(x, x, x2);
  const __m256 p = _mm256_mul_ps(k1, x2), p_lo = _mm256_fmsub_ps(k1, x2, p);
  // k0 + p exactly as s + s_lo (Fast2Sum on the larger and the smaller: both are positive).
  const __m256 big = _mm256_max_ps(p, k0), small = _mm256_min_ps(p, k0);
  const __m256 s = _mm256_add_ps(big, small);
  const __m256 s_lo = _mm256_sub_ps(small, _mm256_sub_ps(s, big));
  const __m256 lo = _mm256_add_ps(
      _mm256_add_ps(_mm256_fmadd_ps(k1, x2_lo, p_lo), _mm256_fmadd_ps(k1_lo, x2, k0_lo)), s_lo);
  const __m256 hi = _mm256_mul_ps(x, s);
  return {hi, _mm256_fmadd_ps(x, lo, _mm256_fmsub_ps(x, s, hi))};
}

// PyTorch's tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as
// x sigmoid(2u): for vectors all within [-3.6, 3.6], gelu_from_gate_minus with
// p = sigmoid(-2u(|x|)) (kGeluTanhSigmoidMinus). Otherwise 2u is computed as hi + lo (in f32 pairs within [-8, 8],
// in double beyond): for x << 0 the result is about x exp(2u), whose relative error is |2u|
// times that of 2u.
KILN_VEC __m256 gelu_tanh(__m256 x) {
  if (all_within(x, 3.6f)) [[likely]]
    return gelu_from_gate_minus(x, half_unit_pieces(kGeluTanhSigmoidMinus, abs(x)));
  // |x| <= 8: |2u| <= 50 and the result is normal, so scaling last changes nothing.
  if (all_within(x, 8.0f)) [[likely]] {
    const GeluTanhArgument u2 = gelu_tanh_argument(x);
    return _mm256_mul_ps(x, sigmoid_in_range(u2.hi, u2.lo));
  }
  const __m256d k0 = _mm256_set1_pd(1.5957691216057308);  // 2 sqrt(2/pi)
  const __m256d k1 = _mm256_set1_pd(1.5957691216057308 * 0.044715);
  const __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  const __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  const __m256d v0 = _mm256_mul_pd(x0, _mm256_fmadd_pd(k1, _mm256_mul_pd(x0, x0), k0));
  const __m256d v1 = _mm256_mul_pd(x1, _mm256_fmadd_pd(k1, _mm256_mul_pd(x1, x1), k0));
  const __m128 hi0 = _mm256_cvtpd_ps(v0), hi1 = _mm256_cvtpd_ps(v1);
  const __m128 lo0 = _mm256_cvtpd_ps(_mm256_sub_pd(v0, _mm256_cvtps_pd(hi0)));
  const __m128 lo1 = _mm256_cvtpd_ps(_mm256_sub_pd(v1, _mm256_cvtps_pd(hi1)));
  const __m256 hi = _mm256_set_m128(hi1, hi0), lo = _mm256_set_m128(lo1, lo0);
  const SigmoidParts sig = sigmoid_parts(hi, lo);
  return ldexp(_mm256_mul_ps(x, sig.m), sig.n);
}

// erf's coefficients, [degree][k].
alignas(64) inline constexpr float kErfPieces[8][8] = {
    {-5.864138330e-08f, -1.116648093e-01f, 1.060415506e-01f, 1.533513702e-02f, 1.227172557e-03f, 5.331226930e-05f, 1.242514259e-06f, 1.541724970e-08f},
    {1.549115725e-09f, -2.026765347e-01f, -1.746526808e-01f, -3.412895650e-02f, -3.470963100e-03f, -1.837198215e-04f, -5.061025149e-06f, -7.256351608e-08f},
    {-1.228168458e-01f, -6.313182414e-02f, 1.140592396e-01f, 3.343243897e-02f, 4.533464089e-03f, 2.999562130e-04f, 9.917577700e-06f, 1.657641491e-07f},
    {1.061038802e-06f, 3.239199519e-02f, -3.064821847e-02f, -1.811877638e-02f, -3.569721477e-03f, -3.064785851e-04f, -1.240135225e-05f, -2.462493853e-07f},
    {1.202260144e-02f, 1.559940632e-03f, -2.413268434e-03f, 5.235825200e-03f, 1.838594326e-03f, 2.174280962e-04f, 1.102697024e-05f, 2.509378874e-07f},
    {3.648532220e-05f, -2.980519552e-03f, 3.628755454e-03f, -2.757973562e-04f, -6.107945810e-04f, -1.120652014e-04f, -7.442616607e-06f, -2.596368631e-07f},
    {-1.023348421e-03f, 1.678149420e-04f, -5.436814972e-04f, -3.675235494e-04f, 1.007707397e-04f, 4.276233449e-05f, 4.167291536e-06f, 4.331751668e-08f},
    {1.118096916e-04f, 1.870732376e-04f, -1.680563000e-04f, 1.197857491e-04f, 9.477133062e-06f, -1.079979484e-05f, -1.683361688e-06f, -1.810372225e-07f},
};  // C[degree][k]
// erf(x), branch-free, on z = min(|x|, 4) (erf rounds to 1 from 3.92 on): 8 pieces of width 4/7,
// k = round(1.75 z), each a degree-7 polynomial p in v = 1.75 z - k (|v| <= 1/2), fitted for
// absolute error with f32 coefficients; a permute picks each lane's coefficient by k, so no exp,
// division or gather. Two forms (1 ULP at most over every f32, measured exhaustively):
//  * k <= 1 (|x| < 0.857): p = erf(x) / x - c, c = 2/sqrt(pi) rounded to f32, and
//    erf = |x| c + |x| p with the large product rounded only once (FMA); the small term stays
//    below a quarter of the result, so its rounding costs a fraction of an ULP;
//  * k >= 2: p = erfc(|x|) < 0.23 and erf = 1 - p: erfc's rounding is a quarter of erf's ULP.
// The sign is restored last (keeps -0); min keeps a NaN (its second operand), which the
// polynomial passes on.
KILN_VEC __m256 erf(__m256 x) {
  const __m256 ax = abs(x);
  const __m256 magic = splat(12582912.0f);  // as in half_unit_pieces
  const __m256 z = _mm256_min_ps(splat(4.0f), ax);
  const __m256 shifted = _mm256_fmadd_ps(z, splat(1.75f), magic);
  const __m256 k = _mm256_sub_ps(shifted, magic);
  const __m256 v = _mm256_fmsub_ps(z, splat(1.75f), k);
  const __m256i piece = _mm256_castps_si256(shifted);
  const __m256 p = piecewise_degree7(kErfPieces, piece, v);
  const __m256 small = _mm256_fmadd_ps(ax, splat(1.1283792f), _mm256_mul_ps(ax, p));
  const __m256 large = _mm256_sub_ps(splat(1.0f), p);
  const __m256 magnitude =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(k, splat(1.5f), _CMP_LT_OQ));
  return _mm256_or_ps(magnitude, sign_bits(x));
}

// log(x) (Cephes logf): x = 2^e m with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
// log(m) = f - f^2/2 + f^3 P(f), and e ln2 in two parts so that e * ln2_hi is exact. Subnormal
// inputs are scaled by 2^23 first; 0 gives -inf, negative inputs NaN, +inf and NaN themselves.
struct LogParts {
  __m256 e, f, f2, cubic;  // cubic = f^3 P(f)
};
inline constexpr float kLogPolynomial[] = {
    3.3333331174e-1f,  -2.4999993993e-1f, 2.0000714765e-1f,  -1.6668057665e-1f, 1.4249322787e-1f,
    -1.2420140846e-1f, 1.1676998740e-1f,  -1.1514610310e-1f, 7.0376836292e-2f};
// The parts of 2^e m for m in [sqrt(1/2), sqrt(2)).
KILN_VEC LogParts log_parts_of(__m256 e, __m256 m) {
  const __m256 f = _mm256_sub_ps(m, splat(1.0f));
  const __m256 f2 = _mm256_mul_ps(f, f);
  return {e, f, f2, _mm256_mul_ps(_mm256_mul_ps(f, f2), polynomial(f, kLogPolynomial))};
}
KILN_VEC LogParts log_parts(__m256 x) {
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
  return log_parts_of(_mm256_cvtepi32_ps(exponent), m);
}
// log(2^e m) = e ln2 + f + y with y = f^3 P(f) - f^2/2 + e ln2_lo: e ln2_hi + f is summed with
// its rounding error kept (Fast2Sum: |e ln2_hi| >= |f| unless e = 0, where the sum is exact), so
// that the result rounds once.
KILN_VEC __m256 log_of_parts(const LogParts& p) {
  __m256 y = _mm256_fmadd_ps(p.e, splat(-2.12194440e-4f), p.cubic);
  y = _mm256_fnmadd_ps(p.f2, splat(0.5f), y);
  const __m256 t = _mm256_mul_ps(p.e, splat(0.693359375f));
  const __m256 sum = _mm256_add_ps(t, p.f);
  const __m256 sum_error = _mm256_add_ps(_mm256_sub_ps(t, sum), p.f);
  return _mm256_add_ps(sum, _mm256_add_ps(sum_error, y));
}
// log's and log2's values at 0 (-inf), below (NaN), +inf and NaN (themselves).
KILN_VEC __m256 with_log_specials(__m256 result, __m256 x) {
  result = _mm256_blendv_ps(result, splat(-__builtin_inff()),
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  result = _mm256_blendv_ps(result, splat(__builtin_nanf("")),
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, splat(3.40282347e+38f), _CMP_NLE_UQ));
}
KILN_VEC __m256 log(__m256 x) { return with_log_specials(log_of_parts(log_parts(x)), x); }

// log2(x) = e + log(m) log2(e) with log(m) = f + y from log's parts: powers of two give e
// exactly (f = y = 0); f log2(e) is taken with log2(e) in two parts, so that e plus it rounds once
// more.
KILN_VEC __m256 log2(__m256 x) {
  const LogParts p = log_parts(x);
  const __m256 y = _mm256_fnmadd_ps(p.f2, splat(0.5f), p.cubic);
  const __m256 log2_e_hi = splat(1.44269502162933349609f), log2_e_lo = splat(1.92596303e-8f);
  const __m256 log2_m = _mm256_fmadd_ps(
      p.f, log2_e_hi, _mm256_fmadd_ps(y, log2_e_hi, _mm256_mul_ps(p.f, log2_e_lo)));
  return with_log_specials(_mm256_add_ps(p.e, log2_m), x);
}

// expm1(x) = 2^n (1 + q) - 1 = fma(2^n, q, 2^n - 1) with exp's reduction x = n ln2 + r and
// q = e^r - 1 (tanh's E): near 0 (n = 0) it is q itself, so it keeps its relative accuracy, and
// 2^n - 1 is exact down to n = -24. x is clamped to [-18, 80] (NaN passes: the constants come
// first); below -17.3 the result rounds to -1, and above 80 it is exp(x), whose overflow exp
// handles (the -1 is far below its ULP). The sign of x goes on last (-0 stays -0).
KILN_VEC __m256 expm1(__m256 x) {
  const __m256 clamped = _mm256_min_ps(splat(80.0f), _mm256_max_ps(splat(-18.0f), x));
  const ExpReduced e = exp_reduce(clamped);
  const __m256 scale = pow2(_mm256_cvtps_epi32(e.n));
  __m256 result = _mm256_fmadd_ps(scale, exp_polynomial_minus_one(e.r),
                                  _mm256_sub_ps(scale, splat(1.0f)));
  const __m256 large = _mm256_cmp_ps(x, splat(80.0f), _CMP_GT_OQ);
  if (_mm256_movemask_ps(large)) [[unlikely]]
    result = _mm256_blendv_ps(result, exp(x), large);
  return _mm256_or_ps(result, sign_bits(x));
}

// log1p(x) = log(u) * (x / (u - 1)) with u = 1 + x rounded (Goldberg): the quotient undoes u's
// rounding to first order. x itself where u = 1 (|x| below half an ULP of 1; -0 stays -0), and u
// where it is +inf. -1 gives -inf, below -1 NaN, as log does.
KILN_VEC __m256 log1p(__m256 x) {
  const __m256 u = _mm256_add_ps(splat(1.0f), x);
  const __m256 d = _mm256_sub_ps(u, splat(1.0f));
  __m256 result = _mm256_mul_ps(log(u), _mm256_div_ps(x, d));
  result = _mm256_blendv_ps(result, x, _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_EQ_OQ));
  return _mm256_blendv_ps(result, u, _mm256_cmp_ps(u, splat(__builtin_inff()), _CMP_EQ_OQ));
}

// log1p(e^t) for t = hi + lo (lo the rounding error of a product hi, 0 where hi is infinite), as
// max(t, 0) + log1p(v) with v = e^-|t| in [0, 1]: e^-|hi| corrected by lo to first order.
// u = 1 + v lies in [1, 2], so log(u) takes no exponent extraction (e is 0 or 1) and no special
// cases, and log1p(v) = log(u) + c / u, where c = v - (u - 1) is u's rounding error, exactly
// (Fast2Sum). -inf gives 0; +inf and NaN themselves.
KILN_VEC __m256 log1p_exp(__m256 hi, __m256 lo) {
  const __m256 e = exp(_mm256_or_ps(abs(hi), splat(-0.0f)));
  const __m256 v = _mm256_fnmadd_ps(e, _mm256_xor_ps(lo, sign_bits(hi)), e);
  const __m256 u = _mm256_add_ps(splat(1.0f), v);
  const __m256 c = _mm256_sub_ps(v, _mm256_sub_ps(u, splat(1.0f)));
  const __m256 high = _mm256_cmp_ps(u, splat(1.41421356f), _CMP_GT_OQ);
  const LogParts p = log_parts_of(_mm256_and_ps(high, splat(1.0f)),
                                  _mm256_blendv_ps(u, _mm256_mul_ps(u, splat(0.5f)), high));
  const __m256 positive_lo =
      _mm256_and_ps(lo, _mm256_cmp_ps(hi, _mm256_setzero_ps(), _CMP_GT_OQ));
  const __m256 log1p_v = _mm256_add_ps(log_of_parts(p), _mm256_div_ps(c, u));
  const __m256 small = _mm256_add_ps(positive_lo, log1p_v);
  // max(0, hi) passes a NaN hi on (its second operand).
  return _mm256_add_ps(_mm256_max_ps(_mm256_setzero_ps(), hi), small);
}

// mish(x) = x tanh(log1p(e^x)), PyTorch's formula, with log1p(e^x) as softplus takes it. Below
// -17, tanh(log1p(e^x)) is e^x within half an ULP, and x e^x is taken as x times exp's m, scaled
// by 2^n last: a subnormal e^x alone would have lost most of its digits before the product.
KILN_VEC __m256 mish(__m256 x) {
  __m256 result = _mm256_mul_ps(x, tanh(log1p_exp(x, _mm256_setzero_ps())));
  const __m256 tiny = _mm256_cmp_ps(x, splat(-17.0f), _CMP_LT_OQ);
  if (_mm256_movemask_ps(tiny)) {
    const ExpParts e = exp_parts(x, _mm256_setzero_ps());
    result = _mm256_blendv_ps(result, ldexp(_mm256_mul_ps(x, e.m), e.n), tiny);
  }
  return result;
}

// sin (kCos false) or cos: x = j pi/2 + r, |r| <= pi/4, the reduction in double with pi/2 in two
// parts (fdlibm's: the first has 33 bits, so j times it is exact): near a zero of the result r
// is tiny and must keep its relative accuracy, which an f32 reduction loses (hundreds of ULP
// near x = 4477). Then Cephes' sinf and cosf polynomials of r in f32, chosen and signed by the
// quadrant j mod 4 (j + 1 for cos). Lanes beyond |x| = 2^20 (j must stay below 2^20 for j times
// the 33-bit part to be exact), and inf and NaN, are computed in double as the reference does
// (std::sin, std::cos), lane by lane: a lane's bits depend on its value only.
KILN_VEC __m128 reduced_half(__m128 x, __m128 j) {
  const __m256d jd = _mm256_cvtps_pd(j);
  __m256d r = _mm256_fnmadd_pd(jd, _mm256_set1_pd(1.57079632673412561417e+00), _mm256_cvtps_pd(x));
  r = _mm256_fnmadd_pd(jd, _mm256_set1_pd(6.07710050650619224932e-11), r);
  return _mm256_cvtpd_ps(r);
}
inline constexpr float kSinPolynomial[] = {-1.6666654611e-1f, 8.3321608736e-3f,
                                           -1.9515295891e-4f};
inline constexpr float kCosPolynomial[] = {4.166664568298827e-2f, -1.388731625493765e-3f,
                                           2.443315711809948e-5f};
template <bool kCos>
KILN_VEC __m256 sin_cos(__m256 x) {
  const __m256 j = _mm256_round_ps(_mm256_mul_ps(x, splat(0.636619772367581343f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_set_m128(
      reduced_half(_mm256_extractf128_ps(x, 1), _mm256_extractf128_ps(j, 1)),
      reduced_half(_mm256_castps256_ps128(x), _mm256_castps256_ps128(j)));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 sin_r = _mm256_fmadd_ps(_mm256_mul_ps(r2, r), polynomial(r2, kSinPolynomial), r);
  const __m256 cos_r = _mm256_fmadd_ps(_mm256_mul_ps(r2, r2), polynomial(r2, kCosPolynomial),
                                       _mm256_fnmadd_ps(r2, splat(0.5f), splat(1.0f)));
  __m256i quadrant = _mm256_cvtps_epi32(j);
  if constexpr (kCos) quadrant = _mm256_add_epi32(quadrant, _mm256_set1_epi32(1));
  // Bit 0 of the quadrant (two's complement: mod 4 for negative j too) picks cos r, bit 1
  // negates; each moved to the sign bit, which blendv and xor read.
  __m256 y = _mm256_blendv_ps(sin_r, cos_r, _mm256_castsi256_ps(_mm256_slli_epi32(quadrant, 31)));
  y = _mm256_xor_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(quadrant, 1), 31)));
  if constexpr (!kCos)  // sin(-0) = -0, where r came out +0
    y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  const int beyond = _mm256_movemask_ps(_mm256_cmp_ps(abs(x), splat(1048576.0f), _CMP_NLE_UQ));
  if (beyond) [[unlikely]] {
    alignas(32) float lanes[8], results[8];
    _mm256_store_ps(lanes, x);
    _mm256_store_ps(results, y);
    for (int l = 0; l < 8; ++l)
      if (beyond >> l & 1) {
        const double v = lanes[l];
        results[l] = static_cast<float>(kCos ? std::cos(v) : std::sin(v));
      }
    y = _mm256_load_ps(results);
  }
  return y;
}

// x / (1 + exp(-x)); below -87, x sigmoid(x) scaled by 2^n last, so that a subnormal result is
// rounded once.
KILN_VEC __m256 silu(__m256 x) {
  return sigmoid_times(x, x, _mm256_div_ps(x, one_plus_exp_minus(x)));
}

#undef KILN_VEC

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
