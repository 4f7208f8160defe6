// Pooling over the last two dims of [N, C, H, W] or [C, H, W]: PyTorch's max_pool2d, avg_pool2d
// and adaptive_avg_pool2d; and the max poolings that also return indices, over two or three dims.
//
//   max_pool2d(x; kernel_size, stride = [] (= kernel_size), padding = [0], dilation = [1],
//              ceil_mode = false)
//   avg_pool2d(x; kernel_size, stride = [], padding = [0], ceil_mode = false,
//              count_include_pad = true, divisor_override = 0 (none))
//   adaptive_avg_pool2d(x; output_size)
//   max_pool2d_with_indices(x; max_pool2d's attributes) -> (y, indices)
//   max_pool3d_with_indices(x [N, C, D, H, W] or [C, D, H, W]; as max_pool2d, with [d, h, w]
//                           or one value for all three) -> (y, indices)
//   adaptive_max_pool2d(x; output_size [h, w]) -> (y, indices)
//   adaptive_max_pool3d(x [N, C, D, H, W] or [C, D, H, W]; output_size [d, h, w]) -> (y, indices)
//
// The with-indices max poolings are PyTorch's ops of those names: the maximum of each window
// and the flat index (row * W + column, or (depth * H + row) * W + column) within its input
// plane of the element it took, an int64. Adaptive windows are PyTorch's: output o of an axis
// reads [floor(o * in / out), ceil((o + 1) * in / out)), so neighbouring windows may differ in
// size and overlap. A window is scanned in index order: its first maximum wins, a NaN beats
// everything and a later NaN an earlier one, and a window of -inf only gives its first element.
// Float dtypes only, as PyTorch's CPU kernels; plain layout; one reference loop for all four
// (nothing hot reads the indices; graphs that read only the values take max_pool2d).
//
// max_pool2d and avg_pool2d are layout-aware: x may be in any layout (the format stage keeps a
// chain of convolutions in its layout across them) and y is in x's.
//
// Size attributes take [h, w] or one value for both. Windows follow PyTorch exactly: padding at
// most half the (dilated) window, ceil_mode's last window kept only when it starts inside the
// input or the left padding, count_include_pad counting the declared padding but not what
// ceil_mode's last window overhangs. Max propagates NaN; an average of integers truncates.
//
// max_pool2d, avg_pool2d and adaptive_avg_pool2d also take bf16 (made by
// fold_bf16_casts_into_widening_kernels, which drops the casts the builder puts around them):
// each kernel's f32 result on the widened input, rounded, as between casts (a maximum exactly).
//
// Kernels, best first: for max, AVX2 (f32 in every layout, bf16 in channels-inner ones; 16 lanes
// on AVX-512; oneDNN's max pooling drops NaNs); for averages, the AVX2 global average (adaptive
// to 1x1, f32), oneDNN where it has a jit kernel (f32; plain NCHW has one only with AVX-512),
// AVX2 (f32 in every layout, bf16 in channels-inner ones; the global average takes bf16
// through its f32 loop on a widened copy); then the reference loops (every dtype PyTorch takes;
// f32 sums in double; other layouts through plain copies; bf16 through the f32 loops on a
// widened copy).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/channel_stats_avx2.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/pooling.h"
#include "kernels/cpu/widened_bf16.h"
#include "ops/op_registry.h"
#include "ops/window_dims.h"

