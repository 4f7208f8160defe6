// Matrix products → Kiln's matmul (+ add for a bias).
#include "frontend/converter.h"

namespace kiln {

namespace {

std::vector<Value*> matmul(ConvertContext& ctx) {
  return {ctx.add("matmul", {ctx.tensor("self"), ctx.tensor("mat2")})};
}

// addmm / baddbmm: beta * self + alpha * (a @ b). Like PyTorch, beta = 0 ignores self (its NaN
// and inf included).
Converter bias_matmul(const char* a, const char* b) {
  return [a, b](ConvertContext& ctx) -> std::vector<Value*> {
    const double alpha = ctx.has("alpha") ? ctx.number("alpha") : 1.0;
    const double beta = ctx.has("beta") ? ctx.number("beta") : 1.0;
    // PyTorch's GEMM skips the product when alpha = 0, so a NaN or inf in a or b doesn't reach
    // the result; alpha * (a @ b) would let it through.
    if (alpha == 0.0) ctx.unsupported("alpha = 0 (PyTorch skips the product; use beta * input)");
    Value* product = ctx.add("matmul", {ctx.tensor(a), ctx.tensor(b)});
    const DType dtype = product->type().dtype;
    if (alpha != 1.0) product = ctx.add("mul", {product, ctx.scalar(alpha, dtype)});
    if (beta == 0.0) return {product};
    Value* self = ctx.tensor("self");
    if (beta != 1.0) self = ctx.add("mul", {self, ctx.scalar(beta, dtype)});
    return {ctx.add("add", {product, self})};
  };
}

// A mixture-of-experts layer's expert products: input [S, K] sorted by expert, weight [E, K, N],
// offs [E] the cumulative rows of each expert (transformers' grouped_mm_fallback, and
// torch._grouped_mm's 2-D by 3-D form, which bf16 experts take under torch.compile).
std::vector<Value*> grouped_mm(ConvertContext& ctx, const char* input, const char* weight) {
  Value* a = ctx.tensor(input);
  Value* b = ctx.tensor(weight);
  if (a->type().rank() != 2 || b->type().rank() != 3)
    ctx.unsupported("only the 2-D input by 3-D weight form (one matrix per group of rows)");
  return {ctx.add("grouped_matmul", {a, b, ctx.tensor("offs")})};
}

}  // namespace

void register_aten_linear_converters(ConverterRegistry& r) {
  r.add("aten.mm.default", matmul);
  r.add("aten.bmm.default", matmul);
  // Kiln's matmul takes rank-1 operands as torch.matmul does: [M, K]·[K] and [K]·[K] (a 0-d result).
  r.add("aten.mv.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("matmul", {ctx.tensor("self"), ctx.tensor("vec")})};
  });
  r.add("aten.dot.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("matmul", {ctx.tensor("self"), ctx.tensor("tensor")})};
  });
  r.add("aten.addmm.default", bias_matmul("mat1", "mat2"));
  r.add("transformers.grouped_mm_fallback.default", [](ConvertContext& ctx) {
    return grouped_mm(ctx, "input", "weight");
  });
  r.add("aten._grouped_mm.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (!ctx.has("offs")) ctx.unsupported("no offs (the batched form)");
    if (ctx.has("bias")) ctx.unsupported("a bias");
    if (ctx.dtype("out_dtype") && *ctx.dtype("out_dtype") != ctx.tensor("self")->type().dtype)
      ctx.unsupported("an out_dtype other than the input's");
    return grouped_mm(ctx, "self", "mat2");
  });
  r.add("aten.baddbmm.default", bias_matmul("batch1", "batch2"));
  r.add("aten.linear.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* y = ctx.add("matmul", {ctx.tensor("input"), ctx.tensor("weight")},
                       {{"transpose_b", true}});
    if (Value* bias = ctx.optional_tensor("bias")) y = ctx.add("add", {y, bias});
    return {y};
  });
}

}  // namespace kiln
