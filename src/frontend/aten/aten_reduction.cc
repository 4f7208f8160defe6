// Reductions → Kiln's reduction family.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "frontend/converter.h"
#include "ops/type_promotion.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// The dims argument `arg`: a list, or one int (the .dim and .dim_int overloads); none (None,
// or an overload without it) is every dim.
std::vector<int64_t> reduced_dims(ConvertContext& ctx, const char* arg) {
  if (!ctx.has(arg)) return {};
  try {
    return ctx.integers(arg);
  } catch (const Error&) {
    return {ctx.integer(arg)};
  }
}

// sum/mean over `dim` (None or [] = every dim; the .default overloads, which have neither dim
// nor keepdim, reduce every dim); a dtype argument is a cast of the input, as in PyTorch.
Converter reduce_dims(const std::string& op, const char* dims_arg) {
  return [op, dims_arg](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    if (ctx.has("dtype")) x = ctx.cast(x, *ctx.dtype("dtype"));
    std::vector<int64_t> dims = reduced_dims(ctx, dims_arg);
    const bool keepdim = ctx.has("keepdim") && ctx.boolean("keepdim");
    return {ctx.add(op, {x}, {{"dim", dims}, {"keepdim", keepdim}})};
  };
}

// var/std: correction (None = 1) and keepdim.
Converter spread(const std::string& op) {
  return [op](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<int64_t> dims = ctx.has("dim") ? ctx.integers("dim") : std::vector<int64_t>{};
    double correction = ctx.has("correction") ? ctx.number("correction") : 1.0;
    return {ctx.add(op, {ctx.tensor("self")},
                    {{"dim", dims}, {"keepdim", ctx.boolean("keepdim")},
                     {"correction", correction}})};
  };
}

// The vector norm of order `ord` of float x over `over`'s dims: the reductions of |x| the order
// names, the sum of |x|^ord to the power 1/ord otherwise, as PyTorch defines them.
Value* norm_of(ConvertContext& ctx, Value* x, double ord, const AttrMap& over) {
  const DType dtype = x->type().dtype;
  if (ord == 0) return ctx.cast(ctx.add("sum", {ctx.add("ne", {x, ctx.scalar(0, dtype)})}, over),
                                dtype);
  if (ord == 2) return ctx.add("sqrt", {ctx.add("sum", {ctx.add("mul", {x, x})}, over)});
  Value* magnitude = ctx.add("abs", {x});
  if (std::isinf(ord)) return ctx.add(ord > 0 ? "amax" : "amin", {magnitude}, over);
  if (ord == 1) return ctx.add("sum", {magnitude}, over);
  Value* powers = ctx.add("pow", {magnitude, ctx.scalar(ord, dtype)});
  return ctx.add("pow", {ctx.add("sum", {powers}, over), ctx.scalar(1 / ord, dtype)});
}

// linalg.vector_norm(x, ord, dim, keepdim, dtype) (torch.norm, F.normalize), and the older
// norm(x, p, dim, keepdim, dtype) (F.pairwise_distance) whose order is `ord_arg` "p".
std::vector<Value*> vector_norm(ConvertContext& ctx, const char* ord_arg) {
  Value* x = ctx.tensor("self");
  if (ctx.has("dtype")) x = ctx.cast(x, *ctx.dtype("dtype"));
  if (!is_floating(x->type().dtype)) ctx.unsupported("vector_norm of a non-float tensor");
  return {norm_of(ctx, x, ctx.has(ord_arg) ? ctx.number(ord_arg) : 2.0,
                  {{"dim", reduced_dims(ctx, "dim")},
                   {"keepdim", ctx.has("keepdim") && ctx.boolean("keepdim")}})};
}