namespace kiln {

namespace {

using cpu::Pool2dGeometry;
using cpu::PoolAlgorithm;

// Calls fn(T{}) with T the C++ type of `dtype`, one of the dtypes pooling takes.
template <typename Fn>
auto visit_dtype(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::F32: return fn(float{});
    case DType::F64: return fn(double{});
    case DType::I64: return fn(int64_t{});
    case DType::I32: return fn(int32_t{});
    case DType::I16: return fn(int16_t{});
    case DType::I8: return fn(int8_t{});
    case DType::U8: return fn(uint8_t{});
    default: KILN_ASSERT(false, "pooling has no kernel for " << dtype_name(dtype));
  }
}

// ---------------------------------------------------------------- attributes and inference

// One value per spatial axis from a list of one value for all or one per axis; `fallback` for an
// empty list.
std::vector<int64_t> per_axis(const std::vector<int64_t>& v, size_t spatial,
                              const std::vector<int64_t>& fallback) {
  if (v.empty()) return fallback;
  return v.size() == 1 ? std::vector<int64_t>(spatial, v[0]) : v;
}

std::array<int64_t, 2> pair_of(const std::vector<int64_t>& v, std::array<int64_t, 2> fallback) {
  const auto both = per_axis(v, 2, {fallback[0], fallback[1]});
  return {both[0], both[1]};
}

// The window along each of the last `spatial` dims, from a node's (or an inference's) validated
// attributes.
template <typename Attrs>
std::vector<WindowAxis> window_axes(const Attrs& attrs, size_t spatial, bool has_dilation) {
  const auto kernel = per_axis(attrs.attr_ints("kernel_size"), spatial, {});
  const auto stride = per_axis(attrs.attr_ints("stride"), spatial, kernel);
  const auto padding = per_axis(attrs.attr_ints("padding"), spatial, std::vector<int64_t>(spatial, 0));
  const auto dilation = has_dilation ? per_axis(attrs.attr_ints("dilation"), spatial, {})
                                     : std::vector<int64_t>(spatial, 1);
  std::vector<WindowAxis> axes;
  for (size_t i = 0; i < spatial; ++i)
    axes.push_back(WindowAxis{.kernel = kernel[i], .stride = stride[i], .dilation = dilation[i],
                              .pad_begin = padding[i], .pad_end = padding[i],
                              .ceil_mode = attrs.attr_bool("ceil_mode")});
  return axes;
}

template <typename Attrs>
std::array<WindowAxis, 2> pool_axes(const Attrs& attrs, bool has_dilation) {
  const auto axes = window_axes(attrs, 2, has_dilation);
  return {axes[0], axes[1]};
}

void check_dtype(InferContext& ctx, DType dtype, std::initializer_list<DType> supported) {
  if (std::find(supported.begin(), supported.end(), dtype) != supported.end()) return;
  std::string names;
  for (DType d : supported) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  ctx.fail(ctx.op() + " takes " + names + ", not " + std::string(dtype_name(dtype)));
}

// x is [N, C, <spatial dims>] or [C, <spatial dims>], every dim but N non-empty (PyTorch's rule).
void check_pool_input(InferContext& ctx, size_t spatial = 2) {
  const TensorType& x = ctx.input(0);
  const char* dims = spatial == 3 ? "D, H, W" : "H, W";
  ctx.check(x.rank() == spatial + 1 || x.rank() == spatial + 2,
            std::string("x must be [N, C, ") + dims + "] or [C, " + dims + "]");
  for (size_t d = x.rank() - spatial - 1; d < x.rank(); ++d)
    ctx.check(!x.shape[d].is_static() || x.shape[d].size() > 0,
              "x's dims other than the batch must not be empty");
}

// An int-list attribute of `min_size` to `spatial` values (or one for all), each at least `least`
// and below 2^31 (which keeps every window computation far from overflow).
void check_pair(InferContext& ctx, const std::string& name, size_t min_size, int64_t least,
                size_t spatial = 2) {
  const auto& v = ctx.attr_ints(name);
  ctx.check(v.size() >= min_size && (v.size() <= 1 || v.size() == spatial) &&
                std::all_of(v.begin(), v.end(),
                            [&](int64_t e) { return e >= least && e <= INT32_MAX; }),
            name + " must be " + (min_size == 0 ? "empty, " : "") + "one int or " +
                (spatial == 3 ? "three [d, h, w]" : "two [h, w]") + ", each " +
                (least == 0 ? "non-negative" : "positive") + " and below 2^31");
}

// Sets and returns y's type.
TensorType infer_window_pool(InferContext& ctx, bool has_dilation, size_t spatial = 2) {
  check_pool_input(ctx, spatial);
  check_pair(ctx, "kernel_size", 1, 1, spatial);
  check_pair(ctx, "stride", 0, 1, spatial);
  check_pair(ctx, "padding", 1, 0, spatial);
  if (has_dilation) check_pair(ctx, "dilation", 1, 1, spatial);
  const auto axes = window_axes(ctx, spatial, has_dilation);
  for (const WindowAxis& a : axes)
    ctx.check(2 * a.pad_begin <= a.extent(),
              "padding " + std::to_string(a.pad_begin) + " is more than half the window (" +
                  std::to_string(a.extent()) + " elements: kernel " + std::to_string(a.kernel) +
                  ", dilation " + std::to_string(a.dilation) + ")");
  const TensorType& x = ctx.input(0);
  Shape out = x.shape;
  static const char* const kAxisNames[] = {"depth", "row", "column"};
  for (size_t i = 0; i < spatial; ++i) {
    const size_t d = x.rank() - spatial + i;
    out[d] = window_output_dim(ctx, x.shape[d], axes[i], kAxisNames[3 - spatial + i]);
  }
  TensorType y{x.dtype, out, x.layout};  // the channels stay: so does the layout
  ctx.set_output(0, y);
  return y;
}

void infer_max_pool2d(InferContext& ctx) {
  check_dtype(ctx, ctx.input(0).dtype,
              {DType::F32, DType::F64, DType::BF16, DType::I64, DType::I32, DType::I16, DType::I8,
               DType::U8});
  infer_window_pool(ctx, /*has_dilation=*/true);
}

void infer_avg_pool2d(InferContext& ctx) {
  check_dtype(ctx, ctx.input(0).dtype, {DType::F32, DType::F64, DType::BF16, DType::I64});
  infer_window_pool(ctx, /*has_dilation=*/false);
}

void infer_adaptive_avg_pool2d(InferContext& ctx) {
  check_dtype(ctx, ctx.input(0).dtype, {DType::F32, DType::F64, DType::BF16});
  check_pool_input(ctx);
  check_pair(ctx, "output_size", 1, 0);
  const auto size = pair_of(ctx.attr_ints("output_size"), {1, 1});
  const TensorType& x = ctx.input(0);
  Shape out = x.shape;
  out[x.rank() - 2] = Dim(size[0]);
  out[x.rank() - 1] = Dim(size[1]);
  ctx.set_output(0, TensorType{x.dtype, out, Layout::Plain});
}

// The with-indices max poolings: floats only, as PyTorch's CPU kernels.
void check_with_indices_dtype(InferContext& ctx) {
  check_dtype(ctx, ctx.input(0).dtype, {DType::F32, DType::F64, DType::BF16, DType::F16});
}

template <size_t kSpatial>
void infer_max_pool_with_indices(InferContext& ctx) {
  check_with_indices_dtype(ctx);
  const TensorType y = infer_window_pool(ctx, /*has_dilation=*/true, kSpatial);
  ctx.set_output(1, TensorType{DType::I64, y.shape, Layout::Plain});
}

template <size_t kSpatial>
void infer_adaptive_max_pool(InferContext& ctx) {
  check_with_indices_dtype(ctx);
  check_pool_input(ctx, kSpatial);
  check_pair(ctx, "output_size", 1, 0, kSpatial);
  const auto size = per_axis(ctx.attr_ints("output_size"), kSpatial, {});
  const TensorType& x = ctx.input(0);
  Shape out = x.shape;
  for (size_t i = 0; i < kSpatial; ++i) out[x.rank() - kSpatial + i] = Dim(size[i]);
  ctx.set_output(0, TensorType{x.dtype, out, Layout::Plain});
  ctx.set_output(1, TensorType{DType::I64, out, Layout::Plain});
}

// ---------------------------------------------------------------- geometry

// How far the windows reach past the input's end: at least the declared padding (oneDNN's
// output-size rule needs it), more where a ceil-mode window overhangs it.
int64_t reach(int64_t in, int64_t out, const WindowAxis& a) {
  return std::max(a.pad_end, (out - 1) * a.stride + a.extent() - in - a.pad_begin);
}

Pool2dGeometry pool_geometry(const KernelSpec& spec, bool has_dilation) {
  const std::vector<int64_t> x = spec.input_sizes(0), y = spec.output_sizes(0);
  const size_t r = x.size();
  const auto axes = pool_axes(spec.node, has_dilation);
  return Pool2dGeometry{.layout = spec.inputs[0].layout,
                        .n = r == 4 ? x[0] : 1, .c = x[r - 3], .h = x[r - 2], .w = x[r - 1],
                        .oh = y[r - 2], .ow = y[r - 1],
                        .kh = axes[0].kernel, .kw = axes[1].kernel,
                        .stride_h = axes[0].stride, .stride_w = axes[1].stride,
                        .dilation_h = axes[0].dilation, .dilation_w = axes[1].dilation,
                        .pad_h = axes[0].pad_begin, .pad_w = axes[1].pad_begin,
                        .reach_bottom = reach(x[r - 2], y[r - 2], axes[0]),
                        .reach_right = reach(x[r - 1], y[r - 1], axes[1])};
}

// Adaptive pooling's windows are those of a plain average pooling when the output divides the
// input: kernel = stride = input / output.
Pool2dGeometry adaptive_geometry(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), y = spec.output_sizes(0);
  const size_t r = x.size();
  Pool2dGeometry g{.n = r == 4 ? x[0] : 1, .c = x[r - 3], .h = x[r - 2], .w = x[r - 1],
                   .oh = y[r - 2], .ow = y[r - 1]};
  if (g.oh > 0 && g.ow > 0) {
    g.kh = g.stride_h = g.h / g.oh;
    g.kw = g.stride_w = g.w / g.ow;
  }
  return g;
}

