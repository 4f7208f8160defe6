// Resizing the last two dims of x [N, C, H, W]: PyTorch's upsample_nearest2d and
// upsample_bilinear2d (F.interpolate's "nearest" and "bilinear" modes).
//
//   upsample_nearest2d(x; output_size = [], scale_factors = [])
//   upsample_bilinear2d(x; output_size = [], align_corners = false, scale_factors = [])
//
// output_size [OH, OW] fixes the output; without it, OH = floor(H * scale_factors[0]) (and the
// same for W). scale_factors, when given, also enter the source-index arithmetic as they do in
// PyTorch (its recompute_scale_factor=False); a factor <= 0 counts as absent, so both of ATen's
// forms map here: .vec(output_size | scale_factors) and (output_size, scales_h, scales_w).
//
// Source indices and interpolation weights are computed exactly as PyTorch's CPU kernels
// compute them (ATen's UpSample.h; checked bit for bit against PyTorch 2.13 on thousands of
// sizes): nearest in float for every dtype, bilinear in the dtype's precision. Kernels, best
// first: "table" (indices and weights computed once per axis at creation; bilinear arithmetic in
// the tensor's dtype, as PyTorch's) and the reference (per element; bilinear in double).
// f16 and bf16: nearest copies them as they are (a copy is exact in any dtype, so casts to f32
// and back would change nothing); bilinear computes them in f32 between casts
// (computes_low_precision_in_f32, docs/ops.md), as PyTorch's kernels do for outputs with
// OH + OW <= 128 (larger ones PyTorch rounds along the way; Kiln still rounds once).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------- PyTorch's index arithmetic

// area_pixel_compute_scale: source elements per destination element, in M.
template <typename M>
M source_scale(int64_t in, int64_t out, bool align_corners, double scale_factor) {
  if (align_corners) return out > 1 ? static_cast<M>(in - 1) / static_cast<M>(out - 1) : M(0);
  return scale_factor > 0 ? static_cast<M>(1.0 / scale_factor)
                          : static_cast<M>(in) / static_cast<M>(out);
}

// min(floor(position), last) for a position >= 0, through floorf as PyTorch (which rounds a
// double position to float first). A position past `last`, infinite or NaN (a tiny
// scale_factor next to an output_size makes one) gives `last`, never an index out of range.
inline int64_t clamped_floor(float position, int64_t last) {
  if (!(position < static_cast<float>(last))) return last;
  return static_cast<int64_t>(std::floor(position));
}

// nearest_idx: the source index of destination index o, in float whatever the dtype.
int64_t nearest_source(int64_t o, int64_t in, int64_t out, double scale_factor) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float scale = source_scale<float>(in, out, false, scale_factor);
  return clamped_floor(static_cast<float>(o) * scale, in - 1);
}

// The two source indices of destination index o and their weights.
template <typename M>
struct LinearTap {
  int64_t i0, i1;
  M w0, w1;
};

// compute_source_index_and_lambda, in the dtype's own precision (f32 or f64). PyTorch's x86
// kernels are compiled for AVX2, which contracts scale * (o + 0.5) - 0.5 into one FMA: so here.
template <typename M>
LinearTap<M> linear_source(int64_t o, int64_t in, int64_t out, bool align_corners, M scale) {
  if (in == out) return {o, o, M(1), M(0)};
  M position = align_corners ? scale * static_cast<M>(o)
                             : std::fma(scale, static_cast<M>(o) + M(0.5), M(-0.5));
  if (!align_corners && position < M(0)) position = M(0);
  const int64_t i0 = clamped_floor(static_cast<float>(position), in - 1);
  const M w1 = std::min(std::max(position - static_cast<M>(i0), M(0)), M(1));
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), M(1) - w1, w1};
}

// ---------------------------------------------------------------- attributes and inference

const std::vector<double>& scale_factors_of(const AttrMap& attrs) {
  return std::get<std::vector<double>>(attrs.at("scale_factors"));
}

struct Resize {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  bool align_corners = false;
  double scale_h = -1, scale_w = -1;  // <= 0: absent
};

