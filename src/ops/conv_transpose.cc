// conv_transpose2d and conv_transpose3d: PyTorch's ConvTranspose2d and ConvTranspose3d forward
// on NC(D)HW tensors, f32 and f64.
//
// Inputs x[N, C, (D,) H, W], w[C, O/groups, (KD,) KH, KW] (PyTorch's layout: input channels
// first) and optionally bias[O] (a variadic last input with zero or one values). Attributes, each
// one value per spatial axis or one value for all: stride, padding, output_padding (extra
// elements at the end of each axis; less than the stride or the dilation), dilation; and groups.
// Output size along each axis:
//   out = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1.
//
// Kernels, best first: oneDNN's deconvolution (f32), then the reference loops (f32, f64). Both
// ops share all of it: a 2-d problem is a 3-d one of depth 1 (ConvTransposeGeometry).
#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/cpu/conv_transpose.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"
#include "ops/window_dims.h"

namespace kiln {

namespace {

using cpu::ConvTransposeGeometry;
using Axes = ConvTransposeGeometry::Axes;

// Per op: its spatial axes, which attribute lists have one entry per axis ("[h, w]").
struct Form {
  int spatial;
  const char* name;
  const char* axes_label;   // "[h, w]" or "[d, h, w]"
  const char* count_word;   // "two" or "three"
  const char* x_layout;     // "[N, C, H, W]"
  const char* w_layout;     // "[C, O/groups, KH, KW]"
};
constexpr Form kForms[] = {
    {2, "conv_transpose2d", "[h, w]", "two", "[N, C, H, W]", "[C, O/groups, KH, KW]"},
    {3, "conv_transpose3d", "[d, h, w]", "three", "[N, C, D, H, W]", "[C, O/groups, KD, KH, KW]"},
};

// An attribute's per-axis values as [d, h, w], `unit` in the axes a 2-d op lacks.
Axes axes_of(const std::vector<int64_t>& v, int spatial, int64_t unit) {
  Axes a{unit, unit, unit};
  for (int i = 0; i < spatial; ++i)
    a[static_cast<size_t>(3 - spatial + i)] = v.size() == 1 ? v[0] : v[static_cast<size_t>(i)];
  return a;
}

struct Attrs {
  Axes stride, padding, output_padding, dilation;
  int64_t groups;
};

template <typename Source>  // InferContext or Node, attributes already validated
Attrs attrs_of(const Source& s, int spatial) {
  return Attrs{axes_of(s.attr_ints("stride"), spatial, 1), axes_of(s.attr_ints("padding"), spatial, 0),
               axes_of(s.attr_ints("output_padding"), spatial, 0),
               axes_of(s.attr_ints("dilation"), spatial, 1), s.attr_int("groups")};
}

WindowAxis axis_of(const Attrs& a, size_t i, int64_t kernel) {
  return WindowAxis{.kernel = kernel, .stride = a.stride[i], .dilation = a.dilation[i],
                    .pad_begin = a.padding[i], .pad_end = a.padding[i]};
}

// One value or one per spatial axis, each at least `least` and below 2^31 (far from overflow in
// the output size).
void check_axes(InferContext& ctx, const Form& f, const std::string& name, int64_t least) {
  const auto& v = ctx.attr_ints(name);
  ctx.check((v.size() == 1 || v.size() == static_cast<size_t>(f.spatial)) &&
                std::all_of(v.begin(), v.end(),
                            [&](int64_t e) { return e >= least && e <= INT32_MAX; }),
            name + " must be one int or " + f.count_word + " " + f.axes_label + ", each " +
                (least == 0 ? "non-negative" : "positive") + " and below 2^31");
}

void infer_conv_transpose(InferContext& ctx, const Form& f) {
  const TensorType& x = ctx.input(0);
  const TensorType& w = ctx.input(1);
  const size_t rank = static_cast<size_t>(f.spatial) + 2;
  const std::string dims = std::to_string(rank) + "-D ";
  ctx.check(x.rank() == rank, "x must be " + dims + f.x_layout);
  ctx.check(w.rank() == rank, "w must be " + dims + f.w_layout);
  ctx.check(ctx.num_inputs() <= 3, "takes x, w and at most one bias");
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            std::string(f.name) + " takes f32 or f64, not " + std::string(dtype_name(x.dtype)));
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    ctx.check(ctx.input(i).dtype == x.dtype, "x, w and bias must have the same dtype");
  check_axes(ctx, f, "stride", 1);
  check_axes(ctx, f, "padding", 0);
  check_axes(ctx, f, "output_padding", 0);
  check_axes(ctx, f, "dilation", 1);
  const Attrs a = attrs_of(ctx, f.spatial);
  ctx.check(a.groups >= 1, "groups must be at least 1, got " + std::to_string(a.groups));
  for (size_t i = 0; i < 3; ++i)
    ctx.check(a.output_padding[i] < a.stride[i] || a.output_padding[i] < a.dilation[i],
              "output_padding " + std::to_string(a.output_padding[i]) +
                  " must be smaller than the stride (" + std::to_string(a.stride[i]) +
                  ") or the dilation (" + std::to_string(a.dilation[i]) + ")");
  for (size_t d = 2; d < rank; ++d)
    ctx.check(w.shape[d].is_static() && w.shape[d].size() >= 1 && w.shape[d].size() <= INT32_MAX,
              std::string("the kernel's ") + (f.spatial == 3 ? "depth, " : "") +
                  "height and width (w's dims 2 and up) must be known, positive and below 2^31");

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
  static const char* const kAxisNames[] = {"depth", "row", "column"};
  std::vector<Dim> out{x.shape[0], out_channels};
  for (size_t i = static_cast<size_t>(3 - f.spatial); i < 3; ++i) {
    const size_t d = i - static_cast<size_t>(3 - f.spatial) + 2;
    out.push_back(transposed_output_dim(ctx, x.shape[d], axis_of(a, i, w.shape[d].size()),
                                        a.output_padding[i], kAxisNames[i]));
  }
  ctx.set_output(0, TensorType{x.dtype, std::move(out), Layout::Plain});
}

ConvTransposeGeometry geometry_of(const KernelSpec& spec, int spatial) {
  const std::vector<int64_t> x = spec.input_sizes(0), w = spec.input_sizes(1),
                             y = spec.output_sizes(0);
  const Attrs a = attrs_of(spec.node, spatial);
  ConvTransposeGeometry g{.spatial = spatial, .n = x[0], .c = x[1], .o = y[1], .groups = a.groups,
                          .stride = a.stride, .dilation = a.dilation, .pad = a.padding,
                          .output_padding = a.output_padding};
  for (int i = 0; i < spatial; ++i) {
    const auto axis = static_cast<size_t>(3 - spatial + i), d = static_cast<size_t>(2 + i);
    g.in[axis] = x[d];
    g.kernel[axis] = w[d];
    g.out[axis] = y[d];
  }
  return g;
}

// The input index that output index `out` takes through kernel tap k along `axis`, or -1 when
// none does: out = in * stride - pad + k * dilation.
int64_t source_index(const ConvTransposeGeometry& g, size_t axis, int64_t out, int64_t k) {
  const int64_t t = out + g.pad[axis] - k * g.dilation[axis];
  if (t < 0 || t % g.stride[axis] != 0 || t / g.stride[axis] >= g.in[axis]) return -1;
  return t / g.stride[axis];
}

// Each output element gathers its terms (rather than each input scattering them), so volumes
// split over threads without write conflicts. Sums in double, as conv2d's reference.
template <typename T>
void reference_conv_transpose(const ConvTransposeGeometry& g, const T* x, const T* w,
                              const T* bias, T* y, int threads) {
  const int64_t c_per_group = g.c / g.groups, o_per_group = g.o / g.groups;
  const int64_t in_volume = g.in[0] * g.in[1] * g.in[2];
  const int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  const int64_t out_volume = g.out[0] * g.out[1] * g.out[2];
  cpu::parallel_chunks(g.n * g.o, out_volume * c_per_group * taps, threads,
                       [&](int64_t begin, int64_t end) {
    for (int64_t volume = begin; volume < end; ++volume) {
      const int64_t batch = volume / g.o, out_channel = volume % g.o;
      const int64_t group = out_channel / o_per_group;
      const T* x_group = x + (batch * g.c + group * c_per_group) * in_volume;
      // w[c][out_channel % o_per_group] for the group's channels c.
      const T* w_out = w + (group * c_per_group * o_per_group + out_channel % o_per_group) * taps;
      T* y_volume = y + volume * out_volume;
      for (int64_t oz = 0; oz < g.out[0]; ++oz)
        for (int64_t oy = 0; oy < g.out[1]; ++oy)
          for (int64_t ox = 0; ox < g.out[2]; ++ox) {
            double sum = bias ? static_cast<double>(bias[out_channel]) : 0.0;
            for (int64_t kz = 0; kz < g.kernel[0]; ++kz) {
              const int64_t iz = source_index(g, 0, oz, kz);
              if (iz < 0) continue;
              for (int64_t ky = 0; ky < g.kernel[1]; ++ky) {
                const int64_t iy = source_index(g, 1, oy, ky);
                if (iy < 0) continue;
                for (int64_t kx = 0; kx < g.kernel[2]; ++kx) {
                  const int64_t ix = source_index(g, 2, ox, kx);
                  if (ix < 0) continue;
                  const int64_t at = (iz * g.in[1] + iy) * g.in[2] + ix;
                  const int64_t tap = (kz * g.kernel[1] + ky) * g.kernel[2] + kx;
                  for (int64_t c = 0; c < c_per_group; ++c)
                    sum += static_cast<double>(x_group[c * in_volume + at]) *
                           static_cast<double>(w_out[c * o_per_group * taps + tap]);
                }
              }
            }
            y_volume[(oz * g.out[1] + oy) * g.out[2] + ox] = static_cast<T>(sum);
          }
    }
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec, int spatial) {
  auto make = [&]<typename T>(T*) {
    return make_kernel([g = geometry_of(spec, spatial), bias = spec.inputs.size() == 3,
                        threads = spec.threads](std::span<const void* const> in,
                                                std::span<void* const> out) {
      reference_conv_transpose(g, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                               bias ? static_cast<const T*>(in[2]) : nullptr,
                               static_cast<T*>(out[0]), threads);
    });
  };
  if (spec.inputs[0].dtype == DType::F64) return make(static_cast<double*>(nullptr));
  return make(static_cast<float*>(nullptr));
}

std::string onednn_unsupported(const KernelSpec& spec, int spatial) {
  if (spec.inputs[0].dtype != DType::F32) return "f32 only";
  const ConvTransposeGeometry g = geometry_of(spec, spatial);
  // oneDNN's primitive creation can't take empty tensors; the reference loops write them.
  if (g.n == 0 || g.c == 0 || g.o == 0) return "zero-size tensor";
  // output_padding becomes negative end padding (conv_transpose_onednn.cc); oneDNN refuses to
  // create the primitive once it reaches the stride (PyTorch allows it below the dilation).
  for (size_t i = 0; i < 3; ++i)
    if (g.output_padding[i] - g.pad[i] >= g.stride[i])
      return "output_padding exceeds the padding by the stride or more";
  return "";
}

}  // namespace

void register_conv_transpose_ops(OpRegistry& registry) {
  for (const Form& f : kForms) {
    const int spatial = f.spatial;
    const std::vector<int64_t> ones(static_cast<size_t>(spatial), 1),
        zeros(static_cast<size_t>(spatial), 0);
    OpDef def;
    def.name = f.name;
    def.inputs = {{"x"}, {"w"}, {"bias", /*variadic=*/true}};
    def.attrs = {{"stride", ones}, {"padding", zeros}, {"output_padding", zeros},
                 {"dilation", ones}, {"groups", int64_t{1}}};
    def.infer = [&f](InferContext& ctx) { infer_conv_transpose(ctx, f); };
    def.computes_low_precision_in_f32 = true;
    def.kernels = {
        {"onednn", "onednn",
         [spatial](const KernelSpec& spec) { return onednn_unsupported(spec, spatial); },
         [spatial](const KernelSpec& spec) {
           return cpu::create_onednn_conv_transpose(geometry_of(spec, spatial),
                                                    spec.inputs.size() == 3, spec);
         }},
        {"reference", "native", [](const KernelSpec&) { return std::string(); },
         [spatial](const KernelSpec& spec) { return create_reference(spec, spatial); }},
    };
    registry.add(std::move(def));
  }
}

}  // namespace kiln
