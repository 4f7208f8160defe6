// 2-D pooling on the CPU: the problem description shared by the pooling ops' kernels, oneDNN's
// average pooling and the AVX2 max and average pooling (plain, and channels-inner layouts).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"
#include "ops/op_registry.h"

namespace kiln::cpu {

// y[N, C, OH, OW] from windows of x[N, C, H, W], both stored in `layout` (include/kiln/shape.h;
// plain is dense row-major): window (oy, ox) covers rows oy * stride_h - pad_top + ky *
// dilation_h for ky < kh, and the same for columns.
struct Pool2dGeometry {
  Layout layout = Layout::Plain;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t oh = 0, ow = 0;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  // The declared padding (PyTorch's is symmetric: the same on the bottom and right).
  int64_t pad_h = 0, pad_w = 0;
  // The padding the windows reach on the bottom and right: the declared padding, or more in
  // ceil mode, where the last window may overhang it.
  int64_t reach_bottom = 0, reach_right = 0;
};

// Calls element(iy * w + ix) for each element of window (oy, ox) inside x, in row-major order
// (the order ties and NaNs resolve in). Always inlined, so that a vector kernel's element
// callback inlines too.
template <typename Element>
__attribute__((always_inline)) inline void for_each_window_element(const Pool2dGeometry& g,
                                                                  int64_t oy, int64_t ox,
                                                                  Element element) {
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
      if (ix >= 0 && ix < g.w) element(iy * g.w + ix);
    }
  }
}

// A channels-inner layout (nhwc, nChw8c, nChw16c) viewed as [outer, H, W, block]: nhwc has
// outer N and block C, the blocked layouts outer N·C/b and block b.
struct ChannelsInner {
  int64_t outer, block;
};
inline ChannelsInner channels_inner(const Pool2dGeometry& g) {
  if (g.layout == Layout::NHWC) return {g.n, g.c};
  const int64_t b = layout_channel_block(g.layout);
  return {g.n * (g.c / b), b};
}

// The walk of the channels-inner loops (pooling_avx2.cc, pooling_avx512.cc) over output rows
// [begin, end) of outer·OH: output(x_channels, y_channels, count, block, oy, ox) for each output
// pixel and each kLanes channels of it (count of them at the block's end), where window element
// `pixel` of those channels starts at x_channels + pixel * block. Always inlined, as
// for_each_window_element.
template <int64_t kLanes, typename T, typename Output>
__attribute__((always_inline)) inline void for_each_channels_inner_output(
    const Pool2dGeometry& g, const T* x, T* y, int64_t begin, int64_t end, Output output) {
  const ChannelsInner v = channels_inner(g);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t o = row / g.oh, oy = row % g.oh;
    const T* image = x + o * g.h * g.w * v.block;
    T* y_row = y + row * g.ow * v.block;
    for (int64_t ox = 0; ox < g.ow; ++ox)
      for (int64_t c = 0; c < v.block; c += kLanes)
        output(image + c, y_row + ox * v.block + c, std::min(kLanes, v.block - c), v.block, oy,
               ox);
  }
}

enum class PoolAlgorithm {
  AvgIncludePadding,  // divides by kh * kw: the windows must not overhang the declared padding
  AvgExcludePadding,  // divides by the number of input elements in the window
};

// Average pooling through oneDNN, x and y in g.layout: f32; no zero-size tensors. (oneDNN's max
// pooling is not used: it drops NaNs, where PyTorch's max propagates them.)
std::unique_ptr<KernelInstance> create_onednn_pool2d(const Pool2dGeometry& g,
                                                     PoolAlgorithm algorithm,
                                                     const KernelSpec& spec);
// Empty when oneDNN has a jit kernel for this pooling on this CPU, else why not: its reference
// implementation, all it has for plain NCHW below AVX-512, is slower than Kiln's loops.
std::string onednn_pool2d_unsupported_reason(const Pool2dGeometry& g, PoolAlgorithm algorithm,
                                             int threads);

#ifdef KILN_X86
namespace avx2 {
// Max pooling of planes [begin, end) of f32 x into y, bit for bit the reference's result (a NaN
// in a window gives NaN); `rows` is scratch for g.h * g.ow floats. Call only when has_avx2_fma().
void max_pool_planes(const Pool2dGeometry& g, const float* x, float* y, int64_t begin,
                     int64_t end, float* rows);
// Average pooling likewise (no dilation): each window's sum, in f32, divided by
// row_divisors[oy] * column_divisors[ox].
void avg_pool_planes(const Pool2dGeometry& g, const float* x, float* y, int64_t begin,
                     int64_t end, float* rows, const float* row_divisors,
                     const float* column_divisors);

// The same on a channels-inner layout (g.layout nhwc, nChw8c or nChw16c): x viewed as
// [outer, H, W, block] (nhwc: outer N, block C; blocked: outer N·C/b, block b), y likewise;
// output rows [begin, end) of outer·OH. Each output pixel reduces its window 8 channels at a
// time in the reference's row-major order, so max is bit for bit the reference's and averages
// sum in f32 before dividing.
void max_pool_channels_inner(const Pool2dGeometry& g, const float* x, float* y, int64_t begin,
                             int64_t end);
void avg_pool_channels_inner(const Pool2dGeometry& g, const float* x, float* y, int64_t begin,
                             int64_t end, const float* row_divisors, const float* column_divisors);
// bf16 x and y: the same windows widened to f32, each result rounded to bf16 as a cast of the
// f32 kernel's result would be (a maximum, one of its window's values, exactly; a NaN window
// gives 0x7FC0).
void max_pool_channels_inner(const Pool2dGeometry& g, const BFloat16* x, BFloat16* y,
                             int64_t begin, int64_t end);
void avg_pool_channels_inner(const Pool2dGeometry& g, const BFloat16* x, BFloat16* y,
                             int64_t begin, int64_t end, const float* row_divisors,
                             const float* column_divisors);
}  // namespace avx2

namespace avx512 {
// avx2::max_pool_channels_inner 16 channels at a time, with the same results (f32 and bf16).
// Call only when has_avx512f().
void max_pool_channels_inner(const Pool2dGeometry& g, const float* x, float* y, int64_t begin,
                             int64_t end);
void max_pool_channels_inner(const Pool2dGeometry& g, const BFloat16* x, BFloat16* y,
                             int64_t begin, int64_t end);
}  // namespace avx512
#endif

}  // namespace kiln::cpu