Resize resize_of(const KernelSpec& spec, bool has_align_corners) {
  const std::vector<int64_t> x = spec.input_sizes(0), y = spec.output_sizes(0);
  const auto& scales = scale_factors_of(spec.node.attrs());
  return Resize{.planes = x[0] * x[1], .h = x[2], .w = x[3], .oh = y[2], .ow = y[3],
                .align_corners = has_align_corners && spec.node.attr_bool("align_corners"),
                .scale_h = scales.empty() ? -1 : scales[0],
                .scale_w = scales.empty() ? -1 : scales[1]};
}

std::string scale_name(double scale) {
  std::ostringstream out;
  out << std::setprecision(17) << scale;
  return out.str();
}

// floor(in * scale), named "{}*2" for whole factors and "floor({}*1.5)" otherwise.
Dim scaled_dim(InferContext& ctx, Dim in, double scale, const std::string& what) {
  // Saturating at 2^62, which no tensor reaches: a symbol's range may be unbounded above.
  auto size = [scale](int64_t s) {
    const double scaled = std::floor(static_cast<double>(s) * scale);
    return scaled >= 0x1p62 ? int64_t{1} << 62 : static_cast<int64_t>(scaled);
  };
  if (in.is_static() && static_cast<double>(in.size()) * scale >= 0x1p62)
    ctx.fail("scale factor " + scale_name(scale) + " makes the output's " + what +
             "s overflow; use a smaller one");
  if (in.is_static() && size(in.size()) < 1)
    ctx.fail("scale factor " + scale_name(scale) + " gives " + std::to_string(size(in.size())) +
             " output " + what + "s from " + std::to_string(in.size()) +
             "; the output needs at least one");
  if (scale == 1) return in;
  const std::string expr = scale == std::floor(scale) ? "{}*" + scale_name(scale)
                                                      : "floor({}*" + scale_name(scale) + ")";
  return ctx.derive(in, size, expr);
}

void infer_upsample(InferContext& ctx, std::initializer_list<DType> dtypes) {
  const TensorType& x = ctx.input(0);
  std::string names;
  for (DType d : dtypes) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  ctx.check(std::find(dtypes.begin(), dtypes.end(), x.dtype) != dtypes.end(),
            ctx.op() + " takes " + names + ", not " + std::string(dtype_name(x.dtype)));
  ctx.check(x.rank() == 4, "x must be 4-D [N, C, H, W]");
  for (size_t d = 1; d < 4; ++d)
    ctx.check(!x.shape[d].is_static() || x.shape[d].size() > 0,
              "x's dims other than the batch must not be empty");
  const auto& size = ctx.attr_ints("output_size");
  const auto& scales = scale_factors_of(ctx.attrs());
  ctx.check(size.empty() || (size.size() == 2 && size[0] >= 1 && size[1] >= 1),
            "output_size must be empty or two positive ints [OH, OW]");
  ctx.check(scales.empty() || scales.size() == 2,
            "scale_factors must be empty or two floats [scale_h, scale_w]");
  ctx.check(!size.empty() || !scales.empty(), "give output_size or scale_factors");
  Shape out = x.shape;
  if (!size.empty()) {
    out[2] = Dim(size[0]);
    out[3] = Dim(size[1]);
  } else {
    ctx.check(scales[0] > 0 && scales[1] > 0 && std::isfinite(scales[0]) && std::isfinite(scales[1]),
              "scale_factors must be positive and finite to size the output");
    out[2] = scaled_dim(ctx, x.shape[2], scales[0], "row");
    out[3] = scaled_dim(ctx, x.shape[3], scales[1], "column");
  }
  ctx.set_output(0, TensorType{x.dtype, out, Layout::Plain});
}

// Calls fn(T{}) with T the C++ type of `dtype` (f32, f64 or u8), or uint16_t for f16 and bf16,
// which nearest only copies.
template <typename Fn>
auto visit_dtype(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::F64: return fn(double{});
    case DType::U8: return fn(uint8_t{});
    case DType::F16: case DType::BF16: return fn(uint16_t{});
    default: KILN_ASSERT(dtype == DType::F32, "upsample has no kernel for " << dtype_name(dtype));
  }
  return fn(float{});
}

// ---------------------------------------------------------------- nearest

std::vector<int64_t> nearest_table(int64_t in, int64_t out, double scale_factor) {
  std::vector<int64_t> table(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o)
    table[static_cast<size_t>(o)] = nearest_source(o, in, out, scale_factor);
  return table;
}

