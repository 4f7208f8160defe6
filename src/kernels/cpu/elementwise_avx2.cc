#include "kernels/cpu/elementwise_avx2.h"

#ifdef KILN_X86
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

namespace {

// ---------------------------------------------------------------- operands and results

// Loop operands: 8 consecutive elements, or one element broadcast (step 0). Tails go through
// masked loads and stores so every element takes the same vector code (results don't depend on
// position).
// Streamed inputs are prefetched into L2 only: the 8-lane loops of the longer functions ran
// 11-14% faster so than with prefetches into L1 (960 MiB, 2 threads: tanh 21.6 -> 24.5 GB/s,
// erf 25.1 -> 28.7, gelu (tanh) 24.8 -> 28.2; exp unchanged), the 16-lane loop alike either way.
inline void prefetch_streamed(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

struct Contiguous {
  const float* p;
  Contiguous advanced(int64_t count) const { return {p + count}; }
  KILN_TARGET_AVX2 __m256 load(int64_t i) const { return _mm256_loadu_ps(p + i); }
  KILN_TARGET_AVX2 __m256 load_tail(int64_t i, int64_t, __m256i mask) const {
    return _mm256_maskload_ps(p + i, mask);
  }
  void prefetch(int64_t i) const {
    prefetch_streamed(p + i + kStreamingPrefetchFloats);
  }
};
struct Broadcast {
  __m256 v;
  Broadcast advanced(int64_t) const { return *this; }
  void prefetch(int64_t) const {}
  KILN_TARGET_AVX2 __m256 load(int64_t) const { return v; }
  KILN_TARGET_AVX2 __m256 load_tail(int64_t, int64_t, __m256i) const { return v; }
};

KILN_TARGET_AVX2 inline Broadcast broadcast_of(const float* p) { return {splat(*p)}; }
KILN_TARGET_AVX2 inline Broadcast broadcast_of(const BFloat16* p) { return {splat(to_float(*p))}; }

// 8 consecutive bf16 elements, widened (exactly) on load.
struct Bf16Contiguous {
  const BFloat16* p;
  Bf16Contiguous advanced(int64_t count) const { return {p + count}; }
  KILN_TARGET_AVX2 __m256 load(int64_t i) const { return load_bf16(p + i); }
  KILN_TARGET_AVX2 __m256 load_tail(int64_t i, int64_t count, __m256i) const {
    return load_bf16_tail(p + i, count);
  }
  void prefetch(int64_t i) const {
    prefetch_streamed(p + i + kStreamingPrefetchFloats);
  }
};

// 8 bools (bytes 0 or 1) as a lane mask: all ones where true.
KILN_TARGET_AVX2 inline __m256 condition_mask(uint64_t bytes) {
  const __m256i lanes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes)));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(lanes, _mm256_setzero_si256()));
}
struct ConditionContiguous {
  const bool* p;
  ConditionContiguous advanced(int64_t count) const { return {p + count}; }
  void prefetch(int64_t i) const {
    prefetch_streamed(p + i + kStreamingPrefetchFloats);
  }
  KILN_TARGET_AVX2 __m256 load(int64_t i) const {
    uint64_t bytes;
    std::memcpy(&bytes, p + i, 8);
    return condition_mask(bytes);
  }
  KILN_TARGET_AVX2 __m256 load_tail(int64_t i, int64_t count, __m256i) const {
    uint64_t bytes = 0;
    std::memcpy(&bytes, p + i, static_cast<size_t>(count));
    return condition_mask(bytes);
  }
};

struct FloatOut {
  float* p;
  KILN_TARGET_AVX2 void store(int64_t i, __m256 v) const { _mm256_storeu_ps(p + i, v); }
  KILN_TARGET_AVX2 void store_tail(int64_t i, int64_t, __m256i mask, __m256 v) const {
    _mm256_maskstore_ps(p + i, mask, v);
  }
};

// Rounded to bf16 (nearest even, NaN 0x7FC0) on store: the f32 result's conversion, which the
// driver otherwise runs over a block of f32 results.
struct Bf16Out {
  BFloat16* p;
  KILN_TARGET_AVX2 void store(int64_t i, __m256 v) const { store_bf16(p + i, v); }
  KILN_TARGET_AVX2 void store_tail(int64_t i, int64_t count, __m256i, __m256 v) const {
    store_bf16_tail(p + i, count, v);
  }
};

