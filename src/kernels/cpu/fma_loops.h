// Register-only FMA loops: the machine's f32 peak (the micro-benchmark) and whether its
// AVX-512 FMAs run at twice AVX2's rate (cpu::avx512_fma_full_width).
#pragma once

#include "kernels/cpu/cpu_features.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <cstdint>

namespace kiln::cpu {

// acc = acc * a + b in `kChains` independent chains: enough in flight to cover the FMA latency
// (4-5 cycles) times the FMA units (2) of current x86 cores, all in registers, converging to 1
// so no value ever becomes a denormal or an infinity. Returns a sum so the work isn't dropped.
template <int kChains>
KILN_TARGET_AVX2 float fma_loop_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.5f + 0.01f * c);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  return _mm256_cvtss_f32(sum);
}

template <int kChains>
KILN_TARGET_AVX512 float fma_loop_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.5f + 0.01f * c);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_store_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

}  // namespace kiln::cpu

#endif  // KILN_X86