bool is_empty(const Pool2dGeometry& g) { return g.n * g.c * g.oh * g.ow == 0; }

// ---------------------------------------------------------------- reference kernels

template <typename T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T>
T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Integer sums wrap around (as PyTorch's do) rather than overflow, and dividing the lowest value
// by -1 wraps rather than traps.
// An element as the type its comparisons run in: bf16 and f16 widened to f32, exactly.
template <typename T>
auto comparable(T v) {
  if constexpr (std::is_same_v<T, cpu::BFloat16> || std::is_same_v<T, cpu::Float16>)
    return cpu::to_float(v);
  else return v;
}

template <typename A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else return a + b;
}
template <typename A>
A divide(A sum, int64_t divisor) {
  if constexpr (std::is_integral_v<A>)
    if (divisor == -1) return static_cast<A>(0 - static_cast<uint64_t>(sum));
  return sum / static_cast<A>(divisor);
}

// Calls fn(plane, oy, ox, x_plane, y_pointer) for every output element, planes split over threads.
template <typename T, typename Fn>
void for_each_output(const Pool2dGeometry& g, const T* x, T* y, int64_t work_per_output,
                     int threads, const Fn& fn) {
  cpu::parallel_chunks(g.n * g.c, g.oh * g.ow * work_per_output, threads,
                       [&](int64_t begin, int64_t end) {
                         for (int64_t p = begin; p < end; ++p) {
                           const T* x_plane = x + p * g.h * g.w;
                           T* y_plane = y + p * g.oh * g.ow;
                           for (int64_t oy = 0; oy < g.oh; ++oy)
                             for (int64_t ox = 0; ox < g.ow; ++ox)
                               y_plane[oy * g.ow + ox] = fn(x_plane, oy, ox);
                         }
                       });
}

