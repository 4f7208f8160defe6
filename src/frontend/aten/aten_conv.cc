// aten.convolution → Kiln's conv1d, conv2d, conv3d, conv_transpose2d and conv_transpose3d
// (conv_transpose1d as a conv_transpose2d of height 1); aten.im2col (nn.Unfold, a convolution's patches) → a gather,
// aten.col2im (nn.Fold) → an accumulating scatter.
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
  if (spatial > 1) {
    std::vector<Value*> inputs = {x, w};
    if (bias) inputs.push_back(bias);
    return {ctx.add(spatial == 2 ? "conv_transpose2d" : "conv_transpose3d", inputs,
                    std::move(attrs))};
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

// The windows of im2col and col2im over planes of H x W padded to hp x wp: window (oy, ox) of
// kernel offset (i, j) at [(i·kw + j)·oh·ow + oy·ow + ox], holding its position in the padded
// plane flattened.
struct Windows {
  int64_t c = 0, hp = 0, wp = 0, oh = 0, ow = 0;
  std::vector<int64_t> k, dil, pad, st;

  Tensor positions() const {
    Tensor t = Tensor::empty(DType::I64, {k[0] * k[1] * oh * ow});
    int64_t* p = t.data<int64_t>();
    for (int64_t i = 0; i < k[0]; ++i)
      for (int64_t j = 0; j < k[1]; ++j)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox)
            *p++ = (oy * st[0] + i * dil[0]) * wp + ox * st[1] + j * dil[1];
    return t;
  }
};

// The window arguments of im2col or col2im over planes of h x w and c channels.
Windows windows_of(ConvertContext& ctx, const char* op, int64_t c, int64_t h, int64_t w) {
  Windows win{.c = c};
  win.k = ctx.integers("kernel_size");
  win.dil = ctx.integers("dilation");
  win.pad = ctx.integers("padding");
  win.st = ctx.integers("stride");
  for (const auto* v : {&win.k, &win.dil, &win.pad, &win.st})
    if (v->size() != 2) ctx.unsupported(std::string(op) + " window arguments other than [h, w] pairs");
  win.hp = h + 2 * win.pad[0];
  win.wp = w + 2 * win.pad[1];
  auto outputs = [](int64_t padded, int64_t kernel, int64_t dilation, int64_t stride) {
    return (padded - dilation * (kernel - 1) - 1) / stride + 1;
  };
  win.oh = outputs(win.hp, win.k[0], win.dil[0], win.st[0]);
  win.ow = outputs(win.wp, win.k[1], win.dil[1], win.st[1]);
  if (win.oh <= 0 || win.ow <= 0)
    ctx.unsupported(std::string(op) + " windows that don't fit the padded input");
  return win;
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
  const Windows win = windows_of(ctx, "im2col", shape[rank - 3].size(), shape[rank - 2].size(),
                                 shape[rank - 1].size());
  if (win.pad[0] || win.pad[1])
    x = ctx.add("pad", {x}, {{"pad", std::vector<int64_t>{win.pad[1], win.pad[1], win.pad[0], win.pad[0]}},
                             {"mode", std::string("constant")}, {"value", 0.0}});
  const auto batched = [&](std::vector<int64_t> dims) {
    if (rank == 4) dims.insert(dims.begin(), -1);
    return dims;
  };
  Value* planes = ctx.add("reshape", {x}, {{"shape", batched({win.c, win.hp * win.wp})}});
  Value* patches = ctx.add(
      "index_select",
      {planes, ctx.graph().add_constant(ctx.node_name() + "_positions", win.positions())},
      {{"dim", static_cast<int64_t>(rank) - 2}});
  return ctx.add("reshape", {patches},
                 {{"shape", batched({win.c * win.k[0] * win.k[1], win.oh * win.ow})}});
}

