// Rows of attention's scores and outputs on 16 AVX-512 lanes, shared by the onednn and flash_amx
// kernels: one masking and one final rounding, so that the two agree wherever their products
// and weights do.
#pragma once

#include "kernels/cpu/attention.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/vec_math_avx512.h"

namespace kiln::cpu::avx512 {

// Scores s[j, j + 16) of one query row (`lanes`: those before the row's end n) times `scale`,
// g's mask added (additive) or applied (bool), and -inf at the keys from `attended` on (causal
// attention's future) or where a bool mask is false. `mask` points at the mask's element for
// s[0] (null without a mask); its keys are contiguous or broadcast (g.mask_col_stride 1 or 0).
KILN_TARGET_AVX512 inline __m512 masked_scores(const AttentionGeometry& g, const float* s,
                                               const void* mask, int64_t j, int64_t n,
                                               __mmask16 lanes, int64_t attended, __m512 scale) {
  __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, s + j), scale);
  __mmask16 keep = j + 16 <= attended ? lanes : lanes & lanes_from(j, attended);
  if (g.mask == AttentionMask::Additive) {
    const auto* add = static_cast<const float*>(mask);
    v = _mm512_add_ps(v, g.mask_col_stride == 0 ? splat(add[0])
                                                 : _mm512_maskz_loadu_ps(lanes, add + j));
  } else if (g.mask == AttentionMask::Bool) {
    const auto* flags = static_cast<const uint8_t*>(mask);
    __m128i bytes;
    if (g.mask_col_stride == 0) {
      bytes = _mm_set1_epi8(static_cast<char>(flags[0]));
    } else if (j + 16 <= n) {
      bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(flags + j));
    } else {  // a masked byte load would take AVX512-BW; the row's tail is copied instead
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, flags + j, static_cast<size_t>(n - j));
      bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
    }
    const __m512i flags32 = _mm512_maskz_cvtepu8_epi32(kAllLanes, bytes);
    keep &= _mm512_test_epi32_mask(flags32, flags32);
  }
  return keep == lanes ? v
                       : _mm512_mask_blend_ps(keep, splat(-std::numeric_limits<float>::infinity()),
                                              v);
}

// out[0, n) = w / sum: f32 divided, bf16 multiplied by 1 / sum and rounded once to nearest even
// (bf16_avx512.h's rounding, subnormals kept); NaN for a NaN sum (a row with a NaN score),
// zeros for a zero sum (a row attending no key).
template <typename T>
KILN_TARGET_AVX512 inline void store_normalized_row(const float* w, float sum, int64_t n,
                                                    T* out) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, BFloat16>);
  if (std::isnan(sum) || sum == 0) {
    const float value = sum == 0 ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    if constexpr (std::is_same_v<T, float>) std::fill(out, out + n, value);
    else std::fill(out, out + n, to_bfloat16(value));
    return;
  }
  const __m512 by = splat(std::is_same_v<T, float> ? sum : 1.0f / sum);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 lanes = lanes_from(c, n);
    const __m512 row = _mm512_maskz_loadu_ps(lanes, w + c);
    if constexpr (std::is_same_v<T, float>)
      _mm512_mask_storeu_ps(out + c, lanes, _mm512_div_ps(row, by));
    else
      _mm512_mask_cvtepi32_storeu_epi16(out + c, lanes, round_to_bf16(_mm512_mul_ps(row, by)));
  }
}

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
