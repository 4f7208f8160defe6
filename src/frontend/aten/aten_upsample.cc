// Upsampling → Kiln's upsample ops. torch.export keeps aten's .vec forms; under torch.compile the
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

}  // namespace

void register_aten_upsample_converters(ConverterRegistry& r) {
  r.add("aten.upsample_nearest2d.vec", nearest);
  r.add("kiln.upsample_nearest2d.default", nearest);
  r.add("aten.upsample_bilinear2d.vec", bilinear);
  r.add("kiln.upsample_bilinear2d.default", bilinear);
}

}  // namespace kiln