// col2im (nn.Fold), im2col's adjoint: cols [N, C·kh·kw, L] or [C·kh·kw, L] → [N, C, H, W] (H, W
// from output_size), each column's values added into the window it came from. An index_put
// with accumulate of the columns, windows leading, into zeros over the padded planes, at
// im2col's positions, then the padding cut away. index_put adds in the positions' order, kernel
// offset first, as PyTorch's loop does, so overlapping windows sum bit for bit as eager's. Every
// size static.
Value* col2im(ConvertContext& ctx) {
  Value* cols = ctx.tensor("self");
  const Shape& shape = cols->type().shape;
  const size_t rank = shape.size();
  if (rank != 2 && rank != 3) ctx.unsupported("col2im of a rank-" + std::to_string(rank) + " input");
  if (!is_static(shape)) ctx.unsupported("col2im with dynamic sizes");
  const std::vector<int64_t> out = ctx.integers("output_size");
  if (out.size() != 2) ctx.unsupported("col2im output_size other than [h, w]");
  const int64_t n = rank == 3 ? shape[0].size() : 1, rows = shape[rank - 2].size();
  const std::vector<int64_t> k = ctx.integers("kernel_size");
  if (k.size() != 2 || k[0] * k[1] <= 0 || rows % (k[0] * k[1]) != 0)
    ctx.unsupported("col2im rows that aren't channels times the kernel's size");
  const Windows win = windows_of(ctx, "col2im", rows / (k[0] * k[1]), out[0], out[1]);
  const int64_t windows = k[0] * k[1] * win.oh * win.ow;
  if (shape[rank - 1].size() != win.oh * win.ow)
    ctx.unsupported("col2im columns that aren't the windows' count");
  // [N, C, K·L] with K·L in the positions' order, then windows leading.
  Value* values = ctx.add("reshape", {cols}, {{"shape", std::vector<int64_t>{n, win.c, windows}}});
  values = ctx.add("permute", {values}, {{"dims", std::vector<int64_t>{2, 0, 1}}});
  Value* zeros = ctx.add("zeros", {}, {{"size", std::vector<int64_t>{win.hp * win.wp, n, win.c}},
                                       {"dtype", std::string(dtype_name(cols->type().dtype))}});
  Value* sums = ctx.add(
      "index_put",
      {zeros, values, ctx.graph().add_constant(ctx.node_name() + "_positions", win.positions())},
      {{"accumulate", true}});
  Value* planes = ctx.add("permute", {sums}, {{"dims", std::vector<int64_t>{1, 2, 0}}});
  Value* image = ctx.add("reshape", {planes}, {{"shape", std::vector<int64_t>{n, win.c, win.hp, win.wp}}});
  for (int64_t d = 0; d < 2; ++d)
    if (win.pad[d])
      image = ctx.add("slice", {image}, {{"dim", d + 2}, {"start", win.pad[d]},
                                         {"end", win.pad[d] + out[d]}, {"step", int64_t{1}}});
  if (rank == 2)
    image = ctx.add("reshape", {image}, {{"shape", std::vector<int64_t>{win.c, out[0], out[1]}}});
  return image;
}

}  // namespace

void register_aten_conv_converters(ConverterRegistry& r) {
  r.add("aten.im2col.default",
        [](ConvertContext& ctx) -> std::vector<Value*> { return {im2col(ctx)}; });
  r.add("aten.col2im.default",
        [](ConvertContext& ctx) -> std::vector<Value*> { return {col2im(ctx)}; });
  r.add("aten.convolution.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("input");
    Value* w = ctx.tensor("weight");
    Value* bias = ctx.optional_tensor("bias");
    // aten.conv1d/conv2d batch an unbatched input before they reach aten.convolution.
    const int64_t spatial = static_cast<int64_t>(x->type().rank()) - 2;
    if (spatial < 1 || spatial > 3)
      ctx.unsupported("a " + std::to_string(spatial) + "-d convolution (Kiln has 1-d to 3-d)");
    if (ctx.boolean("transposed")) return transposed(ctx, x, w, bias, spatial);
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
