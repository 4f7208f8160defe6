// conv2d: PyTorch's Conv2d forward on NCHW tensors, f32 and f64.
//
// Inputs x[N, C, H, W], w[O, C/groups, KH, KW] and optionally bias[O] (a variadic last input
// with zero or one values). Attributes: stride [sh, sw], padding [ph, pw] (symmetric) or [top,
// left, bottom, right], dilation [dh, dw], groups, and fused_activation ("none" or "relu",
// applied after the bias by the same kernel: the epilogue a fusion pass sets).
//
// Kernels, best first: oneDNN (f32), then the reference loops (f32, f64).
#include <algorithm>
#include <array>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

using cpu::Activation;
using cpu::Conv2dGeometry;
using cpu::ConvEpilogue;

std::array<int64_t, 4> padding_tlbr(const std::vector<int64_t>& padding) {
  if (padding.size() == 2) return {padding[0], padding[1], padding[0], padding[1]};
  return {padding[0], padding[1], padding[2], padding[3]};
}

// The number of window positions of `extent` input elements, `stride` apart, in `in + pad`
// elements; 0 when not even one fits (type inference rejects that for known sizes).
int64_t window_count(int64_t in, int64_t pad, int64_t extent, int64_t stride) {
  return in + pad < extent ? 0 : (in + pad - extent) / stride + 1;
}

Dim output_dim(InferContext& ctx, Dim in, int64_t pad, int64_t kernel, int64_t dilation,
               int64_t stride, const char* axis) {
  const int64_t extent = dilation * (kernel - 1) + 1;
  const int64_t largest = in.is_static() ? in.size() : ctx.symbols()[in.symbol()].max;
  if (largest + pad < extent)
    ctx.fail(std::string("the kernel spans ") + std::to_string(extent) + " input " + axis +
             "s (size " + std::to_string(kernel) + ", dilation " + std::to_string(dilation) +
             ") but the padded input has " + (in.is_static() ? "" : "at most ") +
             std::to_string(largest + pad) + "; pad more or use a smaller kernel");
  const int64_t offset = pad - extent + (stride == 1 ? 1 : 0);
  if (stride == 1 && offset == 0) return in;  // a "same" convolution keeps the dim itself
  std::string shift = offset > 0 ? "+" : "";
  if (offset != 0) shift += std::to_string(offset);
  std::string expr =
      stride == 1 ? "{}" + shift : "({}" + shift + ")/" + std::to_string(stride) + "+1";
  return ctx.derive(
      in, [=](int64_t size) { return window_count(size, pad, extent, stride); }, expr);
}

void infer_conv2d(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& w = ctx.input(1);
  ctx.check(x.rank() == 4, "x must be 4-D [N, C, H, W]");
  ctx.check(w.rank() == 4, "w must be 4-D [O, C/groups, KH, KW]");
  ctx.check(ctx.num_inputs() <= 3, "takes x, w and at most one bias");
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64, "conv2d supports f32 and f64");
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    ctx.check(ctx.input(i).dtype == x.dtype, "x, w and bias must have the same dtype");

  const int64_t groups = ctx.attr_int("groups");
  const auto& stride = ctx.attr_ints("stride");
  const auto& dilation = ctx.attr_ints("dilation");
  const auto& padding = ctx.attr_ints("padding");
  ctx.check(groups >= 1, "groups must be at least 1, got " + std::to_string(groups));
  ctx.check(stride.size() == 2 && stride[0] >= 1 && stride[1] >= 1,
            "stride must be two positive ints [sh, sw]");
  ctx.check(dilation.size() == 2 && dilation[0] >= 1 && dilation[1] >= 1,
            "dilation must be two positive ints [dh, dw]");
  ctx.check((padding.size() == 2 || padding.size() == 4) &&
                std::all_of(padding.begin(), padding.end(), [](int64_t p) { return p >= 0; }),
            "padding must be non-negative ints, [ph, pw] or [top, left, bottom, right]");
  const std::string& activation = ctx.attr_string("fused_activation");
  ctx.check(activation == "none" || activation == "relu",
            "fused_activation must be \"none\" or \"relu\", got \"" + activation + "\"");

  ctx.check(w.shape[2].is_static() && w.shape[3].is_static() && w.shape[2].size() >= 1 &&
                w.shape[3].size() >= 1,
            "the kernel's height and width (w's dims 2 and 3) must be known and positive");
  const Dim out_channels = w.shape[0];
  const auto g = std::to_string(groups);
  if (out_channels.is_static())
    ctx.check(
        out_channels.size() % groups == 0,
        "groups=" + g + " must divide w's output channels " + std::to_string(out_channels.size()));
  const Dim in_channels = x.shape[1];
  if (in_channels.is_static()) {
    ctx.check(in_channels.size() % groups == 0,
              "groups=" + g + " must divide x's channels " + std::to_string(in_channels.size()));
    if (w.shape[1].is_static())
      ctx.check(in_channels.size() == w.shape[1].size() * groups,
                "x has " + std::to_string(in_channels.size()) + " channels but w takes " +
                    std::to_string(w.shape[1].size()) + " per group x " + g +
                    " groups = " + std::to_string(w.shape[1].size() * groups));
  }
  if (ctx.num_inputs() == 3) {
    ctx.check(ctx.input(2).rank() == 1, "bias must be 1-D [O]");
    ctx.unify(ctx.input(2).shape[0], out_channels, "bias size and w's output channels");
  }

  const auto pad = padding_tlbr(padding);
  Dim oh = output_dim(ctx, x.shape[2], pad[0] + pad[2], w.shape[2].size(), dilation[0], stride[0],
                      "row");
  Dim ow = output_dim(ctx, x.shape[3], pad[1] + pad[3], w.shape[3].size(), dilation[1], stride[1],
                      "column");
  ctx.set_output(0, TensorType{x.dtype, {x.shape[0], out_channels, oh, ow}, Layout::Plain});
}

