// Max pooling on channels-inner layouts 16 channels at a time (AVX-512): the loop of
// pooling_avx2.cc's max_pool_channels_inner with twice the lanes, each lane reducing its window
// in the same row-major order, so the results are that kernel's (and the reference's).
#include "kernels/cpu/pooling.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace kiln::cpu::avx512 {

namespace {

// Up to 16 channels at p as f32 lanes (the others 0), and back.
KILN_TARGET_AVX512 inline __m512 load_channels(const float* p, int64_t, __mmask16 lanes) {
  return _mm512_maskz_loadu_ps(lanes, p);
}
KILN_TARGET_AVX512 inline void store_channels(float* p, int64_t, __mmask16 lanes, __m512 v) {
  _mm512_mask_storeu_ps(p, lanes, v);
}
// bf16 widens exactly. (The zero-masked forms, as below: GCC 12 warns of the plain ones'
// undefined pass-through.) Narrowing keeps the top half of each lane: exact for a maximum, which is
// one of its window's values, and 0x7FC0 for the quiet NaN a NaN window gives, as rounding does.
KILN_TARGET_AVX512 inline __m512 load_channels(const BFloat16* p, int64_t count, __mmask16) {
  __m256i bits = _mm256_setzero_si256();
  if (count == 16) bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  else std::memcpy(static_cast<void*>(&bits), p, static_cast<size_t>(count) * sizeof(BFloat16));
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, bits), 16));
}
KILN_TARGET_AVX512 inline void store_channels(BFloat16* p, int64_t count, __mmask16, __m512 v) {
  const __m256i bits = _mm512_maskz_cvtepi32_epi16(
      0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, _mm512_castps_si512(v), 16));
  if (count == 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
  else std::memcpy(static_cast<void*>(p), &bits, static_cast<size_t>(count) * sizeof(BFloat16));
}

template <typename T>
KILN_TARGET_AVX512 void max_pool(const Pool2dGeometry& g, const T* x, T* y, int64_t begin,
                                 int64_t end) {
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for_each_channels_inner_output<16>(
      g, x, y, begin, end,
      [&](const T* in, T* out, int64_t count, int64_t block, int64_t oy,
          int64_t ox) KILN_TARGET_AVX512 {
        const auto lanes = static_cast<__mmask16>((1u << count) - 1);
        // max(v, acc) keeps acc when either is NaN or on ties (the earlier value); NaNs among
        // the v are collected apart and put back at the end, as in the 8-lane loop.
        __m512 acc = lowest;
        __mmask16 saw_nan = 0;
        for_each_window_element(g, oy, ox, [&](int64_t pixel) KILN_TARGET_AVX512 {
          const __m512 value = load_channels(in + pixel * block, count, lanes);
          acc = _mm512_maskz_max_ps(0xFFFF, value, acc);
          saw_nan |= _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
        });
        store_channels(out, count, lanes, _mm512_mask_blend_ps(saw_nan, acc, nan));
      });
}

}  // namespace

KILN_TARGET_AVX512 void max_pool_channels_inner(const Pool2dGeometry& g, const float* x,
                                                float* y, int64_t begin, int64_t end) {
  max_pool(g, x, y, begin, end);
}

KILN_TARGET_AVX512 void max_pool_channels_inner(const Pool2dGeometry& g, const BFloat16* x,
                                                BFloat16* y, int64_t begin, int64_t end) {
  max_pool(g, x, y, begin, end);
}

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
