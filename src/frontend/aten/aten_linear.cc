// Matrix products → Kiln's matmul (+ add for a bias).
#include "frontend/converter.h"

namespace kiln {

namespace {

std::vector<Value*> matmul(ConvertContext& ctx) {
  return {ctx.add("matmul", {ctx.tensor("self"), ctx.tensor("mat2")})};
}

void require_unit(ConvertContext& ctx, const char* arg) {
  if (ctx.has(arg) && ctx.number(arg) != 1.0)
    ctx.unsupported(std::string(arg) + " = " + std::to_string(ctx.number(arg)) +
                    " (only 1 is supported)");
}

// addmm / baddbmm: beta * input + alpha * (a @ b), with beta = alpha = 1.
Converter bias_matmul(const char* a, const char* b) {
  return [a, b](ConvertContext& ctx) -> std::vector<Value*> {
    require_unit(ctx, "beta");
    require_unit(ctx, "alpha");
    Value* product = ctx.add("matmul", {ctx.tensor(a), ctx.tensor(b)});
    return {ctx.add("add", {product, ctx.tensor("self")})};
  };
}

}  // namespace

void register_aten_linear_converters(ConverterRegistry& r) {
  r.add("aten.mm.default", matmul);
  r.add("aten.bmm.default", matmul);
  r.add("aten.addmm.default", bias_matmul("mat1", "mat2"));
  r.add("aten.baddbmm.default", bias_matmul("batch1", "batch2"));
  r.add("aten.linear.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* y = ctx.add("matmul", {ctx.tensor("input"), ctx.tensor("weight")},
                       {{"transpose_b", true}});
    if (Value* bias = ctx.optional_tensor("bias")) y = ctx.add("add", {y, bias});
    return {y};
  });
}

}  // namespace kiln