template <typename T>
void max_pool_reference(const Pool2dGeometry& g, const T* x, T* y, int threads) {
  for_each_output(g, x, y, g.kh * g.kw, threads, [&](const T* plane, int64_t oy, int64_t ox) {
    T best = lowest<T>();
    cpu::for_each_window_element(g, oy, ox, [&](int64_t pixel) {
      const T v = plane[pixel];
      if (v > best || is_nan(v)) best = v;  // as PyTorch: a NaN wins, and so does a later one
    });
    return best;
  });
}

// The windows of a with-indices max pooling along one axis: output o reads the input's elements
// first[o] + k * step for k < count[o], all inside the input.
struct AxisWindows {
  int64_t in = 1;
  std::vector<int64_t> first, count;
  int64_t step = 1;
};

template <typename T>
void max_pool_with_indices(const std::array<AxisWindows, 3>& axes, int64_t planes, const T* x,
                           T* y, int64_t* indices, int threads) {
  const auto& [depth, rows, cols] = axes;
  const int64_t od = std::ssize(depth.first), oh = std::ssize(rows.first),
                ow = std::ssize(cols.first);
  const int64_t in_plane = depth.in * rows.in * cols.in, out_plane = od * oh * ow;
  auto widest = [](const AxisWindows& a) {
    return a.count.empty() ? 0 : *std::max_element(a.count.begin(), a.count.end());
  };
  cpu::parallel_chunks(planes, out_plane * widest(depth) * widest(rows) * widest(cols), threads,
                       [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = x + p * in_plane;
      int64_t o = p * out_plane;
      for (int64_t z = 0; z < od; ++z)
        for (int64_t r = 0; r < oh; ++r)
          for (int64_t c = 0; c < ow; ++c, ++o) {
            auto best = lowest<decltype(comparable(T{}))>();
            int64_t best_index = -1;
            for (int64_t kz = 0; kz < depth.count[z]; ++kz)
              for (int64_t kr = 0; kr < rows.count[r]; ++kr) {
                const int64_t row = (depth.first[z] + kz * depth.step) * rows.in + rows.first[r] +
                                    kr * rows.step;
                for (int64_t kc = 0; kc < cols.count[c]; ++kc) {
                  const int64_t pixel = row * cols.in + cols.first[c] + kc * cols.step;
                  // As PyTorch: the window's first element until something beats -inf.
                  if (best_index < 0) best_index = pixel;
                  const auto v = comparable(plane[pixel]);
                  if (v > best || is_nan(v)) {
                    best = v;
                    best_index = pixel;
                  }
                }
              }
            KILN_ASSERT(best_index >= 0, "an empty max pooling window");
            y[o] = plane[best_index];
            indices[o] = best_index;
          }
    }
  });
}

struct Span {
  int64_t begin, end, counted;
};
Span window_span(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t in) {
  const int64_t start = o * stride - pad;
  const int64_t stop = std::min(start + kernel, in + pad);
  return Span{std::max<int64_t>(start, 0), std::min(stop, in), stop - start};
}

template <typename T>
T window_mean(const T* plane, int64_t width, Span rows, Span cols, int64_t divisor) {
  Accumulator<T> sum = 0;
  for (int64_t iy = rows.begin; iy < rows.end; ++iy)
    for (int64_t ix = cols.begin; ix < cols.end; ++ix)
      sum = add(sum, static_cast<Accumulator<T>>(plane[iy * width + ix]));
  return static_cast<T>(divide(sum, divisor));
}

template <typename T>
void avg_pool_reference(const Pool2dGeometry& g, bool count_include_pad, int64_t divisor_override,
                        const T* x, T* y, int threads) {
  for_each_output(g, x, y, g.kh * g.kw, threads, [&](const T* plane, int64_t oy, int64_t ox) {
    const Span rows = window_span(oy, g.stride_h, g.pad_h, g.kh, g.h);
    const Span cols = window_span(ox, g.stride_w, g.pad_w, g.kw, g.w);
    const int64_t divisor = divisor_override != 0 ? divisor_override
                            : count_include_pad   ? rows.counted * cols.counted
                                                  : (rows.end - rows.begin) * (cols.end - cols.begin);
    return window_mean(plane, g.w, rows, cols, divisor);
  });
}

// PyTorch's adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)).
Span adaptive_span(int64_t o, int64_t in, int64_t out) {
  const int64_t begin = o * in / out, end = ((o + 1) * in + out - 1) / out;
  return Span{begin, end, end - begin};
}

template <typename T>
void adaptive_avg_pool_reference(const Pool2dGeometry& g, const T* x, T* y, int threads) {
  for_each_output(g, x, y, g.h * g.w / std::max<int64_t>(g.oh * g.ow, 1) + 1, threads,
                  [&](const T* plane, int64_t oy, int64_t ox) {
                    const Span rows = adaptive_span(oy, g.h, g.oh);
                    const Span cols = adaptive_span(ox, g.w, g.ow);
                    return window_mean(plane, g.w, rows, cols, rows.counted * cols.counted);
                  });
}

