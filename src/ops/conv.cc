// conv2d: PyTorch's Conv2d forward on [N, C, H, W] tensors, f32 and f64, and bf16 x and w (which
// fold_bf16_casts_into_conv makes of an f32 convolution of widened bf16 values) accumulated in
// f32, with an f32 bias and an f32 result, or a bf16 one (attribute dtype) rounded once after the
// epilogue.
//
// Inputs x[N, C, H, W], w[O, C/groups, KH, KW], then optionally bias[O], then r (when residual is
// true). Attributes: stride [sh, sw], padding [ph, pw] (symmetric) or [top, left, bottom, right],
// dilation [dh, dw], groups, and the epilogue fusion passes set, applied by the same kernel as
// the result is stored (cpu::ConvEpilogue):
//   y = clamp(fused_activation(conv(x, w) + bias + r), clamp_min, clamp_max)
// computed in x's dtype (f32 for bf16 x) and stored in y's.
// with fused_activation one of the matmul epilogue's ("none", "relu", "gelu_erf", ...), clamp
// bounds -inf and inf (none) by default, and r of y's type and layout. The defaults leave a plain
// convolution. x may be in any layout; y is in `layout` (the format stage sets it); w and bias
// are plain.
//
// Kernels, best first: oneDNN's Winograd convolution (f32 3x3 stride-1 convolutions in nChw16c
// on AVX-512 CPUs: about twice as fast as direct, docs/ops.md), oneDNN's direct convolution
// (f32, bf16: on CPUs without AVX512-BF16 its f32 convolution on widened operands), then the
// reference loops (every dtype), which read and write non-plain layouts through plain copies in
// their scratch memory.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <type_traits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/dtype_attr.h"
#include "ops/op_registry.h"
#include "ops/window_dims.h"

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
// Computed in 128 bits: an unbounded symbol's range ends at INT64_MAX.
int64_t window_count(int64_t in, int64_t pad, int64_t extent, int64_t stride) {
  const __int128 padded = __int128{in} + pad;
  if (padded < extent) return 0;
  const __int128 count = (padded - extent) / stride + 1;
  return count > INT64_MAX ? INT64_MAX : static_cast<int64_t>(count);
}