// A lane mask stored as 8 bools.
struct BoolOut {
  bool* p;
  KILN_TARGET_AVX2 static uint64_t bytes(__m256 mask) {
    const __m256i m = _mm256_castps_si256(mask);
    const __m128i words =
        _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    const __m128i ones = _mm_and_si128(_mm_packs_epi16(words, words), _mm_set1_epi8(1));
    return static_cast<uint64_t>(_mm_cvtsi128_si64(ones));
  }
  KILN_TARGET_AVX2 void store(int64_t i, __m256 mask) const {
    const uint64_t b = bytes(mask);
    std::memcpy(p + i, &b, 8);
  }
  KILN_TARGET_AVX2 void store_tail(int64_t i, int64_t count, __m256i, __m256 mask) const {
    const uint64_t b = bytes(mask);
    std::memcpy(p + i, &b, static_cast<size_t>(count));
  }
};

thread_local int64_t region_bytes = 0;  // the innermost StreamingRegion's

std::atomic<int64_t>& streaming_threshold() {
  static std::atomic<int64_t> bytes = [] {
    const int64_t llc = last_level_cache_bytes();
    return llc > 0 ? llc / 2 : std::numeric_limits<int64_t>::max();
  }();
  return bytes;
}

// out = op(in...) over n elements.
template <typename Op, typename Out, typename... In>
KILN_TARGET_AVX2 void plain_loop(const Op& op, Out out, int64_t n, In... in) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) out.store(i, op.apply(in.load(i)...));
  if (i < n) {
    const int64_t count = n - i;
    const __m256i mask = tail_mask(count);
    out.store_tail(i, count, mask, op.apply(in.load_tail(i, count, mask)...));
  }
}

// The same, for large float outputs, with streaming stores, which bypass the caches: writing a
// line then costs no read of it first. The inputs are prefetched ahead, without which the ops
// with more than a few instructions a vector lost by streaming. 960 MiB, 2 threads, share of
// memcpy, cached stores -> streaming and prefetching: relu 60% -> 120%, exp 53% -> 103%,
// gelu (erf) 47% -> 87%, sigmoid and erf 43-48% -> 71%, silu 47% -> 65%, tanh 40% -> 53%. Each
// 64-byte line is written by two stores in a row.
template <typename Op, typename Out, typename... In>
KILN_TARGET_AVX2 void vector_loop(const Op& op, Out out, int64_t n, In... in) {
  if constexpr (std::is_same_v<Out, FloatOut>) {
    if (streams_output(n * static_cast<int64_t>(sizeof(float)))) {
      const auto misalignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out.p) % 64);
      const int64_t head = std::min(n, (64 - misalignment) % 64 / 4);
      plain_loop(op, out, head, in...);
      int64_t i = head;
      for (; i + 16 <= n; i += 16) {
        (in.prefetch(i), ...);
        const __m256 lo = op.apply(in.load(i)...), hi = op.apply(in.load(i + 8)...);
        _mm256_stream_ps(out.p + i, lo);
        _mm256_stream_ps(out.p + i + 8, hi);
      }
      fence_streamed_stores();
      plain_loop(op, FloatOut{out.p + i}, n - i, in.advanced(i)...);
      return;
    }
  }
  plain_loop(op, out, n, in...);
}

template <typename Op>
KILN_TARGET_AVX2 void unary(const Op& op, const float* in, float* out, int64_t n) {
  vector_loop(op, FloatOut{out}, n, Contiguous{in});
}

// The loop for each combination of steps of a and b (f32 or bf16), after the operands `first`
// (where's condition).
template <typename Op, typename Out, typename T, typename... First>
KILN_TARGET_AVX2 void binary(const Op& op, Out out, int64_t n, const T* a, int64_t a_step,
                             const T* b, int64_t b_step, First... first) {
  using Operand = std::conditional_t<std::is_same_v<T, float>, Contiguous, Bf16Contiguous>;
  if (a_step && b_step)
    vector_loop(op, out, n, first..., Operand{a}, Operand{b});
  else if (a_step)
    vector_loop(op, out, n, first..., Operand{a}, broadcast_of(b));
  else if (b_step)
    vector_loop(op, out, n, first..., broadcast_of(a), Operand{b});
  else
    vector_loop(op, out, n, first..., broadcast_of(a), broadcast_of(b));
}

