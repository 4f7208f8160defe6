// Matrix products → Kiln's matmul (+ add for a bias); distances (cdist) through it.
#include <cmath>
#include <limits>

#include "frontend/converter.h"

namespace kiln {

namespace {

std::vector<Value*> matmul(ConvertContext& ctx) {
  return {ctx.add("matmul", {ctx.tensor("self"), ctx.tensor("mat2")})};
}

// beta * self + alpha * product(a, b) for addmm, baddbmm, addmv, addr and addbmm. Like
// PyTorch, beta = 0 ignores self (its NaN and inf included).
Converter bias_product(const char* a, const char* b,
                       Value* (*product_of)(ConvertContext&, Value*, Value*)) {
  return [a, b, product_of](ConvertContext& ctx) -> std::vector<Value*> {
    const double alpha = ctx.has("alpha") ? ctx.number("alpha") : 1.0;
    const double beta = ctx.has("beta") ? ctx.number("beta") : 1.0;
    // PyTorch's GEMM skips the product when alpha = 0, so a NaN or inf in a or b doesn't reach
    // the result; alpha * (a @ b) would let it through.
    if (alpha == 0.0) ctx.unsupported("alpha = 0 (PyTorch skips the product; use beta * input)");
    Value* product = product_of(ctx, ctx.tensor(a), ctx.tensor(b));
    const DType dtype = product->type().dtype;
    if (alpha != 1.0) product = ctx.add("mul", {product, ctx.scalar(alpha, dtype)});
    if (beta == 0.0) return {product};
    Value* self = ctx.tensor("self");
    if (beta != 1.0) self = ctx.add("mul", {self, ctx.scalar(beta, dtype)});
    return {ctx.add("add", {product, self})};
  };
}

Value* matrix_product(ConvertContext& ctx, Value* a, Value* b) {
  return ctx.add("matmul", {a, b});
}

// addr's outer product a[:, None] * b[None, :].
Value* outer_product(ConvertContext& ctx, Value* a, Value* b) {
  return ctx.add("mul", {ctx.add("unsqueeze", {a}, {{"dim", int64_t{1}}}),
                         ctx.add("unsqueeze", {b}, {{"dim", int64_t{0}}})});
}

// addbmm's sum over the batch of a[i] @ b[i], as one product with the batch joined into K:
// [n, B·m] @ [B·m, p], each element one dot product of B·m terms.
Value* batch_summed_product(ConvertContext& ctx, Value* a, Value* b) {
  const TensorType &ta = a->type(), &tb = b->type();
  if (ta.rank() != 3 || tb.rank() != 3 || !is_static(ta.shape) || !is_static(tb.shape))
    ctx.unsupported("addbmm of batches whose shapes aren't static and 3-D");
  const int64_t batch = ta.shape[0].size(), n = ta.shape[1].size(), m = ta.shape[2].size(),
                p = tb.shape[2].size();
  Value* rows = ctx.add("reshape", {ctx.add("permute", {a}, {{"dims", std::vector<int64_t>{1, 0, 2}}})},
                        {{"shape", std::vector<int64_t>{n, batch * m}}});
  Value* columns = ctx.add("reshape", {b}, {{"shape", std::vector<int64_t>{batch * m, p}}});
  return ctx.add("matmul", {rows, columns});
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

// PyTorch's _euclidean_dist: every row pair's distance as [-2·x1, |x1|², 1] @ [x2, 1, |x2|²]ᵀ,
// clamped at 0 and square-rooted (fast, but near-equal rows lose their distance to cancellation,
// in eager too).
Value* euclidean_dist(ConvertContext& ctx, Value* x1, Value* x2) {
  const DType dtype = x1->type().dtype;
  auto squares = [&](Value* x) {
    return ctx.add("sum", {ctx.add("mul", {x, x})},
                   {{"dim", std::vector<int64_t>{-1}}, {"keepdim", true}});
  };
  auto ones = [&](Value* norms) {
    return ctx.add("add", {ctx.add("mul", {norms, ctx.scalar(0, dtype)}), ctx.scalar(1, dtype)});
  };
  Value* n1 = squares(x1);
  Value* n2 = squares(x2);
  Value* a = ctx.add("concat", {ctx.add("mul", {x1, ctx.scalar(-2, dtype)}), n1, ones(n1)},
                     {{"dim", int64_t{-1}}});
  Value* b = ctx.add("concat", {x2, ones(n2), n2}, {{"dim", int64_t{-1}}});
  const int64_t rank = static_cast<int64_t>(x2->type().rank());
  std::vector<int64_t> swap(rank);
  for (int64_t d = 0; d < rank; ++d) swap[d] = d;
  std::swap(swap[rank - 1], swap[rank - 2]);
  Value* product = ctx.add("matmul", {a, ctx.add("permute", {b}, {{"dims", swap}})});
  Value* clamped = ctx.add(
      "clamp", {product}, {{"min", 0.0}, {"max", std::numeric_limits<double>::infinity()}});
  return ctx.add("sqrt", {clamped});
}

// _cdist_forward(x1 [..., R1, M], x2 [..., R2, M], p, compute_mode): as PyTorch's, the matrix
// product form for p = 2 with compute_mode 1, or 0 (the default) and more than 25 rows on a side;
// otherwise the rows' differences reduced over M: sqrt of the sum of squares (2), the sum of
// absolute values (1), their maximum (inf), the count of nonzeros (0), or (sum |d|^p)^(1/p).
std::vector<Value*> cdist(ConvertContext& ctx) {
  Value* x1 = ctx.tensor("x1");
  Value* x2 = ctx.tensor("x2");
  const double p = ctx.number("p");
  const int64_t mode = ctx.has("compute_mode") ? ctx.integer("compute_mode") : 0;
  const Shape& s1 = x1->type().shape;
  const Shape& s2 = x2->type().shape;
  if (s1.size() < 2 || s2.size() < 2) ctx.unsupported("cdist of tensors under 2 dims");
  const Dim r1 = s1[s1.size() - 2], r2 = s2[s2.size() - 2];
  const DType dtype = x1->type().dtype;
  const std::vector<int64_t> last{-1};
  if (p == 2 && mode == 0 && (!r1.is_static() || !r2.is_static()))
    ctx.unsupported("cdist over a dynamic count of rows (PyTorch picks its algorithm by it)");
  if (p == 2 && (mode == 1 || (mode == 0 && (r1.size() > 25 || r2.size() > 25))))
    return {euclidean_dist(ctx, x1, x2)};
  Value* difference = ctx.add("sub", {ctx.add("unsqueeze", {x1}, {{"dim", int64_t{-2}}}),
                                      ctx.add("unsqueeze", {x2}, {{"dim", int64_t{-3}}})});
  Value* magnitude = ctx.add("abs", {difference});
  if (p == 0)
    return {ctx.cast(ctx.add("sum", {ctx.add("ne", {magnitude, ctx.scalar(0, dtype)})},
                             {{"dim", last}}),
                     dtype)};
  if (p == 1) return {ctx.add("sum", {magnitude}, {{"dim", last}})};
  if (std::isinf(p)) return {ctx.add("amax", {magnitude}, {{"dim", last}})};
  if (p == 2)
    return {ctx.add("sqrt", {ctx.add("sum", {ctx.add("mul", {magnitude, magnitude})},
                                     {{"dim", last}})})};
  Value* powers = ctx.add("pow", {magnitude, ctx.scalar(p, DType::F64)},
                          {{"wrapped_numbers", std::vector<int64_t>{1}}});
  return {ctx.add("pow", {ctx.add("sum", {powers}, {{"dim", last}}), ctx.scalar(1 / p, DType::F64)},
                  {{"wrapped_numbers", std::vector<int64_t>{1}}})};
}

// linalg_cross(a, b, dim): the components along dim (size 3 in both, the other dims
// broadcasting) as a_j b_k - a_k b_j, concatenated. PyTorch's f32 and f64 kernel compiles to
// fma(a_j, b_k, -(a_k b_j)); its integer and 2-byte float kernels round each operation.
std::vector<Value*> linalg_cross(ConvertContext& ctx) {
  Value* a = ctx.tensor("self");
  Value* b = ctx.tensor("other");
  const int64_t rank = static_cast<int64_t>(a->type().rank());
  int64_t dim = ctx.has("dim") ? ctx.integer("dim") : -1;
  if (dim < 0) dim += rank;
  if (rank == 0 || dim < 0 || dim >= rank || b->type().rank() != a->type().rank())
    ctx.unsupported("linalg_cross over a dim outside its inputs' rank, or of inputs whose ranks "
                    "differ (PyTorch raises there)");
  for (Value* x : {a, b}) {
    const Dim size = x->type().shape[static_cast<size_t>(dim)];
    if (!size.is_static() || size.size() != 3)
      ctx.unsupported("linalg_cross over a dim whose size isn't 3 in both inputs");
  }
  auto part = [&](Value* x, int64_t k) {
    return ctx.add("slice", {x}, {{"dim", dim}, {"start", k}, {"end", k + 1},
                                  {"step", int64_t{1}}});
  };
  const DType dtype = a->type().dtype;
  const bool fused = dtype == DType::F32 || dtype == DType::F64;
  auto component = [&](int64_t j, int64_t k) {
    Value* product = ctx.add("mul", {part(a, k), part(b, j)});
    if (fused) return ctx.add("fma", {part(a, j), part(b, k), ctx.add("neg", {product})});
    return ctx.add("sub", {ctx.add("mul", {part(a, j), part(b, k)}), product});
  };
  return {ctx.add("concat", {component(1, 2), component(2, 0), component(0, 1)},
                  {{"dim", dim}})};
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
  r.add("aten.vdot.default", [](ConvertContext& ctx) -> std::vector<Value*> {  // real: dot
    return {ctx.add("matmul", {ctx.tensor("self"), ctx.tensor("other")})};
  });
  r.add("aten.addmm.default", bias_product("mat1", "mat2", matrix_product));
  r.add("aten.addmv.default", bias_product("mat", "vec", matrix_product));
  r.add("aten.addr.default", bias_product("vec1", "vec2", outer_product));
  r.add("aten.addbmm.default", bias_product("batch1", "batch2", batch_summed_product));
  r.add("aten._cdist_forward.default", cdist);
  r.add("aten.linalg_cross.default", linalg_cross);
  r.add("aten._euclidean_dist.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {euclidean_dist(ctx, ctx.tensor("x1"), ctx.tensor("x2"))};
  });
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
  r.add("aten.baddbmm.default", bias_product("batch1", "batch2", matrix_product));
  r.add("aten.linear.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* y = ctx.add("matmul", {ctx.tensor("input"), ctx.tensor("weight")},
                       {{"transpose_b", true}});
    if (Value* bias = ctx.optional_tensor("bias")) y = ctx.add("add", {y, bias});
    return {y};
  });
}

}  // namespace kiln
