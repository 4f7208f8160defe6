// Elementwise ATen ops → Kiln's elementwise family.
#include "frontend/converter.h"

namespace kiln {

namespace {

// The `other` operand: a tensor, or a Python number that becomes a rank-0 constant of the
// result's dtype (PyTorch's promotion: a number never widens a tensor's dtype category).
Value* operand(ConvertContext& ctx, const std::string& arg) {
  if (ctx.is_tensor(arg)) return ctx.tensor(arg);
  return ctx.scalar(ctx.number(arg), ctx.output_dtype());
}

// Kiln's binary ops take equal dtypes; PyTorch promotes. Until the cast op lands, mixed dtypes
// stay in PyTorch.
void require_output_dtype(ConvertContext& ctx, const std::vector<Value*>& operands) {
  for (Value* v : operands)
    if (v->type().dtype != ctx.output_dtype())
      ctx.unsupported("mixed dtypes (" + std::string(dtype_name(v->type().dtype)) + " into " +
                      std::string(dtype_name(ctx.output_dtype())) + ") need type promotion");
}

Converter binary(const std::string& op, bool has_alpha) {
  return [op, has_alpha](ConvertContext& ctx) -> std::vector<Value*> {
    Value* a = operand(ctx, "self");
    Value* b = operand(ctx, "other");
    require_output_dtype(ctx, {a, b});
    if (has_alpha && ctx.has("alpha") && ctx.number("alpha") != 1.0)
      b = ctx.add("mul", {b, ctx.scalar(ctx.number("alpha"), b->type().dtype)});
    return {ctx.add(op, {a, b})};
  };
}

Converter unary(const std::string& op) {
  return [op](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    require_output_dtype(ctx, {x});
    return {ctx.add(op, {x})};
  };
}

}  // namespace

void register_aten_elementwise_converters(ConverterRegistry& r) {
  for (const char* suffix : {"Tensor", "Scalar"}) {
    std::string s = suffix;
    r.add("aten.add." + s, binary("add", true));
    r.add("aten.sub." + s, binary("sub", true));
    r.add("aten.mul." + s, binary("mul", false));
  }
  for (const char* suffix : {"Tensor", "Scalar"})
    r.add(std::string("aten.div.") + suffix, binary("div", false));
  for (const char* op : {"relu", "neg", "sqrt", "rsqrt", "exp", "sigmoid", "tanh"})
    r.add(std::string("aten.") + op + ".default", unary(op));
  r.add("aten.gelu.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    require_output_dtype(ctx, {x});
    return {ctx.add("gelu", {x}, {{"approximate", ctx.string("approximate")}})};
  });
}

}  // namespace kiln
