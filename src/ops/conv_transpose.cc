// conv_transpose2d: PyTorch's ConvTranspose2d forward on NCHW tensors, f32 and f64.
//
// Inputs x[N, C, H, W], w[C, O/groups, KH, KW] (PyTorch's layout: input channels first) and
// optionally bias[O] (a variadic last input with zero or one values). Attributes, each [h, w] or
// one value for both: stride, padding, output_padding (extra rows and columns at the bottom and
// right; less than the stride or the dilation), dilation; and groups. Output size:
//   OH = (H - 1) * stride - 2 * padding + dilation * (KH - 1) + output_padding + 1.
//
// Kernels, best first: oneDNN's deconvolution (f32), then the reference loops (f32, f64).
#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/cpu/conv_transpose.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"
#include "ops/window_dims.h"

namespace kiln {

namespace {

using cpu::ConvTranspose2dGeometry;

std::array<int64_t, 2> pair_of(const std::vector<int64_t>& v) {
  return {v[0], v.size() == 1 ? v[0] : v[1]};
}

struct Attrs {
  std::array<int64_t, 2> stride, padding, output_padding, dilation;
  int64_t groups;
};

template <typename Source>  // InferContext or Node, attributes already validated
Attrs attrs_of(const Source& s) {
  return Attrs{pair_of(s.attr_ints("stride")), pair_of(s.attr_ints("padding")),
               pair_of(s.attr_ints("output_padding")), pair_of(s.attr_ints("dilation")),
               s.attr_int("groups")};
}

WindowAxis axis_of(const Attrs& a, size_t i, int64_t kernel) {
  return WindowAxis{.kernel = kernel, .stride = a.stride[i], .dilation = a.dilation[i],
                    .pad_begin = a.padding[i], .pad_end = a.padding[i]};
}

// One or two values, each at least `least` and below 2^31 (far from overflow in the output size).
void check_pair(InferContext& ctx, const std::string& name, int64_t least) {
  const auto& v = ctx.attr_ints(name);
  ctx.check((v.size() == 1 || v.size() == 2) &&
                std::all_of(v.begin(), v.end(),
                            [&](int64_t e) { return e >= least && e <= INT32_MAX; }),
            name + " must be one int or two [h, w], each " +
                (least == 0 ? "non-negative" : "positive") + " and below 2^31");
}

void infer_conv_transpose2d(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& w = ctx.input(1);
  ctx.check(x.rank() == 4, "x must be 4-D [N, C, H, W]");
  ctx.check(w.rank() == 4, "w must be 4-D [C, O/groups, KH, KW]");
  ctx.check(ctx.num_inputs() <= 3, "takes x, w and at most one bias");
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            "conv_transpose2d takes f32 or f64, not " + std::string(dtype_name(x.dtype)));
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    ctx.check(ctx.input(i).dtype == x.dtype, "x, w and bias must have the same dtype");
  check_pair(ctx, "stride", 1);
  check_pair(ctx, "padding", 0);
  check_pair(ctx, "output_padding", 0);
  check_pair(ctx, "dilation", 1);
  const Attrs a = attrs_of(ctx);
  ctx.check(a.groups >= 1, "groups must be at least 1, got " + std::to_string(a.groups));
  for (size_t i = 0; i < 2; ++i)
    ctx.check(a.output_padding[i] < a.stride[i] || a.output_padding[i] < a.dilation[i],
              "output_padding " + std::to_string(a.output_padding[i]) +
                  " must be smaller than the stride (" + std::to_string(a.stride[i]) +
                  ") or the dilation (" + std::to_string(a.dilation[i]) + ")");
  for (size_t d = 2; d < 4; ++d)
    ctx.check(w.shape[d].is_static() && w.shape[d].size() >= 1 && w.shape[d].size() <= INT32_MAX,
              "the kernel's height and width (w's dims 2 and 3) must be known, positive and "
              "below 2^31");

  const std::string g = std::to_string(a.groups);
  ctx.unify(x.shape[1], w.shape[0], "x's channels and w's input channels (dim 0)");
  const Dim in_channels = x.shape[1].is_static() ? x.shape[1] : w.shape[0];
  if (in_channels.is_static())
    ctx.check(in_channels.size() % a.groups == 0,
              "groups=" + g + " must divide the input channels " + std::to_string(in_channels.size()));
  const Dim out_channels =
      a.groups == 1 ? w.shape[1]
                    : ctx.derive(w.shape[1], [groups = a.groups](int64_t s) { return s * groups; },
                                 "{}*" + g);
  if (ctx.num_inputs() == 3) {
    ctx.check(ctx.input(2).rank() == 1, "bias must be 1-D [O]");
    ctx.unify(ctx.input(2).shape[0], out_channels, "bias size and the output channels");
  }
  const Dim oh = transposed_output_dim(ctx, x.shape[2], axis_of(a, 0, w.shape[2].size()),
                                       a.output_padding[0], "row");
  const Dim ow = transposed_output_dim(ctx, x.shape[3], axis_of(a, 1, w.shape[3].size()),
                                       a.output_padding[1], "column");
  ctx.set_output(0, TensorType{x.dtype, {x.shape[0], out_channels, oh, ow}, Layout::Plain});
}

ConvTranspose2dGeometry geometry_of(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), w = spec.input_sizes(1),
                             y = spec.output_sizes(0);
  const Attrs a = attrs_of(spec.node);
  return ConvTranspose2dGeometry{.n = x[0], .c = x[1], .h = x[2], .w = x[3],
                                 .o = y[1], .kh = w[2], .kw = w[3],
                                 .oh = y[2], .ow = y[3],
                                 .groups = a.groups,
                                 .stride_h = a.stride[0], .stride_w = a.stride[1],
                                 .dilation_h = a.dilation[0], .dilation_w = a.dilation[1],
                                 .pad_h = a.padding[0], .pad_w = a.padding[1],
                                 .output_padding_h = a.output_padding[0],
                                 .output_padding_w = a.output_padding[1]};
}

