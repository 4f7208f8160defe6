// Max pooling on channels-inner layouts 16 channels at a time (AVX-512): the loop of
// pooling_avx2.cc's max_pool_channels_inner with twice the lanes, each lane reducing its window
// in the same row-major order, so the results are that kernel's (and the reference's).
#include "kernels/cpu/pooling.h"

#ifdef KILN_X86
#include <immintrin.h>

#include <algorithm>
#include <limits>

namespace kiln::cpu::avx512 {

KILN_TARGET_AVX512 void max_pool_channels_inner(const Pool2dGeometry& g, const float* x,
                                                float* y, int64_t begin, int64_t end) {
  const ChannelsInner v = channels_inner(g);
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (int64_t row = begin; row < end; ++row) {
    const int64_t o = row / g.oh, oy = row % g.oh;
    const float* image = x + o * g.h * g.w * v.block;
    float* y_row = y + row * g.ow * v.block;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      for (int64_t c = 0; c < v.block; c += 16) {
        const auto lanes = static_cast<__mmask16>(
            (1u << std::min<int64_t>(16, v.block - c)) - 1);
        // max(v, acc) keeps acc when either is NaN or on ties (the earlier value); NaNs among
        // the v are collected apart and put back at the end, as in the 8-lane loop. (The
        // zero-masked max: GCC 12 warns of the plain one's undefined pass-through.)
        __m512 acc = lowest;
        __mmask16 saw_nan = 0;
        for_each_window_element(g, oy, ox, [&](int64_t pixel) KILN_TARGET_AVX512 {
          const __m512 value = _mm512_maskz_loadu_ps(lanes, image + pixel * v.block + c);
          acc = _mm512_maskz_max_ps(0xFFFF, value, acc);
          saw_nan |= _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
        });
        _mm512_mask_storeu_ps(y_row + ox * v.block + c, lanes,
                              _mm512_mask_blend_ps(saw_nan, acc, nan));
      }
    }
  }
}

}  // namespace kiln::cpu::avx512

#endif  // KILN_X86
