#include "kernels/cpu/scan.h"

#ifdef KILN_X86
#include <immintrin.h>

#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

namespace {

// 8 rows n apart: lane j of `low` and `high` is row j's (j < 4) or row j + 4's running sum.
KILN_TARGET_AVX2 void cumsum_8_rows(const float* x, float* y, int64_t n) {
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v[8];
    for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(x + r * n + i);
    transpose8(v);  // v[k]: element i + k of the 8 rows
    for (int k = 0; k < 8; ++k) {
      low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(v[k])));
      high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(v[k], 1)));
      v[k] = _mm256_set_m128(_mm256_cvtpd_ps(high), _mm256_cvtpd_ps(low));
    }
    transpose8(v);
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(y + r * n + i, v[r]);
  }
  double acc[8];
  _mm256_storeu_pd(acc, low);
  _mm256_storeu_pd(acc + 4, high);
  for (; i < n; ++i)
    for (int r = 0; r < 8; ++r) {
      acc[r] += static_cast<double>(x[r * n + i]);
      y[r * n + i] = static_cast<float>(acc[r]);
    }
}

}  // namespace

void cumsum_rows(const float* x, float* y, int64_t rows, int64_t n, int threads) {
  const int64_t groups = rows / 8;
  parallel_chunks(groups + rows % 8, 8 * n, threads, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      if (g < groups) {
        cumsum_8_rows(x + g * 8 * n, y + g * 8 * n, n);
        continue;
      }
      const int64_t r = 8 * groups + (g - groups);
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        acc += static_cast<double>(x[r * n + i]);
        y[r * n + i] = static_cast<float>(acc);
      }
    }
  });
}

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