// The reference loops read and write plain tensors: x and y in another layout go through plain
// copies in the scratch memory, as conv2d's reference does.
template <typename T, typename Run>
class ReferenceThroughPlain final : public KernelInstance {
 public:
  ReferenceThroughPlain(const Pool2dGeometry& g, Run run, int threads)
      : g_(g), run_(std::move(run)), threads_(threads) {}

  size_t scratch_bytes() const override { return y_offset() + bytes(g_.oh * g_.ow); }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    T* x = static_cast<T*>(scratch);
    T* y = reinterpret_cast<T*>(static_cast<std::byte*>(scratch) + y_offset());
    cpu::convert_layout(cpu::Nchw{g_.n, g_.c, g_.h, g_.w}, g_.layout,
                        static_cast<const T*>(in[0]), Layout::Plain, x, threads_);
    Pool2dGeometry plain = g_;
    plain.layout = Layout::Plain;
    run_(plain, static_cast<const T*>(x), y, threads_);
    cpu::convert_layout(cpu::Nchw{g_.n, g_.c, g_.oh, g_.ow}, Layout::Plain, y, g_.layout,
                        static_cast<T*>(out[0]), threads_);
  }

 private:
  size_t bytes(int64_t plane) const {
    return static_cast<size_t>(g_.n * g_.c * plane) * sizeof(T);
  }
  // The plain y after the plain x, aligned for any kernel use.
  size_t y_offset() const {
    return (bytes(g_.h * g_.w) + kAlignment - 1) / kAlignment * kAlignment;
  }

  Pool2dGeometry g_;
  Run run_;
  int threads_;
};

// A kernel calling run(geometry, x, y, threads) with x and y of the node's dtype, plain.
template <typename Run>
std::unique_ptr<KernelInstance> typed_kernel(const KernelSpec& spec, const Pool2dGeometry& g,
                                             Run run) {
  return visit_dtype(spec.inputs[0].dtype, [&](auto t) -> std::unique_ptr<KernelInstance> {
    using T = decltype(t);
    if (g.layout != Layout::Plain)
      return std::make_unique<ReferenceThroughPlain<T, Run>>(g, run, spec.threads);
    return make_kernel([g, run, threads = spec.threads](std::span<const void* const> in,
                                                        std::span<void* const> out) {
      run(g, static_cast<const T*>(in[0]), static_cast<T*>(out[0]), threads);
    });
  });
}

std::unique_ptr<KernelInstance> max_pool_reference_kernel(const KernelSpec& spec) {
  if (spec.inputs[0].dtype == DType::BF16)
    return cpu::create_widened_bf16(spec, max_pool_reference_kernel);
  return typed_kernel(spec, pool_geometry(spec, true),
                      [](const Pool2dGeometry& g, const auto* x, auto* y, int threads) {
                        max_pool_reference(g, x, y, threads);
                      });
}

// A sliding window's elements inside the input: PyTorch's window start o * stride - padding,
// stepped by the dilation, its taps before 0 or past the input's end skipped.
AxisWindows strided_windows(int64_t in, int64_t out, const WindowAxis& a) {
  AxisWindows w{.in = in, .step = a.dilation};
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * a.stride - a.pad_begin;
    const int64_t skipped = start < 0 ? (a.dilation - 1 - start) / a.dilation : 0;
    const int64_t below_end = start < in ? (in - start + a.dilation - 1) / a.dilation : 0;
    w.first.push_back(start + skipped * a.dilation);
    w.count.push_back(std::max<int64_t>(std::min(a.kernel, below_end) - skipped, 0));
  }
  return w;
}

AxisWindows adaptive_windows(int64_t in, int64_t out) {
  AxisWindows w{.in = in};
  for (int64_t o = 0; o < out; ++o) {
    const Span s = adaptive_span(o, in, out);
    w.first.push_back(s.begin);
    w.count.push_back(s.end - s.begin);
  }
  return w;
}

// The reference kernel of the with-indices max poolings over kSpatial dims (2-d as 3-d with one
// depth), adaptive or sliding windows.
template <size_t kSpatial, bool kAdaptive>
std::unique_ptr<KernelInstance> max_pool_with_indices_kernel(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), y = spec.output_sizes(0);
  const size_t r = x.size(), first_axis = r - kSpatial;
  std::array<AxisWindows, 3> axes{AxisWindows{.first = {0}, .count = {1}}, {}, {}};
  std::vector<WindowAxis> windows;
  if constexpr (!kAdaptive) windows = window_axes(spec.node, kSpatial, /*has_dilation=*/true);
  for (size_t i = 0; i < kSpatial; ++i)
    axes[3 - kSpatial + i] = kAdaptive ? adaptive_windows(x[first_axis + i], y[first_axis + i])
                                       : strided_windows(x[first_axis + i], y[first_axis + i], windows[i]);
  int64_t planes = 1;
  for (size_t d = 0; d < first_axis; ++d) planes *= x[d];
  auto typed = [&](auto t) -> std::unique_ptr<KernelInstance> {
    using T = decltype(t);
    return make_kernel([axes, planes, threads = spec.threads](std::span<const void* const> in,
                                                              std::span<void* const> out) {
      max_pool_with_indices(axes, planes, static_cast<const T*>(in[0]), static_cast<T*>(out[0]),
                            static_cast<int64_t*>(out[1]), threads);
    });
  };
  switch (spec.inputs[0].dtype) {
    case DType::F32: return typed(float{});
    case DType::F64: return typed(double{});
    case DType::BF16: return typed(cpu::BFloat16{});
    case DType::F16: return typed(cpu::Float16{});
    default: KILN_ASSERT(false, spec.node.op() << " has no kernel for "
                                               << dtype_name(spec.inputs[0].dtype));
  }
}