// The order statistics: x sorted along dim (NaN last, as sort does; ties by lower index), then
// the element at each slice's rank: k - 1 (kthvalue; beyond the slice, the gather's run-time
// E40002, where PyTorch raises); (n - 1) / 2, or n - 1 (a NaN) where the slice holds a NaN
// (median); (c - 1) / 2 of the slice's c numbers, or 0 (a NaN) for none (nanmedian). `whole`:
// over every element (median(x), nanmedian(x): no indices). The index is that element's: among
// equal elements PyTorch promises only that x[index] is the value (its own choice varies).
enum class OrderStatistic { Kth, Median, NanMedian };
std::vector<Value*> order_statistic(ConvertContext& ctx, OrderStatistic which, bool whole) {
  Value* x = ctx.tensor("self");
  const size_t rank = x->type().rank();
  const bool flatten = whole || rank == 0;
  if (flatten) x = ctx.add("reshape", {x}, {{"shape", std::vector<int64_t>{-1}}});
  const int64_t dim = flatten ? 0 : ctx.dim("dim", rank);
  const bool keepdim = !flatten && ctx.has("keepdim") && ctx.boolean("keepdim");
  const DType dtype = x->type().dtype;
  const bool floating = is_floating(dtype);
  const std::vector<Value*> sorted = ctx.graph().add_node(
      "topk", {x}, {{"k", int64_t{-1}}, {"dim", dim}, {"largest", false}, {"sorted", true}},
      ctx.node_name() + "_sorted");
  // Per slice, with the dim kept: how many of its elements are `counted` (every one, or the
  // numbers), and integer arithmetic on such counts.
  const AttrMap slices{{"dim", std::vector<int64_t>{dim}}, {"keepdim", true}};
  auto count = [&](Value* counted) { return ctx.add("sum", {counted}, slices); };
  auto i64 = [&](double v) { return ctx.scalar(v, DType::I64); };
  auto half = [&](Value* c) {  // (c - 1) / 2, floored, at least 0
    return ctx.add("maximum", {ctx.add("div", {ctx.add("sub", {c, i64(1)}), i64(2)},
                                       {{"rounding_mode", std::string("floor")}}),
                               i64(0)});
  };
  Value* all = count(ctx.add("ones_like", {x}, {{"dtype", std::string("i64")}}));
  Value* ranks = nullptr;
  if (which == OrderStatistic::Kth) {
    ranks = ctx.add("full_like", {all}, {{"fill_value", static_cast<double>(ctx.integer("k") - 1)},
                                         {"dtype", std::string("i64")}});
  } else if (which == OrderStatistic::Median || !floating) {
    ranks = half(all);
    if (floating)
      ranks = ctx.add("where", {ctx.add("any", {ctx.add("isnan", {x})}, slices),
                                ctx.add("sub", {all, i64(1)}), ranks});
  } else {
    ranks = half(count(ctx.add("logical_not", {ctx.add("isnan", {x})})));
  }
  std::vector<Value*> y;
  for (Value* v : sorted) {
    Value* picked = ctx.add("gather", {v, ranks}, {{"dim", dim}});
    if (flatten)
      picked = ctx.add("reshape", {picked}, {{"shape", std::vector<int64_t>{}}});
    else if (!keepdim)
      picked = ctx.add("squeeze", {picked}, {{"dim", std::vector<int64_t>{dim}}});
    y.push_back(picked);
  }
  if (whole) y.resize(1);
  return y;
}

}  // namespace

