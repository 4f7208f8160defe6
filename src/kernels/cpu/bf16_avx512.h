// bf16 <-> f32 on 16 AVX-512 lanes: bf16_avx2.h's conversions (the same bits as float16.h's
// scalar ones: widening exact, narrowing to nearest even, every NaN 0x7FC0) in half the
// instructions, the narrowing packed by one vpmovdw where 8 lanes take a pack and a permute.
// (AVX512-BF16's vcvtneps2bf16 would flush subnormals and keep NaNs' signs, so it isn't used.)
#pragma once

#include "kernels/cpu/cpu_features.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/float16.h"

namespace kiln::cpu::avx512 {

KILN_TARGET_AVX512 inline __m512 widen_bf16(__m256i bits) {
  constexpr __mmask16 kAll = 0xFFFF;
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, bits), 16));
}

// v rounded to bf16 in each 32-bit lane's low half.
KILN_TARGET_AVX512 inline __m512i round_to_bf16(__m512 v) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_maskz_and_epi32(kAll, _mm512_maskz_srli_epi32(kAll, bits, 16),
                                             _mm512_set1_epi32(1));
  const __m512i bias = _mm512_maskz_add_epi32(kAll, lsb, _mm512_set1_epi32(0x7FFF));
  const __m512i rounded =
      _mm512_maskz_srli_epi32(kAll, _mm512_maskz_add_epi32(kAll, bits, bias), 16);
  return _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                               _mm512_set1_epi32(0x7FC0));
}

// n values of a row, each way, 16 at a time; the tail element by element (widening) or under a
// mask (narrowing).
KILN_TARGET_AVX512 inline void widen_bf16_row(const BFloat16* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i,
                     widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  for (; i < n; ++i) out[i] = to_float(x[i]);
}

KILN_TARGET_AVX512 inline void narrow_to_bf16_row(const float* x, BFloat16* out, int64_t n) {
  constexpr __mmask16 kAll = 0xFFFF;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_maskz_cvtepi32_epi16(kAll, round_to_bf16(_mm512_loadu_ps(x + i))));
  if (i < n) {
    const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_cvtepi32_storeu_epi16(out + i, tail,
                                      round_to_bf16(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
