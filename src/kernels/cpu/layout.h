// Tensor layouts on the CPU (include/kiln/shape.h): where each element of a 4-D [N, C, H, W]
// tensor lives in every Layout, the reference conversion between layouts, and oneDNN's reorder.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln::cpu {

// The logical sizes of a 4-D tensor.
struct Nchw {
  int64_t n = 0, c = 0, h = 0, w = 0;
};

inline Nchw nchw_of(const std::vector<int64_t>& sizes) {
  return Nchw{sizes.at(0), sizes.at(1), sizes.at(2), sizes.at(3)};
}

// The offset of element (n, c, y, x) in `layout`; blocked layouts need s.c % block == 0.
inline int64_t layout_offset(Layout layout, const Nchw& s, int64_t n, int64_t c, int64_t y,
                             int64_t x) {
  switch (layout) {
    case Layout::Plain: return ((n * s.c + c) * s.h + y) * s.w + x;
    case Layout::NHWC: return ((n * s.h + y) * s.w + x) * s.c + c;
    case Layout::NChw8c:
    case Layout::NChw16c: {
      const int64_t b = layout_channel_block(layout);
      return (((n * (s.c / b) + c / b) * s.h + y) * s.w + x) * b + c % b;
    }
  }
  KILN_ASSERT(false, "unknown layout");
}

// dst (in layout `to`) = src (in layout `from`), element by element: the reference of reorder,
// and how the reference kernels of layout-aware ops read and write non-plain tensors.
template <typename T>
void convert_layout(const Nchw& s, Layout from, const T* src, Layout to, T* dst, int threads) {
  parallel_chunks(s.n * s.c, s.h * s.w, threads, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / s.c, c = plane % s.c;
      for (int64_t y = 0; y < s.h; ++y)
        for (int64_t x = 0; x < s.w; ++x)
          dst[layout_offset(to, s, n, c, y, x)] = src[layout_offset(from, s, n, c, y, x)];
    }
  });
}

// reorder through oneDNN: f32 or bf16, 4-D, no zero-size tensors.
std::unique_ptr<KernelInstance> create_onednn_reorder(const KernelSpec& spec);

// The layout oneDNN's convolutions of `dtype` (f32 or bf16) prefer on this CPU (what format
// `any` gives for a typical 3x3 convolution): for f32 nChw16c or nhwc with AVX-512, nChw8c with
// AVX2, else plain.
Layout onednn_preferred_conv_layout(DType dtype = DType::F32);

// The layouts the format stage tries for a chain of convolutions of `dtype` (`convs`, the
// chain's conv2d nodes), in order of preference (the last is the fallback): measured per CPU
// (conv_onednn.cc), less the blocked layouts that would split a grouped convolution's groups of
// channels (oneDNN has only its reference kernel for those); {Plain} when none is left.
std::vector<Layout> conv_layout_candidates(DType dtype = DType::F32,
                                           const std::vector<const Node*>& convs = {});

}  // namespace kiln::cpu