Conv2dGeometry geometry_of(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), w = spec.input_sizes(1),
                             y = spec.output_sizes(0);
  const Node& node = spec.node;
  const auto& stride = node.attr_ints("stride");
  const auto& dilation = node.attr_ints("dilation");
  const auto pad = padding_tlbr(node.attr_ints("padding"));
  return Conv2dGeometry{.n = x[0],
                        .c = x[1],
                        .h = x[2],
                        .w = x[3],
                        .o = w[0],
                        .kh = w[2],
                        .kw = w[3],
                        .oh = y[2],
                        .ow = y[3],
                        .groups = node.attr_int("groups"),
                        .stride_h = stride[0],
                        .stride_w = stride[1],
                        .dilation_h = dilation[0],
                        .dilation_w = dilation[1],
                        .pad_top = pad[0],
                        .pad_left = pad[1],
                        .pad_bottom = pad[2],
                        .pad_right = pad[3]};
}

ConvEpilogue epilogue_of(const KernelSpec& spec) {
  return ConvEpilogue{.bias = spec.inputs.size() == 3,
                      .activation = spec.node.attr_string("fused_activation") == "relu"
                                        ? Activation::Relu
                                        : Activation::None};
}

template <typename T>
void reference_conv2d(const Conv2dGeometry& g, const ConvEpilogue& e, const T* x, const T* w,
                      const T* bias, T* y, int threads) {
  const int64_t c_per_group = g.c / g.groups, o_per_group = g.o / g.groups;
  const int64_t window = c_per_group * g.kh * g.kw;
  cpu::parallel_chunks(g.n * g.o, g.oh * g.ow * window, threads, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t batch = plane / g.o, out_channel = plane % g.o;
      const T* x_group = x + (batch * g.c + out_channel / o_per_group * c_per_group) * g.h * g.w;
      const T* w_out = w + out_channel * window;
      T* y_plane = y + plane * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          // In double, as matmul's reference: exact to about 2^-53 of the sum of |x*w|.
          double sum = e.bias ? static_cast<double>(bias[out_channel]) : 0.0;
          for (int64_t c = 0; c < c_per_group; ++c) {
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
                if (ix < 0 || ix >= g.w) continue;
                sum += static_cast<double>(x_group[(c * g.h + iy) * g.w + ix]) *
                       static_cast<double>(w_out[(c * g.kh + ky) * g.kw + kx]);
              }
            }
          }
          // `sum < 0 ? 0 : sum` keeps NaN, as PyTorch's relu.
          if (e.activation == Activation::Relu && sum < 0) sum = 0;
          y_plane[oy * g.ow + ox] = static_cast<T>(sum);
        }
      }
    }
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  auto make = [&]<typename T>(T*) {
    return make_kernel([g = geometry_of(spec), e = epilogue_of(spec), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      reference_conv2d(g, e, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                       e.bias ? static_cast<const T*>(in[2]) : nullptr, static_cast<T*>(out[0]),
                       threads);
    });
  };
  if (spec.inputs[0].dtype == DType::F64) return make(static_cast<double*>(nullptr));
  return make(static_cast<float*>(nullptr));
}

std::string onednn_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::F32) return "f32 only";
  const Conv2dGeometry g = geometry_of(spec);
  // oneDNN's primitive creation can't take empty tensors; the reference loops write them.
  if (g.n == 0 || g.c == 0 || g.o == 0 || g.oh == 0 || g.ow == 0) return "zero-size tensor";
  return "";
}

}  // namespace

void register_conv_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "conv2d";
  def.inputs = {{"x"}, {"w"}, {"bias", /*variadic=*/true}};
  def.attrs = {{"stride", std::vector<int64_t>{1, 1}},
               {"padding", std::vector<int64_t>{0, 0}},
               {"dilation", std::vector<int64_t>{1, 1}},
               {"groups", int64_t{1}},
               {"fused_activation", std::string("none")}};
  def.infer = infer_conv2d;
  def.kernels = {
      {"onednn", "onednn", onednn_unsupported,
       [](const KernelSpec& spec) {
         return cpu::create_onednn_conv2d(geometry_of(spec), epilogue_of(spec), spec);
       }},
      {"reference", "native", nullptr, create_reference},
  };
  registry.add(std::move(def));
}

}  // namespace kiln
