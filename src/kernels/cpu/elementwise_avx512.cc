// The avx512 array kernels of elementwise_avx2.h: one 16-lane loop over vec_math_avx512.h's
// functions. Tails take zero-masked loads and masked stores, so every element goes through the
// same vector code, in the same 8-lane halves as the AVX2 loop's vectors (results equal its).
#include "kernels/cpu/elementwise_avx2.h"

#ifdef KILN_X86
#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/cpu/vec_math_avx512.h"

namespace kiln::cpu::avx512 {

namespace {

template <typename Op>
KILN_TARGET_AVX512 void plain_loop(const Op& op, const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, op(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, mask, op(_mm512_maskz_loadu_ps(mask, in + i)));
  }
}

// Outputs that avx2::streams_output() are written with streaming stores (whole 64-byte lines),
// the input prefetched ahead as in the 8-lane loop (elementwise_avx2.h).
template <typename Op>
KILN_TARGET_AVX512 void unary(const Op& op, const float* in, float* out, int64_t n) {
  if (avx2::streams_output(n * static_cast<int64_t>(sizeof(float)))) {
    const auto misalignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % 64);
    const int64_t head = std::min(n, (64 - misalignment) % 64 / 4);
    plain_loop(op, in, out, head);
    int64_t i = head;
    for (; i + 16 <= n; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(in + i + avx2::kStreamingPrefetchFloats),
                   _MM_HINT_T0);
      _mm512_stream_ps(out + i, op(_mm512_loadu_ps(in + i)));
    }
    avx2::fence_streamed_stores();
    plain_loop(op, in + i, out + i, n - i);
    return;
  }
  plain_loop(op, in, out, n);
}

template <__m512 (*F)(__m512)>
struct Function {
  KILN_TARGET_AVX512 __m512 operator()(__m512 x) const { return F(x); }
};

// avx2's EluOp on 16 lanes.
struct EluOp {
  __m512 scale, input_scale, negative_factor;
  KILN_TARGET_AVX512 __m512 operator()(__m512 x) const {
    const __m512 negative = _mm512_mul_ps(expm1(_mm512_mul_ps(x, input_scale)), negative_factor);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), negative,
                                _mm512_mul_ps(x, scale));
  }
};

// avx2's SoftplusOp on 16 lanes.
struct SoftplusOp {
  __m512 beta, threshold;
  bool divides;
  KILN_TARGET_AVX512 __m512 operator()(__m512 x) const {
    const __m512 t = _mm512_mul_ps(x, beta);
    const __mmask16 finite = _mm512_cmp_ps_mask(abs(t), splat(__builtin_inff()), _CMP_LT_OQ);
    const __m512 t_error = _mm512_maskz_fmsub_ps(finite, x, beta, t);
    __m512 y = log1p_exp(t, t_error);
    if (divides) y = _mm512_div_ps(y, beta);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, threshold, _CMP_GT_OQ), y, x);
  }
};

}  // namespace

#define KILN_UNARY16(name)                                   \
  KILN_TARGET_AVX512 void name(const float* in, float* out, int64_t n) { \
    unary(Function<&name>{}, in, out, n);                      \
  }
KILN_UNARY16(exp)
KILN_UNARY16(sigmoid)
KILN_UNARY16(tanh)
KILN_UNARY16(gelu_erf)
KILN_UNARY16(gelu_tanh)
KILN_UNARY16(erf)
KILN_UNARY16(silu)
KILN_UNARY16(mish)
KILN_UNARY16(log)
KILN_UNARY16(log1p)
KILN_UNARY16(log2)
KILN_UNARY16(expm1)
KILN_UNARY16(sin)
KILN_UNARY16(cos)
#undef KILN_UNARY16

KILN_TARGET_AVX512 void elu(const float* in, float* out, int64_t n, float scale,
                            float input_scale, float negative_factor) {
  unary(EluOp{splat(scale), splat(input_scale), splat(negative_factor)}, in, out, n);
}

KILN_TARGET_AVX512 void softplus(const float* in, float* out, int64_t n, float beta,
                                 float threshold) {
  unary(SoftplusOp{splat(beta), splat(threshold), beta != 1.0f}, in, out, n);
}

}  // namespace kiln::cpu::avx512

namespace kiln::cpu {

UnaryArrayFn widest(UnaryArrayFn eight) {
  if (!has_avx512f()) return eight;
  static constexpr std::pair<UnaryArrayFn, UnaryArrayFn> kSixteen[] = {
      {&avx2::exp, &avx512::exp},           {&avx2::sigmoid, &avx512::sigmoid},
      {&avx2::tanh, &avx512::tanh},         {&avx2::gelu_erf, &avx512::gelu_erf},
      {&avx2::gelu_tanh, &avx512::gelu_tanh}, {&avx2::erf, &avx512::erf},
      {&avx2::silu, &avx512::silu},         {&avx2::mish, &avx512::mish},
      {&avx2::log, &avx512::log},           {&avx2::log1p, &avx512::log1p},
      {&avx2::log2, &avx512::log2},         {&avx2::expm1, &avx512::expm1},
      {&avx2::sin, &avx512::sin},           {&avx2::cos, &avx512::cos}};
  for (const auto& [eight_lanes, sixteen_lanes] : kSixteen)
    if (eight_lanes == eight) return sixteen_lanes;
  return eight;
}

}  // namespace kiln::cpu

#endif  // KILN_X86
