// Upsampling → Kiln's upsample ops; grid sampling (F.grid_sample) → grid_sample. torch.export keeps aten's .vec forms; under torch.compile the
// backend routes F.interpolate to kiln:: ops of the same schemas (python/kiln/_upsample.py), since
// AOTAutograd would otherwise trace them into gathers and arithmetic.
#include "frontend/converter.h"

namespace kiln {

namespace {

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
  if (interpolation == 2) ctx.unsupported("bicubic grid sampling (Kiln has bilinear and nearest)");
  if (interpolation < 0 || interpolation > 2 || padding < 0 || padding > 2)
    ctx.unsupported("grid sampling modes other than ATen's");
  static constexpr const char* kModes[] = {"bilinear", "nearest"};
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
  r.add("aten.grid_sampler_2d.default", grid_sample);
  r.add("aten.grid_sampler.default", grid_sample);
}

}  // namespace kiln
