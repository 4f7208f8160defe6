// Kiln's own depthwise conv3d kernel (depthwise_conv3d_avx2.cc): one filter per channel
// (groups = channels = outputs), where oneDNN 2.6's jit kernel is 3x slower than eager.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_features.h"

namespace kiln::cpu::avx2 {

#ifdef KILN_X86
// What a geometry's runs share, made once at kernel creation: the zero-padded scratch plane's
// extents (its rows split into `phases` = the column stride) and each tap's offset in it.
struct DepthwiseConv3dPlan {
  Conv3dGeometry g;
  int64_t depth = 0, height = 0, phases = 1, phase_width = 0;
  std::vector<int64_t> offsets;  // in the weights' (depth, row, column) order
  int64_t row() const { return phases * phase_width; }
  int64_t plane_size() const;
};

// g.groups == g.c == g.o, no zero-size dims.
DepthwiseConv3dPlan plan_depthwise_conv3d(const Conv3dGeometry& g);

// f32 x[N, C, D, H, W], w[C, 1, KD, KH, KW], optional bias[C] (null: none), y[N, C, OD, OH, OW],
// all plain. Needs AVX2 and FMA.
void depthwise_conv3d(const DepthwiseConv3dPlan& plan, const float* x, const float* w,
                      const float* bias, float* y, int threads);
#endif

}  // namespace kiln::cpu::avx2
