// Kiln's own depthwise conv3d kernel (depthwise_conv3d_avx2.cc): one filter per channel
// (groups = channels = outputs), where oneDNN 2.6's jit kernel is 3x slower than eager.
#pragma once

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_features.h"

namespace kiln::cpu::avx2 {

#ifdef KILN_X86
// f32 x[N, C, D, H, W], w[C, 1, KD, KH, KW], optional bias[C] (null: none), y[N, C, OD, OH, OW],
// all plain; g.groups == g.c == g.o, no zero-size dims. Needs AVX2 and FMA.
void depthwise_conv3d(const Conv3dGeometry& g, const float* x, const float* w, const float* bias,
                      float* y, int threads);
#endif

}  // namespace kiln::cpu::avx2