Dim output_dim(InferContext& ctx, Dim in, int64_t pad, int64_t kernel, int64_t dilation,
               int64_t stride, const char* axis) {
  const int64_t extent = dilation * (kernel - 1) + 1;
  const int64_t largest = in.is_static() ? in.size() : ctx.symbols()[in.symbol()].max;
  if (window_count(largest, pad, extent, 1) == 0)
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

// The inputs after x and w: [bias] then [r].
struct Extras {
  bool bias = false, residual = false;
};

void check_epilogue(InferContext& ctx, Extras& extras) {
  extras.residual = ctx.attr_bool("residual");
  const size_t extra = ctx.num_inputs() - 2;
  ctx.check(extra <= 1 + (extras.residual ? 1u : 0u),
            std::string("takes x, w, at most one bias") +
                (extras.residual ? " and the residual r" : "") + ", got " +
                std::to_string(ctx.num_inputs()) + " inputs");
  ctx.check(!extras.residual || extra >= 1, "residual is true but there is no r input");
  extras.bias = extra == (extras.residual ? 2u : 1u);
  const std::string& activation = ctx.attr_string("fused_activation");
  ctx.check(cpu::parse_activation(activation).has_value(),
            "fused_activation must be one of " + cpu::activation_names() + ", got \"" +
                activation + "\"");
  const double lo = ctx.attr_float("clamp_min"), hi = ctx.attr_float("clamp_max");
  ctx.check(!std::isnan(lo) && !std::isnan(hi) && lo <= hi,
            "clamp_min must not exceed clamp_max, and neither may be NaN");
}

void infer_conv2d(InferContext& ctx) {
  ctx.check(ctx.num_inputs() >= 2, "takes x and w");
  const TensorType& x = ctx.input(0);
  const TensorType& w = ctx.input(1);
  ctx.check(x.rank() == 4, "x must be 4-D [N, C, H, W]");
  ctx.check(w.rank() == 4, "w must be 4-D [O, C/groups, KH, KW]");
  Extras extras;
  check_epilogue(ctx, extras);
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64 || x.dtype == DType::BF16,
            "conv2d supports f32 and f64, and bf16 x and w (accumulated in f32)");
  ctx.check(w.dtype == x.dtype, "w must have x's dtype");
  // bf16 operands accumulate in f32: the bias is f32 and the result f32 unless dtype says bf16.
  const DType accumulator = x.dtype == DType::BF16 ? DType::F32 : x.dtype;
  const DType result = dtype_attr(ctx, "dtype", accumulator);
  const std::string operands(dtype_name(x.dtype)), accumulates(dtype_name(accumulator));
  ctx.check(result == accumulator || (x.dtype == DType::BF16 && result == DType::BF16),
            "dtype must be \"\" or " + accumulates + (x.dtype == DType::BF16 ? " or bf16" : "") +
                " for " + operands + " operands");
  if (extras.bias)
    ctx.check(ctx.input(2).dtype == accumulator,
              "bias must be " + accumulates + " for " + operands + " operands");
  if (extras.residual)
    ctx.check(ctx.input(ctx.num_inputs() - 1).dtype == result,
              "the residual r must have y's dtype " + std::string(dtype_name(result)));
  for (size_t i = 1; i < (extras.bias ? 3u : 2u); ++i)
    ctx.check(ctx.input(i).layout == Layout::Plain, "w and bias must be plain");
  Layout layout = Layout::Plain;
  const std::string& layout_attr = ctx.attr_string("layout");
  ctx.check(parse_layout(layout_attr, layout),
            "layout must be plain, nhwc, nChw8c or nChw16c, got \"" + layout_attr + "\"");

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

  ctx.check(w.shape[2].is_static() && w.shape[3].is_static() && w.shape[2].size() >= 1 &&
                w.shape[3].size() >= 1,
            "the kernel's height and width (w's dims 2 and 3) must be known and positive");
  const Dim out_channels = check_conv_channels(ctx, x, w, groups, extras.bias);

  const auto pad = padding_tlbr(padding);
  Dim oh = output_dim(ctx, x.shape[2], pad[0] + pad[2], w.shape[2].size(), dilation[0], stride[0],
                      "row");
  Dim ow = output_dim(ctx, x.shape[3], pad[1] + pad[3], w.shape[3].size(), dilation[1], stride[1],
                      "column");
  TensorType y{result, {x.shape[0], out_channels, oh, ow}, layout};
  const std::string problem = layout_problem(y.shape, layout);
  ctx.check(problem.empty(), "y can't be in its layout: " + problem);
  if (extras.residual) {
    const TensorType& r = ctx.input(ctx.num_inputs() - 1);
    ctx.check(r.rank() == 4 && r.layout == layout,
              "the residual r must have y's rank and layout (" + type_string(y, &ctx.symbols()) +
                  ")");
    for (size_t d = 0; d < 4; ++d)
      y.shape[d] = ctx.unify(y.shape[d], r.shape[d], "y's and the residual's dim " +
                                                         std::to_string(d));
  }
  ctx.set_output(0, y);
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
  const Node& node = spec.node;
  const bool residual = node.attr_bool("residual");
  const std::optional<Activation> activation = cpu::parse_activation(
      node.attr_string("fused_activation"));
  KILN_ASSERT(activation, "conv2d " << node.name() << " has an unchecked activation");
  return ConvEpilogue{.bias = spec.inputs.size() == (residual ? 4u : 3u),
                      .residual = residual,
                      .activation = *activation,
                      .clamp_min = node.attr_float("clamp_min"),
                      .clamp_max = node.attr_float("clamp_max")};
}