template <typename T>
void nearest_reference(const Resize& r, const T* x, T* y, int threads) {
  cpu::parallel_chunks(r.planes, r.oh * r.ow, threads, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t oy = 0; oy < r.oh; ++oy)
        for (int64_t ox = 0; ox < r.ow; ++ox)
          y[(p * r.oh + oy) * r.ow + ox] =
              x[(p * r.h + nearest_source(oy, r.h, r.oh, r.scale_h)) * r.w +
                nearest_source(ox, r.w, r.ow, r.scale_w)];
  });
}

// Rows gathered through the column table; an output row whose source row is the previous one's
// is a copy of that row.
template <typename T>
void nearest_table_run(const Resize& r, const std::vector<int64_t>& rows,
                       const std::vector<int64_t>& cols, const T* x, T* y, int threads) {
  cpu::parallel_chunks(r.planes, r.oh * r.ow, threads, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      T* y_plane = y + p * r.oh * r.ow;
      for (int64_t oy = 0; oy < r.oh; ++oy) {
        T* y_row = y_plane + oy * r.ow;
        if (oy > 0 && rows[static_cast<size_t>(oy)] == rows[static_cast<size_t>(oy - 1)]) {
          std::memcpy(y_row, y_row - r.ow, static_cast<size_t>(r.ow) * sizeof(T));
          continue;
        }
        const T* x_row = x + (p * r.h + rows[static_cast<size_t>(oy)]) * r.w;
        for (int64_t ox = 0; ox < r.ow; ++ox) y_row[ox] = x_row[cols[static_cast<size_t>(ox)]];
      }
    }
  });
}

std::unique_ptr<KernelInstance> nearest_reference_kernel(const KernelSpec& spec) {
  return visit_dtype(spec.inputs[0].dtype, [&](auto t) -> std::unique_ptr<KernelInstance> {
    using T = decltype(t);
    return make_kernel([r = resize_of(spec, false), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      nearest_reference(r, static_cast<const T*>(in[0]), static_cast<T*>(out[0]), threads);
    });
  });
}

std::unique_ptr<KernelInstance> nearest_table_kernel(const KernelSpec& spec) {
  return visit_dtype(spec.inputs[0].dtype, [&](auto t) -> std::unique_ptr<KernelInstance> {
    using T = decltype(t);
    const Resize r = resize_of(spec, false);
    return make_kernel([r, rows = nearest_table(r.h, r.oh, r.scale_h),
                        cols = nearest_table(r.w, r.ow, r.scale_w), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      nearest_table_run(r, rows, cols, static_cast<const T*>(in[0]), static_cast<T*>(out[0]),
                        threads);
    });
  });
}

// ---------------------------------------------------------------- bilinear

// Output (oy, ox) = (x[y0, x0] w0 + x[y0, x1] w1) h0 + (x[y1, x0] w0 + x[y1, x1] w1) h1, in A.
template <typename A, typename T, typename W>
A bilinear_value(const T* plane, int64_t width, const LinearTap<W>& row, const LinearTap<W>& col) {
  const T* r0 = plane + row.i0 * width;
  const T* r1 = plane + row.i1 * width;
  const A top = static_cast<A>(r0[col.i0]) * static_cast<A>(col.w0) +
                static_cast<A>(r0[col.i1]) * static_cast<A>(col.w1);
  const A bottom = static_cast<A>(r1[col.i0]) * static_cast<A>(col.w0) +
                   static_cast<A>(r1[col.i1]) * static_cast<A>(col.w1);
  return top * static_cast<A>(row.w0) + bottom * static_cast<A>(row.w1);
}

template <typename T>
std::vector<LinearTap<T>> linear_table(int64_t in, int64_t out, bool align_corners,
                                       double scale_factor) {
  const T scale = source_scale<T>(in, out, align_corners, scale_factor);
  std::vector<LinearTap<T>> table;
  for (int64_t o = 0; o < out; ++o) table.push_back(linear_source(o, in, out, align_corners, scale));
  return table;
}