void register_aten_reduction_converters(ConverterRegistry& r) {
  r.add("aten.kthvalue.default",
        [](ConvertContext& ctx) { return order_statistic(ctx, OrderStatistic::Kth, false); });
  r.add("aten.median.dim",
        [](ConvertContext& ctx) { return order_statistic(ctx, OrderStatistic::Median, false); });
  r.add("aten.nanmedian.dim",
        [](ConvertContext& ctx) { return order_statistic(ctx, OrderStatistic::NanMedian, false); });
  r.add("aten.median.default",
        [](ConvertContext& ctx) { return order_statistic(ctx, OrderStatistic::Median, true); });
  r.add("aten.nanmedian.default",
        [](ConvertContext& ctx) { return order_statistic(ctx, OrderStatistic::NanMedian, true); });
  r.add("aten.linalg_vector_norm.default",
        [](ConvertContext& ctx) { return vector_norm(ctx, "ord"); });
  for (const char* overload : {".Scalar", ".ScalarOpt_dim", ".ScalarOpt_dim_dtype", ".ScalarOpt_dtype"})
    r.add(std::string("aten.norm") + overload,
          [](ConvertContext& ctx) { return vector_norm(ctx, "p"); });
  // dist(x, y, p): the p-norm of x - y over every element.
  r.add("aten.dist.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* difference = ctx.add("sub", {ctx.tensor("self"), ctx.tensor("other")});
    if (!is_floating(difference->type().dtype)) ctx.unsupported("dist of non-float tensors");
    return {norm_of(ctx, difference, ctx.has("p") ? ctx.number("p") : 2.0,
                    {{"dim", std::vector<int64_t>{}}, {"keepdim", false}})};
  });
  // var_mean and std_mean: the two reductions, each as var, std and mean compute it.
  for (const char* op : {"var", "std"})
    r.add("aten." + std::string(op) + "_mean.correction",
          [spread = spread(op)](ConvertContext& ctx) -> std::vector<Value*> {
            std::vector<Value*> out = spread(ctx);
            const std::vector<int64_t> dims =
                ctx.has("dim") ? ctx.integers("dim") : std::vector<int64_t>{};
            out.push_back(ctx.add("mean", {ctx.tensor("self")},
                                  {{"dim", dims}, {"keepdim", ctx.boolean("keepdim")}}));
            return out;
          });
  // nansum: the sum with NaNs as 0; count_nonzero: the sum of x != 0, an i64.
  r.add("aten.nansum.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    if (ctx.has("dtype")) x = ctx.cast(x, *ctx.dtype("dtype"));
    if (is_floating(x->type().dtype))
      x = ctx.add("where", {ctx.add("isnan", {x}), ctx.scalar(0, x->type().dtype), x});
    return {ctx.add("sum", {x}, {{"dim", reduced_dims(ctx, "dim")},
                                 {"keepdim", ctx.has("keepdim") && ctx.boolean("keepdim")}})};
  });
  for (const char* overload : {".default", ".dim_IntList"})
    r.add(std::string("aten.count_nonzero") + overload,
          [](ConvertContext& ctx) -> std::vector<Value*> {
            Value* x = ctx.tensor("self");
            Value* nonzero = ctx.add("ne", {x, ctx.scalar(0, x->type().dtype)});
            return {ctx.cast(ctx.add("sum", {nonzero}, {{"dim", reduced_dims(ctx, "dim")}}),
                             DType::I64)};
          });
  r.add("aten.sum.dim_IntList", reduce_dims("sum", "dim"));
  r.add("aten.mean.dim", reduce_dims("mean", "dim"));
  r.add("aten.amax.default", reduce_dims("amax", "dim"));
  r.add("aten.amin.default", reduce_dims("amin", "dim"));
  r.add("aten.logsumexp.default", reduce_dims("logsumexp", "dim"));
  // aminmax(x, dim, keepdim): (amin, amax) over one dim, or over every dim without one.
  r.add("aten.aminmax.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<int64_t> dims;
    if (ctx.has("dim")) dims.push_back(ctx.integer("dim"));
    AttrMap attrs{{"dim", dims}, {"keepdim", ctx.boolean("keepdim")}};
    Value* x = ctx.tensor("self");
    return {ctx.add("amin", {x}, attrs), ctx.add("amax", {x}, attrs)};
  });

  r.add("aten.sum.default", reduce_dims("sum", "dim"));
  r.add("aten.mean.default", reduce_dims("mean", "dim"));
  for (const char* overload : {".default", ".dim_int"})
    r.add(std::string("aten.prod") + overload, reduce_dims("prod", "dim"));
  for (const char* op : {"any", "all"})
    for (const char* overload : {".default", ".dim", ".dims"})
      r.add("aten." + std::string(op) + overload, reduce_dims(op, "dim"));
  // max(x) and min(x): the extreme of every element.
  r.add("aten.max.default", reduce_dims("max", "dim"));
  r.add("aten.min.default", reduce_dims("min", "dim"));
  // max(x, dim) and min(x, dim): (values, indices).
  for (const char* op : {"max", "min"})
    r.add("aten." + std::string(op) + ".dim", [op](ConvertContext& ctx) -> std::vector<Value*> {
      return ctx.graph().add_node(std::string(op) + "_dim", {ctx.tensor("self")},
                                  {{"dim", ctx.integer("dim")},
                                   {"keepdim", ctx.boolean("keepdim")}},
                                  ctx.node_name());
    });
  r.add("aten.var.correction", spread("var"));
  r.add("aten.std.correction", spread("std"));
  for (const char* op : {"argmax", "argmin"})
    r.add(std::string("aten.") + op + ".default", [op](ConvertContext& ctx) -> std::vector<Value*> {
      std::vector<int64_t> dims;
      if (ctx.has("dim")) dims.push_back(ctx.integer("dim"));
      return {ctx.add(op, {ctx.tensor("self")}, {{"dim", dims}, {"keepdim", ctx.boolean("keepdim")}})};
    });
  r.add("aten._log_softmax.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (ctx.boolean("half_to_float")) ctx.unsupported("half_to_float");
    return {ctx.add("log_softmax", {ctx.tensor("self")}, {{"dim", ctx.integer("dim")}})};
  });
  // cumsum(x, dtype=d) sums x cast to d, in d (cumprod multiplies). Kiln's folds give i64 for
  // any integer input; narrowing that back gives d's wrapped results, since two's-complement
  // truncation commutes with addition and multiplication.
  for (const char* op : {"cumsum", "cumprod"})
    r.add("aten." + std::string(op) + ".default", [op](ConvertContext& ctx) -> std::vector<Value*> {
      const std::optional<DType> dtype = ctx.dtype("dtype");
      Value* x = ctx.tensor("self");
      if (dtype) x = ctx.cast(x, *dtype);
      Value* y = ctx.add(op, {x}, {{"dim", ctx.integer("dim")}});
      return {dtype ? ctx.cast(y, *dtype) : y};
    });
  r.add("aten.logcumsumexp.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("logcumsumexp", {ctx.tensor("self")}, {{"dim", ctx.integer("dim")}})};
  });
  for (const char* op : {"cummax", "cummin"})
    r.add("aten." + std::string(op) + ".default", [op](ConvertContext& ctx) -> std::vector<Value*> {
      return ctx.graph().add_node(op, {ctx.tensor("self")}, {{"dim", ctx.integer("dim")}},
                                  ctx.node_name());
    });
  // sort(x, dim, descending): topk of every element along dim (k = -1, symbolic dims too),
  // sorted, ties by lower index (the stable order, which the unstable sort may also give), NaN
  // above every number as in sort.
  for (const char* overload : {".default", ".stable"})
    r.add(std::string("aten.sort") + overload, [](ConvertContext& ctx) -> std::vector<Value*> {
      Value* x = ctx.tensor("self");
      // A 0-d tensor's dims wrap as a 1-d one's, as in PyTorch.
      const int64_t dim = ctx.dim("dim", std::max<size_t>(x->type().rank(), 1));
      return ctx.graph().add_node("topk", {x},
                                  {{"k", int64_t{-1}}, {"dim", dim},
                                   {"largest", ctx.boolean("descending")}, {"sorted", true}},
                                  ctx.node_name());
    });
  r.add("aten.topk.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return ctx.graph().add_node("topk", {ctx.tensor("self")},
                                {{"k", ctx.integer("k")}, {"dim", ctx.integer("dim")},
                                 {"largest", ctx.boolean("largest")},
                                 {"sorted", ctx.boolean("sorted")}},
                                ctx.node_name());
  });
  // searchsorted and bucketize: both operands in torch.result_type of theirs, as PyTorch compares
  // them (a rank-0 f64 tensor of values doesn't widen an f32 line; a Python number searched, the
  // .Scalar overloads, is a wrapped number); a sorter orders the lines by gathering them first
  // (the index it gives is the same: the position in the sorted order).
  auto searchsorted = [](ConvertContext& ctx, const char* sorted_arg) -> std::vector<Value*> {
    Value* sorted = ctx.tensor(sorted_arg);
    const bool number = !ctx.is_tensor("self");
    Value* values = number ? ctx.number_tensor("self") : ctx.tensor("self");
    const PromotionOperand operands[] = {{sorted->type().dtype, sorted->type().rank()},
                                         {values->type().dtype, values->type().rank(), number}};
    const DType common = result_type(operands);
    sorted = ctx.cast(sorted, common);
    values = ctx.cast(values, common);
    if (Value* sorter = ctx.has("sorter") ? ctx.tensor("sorter") : nullptr)
      sorted = ctx.add("gather", {sorted, sorter},
                       {{"dim", static_cast<int64_t>(sorted->type().rank()) - 1}});
    bool right = ctx.boolean("right");
    if (ctx.has("side")) right = ctx.string("side") == "right";
    return {ctx.add("searchsorted", {sorted, values},
                    {{"right", right}, {"out_int32", ctx.boolean("out_int32")}})};
  };
  for (const char* overload : {".Tensor", ".Scalar"}) {
    r.add(std::string("aten.searchsorted") + overload,
          [searchsorted](ConvertContext& ctx) { return searchsorted(ctx, "sorted_sequence"); });
    r.add(std::string("aten.bucketize") + overload,
          [searchsorted](ConvertContext& ctx) { return searchsorted(ctx, "boundaries"); });
  }
  r.add("aten.histc.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("histc", {ctx.tensor("self")},
                    {{"bins", ctx.has("bins") ? ctx.integer("bins") : int64_t{100}},
                     {"min", ctx.has("min") ? ctx.number("min") : 0.0},
                     {"max", ctx.has("max") ? ctx.number("max") : 0.0}})};
  });
}

}  // namespace kiln