// ---------------------------------------------------------------- the ops

// A unary op from a vector function.
template <__m256 (*F)(__m256)>
struct Unary {
  KILN_TARGET_AVX2 __m256 apply(__m256 x) const { return F(x); }
};

KILN_TARGET_AVX2 inline __m256 relu_v(__m256 x) {
  // max(0, x) returns x when x is NaN, and keeps -0, like the reference's x < 0 ? 0 : x.
  return _mm256_max_ps(_mm256_setzero_ps(), x);
}
KILN_TARGET_AVX2 inline __m256 neg_v(__m256 x) { return _mm256_xor_ps(x, splat(-0.0f)); }
KILN_TARGET_AVX2 inline __m256 exp_v(__m256 x) { return avx2::exp(x); }
KILN_TARGET_AVX2 inline __m256 sigmoid_v(__m256 x) { return avx2::sigmoid(x); }
KILN_TARGET_AVX2 inline __m256 tanh_v(__m256 x) { return avx2::tanh(x); }
KILN_TARGET_AVX2 inline __m256 gelu_erf_v(__m256 x) { return avx2::gelu_erf(x); }
KILN_TARGET_AVX2 inline __m256 gelu_tanh_v(__m256 x) { return avx2::gelu_tanh(x); }
KILN_TARGET_AVX2 inline __m256 sqrt_v(__m256 x) { return _mm256_sqrt_ps(x); }
// A true division rather than the 12-bit rsqrt approximation.
KILN_TARGET_AVX2 inline __m256 rsqrt_v(__m256 x) {
  return _mm256_div_ps(splat(1.0f), _mm256_sqrt_ps(x));
}
KILN_TARGET_AVX2 inline __m256 abs_v(__m256 x) { return avx2::abs(x); }
KILN_TARGET_AVX2 inline __m256 floor_v(__m256 x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
KILN_TARGET_AVX2 inline __m256 ceil_v(__m256 x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
KILN_TARGET_AVX2 inline __m256 trunc_v(__m256 x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
KILN_TARGET_AVX2 inline __m256 round_v(__m256 x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
KILN_TARGET_AVX2 inline __m256 reciprocal_v(__m256 x) { return _mm256_div_ps(splat(1.0f), x); }
KILN_TARGET_AVX2 inline __m256 square_v(__m256 x) { return _mm256_mul_ps(x, x); }
KILN_TARGET_AVX2 inline __m256 cube_v(__m256 x) { return _mm256_mul_ps(_mm256_mul_ps(x, x), x); }
KILN_TARGET_AVX2 inline __m256 reciprocal_square_v(__m256 x) {
  return _mm256_div_ps(splat(1.0f), _mm256_mul_ps(x, x));
}
KILN_TARGET_AVX2 inline __m256 erf_v(__m256 x) { return avx2::erf(x); }
KILN_TARGET_AVX2 inline __m256 log_v(__m256 x) { return avx2::log(x); }
KILN_TARGET_AVX2 inline __m256 silu_v(__m256 x) { return avx2::silu(x); }
KILN_TARGET_AVX2 inline __m256 expm1_v(__m256 x) { return avx2::expm1(x); }
KILN_TARGET_AVX2 inline __m256 log1p_v(__m256 x) { return avx2::log1p(x); }
KILN_TARGET_AVX2 inline __m256 log2_v(__m256 x) { return avx2::log2(x); }
KILN_TARGET_AVX2 inline __m256 mish_v(__m256 x) { return avx2::mish(x); }
KILN_TARGET_AVX2 inline __m256 sin_v(__m256 x) { return avx2::sin_cos<false>(x); }
KILN_TARGET_AVX2 inline __m256 cos_v(__m256 x) { return avx2::sin_cos<true>(x); }
// min(max(x + 3, 0), 6) with NaN passing through (max and min return their second operand on
// NaN), as PyTorch's vectorized maximum and minimum.
KILN_TARGET_AVX2 inline __m256 relu6_of_x_plus_3(__m256 x) {
  const __m256 t = _mm256_add_ps(x, splat(3.0f));
  return _mm256_min_ps(splat(6.0f), _mm256_max_ps(_mm256_setzero_ps(), t));
}
KILN_TARGET_AVX2 inline __m256 hardswish_v(__m256 x) {
  return _mm256_div_ps(_mm256_mul_ps(x, relu6_of_x_plus_3(x)), splat(6.0f));
}
KILN_TARGET_AVX2 inline __m256 hardsigmoid_v(__m256 x) {
  return _mm256_div_ps(relu6_of_x_plus_3(x), splat(6.0f));
}

struct ClampOp {
  __m256 lo, hi;
  KILN_TARGET_AVX2 __m256 apply(__m256 x) const {
    return _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  }
};
struct LeakyReluOp {
  __m256 slope;
  KILN_TARGET_AVX2 __m256 apply(__m256 x) const {
    return _mm256_blendv_ps(_mm256_mul_ps(x, slope), x,
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
  }
};

// The reference's branches: x * scale above 0, else expm1(x * input_scale) * negative_factor
// (alpha * scale, rounded once).
struct EluOp {
  __m256 scale, input_scale, negative_factor;
  KILN_TARGET_AVX2 __m256 apply(__m256 x) const {
    const __m256 negative =
        _mm256_mul_ps(avx2::expm1(_mm256_mul_ps(x, input_scale)), negative_factor);
    return _mm256_blendv_ps(negative, _mm256_mul_ps(x, scale),
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
  }
};
// x where x * beta > threshold, else log1p(exp(x * beta)) / beta, with x * beta's rounding error
// carried into the exponential (it would cost |x * beta| ULPs of e^(x * beta) far below 0); the
// division is skipped for beta = 1 (exact either way).
struct SoftplusOp {
  __m256 beta, threshold;
  bool divides;
  KILN_TARGET_AVX2 __m256 apply(__m256 x) const {
    const __m256 t = _mm256_mul_ps(x, beta);
    const __m256 finite = _mm256_cmp_ps(avx2::abs(t), splat(__builtin_inff()), _CMP_LT_OQ);
    const __m256 t_error = _mm256_and_ps(_mm256_fmsub_ps(x, beta, t), finite);
    __m256 y = avx2::log1p_exp(t, t_error);
    if (divides) y = _mm256_div_ps(y, beta);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(t, threshold, _CMP_GT_OQ));
  }
};

template <__m256 (*F)(__m256, __m256)>
struct Binary {
  KILN_TARGET_AVX2 __m256 apply(__m256 a, __m256 b) const { return F(a, b); }
};
KILN_TARGET_AVX2 inline __m256 add_v(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
KILN_TARGET_AVX2 inline __m256 sub_v(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
KILN_TARGET_AVX2 inline __m256 mul_v(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
KILN_TARGET_AVX2 inline __m256 div_v(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
// max(b, a) and min(b, a) give a on ties and when a is NaN; a NaN b is put back after.
KILN_TARGET_AVX2 inline __m256 maximum_v(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(b, a), b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}
KILN_TARGET_AVX2 inline __m256 minimum_v(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_min_ps(b, a), b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}

// fmod(a, b), exactly (C's fmod is): in double, q = trunc(a / b) and r = a - q b. Where
// |a / b| < 2^24 the division can't round across an integer (a nonzero a - N b is a multiple of
// the smaller of a's and b's ULPs, which puts a / b at least 2^-24 of itself, or 2^-24, away from
// N, far beyond the double's rounding), so q is exact, and so is r (q < 2^24 and b have 48 bits
// between them). r takes a's sign (a zero result too). Lanes with |a / b| >= 2^24, a zero or
// infinite b, an infinite a or a NaN take std::fmod, lane by lane.
KILN_TARGET_AVX2 inline __m128 fmod_half(__m128 a32, __m128 b32) {
  const __m256d a = _mm256_cvtps_pd(a32), b = _mm256_cvtps_pd(b32);
  const __m256d q = _mm256_round_pd(_mm256_div_pd(a, b), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256d r = _mm256_fnmadd_pd(q, b, a);
  const __m256d sign = _mm256_set1_pd(-0.0);
  return _mm256_cvtpd_ps(_mm256_or_pd(_mm256_andnot_pd(sign, r), _mm256_and_pd(sign, a)));
}
KILN_TARGET_AVX2 inline __m256 fmod_v(__m256 a, __m256 b) {
  __m256 r = _mm256_set_m128(fmod_half(_mm256_extractf128_ps(a, 1), _mm256_extractf128_ps(b, 1)),
                             fmod_half(_mm256_castps256_ps128(a), _mm256_castps256_ps128(b)));
  const __m256 beyond = _mm256_or_ps(
      _mm256_cmp_ps(avx2::abs(_mm256_div_ps(a, b)), splat(16777216.0f), _CMP_NLT_UQ),
      _mm256_cmp_ps(avx2::abs(b), splat(__builtin_inff()), _CMP_EQ_OQ));
  if (const int lanes = _mm256_movemask_ps(beyond)) [[unlikely]] {
    alignas(32) float x[8], y[8], out[8];
    _mm256_store_ps(x, a);
    _mm256_store_ps(y, b);
    _mm256_store_ps(out, r);
    for (int l = 0; l < 8; ++l)
      if (lanes >> l & 1) out[l] = std::fmod(x[l], y[l]);
    r = _mm256_load_ps(out);
  }
  return r;
}
// PyTorch's remainder of floats: fmod, plus b where the result is nonzero and its sign differs
// from b's (in f32, rounded as PyTorch rounds it).
KILN_TARGET_AVX2 inline __m256 remainder_v(__m256 a, __m256 b) {
  const __m256 r = fmod_v(a, b);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 adjust =
      _mm256_and_ps(_mm256_cmp_ps(r, zero, _CMP_NEQ_UQ),
                    _mm256_xor_ps(_mm256_cmp_ps(b, zero, _CMP_LT_OQ),
                                  _mm256_cmp_ps(r, zero, _CMP_LT_OQ)));
  return _mm256_blendv_ps(r, _mm256_add_ps(r, b), adjust);
}

struct AddScaledOp {
  __m256 alpha;
  KILN_TARGET_AVX2 __m256 apply(__m256 a, __m256 b) const { return _mm256_fmadd_ps(alpha, b, a); }
};

template <int Predicate>
struct Compare {
  KILN_TARGET_AVX2 __m256 apply(__m256 a, __m256 b) const { return _mm256_cmp_ps(a, b, Predicate); }
};

struct WhereOp {
  KILN_TARGET_AVX2 __m256 apply(__m256 cond, __m256 a, __m256 b) const {
    return _mm256_blendv_ps(b, a, cond);
  }
};

}  // namespace

#define KILN_UNARY(name)                                            \
  KILN_TARGET_AVX2 void name(const float* in, float* out, int64_t n) {     \
    unary(Unary<&name##_v>{}, in, out, n);                          \
  }
KILN_UNARY(relu)
KILN_UNARY(neg)
KILN_UNARY(exp)
KILN_UNARY(sigmoid)
KILN_UNARY(tanh)
KILN_UNARY(gelu_erf)
KILN_UNARY(gelu_tanh)
KILN_UNARY(sqrt)
KILN_UNARY(rsqrt)
KILN_UNARY(abs)
KILN_UNARY(floor)
KILN_UNARY(ceil)
KILN_UNARY(trunc)
KILN_UNARY(round)
KILN_UNARY(reciprocal)
KILN_UNARY(square)
KILN_UNARY(cube)
KILN_UNARY(reciprocal_square)
KILN_UNARY(erf)
KILN_UNARY(log)
KILN_UNARY(silu)
KILN_UNARY(expm1)
KILN_UNARY(log1p)
KILN_UNARY(log2)
KILN_UNARY(mish)
KILN_UNARY(sin)
KILN_UNARY(cos)
KILN_UNARY(hardswish)
KILN_UNARY(hardsigmoid)
#undef KILN_UNARY

KILN_TARGET_AVX2 void clamp(const float* in, float* out, int64_t n, float lo, float hi) {
  unary(ClampOp{splat(lo), splat(hi)}, in, out, n);
}
KILN_TARGET_AVX2 void leaky_relu(const float* in, float* out, int64_t n, float negative_slope) {
  unary(LeakyReluOp{splat(negative_slope)}, in, out, n);
}
KILN_TARGET_AVX2 void elu(const float* in, float* out, int64_t n, float scale, float input_scale,
                          float negative_factor) {
  unary(EluOp{splat(scale), splat(input_scale), splat(negative_factor)}, in, out, n);
}
KILN_TARGET_AVX2 void softplus(const float* in, float* out, int64_t n, float beta,
                               float threshold) {
  unary(SoftplusOp{splat(beta), splat(threshold), beta != 1.0f}, in, out, n);
}

#define KILN_BINARY(name)                                                                 \
  KILN_TARGET_AVX2 void name(const float* a, int64_t a_step, const float* b, int64_t b_step,     \
                             float* out, int64_t n) {                                           \
    binary(Binary<&name##_v>{}, FloatOut{out}, n, a, a_step, b, b_step);                        \
  }
KILN_BINARY(add)
KILN_BINARY(sub)
KILN_BINARY(mul)
KILN_BINARY(div)
KILN_BINARY(maximum)
KILN_BINARY(minimum)
KILN_BINARY(fmod)
KILN_BINARY(remainder)
#undef KILN_BINARY

#define KILN_BINARY_BF16(name)                                                   \
  KILN_TARGET_AVX2 void name(const BFloat16* a, int64_t a_step, const BFloat16* b,      \
                             int64_t b_step, BFloat16* out, int64_t n) {               \
    binary(Binary<&name##_v>{}, Bf16Out{out}, n, a, a_step, b, b_step);                \
  }
KILN_BINARY_BF16(add)
KILN_BINARY_BF16(sub)
KILN_BINARY_BF16(mul)
KILN_BINARY_BF16(div)
KILN_BINARY_BF16(maximum)
KILN_BINARY_BF16(minimum)
#undef KILN_BINARY_BF16

KILN_TARGET_AVX2 void add_scaled(const float* a, int64_t a_step, const float* b, int64_t b_step,
                                 float* out, int64_t n, float alpha) {
  binary(AddScaledOp{splat(alpha)}, FloatOut{out}, n, a, a_step, b, b_step);
}

#define KILN_COMPARE(name, predicate)                                                      \
  KILN_TARGET_AVX2 void name(const float* a, int64_t a_step, const float* b, int64_t b_step, \
                             bool* out, int64_t n) {                                        \
    binary(Compare<predicate>{}, BoolOut{out}, n, a, a_step, b, b_step);                    \
  }
KILN_COMPARE(eq, _CMP_EQ_OQ)
KILN_COMPARE(ne, _CMP_NEQ_UQ)
KILN_COMPARE(lt, _CMP_LT_OQ)
KILN_COMPARE(le, _CMP_LE_OQ)
KILN_COMPARE(gt, _CMP_GT_OQ)
KILN_COMPARE(ge, _CMP_GE_OQ)
#undef KILN_COMPARE

KILN_TARGET_AVX2 void where(const bool* cond, int64_t c_step, const float* a, int64_t a_step,
                            const float* b, int64_t b_step, float* out, int64_t n) {
  if (c_step)
    binary(WhereOp{}, FloatOut{out}, n, a, a_step, b, b_step, ConditionContiguous{cond});
  else
    binary(WhereOp{}, FloatOut{out}, n, a, a_step, b, b_step,
           Broadcast{*cond ? _mm256_castsi256_ps(_mm256_set1_epi32(-1)) : _mm256_setzero_ps()});
}

int64_t streaming_store_min_bytes() {
  return streaming_threshold().load(std::memory_order_relaxed);
}

void set_streaming_store_min_bytes(int64_t bytes) {
  streaming_threshold().store(bytes, std::memory_order_relaxed);
}

bool streams_output(int64_t call_bytes) {
  return std::max(call_bytes, region_bytes) >= streaming_store_min_bytes();
}

// The streamed lines reach memory in order with what follows.
void fence_streamed_stores() {
  if (region_bytes == 0) _mm_sfence();
}

StreamingRegion::StreamingRegion(int64_t bytes) : enclosing_(region_bytes) {
  region_bytes = bytes;
}

StreamingRegion::~StreamingRegion() {
  _mm_sfence();
  region_bytes = enclosing_;
}

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