template <typename T>
void bilinear_reference(const Resize& r, const T* x, T* y, int threads) {
  const T scale_h = source_scale<T>(r.h, r.oh, r.align_corners, r.scale_h);
  const T scale_w = source_scale<T>(r.w, r.ow, r.align_corners, r.scale_w);
  cpu::parallel_chunks(r.planes, r.oh * r.ow, threads, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t oy = 0; oy < r.oh; ++oy) {
        const LinearTap<T> row = linear_source(oy, r.h, r.oh, r.align_corners, scale_h);
        for (int64_t ox = 0; ox < r.ow; ++ox) {
          const LinearTap<T> col = linear_source(ox, r.w, r.ow, r.align_corners, scale_w);
          y[(p * r.oh + oy) * r.ow + ox] =
              static_cast<T>(bilinear_value<double>(x + p * r.h * r.w, r.w, row, col));
        }
      }
  });
}

template <typename T>
void bilinear_table_run(const Resize& r, const std::vector<LinearTap<T>>& rows,
                        const std::vector<LinearTap<T>>& cols, const T* x, T* y, int threads) {
  cpu::parallel_chunks(r.planes * r.oh, r.ow, threads, [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line) {
      const int64_t p = line / r.oh, oy = line % r.oh;
      const T* plane = x + p * r.h * r.w;
      T* y_row = y + line * r.ow;
      for (int64_t ox = 0; ox < r.ow; ++ox)
        y_row[ox] = bilinear_value<T>(plane, r.w, rows[static_cast<size_t>(oy)],
                                      cols[static_cast<size_t>(ox)]);
    }
  });
}

template <typename Make>
std::unique_ptr<KernelInstance> floating_kernel(const KernelSpec& spec, Make make) {
  if (spec.inputs[0].dtype == DType::F64) return make(double{});
  return make(float{});
}

std::unique_ptr<KernelInstance> bilinear_reference_kernel(const KernelSpec& spec) {
  return floating_kernel(spec, [&](auto t) -> std::unique_ptr<KernelInstance> {
    using T = decltype(t);
    return make_kernel([r = resize_of(spec, true), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      bilinear_reference(r, static_cast<const T*>(in[0]), static_cast<T*>(out[0]), threads);
    });
  });
}

std::unique_ptr<KernelInstance> bilinear_table_kernel(const KernelSpec& spec) {
  return floating_kernel(spec, [&](auto t) -> std::unique_ptr<KernelInstance> {
    using T = decltype(t);
    const Resize r = resize_of(spec, true);
    return make_kernel([r, rows = linear_table<T>(r.h, r.oh, r.align_corners, r.scale_h),
                        cols = linear_table<T>(r.w, r.ow, r.align_corners, r.scale_w),
                        threads = spec.threads](std::span<const void* const> in,
                                                std::span<void* const> out) {
      bilinear_table_run(r, rows, cols, static_cast<const T*>(in[0]), static_cast<T*>(out[0]),
                         threads);
    });
  });
}

std::string always_supported(const KernelSpec&) { return ""; }

}  // namespace

void register_upsample_ops(OpRegistry& registry) {
  const std::vector<int64_t> no_size;
  const std::vector<double> no_scales;
  OpDef nearest;
  nearest.name = "upsample_nearest2d";
  nearest.inputs = {{"x"}};
  nearest.attrs = {{"output_size", no_size}, {"scale_factors", no_scales}};
  nearest.infer = [](InferContext& ctx) {
    infer_upsample(ctx, {DType::F32, DType::F64, DType::F16, DType::BF16, DType::U8});
  };
  nearest.kernels = {{"table", "native", always_supported, nearest_table_kernel},
                     {"reference", "native", always_supported, nearest_reference_kernel}};
  registry.add(std::move(nearest));

  OpDef bilinear;
  bilinear.name = "upsample_bilinear2d";
  bilinear.inputs = {{"x"}};
  bilinear.attrs = {{"output_size", no_size},
                    {"align_corners", false},
                    {"scale_factors", no_scales}};
  bilinear.infer = [](InferContext& ctx) { infer_upsample(ctx, {DType::F32, DType::F64}); };
  bilinear.computes_low_precision_in_f32 = true;
  bilinear.kernels = {{"table", "native", always_supported, bilinear_table_kernel},
                      {"reference", "native", always_supported, bilinear_reference_kernel}};
  registry.add(std::move(bilinear));
}

}  // namespace kiln