std::unique_ptr<KernelInstance> avg_pool_reference_kernel(const KernelSpec& spec) {
  if (spec.inputs[0].dtype == DType::BF16)
    return cpu::create_widened_bf16(spec, avg_pool_reference_kernel);
  const bool include_pad = spec.node.attr_bool("count_include_pad");
  const int64_t divisor = spec.node.attr_int("divisor_override");
  return typed_kernel(spec, pool_geometry(spec, false),
                      [=](const Pool2dGeometry& g, const auto* x, auto* y, int threads) {
                        avg_pool_reference(g, include_pad, divisor, x, y, threads);
                      });
}

std::unique_ptr<KernelInstance> adaptive_reference_kernel(const KernelSpec& spec) {
  if (spec.inputs[0].dtype == DType::BF16)
    return cpu::create_widened_bf16(spec, adaptive_reference_kernel);
  return typed_kernel(spec, adaptive_geometry(spec),
                      [](const Pool2dGeometry& g, const auto* x, auto* y, int threads) {
                        adaptive_avg_pool_reference(g, x, y, threads);
                      });
}

std::string always_supported(const KernelSpec&) { return ""; }

// ---------------------------------------------------------------- optimized kernels

PoolAlgorithm avg_algorithm(const KernelSpec& spec) {
  return spec.node.attr_bool("count_include_pad") ? PoolAlgorithm::AvgIncludePadding
                                                  : PoolAlgorithm::AvgExcludePadding;
}

// Why oneDNN can't run an average pooling of this geometry well: oneDNN has jit kernels for
// plain NCHW only with AVX-512, and its reference loops elsewhere are slower than Kiln's.
std::string onednn_reason(const KernelSpec& spec, const Pool2dGeometry& g, PoolAlgorithm algorithm) {
  if (spec.inputs[0].dtype != DType::F32) return "f32 only";
  // oneDNN's primitive creation can't take empty tensors; the reference loops write them.
  if (is_empty(g)) return "zero-size tensor";
  return cpu::onednn_pool2d_unsupported_reason(g, algorithm, spec.threads);
}

// Where an average pooling's windows differ from PyTorch's count.
std::string avg_pool_divisor_reason(const KernelSpec& spec, const Pool2dGeometry& g) {
  if (spec.node.attr_int("divisor_override") != 0) return "divisor_override is set";
  // oneDNN divides by the whole window, PyTorch by the part up to the declared padding's end.
  if (spec.node.attr_bool("count_include_pad") &&
      (g.reach_bottom > g.pad_h || g.reach_right > g.pad_w))
    return "a ceil_mode window overhangs the padding and count_include_pad is set";
  return "";
}

std::string avg_pool_onednn_unsupported(const KernelSpec& spec) {
  const Pool2dGeometry g = pool_geometry(spec, false);
  if (std::string why = avg_pool_divisor_reason(spec, g); !why.empty()) return why;
  return onednn_reason(spec, g, avg_algorithm(spec));
}

std::unique_ptr<KernelInstance> avg_pool_onednn(const KernelSpec& spec) {
  return cpu::create_onednn_pool2d(pool_geometry(spec, false), avg_algorithm(spec), spec);
}

std::string adaptive_divides_reason(const Pool2dGeometry& g) {
  if (is_empty(g)) return "zero-size tensor";
  if (g.h % g.oh != 0 || g.w % g.ow != 0)
    return "the output size does not divide the input size (windows of varying size)";
  return "";
}

std::string adaptive_onednn_unsupported(const KernelSpec& spec) {
  const Pool2dGeometry g = adaptive_geometry(spec);
  if (std::string why = adaptive_divides_reason(g); !why.empty()) return why;
  return onednn_reason(spec, g, PoolAlgorithm::AvgExcludePadding);
}

std::unique_ptr<KernelInstance> adaptive_onednn(const KernelSpec& spec) {
  return cpu::create_onednn_pool2d(adaptive_geometry(spec), PoolAlgorithm::AvgExcludePadding,
                                   spec);
}

#ifdef KILN_X86
std::string avx2_unsupported(const KernelSpec& spec) {
  return cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
}

// The AVX2 max or average pooling. Plain: planes split over threads, each thread keeping a
// plane's row reductions in its own part of the scratch. Channels-inner layouts: output rows
// split over threads, channels in the vector lanes, no scratch. Averages divide by
// row_divisors[oy] * column_divisors[ox], PyTorch's count factored by axis.
class PoolAvx2 final : public KernelInstance {
 public:
  PoolAvx2(const Pool2dGeometry& g, int threads, bool max, std::vector<float> row_divisors = {},
           std::vector<float> column_divisors = {}, bool bf16 = false)
      : g_(g), threads_(std::max(threads, 1)), max_(max), bf16_(bf16),
        row_divisors_(std::move(row_divisors)), column_divisors_(std::move(column_divisors)) {}

