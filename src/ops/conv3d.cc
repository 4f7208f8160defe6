// conv3d: PyTorch's Conv3d forward on [N, C, D, H, W] tensors (video and volumetric models), f32
// and f64.
//
// Inputs x[N, C, D, H, W], w[O, C/groups, KD, KH, KW] and optionally bias[O] (a variadic last
// input with zero or one values). Attributes: stride [sd, sh, sw], padding [pd, ph, pw]
// (symmetric) or [front, top, left, back, bottom, right], dilation [dd, dh, dw], groups. Every
// tensor is plain.
//
// Kernels: Kiln's depthwise kernel (f32, one filter per channel, AVX2: faster than oneDNN 2.6's
// there), oneDNN's convolution (f32; in the layout it prefers, reordered around it), then the
// reference loops (f32, f64), which accumulate in double.
#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/depthwise_conv3d.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"
#include "ops/window_dims.h"

namespace kiln {

namespace {

using cpu::Conv3dGeometry;

// padding as (begin, end) per spatial dim.
std::array<std::array<int64_t, 2>, 3> padding_per_dim(const std::vector<int64_t>& padding) {
  std::array<std::array<int64_t, 2>, 3> out{};
  for (size_t d = 0; d < 3; ++d)
    out[d] = {padding[d], padding.size() == 3 ? padding[d] : padding[d + 3]};
  return out;
}

void infer_conv3d(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& w = ctx.input(1);
  ctx.check(x.rank() == 5, "x must be 5-D [N, C, D, H, W]");
  ctx.check(w.rank() == 5, "w must be 5-D [O, C/groups, KD, KH, KW]");
  ctx.check(ctx.num_inputs() <= 3, "takes x, w and at most one bias");
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            "conv3d takes f32 or f64, not " + std::string(dtype_name(x.dtype)));
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    ctx.check(ctx.input(i).dtype == x.dtype, "x, w and bias must have the same dtype");
    ctx.check(ctx.input(i).layout == Layout::Plain, "x, w and bias must be plain");
  }

  const int64_t groups = ctx.attr_int("groups");
  const auto& stride = ctx.attr_ints("stride");
  const auto& dilation = ctx.attr_ints("dilation");
  const auto& padding = ctx.attr_ints("padding");
  ctx.check(groups >= 1, "groups must be at least 1, got " + std::to_string(groups));
  // Below 2^31, every window computation stays far from overflow.
  auto in_range = [](int64_t v, int64_t least) { return v >= least && v <= INT32_MAX; };
  auto all_in_range = [&](const std::vector<int64_t>& v, int64_t least) {
    return std::all_of(v.begin(), v.end(), [&](int64_t e) { return in_range(e, least); });
  };
  ctx.check(stride.size() == 3 && all_in_range(stride, 1),
            "stride must be three positive ints [sd, sh, sw] below 2^31");
  ctx.check(dilation.size() == 3 && all_in_range(dilation, 1),
            "dilation must be three positive ints [dd, dh, dw] below 2^31");
  ctx.check((padding.size() == 3 || padding.size() == 6) && all_in_range(padding, 0),
            "padding must be non-negative ints below 2^31, [pd, ph, pw] or [front, top, left, "
            "back, bottom, right]");
  for (size_t d = 2; d < 5; ++d)
    ctx.check(w.shape[d].is_static() && in_range(w.shape[d].size(), 1),
              "the kernel's depth, height and width (w's dims 2 to 4) must be known, positive "
              "and below 2^31");

  const Dim out_channels = check_conv_channels(ctx, x, w, groups, ctx.num_inputs() == 3);
  const auto pad = padding_per_dim(padding);
  Shape y{x.shape[0], out_channels};
  static constexpr const char* kAxes[] = {"frame", "row", "column"};
  for (size_t d = 0; d < 3; ++d) {
    const WindowAxis axis{.kernel = w.shape[d + 2].size(), .stride = stride[d],
                          .dilation = dilation[d], .pad_begin = pad[d][0], .pad_end = pad[d][1]};
    y.push_back(window_output_dim(ctx, x.shape[d + 2], axis, kAxes[d]));
  }
  ctx.set_output(0, TensorType{x.dtype, y, Layout::Plain});
}

Conv3dGeometry geometry_of(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), w = spec.input_sizes(1),
                             y = spec.output_sizes(0);
  const Node& node = spec.node;
  const auto pad = padding_per_dim(node.attr_ints("padding"));
  Conv3dGeometry g{.n = x[0], .c = x[1], .o = w[0], .groups = node.attr_int("groups")};
  for (size_t d = 0; d < 3; ++d) {
    g.in[d] = x[d + 2];
    g.kernel[d] = w[d + 2];
    g.out[d] = y[d + 2];
    g.stride[d] = node.attr_ints("stride")[d];
    g.dilation[d] = node.attr_ints("dilation")[d];
    g.pad_begin[d] = pad[d][0];
    g.pad_end[d] = pad[d][1];
  }
  return g;
}

