// aten.convolution → Kiln's conv1d, conv2d and conv_transpose2d (conv_transpose1d as a
// conv_transpose2d of height 1).
#include "frontend/converter.h"

namespace kiln {

namespace {

// [v] → [1, v]: a 1-d window as the width of a 2-d one of height 1.
std::vector<int64_t> with_unit_height(std::vector<int64_t> v, int64_t unit) {
  v.insert(v.begin(), unit);
  return v;
}

// A window argument with one entry per spatial dim; ATen takes one entry for all of them
// (`padding=[0]`, as F.conv2d(padding="valid") and TorchScript-era models pass it).
std::vector<int64_t> per_spatial_dim(ConvertContext& ctx, const char* arg, int64_t spatial) {
  std::vector<int64_t> v = ctx.integers(arg);
  if (v.size() == 1) v.assign(static_cast<size_t>(spatial), v[0]);
  return v;
}

Value* unsqueeze(ConvertContext& ctx, Value* x, int64_t dim) {
  return ctx.add("unsqueeze", {x}, {{"dim", dim}});
}

std::vector<Value*> transposed(ConvertContext& ctx, Value* x, Value* w, Value* bias,
                               int64_t spatial) {
  AttrMap attrs{{"stride", per_spatial_dim(ctx, "stride", spatial)},
                {"padding", per_spatial_dim(ctx, "padding", spatial)},
                {"output_padding", per_spatial_dim(ctx, "output_padding", spatial)},
                {"dilation", per_spatial_dim(ctx, "dilation", spatial)},
                {"groups", ctx.integer("groups")}};
  if (spatial == 2) {
    std::vector<Value*> inputs = {x, w};
    if (bias) inputs.push_back(bias);
    return {ctx.add("conv_transpose2d", inputs, std::move(attrs))};
  }
  // x[N, C, L] and w[C, O/g, K] as x[N, C, 1, L] and w[C, O/g, 1, K].
  attrs["stride"] = with_unit_height(per_spatial_dim(ctx, "stride", 1), 1);
  attrs["padding"] = with_unit_height(per_spatial_dim(ctx, "padding", 1), 0);
  attrs["output_padding"] = with_unit_height(per_spatial_dim(ctx, "output_padding", 1), 0);
  attrs["dilation"] = with_unit_height(per_spatial_dim(ctx, "dilation", 1), 1);
  std::vector<Value*> inputs = {unsqueeze(ctx, x, 2), unsqueeze(ctx, w, 2)};
  if (bias) inputs.push_back(bias);
  Value* y = ctx.add("conv_transpose2d", inputs, std::move(attrs));
  return {ctx.add("squeeze", {y}, {{"dim", std::vector<int64_t>{2}}})};
}

}  // namespace

void register_aten_conv_converters(ConverterRegistry& r) {
  r.add("aten.convolution.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("input");
    Value* w = ctx.tensor("weight");
    Value* bias = ctx.optional_tensor("bias");
    // aten.conv1d/conv2d batch an unbatched input before they reach aten.convolution.
    const int64_t spatial = static_cast<int64_t>(x->type().rank()) - 2;
    if (spatial != 1 && spatial != 2)
      ctx.unsupported("a " + std::to_string(spatial) + "-d convolution (Kiln has 1-d and 2-d)");
    if (ctx.boolean("transposed")) return transposed(ctx, x, w, bias, spatial);
    std::vector<Value*> inputs = {x, w};
    if (bias) inputs.push_back(bias);
    return {ctx.add(spatial == 1 ? "conv1d" : "conv2d", inputs,
                    {{"stride", per_spatial_dim(ctx, "stride", spatial)},
                     {"padding", per_spatial_dim(ctx, "padding", spatial)},
                     {"dilation", per_spatial_dim(ctx, "dilation", spatial)},
                     {"groups", ctx.integer("groups")}})};
  });
}

}  // namespace kiln