// The epilogue after the bias, in A (the accumulator's type), rounding after each step as the
// unfused add, activation and hardtanh do, so that a fused reference convolution equals the
// unfused reference chain.
template <typename A>
A reference_epilogue(const ConvEpilogue& e, A y, const A* r) {
  if (e.residual) y = static_cast<A>(y + *r);
  y = cpu::reference_activation(e.activation, y);
  if (e.clamps()) {
    // hardtanh's rule (elementwise.cc): NaN stays NaN.
    const A low = static_cast<A>(e.clamp_min), high = static_cast<A>(e.clamp_max);
    y = y < low ? low : y;
    y = high < y ? high : y;
  }
  return y;
}

// The type of the bias and the epilogue for operands of type X: f32 for bf16 operands.
template <typename X>
using Accumulator = std::conditional_t<std::is_same_v<X, double>, double, float>;

// Operands of type X, result of type Y (rounded once, after the epilogue); on plain tensors; r is
// null without a residual.
template <typename X, typename Y>
void reference_conv2d(const Conv2dGeometry& g, const ConvEpilogue& e, const X* x, const X* w,
                      const Accumulator<X>* bias, const Y* r, Y* y, int threads) {
  using A = Accumulator<X>;
  const int64_t c_per_group = g.c / g.groups, o_per_group = g.o / g.groups;
  const int64_t window = c_per_group * g.kh * g.kw;
  cpu::parallel_chunks(g.n * g.o, g.oh * g.ow * window, threads, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t batch = plane / g.o, out_channel = plane % g.o;
      const auto* x_group = x + (batch * g.c + out_channel / o_per_group * c_per_group) * g.h * g.w;
      const auto* w_out = w + out_channel * window;
      Y* y_plane = y + plane * g.oh * g.ow;
      const Y* r_plane = r ? r + plane * g.oh * g.ow : nullptr;
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
                sum += cpu::convert<double>(x_group[(c * g.h + iy) * g.w + ix]) *
                       cpu::convert<double>(w_out[(c * g.kh + ky) * g.kw + kx]);
              }
            }
          }
          const int64_t at = oy * g.ow + ox;
          const A residual = r_plane ? cpu::convert<A>(r_plane[at]) : A{};
          y_plane[at] = cpu::convert<Y>(
              reference_epilogue(e, static_cast<A>(sum), r_plane ? &residual : nullptr));
        }
      }
    }
  });
}

// The reference loops on plain tensors; x, r and y in other layouts go through plain copies in
// the scratch memory.
template <typename X, typename Y>
class ReferenceConv2d final : public KernelInstance {
 public:
  explicit ReferenceConv2d(const KernelSpec& spec)
      : g_(geometry_of(spec)),
        e_(epilogue_of(spec)),
        threads_(spec.threads),
        x_layout_(spec.inputs[0].layout),
        y_layout_(spec.outputs[0].layout) {
    if (x_layout_ != Layout::Plain) x_copy_ = take(g_.n * g_.c * g_.h * g_.w * sizeof(X));
    if (y_layout_ != Layout::Plain) {
      y_copy_ = take(g_.n * g_.o * g_.oh * g_.ow * sizeof(Y));
      if (e_.residual) r_copy_ = take(g_.n * g_.o * g_.oh * g_.ow * sizeof(Y));
    }
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    auto* base = static_cast<std::byte*>(scratch);
    const cpu::Nchw xs{g_.n, g_.c, g_.h, g_.w}, ys{g_.n, g_.o, g_.oh, g_.ow};
    const X* x = static_cast<const X*>(in[0]);
    if (x_layout_ != Layout::Plain) {
      X* plain = reinterpret_cast<X*>(base + x_copy_);
      cpu::convert_layout(xs, x_layout_, x, Layout::Plain, plain, threads_);
      x = plain;
    }
    const Y* r = e_.residual ? static_cast<const Y*>(in[in.size() - 1]) : nullptr;
    Y* y = static_cast<Y*>(out[0]);
    if (y_layout_ != Layout::Plain) {
      if (r) {
        Y* plain = reinterpret_cast<Y*>(base + r_copy_);
        cpu::convert_layout(ys, y_layout_, r, Layout::Plain, plain, threads_);
        r = plain;
      }
      y = reinterpret_cast<Y*>(base + y_copy_);
    }
    reference_conv2d(g_, e_, x, static_cast<const X*>(in[1]),
                     e_.bias ? static_cast<const Accumulator<X>*>(in[2]) : nullptr, r, y,
                     threads_);
    if (y_layout_ != Layout::Plain)
      cpu::convert_layout(ys, Layout::Plain, y, y_layout_, static_cast<Y*>(out[0]), threads_);
  }

