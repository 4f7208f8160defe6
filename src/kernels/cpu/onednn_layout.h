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

// oneDNN's name of the floating dtypes its kernels take here (f32, bf16).
inline dnnl::memory::data_type onednn_data_type(DType dtype) {
  KILN_ASSERT(dtype == DType::F32 || dtype == DType::BF16,
              "no oneDNN data type for " << dtype_name(dtype));
  return dtype == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// A descriptor of a 4-D tensor of logical sizes [N, C, H, W] in `layout`.
inline dnnl::memory::desc onednn_desc(const std::vector<int64_t>& nchw, Layout layout,
                                      DType dtype) {
  return dnnl::memory::desc(dnnl::memory::dims(nchw.begin(), nchw.end()),
                            onednn_data_type(dtype), onednn_format(layout));
}

}  // namespace kiln::cpu
