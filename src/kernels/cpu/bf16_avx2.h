// bf16 <-> f32 on 8 AVX2 lanes, for kernels that read and write bf16 themselves. The same bits as
// float16.h's scalar conversions: widening is exact, narrowing rounds to nearest even as
// PyTorch does and makes every NaN 0x7FC0.
#pragma once

#include "kernels/cpu/cpu_features.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/float16.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

KILN_TARGET_AVX2 inline __m256 widen_bf16(__m128i bits) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

KILN_TARGET_AVX2 inline __m128i narrow_to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0),
                               _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  // Each lane holds <= 0xFFFF, so the saturating pack is exact; it packs within 128-bit
  // halves, and the permute brings the two halves' results together.
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(
      _mm256_packus_epi32(rounded, _mm256_setzero_si256()), 0b1000));
}

KILN_TARGET_AVX2 inline __m256 load_bf16(const BFloat16* p) {
  return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The first `count` (0..8) elements at p, the other lanes 0.
KILN_TARGET_AVX2 inline __m256 load_bf16_tail(const BFloat16* p, int64_t count) {
  alignas(16) uint16_t bits[8] = {};
  std::memcpy(bits, p, static_cast<size_t>(count) * sizeof(BFloat16));
  return widen_bf16(_mm_load_si128(reinterpret_cast<const __m128i*>(bits)));
}

KILN_TARGET_AVX2 inline void store_bf16(BFloat16* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow_to_bf16(v));
}

KILN_TARGET_AVX2 inline void store_bf16_tail(BFloat16* p, int64_t count, __m256 v) {
  alignas(16) uint16_t bits[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(bits), narrow_to_bf16(v));
  std::memcpy(p, bits, static_cast<size_t>(count) * sizeof(BFloat16));
}

// n values of a row, each way, 8 at a time, the tail under a mask.
KILN_TARGET_AVX2 inline void widen_bf16_row(const BFloat16* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load_bf16(x + i));
  if (i < n) _mm256_maskstore_ps(out + i, tail_mask(n - i), load_bf16_tail(x + i, n - i));
}

KILN_TARGET_AVX2 inline void narrow_to_bf16_row(const float* x, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_bf16(out + i, _mm256_loadu_ps(x + i));
  if (i < n) store_bf16_tail(out + i, n - i, _mm256_maskload_ps(x + i, tail_mask(n - i)));
}

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
