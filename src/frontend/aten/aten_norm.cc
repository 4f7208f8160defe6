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
  if (bias && !weight) {
    // A weight of ones: the norm's result, then the bias.
    std::vector<int64_t> sizes;
    for (const Dim& d : bias->type().shape) {
      if (!d.is_static()) ctx.unsupported("a bias of dynamic shape without a weight");
      sizes.push_back(d.size());
    }
    weight = ctx.add("full", {}, {{"size", sizes}, {"fill_value", 1.0},
                                  {"dtype", std::string(dtype_name(bias->type().dtype))}});
  }
  if (weight) inputs.push_back(weight);
  if (bias) inputs.push_back(bias);
  return inputs;
}

// PyTorch's native norms return (out, mean, rstd); inference graphs read only out.
bool statistics_read(const ConvertContext& ctx) { return ctx.output_used(1) || ctx.output_used(2); }

// The statistics, for graphs that read them: the mean of x over `dims` and the reciprocal of its
// standard deviation (biased, eps added), both keeping the reduced dims, in outputs 1 and 2's
// dtypes.
std::pair<Value*, Value*> mean_and_rstd(ConvertContext& ctx, Value* x,
                                        const std::vector<int64_t>& dims) {
  // In f32 from f16 or bf16, each result rounded once, as PyTorch's kernels do.
  const DType dtype = is_floating(x->type().dtype) && dtype_size(x->type().dtype) < 4
                          ? DType::F32 : x->type().dtype;
  x = ctx.cast(x, dtype);
  AttrMap over{{"dim", dims}, {"keepdim", true}};
  Value* mean = ctx.add("mean", {x}, over);
  over["correction"] = 0.0;
  Value* var = ctx.add("var", {x}, over);
  Value* rstd = ctx.add("rsqrt", {ctx.add("add", {var, ctx.scalar(ctx.number("eps"), dtype)})});
  return {ctx.cast(mean, ctx.output_dtype(1)), ctx.cast(rstd, ctx.output_dtype(2))};
}

}  // namespace

void register_aten_norm_converters(ConverterRegistry& r) {
  r.add("aten.native_layer_norm.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<Value*> inputs = affine_inputs(ctx);
    const int64_t ndim = static_cast<int64_t>(ctx.integers("normalized_shape").size());
    Value* y = ctx.add("layer_norm", inputs,
                       {{"normalized_ndim", ndim}, {"eps", ctx.number("eps")}});
    if (!statistics_read(ctx)) return {y, nullptr, nullptr};
    const int64_t rank = static_cast<int64_t>(inputs[0]->type().rank());
    std::vector<int64_t> normalized;
    for (int64_t d = rank - ndim; d < rank; ++d) normalized.push_back(d);
    auto [mean, rstd] = mean_and_rstd(ctx, inputs[0], normalized);
    return {y, mean, rstd};
  });
  // The statistics are [N, group]: those of x seen as [N, group, everything else].
  r.add("aten.native_group_norm.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<Value*> inputs = affine_inputs(ctx);
    const int64_t groups = ctx.integer("group");
    Value* y = ctx.add("group_norm", inputs, {{"num_groups", groups}, {"eps", ctx.number("eps")}});
    if (!statistics_read(ctx)) return {y, nullptr, nullptr};
    const std::vector<int64_t> statistics{ctx.integer("N"), groups};
    const int64_t group_size = ctx.integer("C") / groups * ctx.integer("HxW");
    Value* grouped = ctx.add("reshape", {inputs[0]},
                             {{"shape", std::vector<int64_t>{statistics[0], groups, group_size}}});
    auto [mean, rstd] = mean_and_rstd(ctx, grouped, {2});
    return {y, ctx.add("reshape", {mean}, {{"shape", statistics}}),
            ctx.add("reshape", {rstd}, {{"shape", statistics}})};
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
