// Normalizations and softmax.
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
}

}  // namespace kiln