// The input index that output index `out` takes through kernel tap k, or -1 when none does:
// out = in * stride - pad + k * dilation.
int64_t source_index(int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                     int64_t in_size) {
  const int64_t t = out + pad - k * dilation;
  if (t < 0 || t % stride != 0 || t / stride >= in_size) return -1;
  return t / stride;
}

// Each output element gathers its terms (rather than each input scattering them), so planes
// split over threads without write conflicts. Sums in double, as conv2d's reference.
template <typename T>
void reference_conv_transpose2d(const ConvTranspose2dGeometry& g, const T* x, const T* w,
                                const T* bias, T* y, int threads) {
  const int64_t c_per_group = g.c / g.groups, o_per_group = g.o / g.groups;
  cpu::parallel_chunks(g.n * g.o, g.oh * g.ow * c_per_group * g.kh * g.kw, threads,
                       [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t batch = plane / g.o, out_channel = plane % g.o;
      const int64_t group = out_channel / o_per_group;
      const T* x_group = x + (batch * g.c + group * c_per_group) * g.h * g.w;
      // w[c][out_channel % o_per_group] for the group's channels c.
      const T* w_out = w + (group * c_per_group * o_per_group + out_channel % o_per_group) * g.kh * g.kw;
      T* y_plane = y + plane * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          double sum = bias ? static_cast<double>(bias[out_channel]) : 0.0;
          for (int64_t ky = 0; ky < g.kh; ++ky) {
            const int64_t iy = source_index(oy, ky, g.stride_h, g.pad_h, g.dilation_h, g.h);
            if (iy < 0) continue;
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t ix = source_index(ox, kx, g.stride_w, g.pad_w, g.dilation_w, g.w);
              if (ix < 0) continue;
              for (int64_t c = 0; c < c_per_group; ++c)
                sum += static_cast<double>(x_group[(c * g.h + iy) * g.w + ix]) *
                       static_cast<double>(w_out[(c * o_per_group * g.kh + ky) * g.kw + kx]);
            }
          }
          y_plane[oy * g.ow + ox] = static_cast<T>(sum);
        }
      }
    }
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  auto make = [&]<typename T>(T*) {
    return make_kernel([g = geometry_of(spec), bias = spec.inputs.size() == 3,
                        threads = spec.threads](std::span<const void* const> in,
                                                std::span<void* const> out) {
      reference_conv_transpose2d(g, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                                 bias ? static_cast<const T*>(in[2]) : nullptr,
                                 static_cast<T*>(out[0]), threads);
    });
  };
  if (spec.inputs[0].dtype == DType::F64) return make(static_cast<double*>(nullptr));
  return make(static_cast<float*>(nullptr));
}

std::string onednn_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::F32) return "f32 only";
  const ConvTranspose2dGeometry g = geometry_of(spec);
  // oneDNN's primitive creation can't take empty tensors; the reference loops write them.
  if (g.n == 0 || g.c == 0 || g.o == 0) return "zero-size tensor";
  // output_padding becomes negative end padding (conv_transpose_onednn.cc); oneDNN refuses to
  // create the primitive once it reaches the stride (PyTorch allows it below the dilation).
  if (g.output_padding_h - g.pad_h >= g.stride_h || g.output_padding_w - g.pad_w >= g.stride_w)
    return "output_padding exceeds the padding by the stride or more";
  return "";
}

}  // namespace

void register_conv_transpose_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "conv_transpose2d";
  def.inputs = {{"x"}, {"w"}, {"bias", /*variadic=*/true}};
  def.attrs = {{"stride", std::vector<int64_t>{1, 1}},
               {"padding", std::vector<int64_t>{0, 0}},
               {"output_padding", std::vector<int64_t>{0, 0}},
               {"dilation", std::vector<int64_t>{1, 1}},
               {"groups", int64_t{1}}};
  def.infer = infer_conv_transpose2d;
  def.computes_low_precision_in_f32 = true;
  def.kernels = {
      {"onednn", "onednn", onednn_unsupported,
       [](const KernelSpec& spec) {
         return cpu::create_onednn_conv_transpose2d(geometry_of(spec), spec.inputs.size() == 3,
                                                    spec);
       }},
      {"reference", "native", [](const KernelSpec&) { return std::string(); }, create_reference},
  };
  registry.add(std::move(def));
}

}  // namespace kiln