bool has_bias(const KernelSpec& spec) { return spec.inputs.size() == 3; }

template <typename T>
void reference_conv3d(const Conv3dGeometry& g, const T* x, const T* w, const T* bias, T* y,
                      int threads) {
  const auto [d, h, wd] = g.in;
  const auto [kd, kh, kw] = g.kernel;
  const auto [od, oh, ow] = g.out;
  const int64_t c_per_group = g.c / g.groups, o_per_group = g.o / g.groups;
  const int64_t window = c_per_group * kd * kh * kw, volume = d * h * wd;
  // The input position of output position `o` and kernel tap `k` along spatial dim `a`; outside
  // [0, size) it is padding.
  auto at = [&](size_t a, int64_t o, int64_t k) {
    return o * g.stride[a] - g.pad_begin[a] + k * g.dilation[a];
  };
  cpu::parallel_chunks(g.n * g.o, od * oh * ow * window, threads, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t batch = plane / g.o, out_channel = plane % g.o;
      const T* x_group = x + (batch * g.c + out_channel / o_per_group * c_per_group) * volume;
      const T* w_out = w + out_channel * window;
      T* y_plane = y + plane * od * oh * ow;
      for (int64_t oz = 0; oz < od; ++oz)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            // In double, as conv2d's reference: exact to about 2^-53 of the sum of |x*w|.
            double sum = bias ? static_cast<double>(bias[out_channel]) : 0.0;
            for (int64_t c = 0; c < c_per_group; ++c)
              for (int64_t i = 0; i < kd; ++i) {
                const int64_t iz = at(0, oz, i);
                if (iz < 0 || iz >= d) continue;
                for (int64_t j = 0; j < kh; ++j) {
                  const int64_t iy = at(1, oy, j);
                  if (iy < 0 || iy >= h) continue;
                  for (int64_t k = 0; k < kw; ++k) {
                    const int64_t ix = at(2, ox, k);
                    if (ix < 0 || ix >= wd) continue;
                    sum += static_cast<double>(x_group[c * volume + (iz * h + iy) * wd + ix]) *
                           static_cast<double>(w_out[((c * kd + i) * kh + j) * kw + k]);
                  }
                }
              }
            y_plane[(oz * oh + oy) * ow + ox] = static_cast<T>(sum);
          }
    }
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  auto make = [&]<typename T>() {
    return make_kernel([g = geometry_of(spec), bias = has_bias(spec), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      reference_conv3d(g, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                       bias ? static_cast<const T*>(in[2]) : nullptr, static_cast<T*>(out[0]),
                       threads);
    });
  };
  if (spec.inputs[0].dtype == DType::F64) return make.template operator()<double>();
  return make.template operator()<float>();
}

std::string onednn_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::F32) return "f32 only";
  // oneDNN's primitive creation can't take empty tensors; the reference loops write them.
  for (const std::vector<int64_t>& sizes : {spec.input_sizes(0), spec.output_sizes(0)})
    if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return "zero-size tensor";
  return "";
}

#ifdef KILN_X86
std::string depthwise_unsupported(const KernelSpec& spec) {
  if (std::string why = onednn_unsupported(spec); !why.empty()) return why;
  if (std::string why = cpu::isa_unavailable_reason(cpu::Isa::Avx2); !why.empty()) return why;
  const Conv3dGeometry g = geometry_of(spec);
  if (g.groups != g.c || g.o != g.c) return "not depthwise (one filter per channel)";
  return "";
}

std::unique_ptr<KernelInstance> create_depthwise(const KernelSpec& spec) {
  return make_kernel([plan = cpu::avx2::plan_depthwise_conv3d(geometry_of(spec)),
                      bias = has_bias(spec), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    cpu::avx2::depthwise_conv3d(plan, static_cast<const float*>(in[0]),
                                static_cast<const float*>(in[1]),
                                bias ? static_cast<const float*>(in[2]) : nullptr,
                                static_cast<float*>(out[0]), threads);
  });
}
#endif

}  // namespace

void register_conv3d_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "conv3d";
  def.inputs = {{"x"}, {"w"}, {"bias", /*variadic=*/true}};
  def.attrs = {{"stride", std::vector<int64_t>{1, 1, 1}},
               {"padding", std::vector<int64_t>{0, 0, 0}},
               {"dilation", std::vector<int64_t>{1, 1, 1}},
               {"groups", int64_t{1}}};
  def.infer = infer_conv3d;
  def.computes_low_precision_in_f32 = true;
  def.kernels = {
#ifdef KILN_X86
      {"depthwise", "native", depthwise_unsupported, create_depthwise},
#endif
      {"onednn", "onednn", onednn_unsupported,
       [](const KernelSpec& spec) {
         return cpu::create_onednn_conv3d(geometry_of(spec), has_bias(spec), spec);
       }},
      {"reference", "native", [](const KernelSpec&) { return std::string(); }, create_reference},
  };
  registry.add(std::move(def));
}

}  // namespace kiln
