// aten.convolution → Kiln's conv1d, conv2d, conv3d and conv_transpose2d (conv_transpose1d as a
// conv_transpose2d of height 1); aten.im2col (nn.Unfold, a convolution's patches) → a gather.
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

// im2col (nn.Unfold): x [N, C, H, W] or [C, H, W] → [N, C·kh·kw, L], L = oh·ow; row
// c·kh·kw + i·kw + j, column oy·ow + ox holds x[c, oy·sh − ph + i·dh, ox·sw − pw + j·dw], 0
// outside x. A gather at constant positions of the zero-padded planes flattened: pad, reshape,
// index_select, reshape. C, H and W static (the positions are constants).
Value* im2col(ConvertContext& ctx) {
  Value* x = ctx.tensor("self");
  const Shape& shape = x->type().shape;
  const size_t rank = shape.size();
  if (rank != 3 && rank != 4) ctx.unsupported("im2col of a rank-" + std::to_string(rank) + " x");
  for (size_t d = rank - 3; d < rank; ++d)
    if (!shape[d].is_static()) ctx.unsupported("im2col with dynamic channels, height or width");
  const std::vector<int64_t> k = ctx.integers("kernel_size"), dil = ctx.integers("dilation"),
                             pad = ctx.integers("padding"), st = ctx.integers("stride");
  if (k.size() != 2 || dil.size() != 2 || pad.size() != 2 || st.size() != 2)
    ctx.unsupported("im2col window arguments other than [h, w] pairs");
  const int64_t c = shape[rank - 3].size(), h = shape[rank - 2].size(),
                w = shape[rank - 1].size();
  const int64_t hp = h + 2 * pad[0], wp = w + 2 * pad[1];
  auto outputs = [](int64_t padded, int64_t kernel, int64_t dilation, int64_t stride) {
    return (padded - dilation * (kernel - 1) - 1) / stride + 1;
  };
  const int64_t oh = outputs(hp, k[0], dil[0], st[0]), ow = outputs(wp, k[1], dil[1], st[1]);
  if (oh <= 0 || ow <= 0) ctx.unsupported("im2col windows that don't fit the padded input");
  Tensor positions = Tensor::empty(DType::I64, {k[0] * k[1] * oh * ow});
  int64_t* p = positions.data<int64_t>();
  for (int64_t i = 0; i < k[0]; ++i)
    for (int64_t j = 0; j < k[1]; ++j)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          *p++ = (oy * st[0] + i * dil[0]) * wp + ox * st[1] + j * dil[1];
  if (pad[0] || pad[1])
    x = ctx.add("pad", {x}, {{"pad", std::vector<int64_t>{pad[1], pad[1], pad[0], pad[0]}},
                             {"mode", std::string("constant")}, {"value", 0.0}});
  const auto batched = [&](std::vector<int64_t> dims) {
    if (rank == 4) dims.insert(dims.begin(), -1);
    return dims;
  };
  Value* planes = ctx.add("reshape", {x}, {{"shape", batched({c, hp * wp})}});
  Value* patches =
      ctx.add("index_select",
              {planes, ctx.graph().add_constant(ctx.node_name() + "_positions", positions)},
              {{"dim", static_cast<int64_t>(rank) - 2}});
  return ctx.add("reshape", {patches}, {{"shape", batched({c * k[0] * k[1], oh * ow})}});
}

}  // namespace

void register_aten_conv_converters(ConverterRegistry& r) {
  r.add("aten.im2col.default",
        [](ConvertContext& ctx) -> std::vector<Value*> { return {im2col(ctx)}; });
  r.add("aten.convolution.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("input");
    Value* w = ctx.tensor("weight");
    Value* bias = ctx.optional_tensor("bias");
    // aten.conv1d/conv2d batch an unbatched input before they reach aten.convolution.
    const int64_t spatial = static_cast<int64_t>(x->type().rank()) - 2;
    if (spatial < 1 || spatial > 3)
      ctx.unsupported("a " + std::to_string(spatial) + "-d convolution (Kiln has 1-d to 3-d)");
    if (ctx.boolean("transposed")) {
      if (spatial == 3)
        ctx.unsupported("a transposed 3-d convolution (Kiln has 1-d and 2-d transposed ones)");
      return transposed(ctx, x, w, bias, spatial);
    }
    std::vector<Value*> inputs = {x, w};
    if (bias) inputs.push_back(bias);
    static constexpr const char* kOps[] = {"conv1d", "conv2d", "conv3d"};
    return {ctx.add(kOps[spatial - 1], inputs,
                    {{"stride", per_spatial_dim(ctx, "stride", spatial)},
                     {"padding", per_spatial_dim(ctx, "padding", spatial)},
                     {"dilation", per_spatial_dim(ctx, "dilation", spatial)},
                     {"groups", ctx.integer("groups")}})};
  });
}

}  // namespace kiln
