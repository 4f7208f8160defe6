// 2-D convolution on the CPU: the problem description shared by conv2d's kernels, and the
// oneDNN kernel.
#pragma once

#include <cstdint>
#include <memory>

#include "ops/op_registry.h"

namespace kiln::cpu {

// y[N, O, OH, OW] = x[N, C, H, W] * w[O, C / groups, KH, KW], all dense row-major (NCHW).
struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t oh = 0, ow = 0;
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

enum class Activation { None, Relu };

// Work done on the convolution's result before it is stored, in this order, by the same kernel
// in the same pass over the output: what a fusion pass attaches to a convolution.
struct ConvEpilogue {
  bool bias = false;  // adds bias[O], the convolution's third input
  Activation activation = Activation::None;
};

// f32; no zero-size tensors. When w is a graph constant (spec.constant_inputs[1]) it is
// reordered once, at creation, into the layout the primitive prefers.
std::unique_ptr<KernelInstance> create_onednn_conv2d(const Conv2dGeometry& g,
                                                     const ConvEpilogue& epilogue,
                                                     const KernelSpec& spec);

}  // namespace kiln::cpu
