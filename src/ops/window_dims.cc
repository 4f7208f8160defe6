#include "ops/window_dims.h"

#include <algorithm>

namespace kiln {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// "+2", "-3", or "" for 0.
std::string signed_term(int64_t v) {
  if (v == 0) return "";
  std::string term = v > 0 ? "+" : "";
  term += std::to_string(v);
  return term;
}

// Sizes are clamped to 2^62, which no tensor reaches, before the window arithmetic: a symbol's
// range may be unbounded above, and attributes are below 2^31, so nothing overflows.
constexpr int64_t kLargestSize = int64_t{1} << 62;

int64_t largest_size(InferContext& ctx, Dim in) {
  return std::min(in.is_static() ? in.size() : ctx.symbols()[in.symbol()].max, kLargestSize);
}

}  // namespace

int64_t window_count(int64_t in, const WindowAxis& a) {
  const int64_t span = in + a.pad_begin + a.pad_end - a.extent();
  int64_t count = floor_div(span + (a.ceil_mode ? a.stride - 1 : 0), a.stride) + 1;
  // PyTorch drops a ceil-mode window that would start in the right padding.
  if (a.ceil_mode && (count - 1) * a.stride >= in + a.pad_begin) --count;
  return count;
}

Dim window_output_dim(InferContext& ctx, Dim in, const WindowAxis& a, const std::string& what) {
  const int64_t largest = largest_size(ctx, in);
  const int64_t count = window_count(largest, a);
  if (count < 1)
    ctx.fail("no window fits: a window spans " + std::to_string(a.extent()) + " input " + what +
             "s (kernel " + std::to_string(a.kernel) + ", dilation " + std::to_string(a.dilation) +
             ") but the input has " + (in.is_static() ? "" : "at most ") + std::to_string(largest) +
             " " + what + "s plus padding " + std::to_string(a.pad_begin) + " and " +
             std::to_string(a.pad_end) + "; pad more or use a smaller kernel");
  const int64_t pad = a.pad_begin + a.pad_end;
  std::string expr;
  if (a.ceil_mode && a.stride > 1) {
    const std::string s = std::to_string(a.stride);
    expr = "ceil(({}" + signed_term(pad - a.extent()) + ")/" + s + ")";
    // The start-inside rule can only drop a window when pad_begin + stride > extent.
    if (a.pad_begin + a.stride > a.extent())
      expr = "min(" + expr + ",({}" + signed_term(a.pad_begin - 1) + ")/" + s + ")";
    expr += "+1";
  } else {
    const int64_t offset = pad - a.extent() + (a.stride == 1 ? 1 : 0);
    if (a.stride == 1 && offset == 0) return in;  // a "same" window keeps the dim itself
    expr = a.stride == 1 ? "{}" + signed_term(offset)
                         : "({}" + signed_term(offset) + ")/" + std::to_string(a.stride) + "+1";
  }
  return ctx.derive(
      in,
      [a](int64_t size) {
        return std::max<int64_t>(window_count(std::min(size, kLargestSize), a), 0);
      },
      expr);
}

int64_t transposed_window_size(int64_t in, const WindowAxis& a, int64_t output_padding) {
  return (in - 1) * a.stride - a.pad_begin - a.pad_end + a.extent() + output_padding;
}

Dim transposed_output_dim(InferContext& ctx, Dim in, const WindowAxis& a, int64_t output_padding,
                          const std::string& what) {
  const int64_t largest = largest_size(ctx, in);
  const int64_t size = largest >= kLargestSize / a.stride
                           ? kLargestSize
                           : transposed_window_size(largest, a, output_padding);
  if (size < 1)
    ctx.fail("the output would have " + std::to_string(size) + " " + what + "s from " +
             (in.is_static() ? "" : "at most ") + std::to_string(largest) + " input " + what +
             "s (stride " + std::to_string(a.stride) + ", padding " + std::to_string(a.pad_begin) +
             ", kernel " + std::to_string(a.kernel) + ", dilation " + std::to_string(a.dilation) +
             ", output_padding " + std::to_string(output_padding) + "); use less padding");
  // (in - 1) * stride + c written as in * stride + (c - stride).
  const int64_t shift = a.extent() + output_padding - a.pad_begin - a.pad_end - a.stride;
  if (a.stride == 1 && shift == 0) return in;
  const std::string expr =
      (a.stride == 1 ? "{}" : "{}*" + std::to_string(a.stride)) + signed_term(shift);
  return ctx.derive(
      in,
      [a, output_padding](int64_t s) {
        // (2^62 - 1) * stride would overflow: the saturated size stands for "unbounded".
        if (s >= kLargestSize / a.stride) return kLargestSize;
        return std::max<int64_t>(transposed_window_size(s, a, output_padding), 0);
      },
      expr);
}

Dim check_conv_channels(InferContext& ctx, const TensorType& x, const TensorType& w,
                        int64_t groups, bool bias) {
  const std::string g = std::to_string(groups);
  const Dim out_channels = w.shape[0];
  if (out_channels.is_static())
    ctx.check(out_channels.size() % groups == 0, "groups=" + g + " must divide w's output channels " +
                                                     std::to_string(out_channels.size()));
  const Dim in_channels = x.shape[1];
  if (in_channels.is_static()) {
    ctx.check(in_channels.size() % groups == 0,
              "groups=" + g + " must divide x's channels " + std::to_string(in_channels.size()));
    if (w.shape[1].is_static())
      ctx.check(in_channels.size() == w.shape[1].size() * groups,
                "x has " + std::to_string(in_channels.size()) + " channels but w takes " +
                    std::to_string(w.shape[1].size()) + " per group x " + g + " groups = " +
                    std::to_string(w.shape[1].size() * groups));
  }
  if (bias) {
    ctx.check(ctx.input(2).rank() == 1, "bias must be 1-D [O]");
    ctx.unify(ctx.input(2).shape[0], out_channels, "bias size and w's output channels");
  }
  return out_channels;
}

}  // namespace kiln
