// 2-D and 3-D convolution on the CPU: the problem descriptions shared by conv2d's and conv3d's
// kernels, and their oneDNN kernels.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

#include "kernels/cpu/gemm_epilogue.h"
#include "ops/op_registry.h"

namespace kiln::cpu {

// y[N, O, OH, OW] = x[N, C, H, W] * w[O, C / groups, KH, KW] in logical (NCHW) sizes; x and y
// may be in any layout (the spec's types say which), w and bias are plain.
struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t oh = 0, ow = 0;
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// Work done on the convolution's result before it is stored, in this order, by the same kernel
// in the same pass over the output: what fusion passes attach to a convolution.
//   y = clamp(activation(conv(x, w) + bias + r), clamp_min, clamp_max)
// (ResNet's relu(bn(conv(x)) + identity), MobileNetV2's relu6 = clamp to [0, 6]).
struct ConvEpilogue {
  bool bias = false;      // adds bias[O], the convolution's third input
  bool residual = false;  // adds r, a tensor of y's type and layout: the convolution's last input
  Activation activation = Activation::None;  // the matmul epilogue's activations
  // Hardtanh's bounds; -inf and inf (no clamp) unless a fusion set them.
  double clamp_min = -std::numeric_limits<double>::infinity();
  double clamp_max = std::numeric_limits<double>::infinity();
  bool clamps() const { return !std::isinf(clamp_min) || !std::isinf(clamp_max); }
};

// f32, or bf16 x and w with an f32 bias and an f32 or bf16 y (widened for the f32 convolution on
// CPUs without AVX512-BF16); no zero-size tensors. When w is a graph constant
// (spec.constant_inputs[1]) it is reordered once, at creation, into the layout the primitive
// prefers for x's and y's layouts.
std::unique_ptr<KernelInstance> create_onednn_conv2d(const Conv2dGeometry& g,
                                                     const ConvEpilogue& epilogue,
                                                     const KernelSpec& spec);

// A dense 3x3 convolution of stride 1 without dilation: what oneDNN's Winograd kernels compute.
inline bool is_winograd_shape(const Conv2dGeometry& g) {
  return g.groups == 1 && g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.dilation_h == 1 && g.dilation_w == 1;
}

// Whether oneDNN has Winograd kernels on this CPU (AVX-512), asked for a 3x3 convolution of
// ResNet-50's second stage.
bool onednn_has_winograd();

// oneDNN's Winograd convolution (AVX-512 only): f32 x and y in nChw16c, constant weights
// (reordered once into its transformed layout), a bias and relu epilogue. Empty when it can run
// `spec`, else why not.
std::string onednn_winograd_unsupported(const Conv2dGeometry& g, const ConvEpilogue& epilogue,
                                        const KernelSpec& spec);
std::unique_ptr<KernelInstance> create_onednn_winograd_conv2d(const Conv2dGeometry& g,
                                                              const ConvEpilogue& epilogue,
                                                              const KernelSpec& spec);

// y[N, O, OD, OH, OW] = x[N, C, D, H, W] * w[O, C / groups, KD, KH, KW], every tensor plain;
// the spatial arrays are (depth, height, width).
struct Conv3dGeometry {
  int64_t n = 0, c = 0, o = 0, groups = 1;
  std::array<int64_t, 3> in{}, kernel{}, out{};
  std::array<int64_t, 3> stride{1, 1, 1}, dilation{1, 1, 1}, pad_begin{}, pad_end{};
};

// f32 x, w and y, and an f32 bias when `bias`; no zero-size tensors. The primitive runs in
// ndhwc (or where oneDNN has no jit kernel there, the layout format `any` picks), which run()
// reorders x into and y out of: on plain ncdhw oneDNN 2.6 has only its GEMM-based kernel, 1.3-15x
// slower on video models' convolutions (docs/ops.md). w takes the primitive's layout too:
// constant weights once, at creation, others at every run.
std::unique_ptr<KernelInstance> create_onednn_conv3d(const Conv3dGeometry& g, bool bias,
                                                     const KernelSpec& spec);

}  // namespace kiln::cpu
