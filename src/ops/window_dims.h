// Output sizes of sliding-window ops along one spatial axis (pooling, conv1d, conv3d, transposed
// convolution), for static and symbolic dims alike, and the channel rules of the convolutions.
//
// A symbolic input dim becomes a derived symbol whose name spells the function, so that two
// nodes computing the same function of the same symbol share one symbol. Floor-mode windows are
// named exactly as conv2d names its output dims ("H-2", "(H-1)/2+1"): the function is the same.
#pragma once

#include <cstdint>
#include <string>

#include "ops/op_registry.h"

namespace kiln {

struct WindowAxis {
  int64_t kernel = 1, stride = 1, dilation = 1;
  int64_t pad_begin = 0, pad_end = 0;
  // PyTorch pooling's ceil_mode: a last, partial window when it starts inside the input or the
  // left padding (pad_begin == pad_end in PyTorch).
  bool ceil_mode = false;

  int64_t extent() const { return dilation * (kernel - 1) + 1; }
};

// The number of windows over `in` elements: PyTorch's pooling_output_shape_pad_lr, which is also
// convolution's output size without ceil_mode. Below 1 when not even one window fits.
int64_t window_count(int64_t in, const WindowAxis& axis);

// The output dim of a sliding window over `in`. Fails (E40002) when no window fits even the
// largest size `in` can take; `what` names the axis in that message ("row", "column", ...).
Dim window_output_dim(InferContext& ctx, Dim in, const WindowAxis& axis, const std::string& what);

// A transposed convolution's output size: (in - 1) * stride - pad_begin - pad_end + extent +
// output_padding.
int64_t transposed_window_size(int64_t in, const WindowAxis& axis, int64_t output_padding);

// The output dim of a transposed convolution over `in`; fails (E40002) when it is below 1 even
// for the largest size `in` can take.
Dim transposed_output_dim(InferContext& ctx, Dim in, const WindowAxis& axis,
                          int64_t output_padding, const std::string& what);

// A convolution's channels: x [N, C, ...] and w [O, C/groups, ...] with groups dividing C and O,
// and when `bias` (input 2) is set, bias [O]; fails (E40002) naming what doesn't fit. Returns O.
Dim check_conv_channels(InferContext& ctx, const TensorType& x, const TensorType& w,
                        int64_t groups, bool bias);

}  // namespace kiln
