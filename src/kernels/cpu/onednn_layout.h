// oneDNN descriptors of Kiln's layouts (include/kiln/shape.h).
#pragma once

#include <vector>

#include "dnnl.hpp"
#include "kiln/error.h"
#include "kiln/shape.h"

namespace kiln::cpu {

inline dnnl::memory::format_tag onednn_format(Layout layout) {
  using tag = dnnl::memory::format_tag;
  switch (layout) {
    case Layout::Plain: return tag::nchw;
    case Layout::NHWC: return tag::nhwc;
    case Layout::NChw8c: return tag::nChw8c;
    case Layout::NChw16c: return tag::nChw16c;
  }
  KILN_ASSERT(false, "unknown layout");
}

// An f32 descriptor of a 4-D tensor of logical sizes [N, C, H, W] in `layout`.
inline dnnl::memory::desc onednn_f32_desc(const std::vector<int64_t>& nchw, Layout layout) {
  return dnnl::memory::desc(dnnl::memory::dims(nchw.begin(), nchw.end()),
                            dnnl::memory::data_type::f32, onednn_format(layout));
}

}  // namespace kiln::cpu
