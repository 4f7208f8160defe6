// Normalizations and softmax.
#include <limits>

#include "frontend/converter.h"

namespace kiln {

namespace {

// input, then the optional weight and bias that Kiln's norms take as a variadic tail.
std::vector<Value*> affine_inputs(ConvertContext& ctx) {
  std::vector<Value*> inputs = {ctx.tensor("input")};
  Value* weight = ctx.optional_tensor("weight");
  Value* bias = ctx.optional_tensor("bias");
  if (bias && !weight) ctx.unsupported("a bias without a weight");
  if (weight) inputs.push_back(weight);
  if (bias) inputs.push_back(bias);
  return inputs;
}

}  // namespace

void register_aten_norm_converters(ConverterRegistry& r) {
  // Returns (out, mean, rstd); inference graphs use only out.
  r.add("aten.native_layer_norm.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<Value*> inputs = affine_inputs(ctx);
    int64_t ndim = static_cast<int64_t>(ctx.integers("normalized_shape").size());
    Value* y = ctx.add("layer_norm", inputs,
                       {{"normalized_ndim", ndim}, {"eps", ctx.number("eps")}});
    return {y, nullptr, nullptr};
  });
  r.add("aten.native_group_norm.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("group_norm", affine_inputs(ctx),
                    {{"num_groups", ctx.integer("group")}, {"eps", ctx.number("eps")}}),
            nullptr, nullptr};
  });
  r.add("aten._softmax.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (ctx.boolean("half_to_float")) ctx.unsupported("half_to_float");
    return {ctx.add("softmax", {ctx.tensor("self")}, {{"axis", ctx.integer("dim")}})};
  });
  // torch.nn.utils.weight_norm: (w, n) with n the 2-norm of v over every dim but `dim` (kept as
  // size 1) and w = v * (g / n), PyTorch's arithmetic.
  r.add("aten._weight_norm_interface.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* v = ctx.tensor("v");
    const int64_t rank = static_cast<int64_t>(v->type().rank()), dim = ctx.integer("dim");
    if (dim < 0 || dim >= rank)
      ctx.unsupported("weight_norm over dim " + std::to_string(dim) + " of a rank-" +
                      std::to_string(rank) + " tensor");
    std::vector<int64_t> others;
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim) others.push_back(d);
    Value* squares = ctx.add("sum", {ctx.add("mul", {v, v})},
                             {{"dim", others}, {"keepdim", true}});
    Value* norm = ctx.add("sqrt", {squares});
    return {ctx.add("mul", {v, ctx.add("div", {ctx.tensor("g"), norm})}), norm};
  });
  // softmax whose rows of only -inf give 0 rather than NaN, as in PyTorch's decomposition: the
  // softmax, then zeros where every element of the row is -inf.
  r.add("aten._safe_softmax.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    if (ctx.has("dtype")) x = ctx.cast(x, *ctx.dtype("dtype"));
    const int64_t dim = ctx.integer("dim");
    Value* y = ctx.add("softmax", {x}, {{"axis", dim}});
    const DType dtype = x->type().dtype;
    Value* masked = ctx.add("eq", {x, ctx.scalar(-std::numeric_limits<double>::infinity(), dtype)});
    Value* masked_rows =
        ctx.add("all", {masked}, {{"dim", std::vector<int64_t>{dim}}, {"keepdim", true}});
    return {ctx.add("where", {masked_rows, ctx.scalar(0.0, y->type().dtype), y})};
  });
}

}  // namespace kiln
