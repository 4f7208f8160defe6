// Transposed 2-D convolution on the CPU: the problem description shared by conv_transpose2d's
// kernels, and the oneDNN kernel.
#pragma once

#include <cstdint>
#include <memory>

#include "ops/op_registry.h"

namespace kiln::cpu {

// y[N, O, OH, OW] = conv_transpose(x[N, C, H, W], w[C, O / groups, KH, KW]) (PyTorch's weight
// layout), all dense row-major: input (iy, ix) adds x * w[ky, kx] into output
// (iy * stride_h - pad_h + ky * dilation_h, ix * stride_w - pad_w + kx * dilation_w), and
// OH = (H - 1) * stride_h - 2 * pad_h + dilation_h * (KH - 1) + output_padding_h + 1.
struct ConvTranspose2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t oh = 0, ow = 0;
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t output_padding_h = 0, output_padding_w = 0;
};

// f32; no zero-size tensors. `bias` adds bias[O], the third input. When w is a graph constant
// (spec.constant_inputs[1]) it is reordered once, at creation, into the primitive's layout.
std::unique_ptr<KernelInstance> create_onednn_conv_transpose2d(const ConvTranspose2dGeometry& g,
                                                               bool bias, const KernelSpec& spec);

}  // namespace kiln::cpu