  size_t scratch_bytes() const override {
    if (g_.layout != Layout::Plain) return 0;
    return static_cast<size_t>(threads_ * g_.h * g_.ow) * sizeof(float);
  }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    if (bf16_) {
      channels_inner(static_cast<const cpu::BFloat16*>(in[0]), static_cast<cpu::BFloat16*>(out[0]));
      return;
    }
    const auto* x = static_cast<const float*>(in[0]);
    auto* y = static_cast<float*>(out[0]);
    if (g_.layout != Layout::Plain) {
      channels_inner(x, y);
      return;
    }
    cpu::parallel_chunks(g_.n * g_.c, g_.oh * g_.ow * g_.kh * g_.kw, threads_,
                         [&](int64_t begin, int64_t end) {
      const int thread = omp_get_thread_num();
      KILN_ASSERT(thread < threads_);
      float* rows = static_cast<float*>(scratch) + thread * g_.h * g_.ow;
      if (max_)
        cpu::avx2::max_pool_planes(g_, x, y, begin, end, rows);
      else
        cpu::avx2::avg_pool_planes(g_, x, y, begin, end, rows, row_divisors_.data(),
                                   column_divisors_.data());
    });
  }

 private:
  // Output rows split over threads, channels in the vector lanes.
  template <typename T>
  void channels_inner(const T* x, T* y) const {
    const cpu::ChannelsInner v = cpu::channels_inner(g_);
    cpu::parallel_chunks(v.outer * g_.oh, g_.ow * v.block * g_.kh * g_.kw, threads_,
                         [&](int64_t begin, int64_t end) {
      if (!max_)
        cpu::avx2::avg_pool_channels_inner(g_, x, y, begin, end, row_divisors_.data(),
                                           column_divisors_.data());
      else if (cpu::has_avx512f()) cpu::avx512::max_pool_channels_inner(g_, x, y, begin, end);
      else cpu::avx2::max_pool_channels_inner(g_, x, y, begin, end);
    });
  }

  Pool2dGeometry g_;
  int threads_;
  bool max_, bf16_;
  std::vector<float> row_divisors_, column_divisors_;
};

// bf16 runs on channels-inner layouts only: a plain bf16 pooling (no convolution chain around
// it) takes the reference loops.
std::string window_pool_avx2_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::BF16) return avx2_unsupported(spec);
  if (std::string why = cpu::isa_unavailable_reason(cpu::Isa::Avx2); !why.empty()) return why;
  if (spec.inputs[0].layout == Layout::Plain)
    return "bf16 runs in channels-inner layouts (nhwc, nChw8c, nChw16c) only";
  return "";
}

std::unique_ptr<KernelInstance> max_pool_avx2(const KernelSpec& spec) {
  return std::make_unique<PoolAvx2>(pool_geometry(spec, true), spec.threads, true,
                                    std::vector<float>{}, std::vector<float>{},
                                    spec.inputs[0].dtype == DType::BF16);
}

// PyTorch's divisor for each output index along one axis (see avg_pool_reference).
std::vector<float> axis_divisors(int64_t out, int64_t stride, int64_t pad, int64_t kernel,
                                 int64_t in, bool count_include_pad) {
  std::vector<float> divisors;
  for (int64_t o = 0; o < out; ++o) {
    const Span s = window_span(o, stride, pad, kernel, in);
    divisors.push_back(static_cast<float>(count_include_pad ? s.counted : s.end - s.begin));
  }
  return divisors;
}

std::unique_ptr<KernelInstance> avg_pool_avx2(const KernelSpec& spec) {
  const Pool2dGeometry g = pool_geometry(spec, false);
  const bool include = spec.node.attr_bool("count_include_pad");
  const int64_t divisor = spec.node.attr_int("divisor_override");
  const bool bf16 = spec.inputs[0].dtype == DType::BF16;
  if (divisor != 0)
    return std::make_unique<PoolAvx2>(g, spec.threads, false,
                                      std::vector<float>(g.oh, static_cast<float>(divisor)),
                                      std::vector<float>(g.ow, 1.0f), bf16);
  return std::make_unique<PoolAvx2>(
      g, spec.threads, false, axis_divisors(g.oh, g.stride_h, g.pad_h, g.kh, g.h, include),
      axis_divisors(g.ow, g.stride_w, g.pad_w, g.kw, g.w, include), bf16);
}

std::string adaptive_avx2_unsupported(const KernelSpec& spec) {
  if (std::string why = avx2_unsupported(spec); !why.empty()) return why;
  return adaptive_divides_reason(adaptive_geometry(spec));
}

std::unique_ptr<KernelInstance> adaptive_avx2(const KernelSpec& spec) {
  const Pool2dGeometry g = adaptive_geometry(spec);
  return std::make_unique<PoolAvx2>(g, spec.threads, false,
                                    std::vector<float>(g.oh, static_cast<float>(g.kh)),
                                    std::vector<float>(g.ow, static_cast<float>(g.kw)));
}

