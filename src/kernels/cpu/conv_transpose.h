// Transposed 2-D and 3-D convolution on the CPU: the problem description shared by
// conv_transpose2d's and conv_transpose3d's kernels, and the oneDNN kernel.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "ops/op_registry.h"

namespace kiln::cpu {

// y[N, O, OD, OH, OW] = conv_transpose(x[N, C, D, H, W], w[C, O / groups, KD, KH, KW])
// (PyTorch's weight layout), all dense row-major: input (iz, iy, ix) adds x * w[kz, ky, kx]
// into output (i * stride - pad + k * dilation) along each axis, and along each axis
//   out = (in - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_padding + 1.
// The per-axis arrays are [depth, height, width]; a 2-D problem (spatial = 2, tensors without
// the depth dim) has depth 1 there, with a kernel of 1 and no stride, padding or dilation.
struct ConvTransposeGeometry {
  using Axes = std::array<int64_t, 3>;
  int spatial = 2;
  int64_t n = 0, c = 0, o = 0, groups = 1;
  Axes in{1, 1, 1}, kernel{1, 1, 1}, out{1, 1, 1};
  Axes stride{1, 1, 1}, dilation{1, 1, 1}, pad{0, 0, 0}, output_padding{0, 0, 0};
};

// f32; no zero-size tensors. `bias` adds bias[O], the third input. When w is a graph constant
// (spec.constant_inputs[1]) it is reordered once, at creation, into the primitive's layout.
std::unique_ptr<KernelInstance> create_onednn_conv_transpose(const ConvTransposeGeometry& g,
                                                             bool bias, const KernelSpec& spec);

}  // namespace kiln::cpu
