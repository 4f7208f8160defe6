// Upsampling → Kiln's upsample ops; antialiased bilinear resizing → two matmuls by constant
// resampling matrices; grid sampling (F.grid_sample) → grid_sample. torch.export keeps aten's .vec forms; under torch.compile the
// backend routes F.interpolate to kiln:: ops of the same schemas (python/kiln/_upsample.py), since
// AOTAutograd would otherwise trace them into gathers and arithmetic.
#include <algorithm>
#include <cmath>
#include <optional>

#include "frontend/converter.h"

namespace kiln {

namespace {

// PyTorch's antialiased bilinear weights along one axis of `in` elements resized to `out`
// (UpSampleKernel.cpp, _compute_indices_min_size_weights_aa), in the input's precision T as
// there, as a dense [out, in] matrix: output i reads the inputs within `support` of its centre
// scale·(i + 0.5) through a triangle filter, widened by the scale when shrinking, its weights
// normalized to sum to 1. align_corners changes only the scale.
template <typename T>
Tensor antialiased_bilinear_weights(int64_t in, int64_t out, bool align_corners,
                                    std::optional<double> given_scale, DType dtype) {
  const T scale = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                  : given_scale && *given_scale > 0 ? static_cast<T>(1.0 / *given_scale)
                                                    : static_cast<T>(in) / static_cast<T>(out);
  const T support = scale >= 1 ? scale : T(1);
  const T inverse_scale = scale >= 1 ? 1 / scale : T(1);
  const auto max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  Tensor weights = Tensor::zeros(dtype, {out, in});
  T* row = weights.data<T>();
  for (int64_t i = 0; i < out; ++i, row += in) {
    const T center = scale * (static_cast<T>(i) + T(0.5));
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(center - support + T(0.5)), 0);
    const int64_t taps = std::clamp<int64_t>(
        std::min<int64_t>(static_cast<int64_t>(center + support + T(0.5)), in) - first, 0, max_taps);
    T total = 0;
    for (int64_t j = 0; j < taps; ++j) {
      const T x = std::abs((static_cast<T>(j + first) - center + T(0.5)) * inverse_scale);
      row[first + j] = x < 1 ? 1 - x : T(0);
      total += row[first + j];
    }
    if (total != 0)
      for (int64_t j = 0; j < taps; ++j) row[first + j] /= total;
  }
  return weights;
}

// F.interpolate(mode="bilinear", antialias=True) (SigLIP2 resizes its position embeddings so):
// the width resampled first, then the height, each a matmul by the axis's constant weights (an
// axis whose size stays is left alone, as PyTorch does); static spatial sizes. The dense product
// reads every input of a row where PyTorch's banded kernel reads the filter's taps: it is faster
// up to about 32 inputs a tap (position embeddings, 16 → 24: 7-8x eager; 64 → 32: 1.9x) and
// slower beyond (96 → 224: level; 256 → 128: 0.5x; 512 → 224: 0.1-0.4x), where the resize
// stays in PyTorch.
std::vector<Value*> antialiased_bilinear(ConvertContext& ctx) {
  Value* x = ctx.tensor("self");
  const TensorType& type = x->type();
  const DType dtype = type.dtype;
  if (type.rank() != 4 || !type.shape[2].is_static() || !type.shape[3].is_static())
    ctx.unsupported("antialiased resizing of other than 4-D x with static height and width");
  if (dtype != DType::F32 && dtype != DType::F64)
    ctx.unsupported("antialiased resizing of " + std::string(dtype_name(dtype)) + " (f32, f64)");
  const std::vector<int64_t> size = ctx.integers("output_size");
  const bool align_corners = ctx.boolean("align_corners");
  const char* scale_args[] = {"scales_h", "scales_w"};
  Value* y = x;
  for (int axis : {1, 0}) {  // width, then height
    const int64_t in = type.shape[2 + axis].size(), out = size[axis];
    if (in == out) continue;
    std::optional<double> scale;
    if (ctx.has(scale_args[axis])) scale = ctx.number(scale_args[axis]);
    const double taps = 2 * std::ceil(std::max(1.0, static_cast<double>(in) / static_cast<double>(out))) + 1;
    if (static_cast<double>(in) > 32 * taps)
      ctx.unsupported("an antialiased resize of " + std::to_string(in) + " to " +
                      std::to_string(out) + " (over 32 inputs a tap, PyTorch's banded kernel is faster)");
    Tensor w = dtype == DType::F32
                   ? antialiased_bilinear_weights<float>(in, out, align_corners, scale, dtype)
                   : antialiased_bilinear_weights<double>(in, out, align_corners, scale, dtype);
    Value* weights = ctx.graph().add_constant(ctx.node_name() + (axis ? "_width" : "_height"),
                                              std::move(w));
    y = axis ? ctx.add("matmul", {y, weights}, {{"transpose_b", true}})  // [.., H, out_w]
             : ctx.add("matmul", {weights, y});                          // [out_h, H] · [.., H, W]
  }
  return {y};
}

// .vec: exactly one of output_size and scale_factors; the factors, when given, also enter the
// source-index arithmetic, which is what Kiln's ops do with them.
AttrMap resize_attrs(ConvertContext& ctx) {
  return {{"output_size",
           ctx.has("output_size") ? ctx.integers("output_size") : std::vector<int64_t>{}},
          {"scale_factors",
           ctx.has("scale_factors") ? ctx.numbers("scale_factors") : std::vector<double>{}}};
}

std::vector<Value*> nearest(ConvertContext& ctx) {
  return {ctx.add("upsample_nearest2d", {ctx.tensor("input")}, resize_attrs(ctx))};
}

std::vector<Value*> bilinear(ConvertContext& ctx) {
  AttrMap attrs = resize_attrs(ctx);
  attrs["align_corners"] = ctx.boolean("align_corners");
  return {ctx.add("upsample_bilinear2d", {ctx.tensor("input")}, std::move(attrs))};
}

// ATen numbers the modes: interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros,
// 1 border, 2 reflection.
std::vector<Value*> grid_sample(ConvertContext& ctx) {
  Value* x = ctx.tensor("input");
  if (x->type().rank() != 4) ctx.unsupported("grid sampling of a volume (Kiln samples 4-D x)");
  const int64_t interpolation = ctx.integer("interpolation_mode");
  const int64_t padding = ctx.integer("padding_mode");
  if (interpolation < 0 || interpolation > 2 || padding < 0 || padding > 2)
    ctx.unsupported("grid sampling modes other than ATen's");
  static constexpr const char* kModes[] = {"bilinear", "nearest", "bicubic"};
  static constexpr const char* kPaddings[] = {"zeros", "border", "reflection"};
  return {ctx.add("grid_sample", {x, ctx.tensor("grid")},
                  {{"mode", std::string(kModes[interpolation])},
                   {"padding_mode", std::string(kPaddings[padding])},
                   {"align_corners", ctx.boolean("align_corners")}})};
}

}  // namespace

void register_aten_upsample_converters(ConverterRegistry& r) {
  r.add("aten.upsample_nearest2d.vec", nearest);
  r.add("kiln.upsample_nearest2d.default", nearest);
  r.add("aten.upsample_bilinear2d.vec", bilinear);
  r.add("kiln.upsample_bilinear2d.default", bilinear);
  r.add("aten._upsample_bilinear2d_aa.default", antialiased_bilinear);
  r.add("aten.grid_sampler_2d.default", grid_sample);
  r.add("aten.grid_sampler.default", grid_sample);
}

}  // namespace kiln