 private:
  // Reserves `bytes` of scratch; returns their offset (aligned for any kernel use).
  size_t take(int64_t bytes) {
    const size_t offset = scratch_bytes_;
    scratch_bytes_ += (static_cast<size_t>(bytes) + kAlignment - 1) / kAlignment * kAlignment;
    return offset;
  }

  Conv2dGeometry g_;
  ConvEpilogue e_;
  int threads_;
  Layout x_layout_, y_layout_;
  size_t scratch_bytes_ = 0, x_copy_ = 0, y_copy_ = 0, r_copy_ = 0;
};

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  switch (spec.inputs[0].dtype) {
    case DType::F64: return std::make_unique<ReferenceConv2d<double, double>>(spec);
    case DType::BF16:
      if (spec.outputs[0].dtype == DType::BF16)
        return std::make_unique<ReferenceConv2d<cpu::BFloat16, cpu::BFloat16>>(spec);
      return std::make_unique<ReferenceConv2d<cpu::BFloat16, float>>(spec);
    default: return std::make_unique<ReferenceConv2d<float, float>>(spec);
  }
}

std::string onednn_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::F32 && spec.inputs[0].dtype != DType::BF16)
    return "f32 and bf16 only";
  const Conv2dGeometry g = geometry_of(spec);
  // oneDNN's primitive creation can't take empty tensors; the reference loops write them.
  if (g.n == 0 || g.c == 0 || g.o == 0 || g.oh == 0 || g.ow == 0) return "zero-size tensor";
  return "";
}

}  // namespace

void register_conv_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "conv2d";
  def.inputs = {{"x"}, {"w"}, {"bias_and_residual", /*variadic=*/true}};
  def.attrs = {{"stride", std::vector<int64_t>{1, 1}},
               {"padding", std::vector<int64_t>{0, 0}},
               {"dilation", std::vector<int64_t>{1, 1}},
               {"groups", int64_t{1}},
               {"fused_activation", std::string("none")},
               {"clamp_min", -std::numeric_limits<double>::infinity()},
               {"clamp_max", std::numeric_limits<double>::infinity()},
               {"residual", false},
               {"layout", std::string("plain")},
               {"dtype", std::string("")}};
  def.infer = infer_conv2d;
  def.computes_low_precision_in_f32 = true;
  def.layout_aware = true;
  def.kernels = {
      {"onednn_winograd", "onednn",
       [](const KernelSpec& spec) {
         if (std::string why = onednn_unsupported(spec); !why.empty()) return why;
         return cpu::onednn_winograd_unsupported(geometry_of(spec), epilogue_of(spec), spec);
       },
       [](const KernelSpec& spec) {
         return cpu::create_onednn_winograd_conv2d(geometry_of(spec), epilogue_of(spec), spec);
       }},
      {"onednn", "onednn", onednn_unsupported,
       [](const KernelSpec& spec) {
         return cpu::create_onednn_conv2d(geometry_of(spec), epilogue_of(spec), spec);
       }},
      {"reference", "native", nullptr, create_reference},
  };
  // y may overwrite the residual r where r dies here (conv_onednn.cc). Position 3 is r whenever
  // it exists (x, w, bias, r); a residual without a bias, at 2, is copied instead.
  def.kernels[1].in_place_inputs = {3};
  registry.add(std::move(def));
}

}  // namespace kiln