std::string global_avx2_unsupported(const KernelSpec& spec) {
  // bf16: the f32 loop on a widened copy (the global average reads each value once).
  if (std::string why = cpu::avx2_f32_unsupported_reason(
          spec.inputs[0].dtype == DType::BF16 ? DType::F32 : spec.inputs[0].dtype);
      !why.empty())
    return why;
  const Pool2dGeometry g = adaptive_geometry(spec);
  if (g.oh != 1 || g.ow != 1) return "output_size is not [1, 1]";
  return "";
}

std::unique_ptr<KernelInstance> global_avx2(const KernelSpec& spec) {
  if (spec.inputs[0].dtype == DType::BF16) return cpu::create_widened_bf16(spec, global_avx2);
  return make_kernel([g = adaptive_geometry(spec), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    const float* x = static_cast<const float*>(in[0]);
    float* y = static_cast<float*>(out[0]);
    const int64_t n = g.h * g.w;
    cpu::parallel_chunks(g.n * g.c, n, threads, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p)
        y[p] = static_cast<float>(cpu::avx2::sum(x + p * n, n) / static_cast<double>(n));
    });
  });
}
#endif

}  // namespace

void register_pooling_ops(OpRegistry& registry) {
  const std::vector<int64_t> none;
  OpDef max_pool;
  max_pool.name = "max_pool2d";
  max_pool.inputs = {{"x"}};
  max_pool.attrs = {{"kernel_size", none, /*required=*/true},
                    {"stride", none},
                    {"padding", std::vector<int64_t>{0}},
                    {"dilation", std::vector<int64_t>{1}},
                    {"ceil_mode", false}};
  max_pool.infer = infer_max_pool2d;
  max_pool.computes_low_precision_in_f32 = true;
  max_pool.layout_aware = true;
#ifdef KILN_X86
  max_pool.kernels.push_back({"avx2", "native", window_pool_avx2_unsupported, max_pool_avx2});
#endif
  max_pool.kernels.push_back({"reference", "native", always_supported, max_pool_reference_kernel});

  auto with_indices = [&](std::string name, std::vector<AttrSpec> attrs,
                          std::function<void(InferContext&)> infer,
                          decltype(KernelDef::create) kernel) {
    OpDef op;
    op.name = std::move(name);
    op.inputs = {{"x"}};
    op.num_outputs = 2;
    op.attrs = std::move(attrs);
    op.infer = infer;
    op.kernels.push_back({"reference", "native", always_supported, kernel});
    registry.add(std::move(op));
  };
  with_indices("max_pool2d_with_indices", max_pool.attrs, infer_max_pool_with_indices<2>,
               max_pool_with_indices_kernel<2, false>);
  with_indices("max_pool3d_with_indices", max_pool.attrs, infer_max_pool_with_indices<3>,
               max_pool_with_indices_kernel<3, false>);
  const std::vector<AttrSpec> output_size = {{"output_size", none, /*required=*/true}};
  with_indices("adaptive_max_pool2d", output_size, infer_adaptive_max_pool<2>,
               max_pool_with_indices_kernel<2, true>);
  with_indices("adaptive_max_pool3d", output_size, infer_adaptive_max_pool<3>,
               max_pool_with_indices_kernel<3, true>);
  registry.add(std::move(max_pool));

  OpDef avg_pool;
  avg_pool.name = "avg_pool2d";
  avg_pool.inputs = {{"x"}};
  avg_pool.attrs = {{"kernel_size", none, /*required=*/true},
                    {"stride", none},
                    {"padding", std::vector<int64_t>{0}},
                    {"ceil_mode", false},
                    {"count_include_pad", true},
                    {"divisor_override", int64_t{0}}};
  avg_pool.infer = infer_avg_pool2d;
  avg_pool.computes_low_precision_in_f32 = true;
  avg_pool.layout_aware = true;
  avg_pool.kernels.push_back({"onednn", "onednn", avg_pool_onednn_unsupported, avg_pool_onednn});
#ifdef KILN_X86
  avg_pool.kernels.push_back({"avx2", "native", window_pool_avx2_unsupported, avg_pool_avx2});
#endif
  avg_pool.kernels.push_back({"reference", "native", always_supported, avg_pool_reference_kernel});
  registry.add(std::move(avg_pool));

  OpDef adaptive;
  adaptive.name = "adaptive_avg_pool2d";
  adaptive.inputs = {{"x"}};
  adaptive.attrs = {{"output_size", none, /*required=*/true}};
  adaptive.infer = infer_adaptive_avg_pool2d;
  adaptive.computes_low_precision_in_f32 = true;
#ifdef KILN_X86
  adaptive.kernels.push_back({"global_avx2", "native", global_avx2_unsupported, global_avx2});
#endif
  adaptive.kernels.push_back({"onednn", "onednn", adaptive_onednn_unsupported, adaptive_onednn});
#ifdef KILN_X86
  adaptive.kernels.push_back({"avx2", "native", adaptive_avx2_unsupported, adaptive_avx2});
#endif
  adaptive.kernels.push_back({"reference", "native", always_supported, adaptive_reference_kernel});
  registry.add(std::move(adaptive));
}

}  // namespace kiln
