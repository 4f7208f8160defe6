// Normalizations and softmax.
#include <limits>
#include <optional>

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

// x's mean and biased variance over `dims` (kept as size 1) and rstd = 1 / sqrt(var + eps), in
// f32 for f16 or bf16 x (PyTorch's kernels compute them so and round each result once).
struct Statistics {
  Value* mean;
  Value* var;
  Value* rstd;
};
Statistics statistics_of(ConvertContext& ctx, Value* x, const std::vector<int64_t>& dims) {
  const DType dtype = is_floating(x->type().dtype) && dtype_size(x->type().dtype) < 4
                          ? DType::F32 : x->type().dtype;
  x = ctx.cast(x, dtype);
  AttrMap over{{"dim", dims}, {"keepdim", true}};
  Value* mean = ctx.add("mean", {x}, over);
  over["correction"] = 0.0;
  Value* var = ctx.add("var", {x}, over);
  Value* rstd = ctx.add("rsqrt", {ctx.add("add", {var, ctx.scalar(ctx.number("eps"), dtype)})});
  return {mean, var, rstd};
}

// Outputs 1 and 2 (mean, rstd) from the statistics: reshaped to `shape` (empty: as they are)
// and cast to the dtypes PyTorch gives them.
std::vector<Value*> mean_and_rstd_outputs(ConvertContext& ctx, const Statistics& stats,
                                          const std::vector<int64_t>& shape = {}) {
  std::vector<Value*> outs;
  for (auto [value, i] : {std::pair{stats.mean, size_t{1}}, std::pair{stats.rstd, size_t{2}}}) {
    if (!shape.empty()) value = ctx.add("reshape", {value}, {{"shape", shape}});
    outs.push_back(ctx.cast(value, ctx.output_dtype(i)));
  }
  return outs;
}

// Batch norm with the batch's statistics: each channel (dim 1) of x normalized over the batch
// and the spatial dims, then scaled and shifted by the affine inputs. With a batch of 1 (as
// InstanceNorm runs it, on x reshaped to [1, N·C, ...]) that is group norm with a group a
// channel, whose kernel computes in double; otherwise the statistics and the arithmetic.
// Returns y, and the statistics where computed or `need_statistics`.
std::pair<Value*, std::optional<Statistics>> batch_statistics_norm(ConvertContext& ctx,
                                                                  bool need_statistics) {
  if (!ctx.boolean("training"))
    ctx.unsupported("batch norm on the batch's statistics, not training");
  std::vector<Value*> inputs = affine_inputs(ctx);
  Value* x = inputs[0];
  const Shape& shape = x->type().shape;
  if (shape.size() < 2 || !shape[1].is_static())
    ctx.unsupported("batch statistics of x without a static channel dim 1");
  std::vector<int64_t> reduced{0};
  for (int64_t d = 2; d < static_cast<int64_t>(shape.size()); ++d) reduced.push_back(d);
  std::optional<Statistics> stats;
  Value* y = nullptr;
  if (shape[0].is_static() && shape[0].size() == 1) {
    y = ctx.add("group_norm", inputs,
                {{"num_groups", shape[1].size()}, {"eps", ctx.number("eps")}});
  } else {
    const DType dtype = x->type().dtype;
    if (dtype != DType::F32 && dtype != DType::F64)
      ctx.unsupported("batch statistics of " + std::string(dtype_name(dtype)) +
                      " over a batch of more than 1");
    stats = statistics_of(ctx, x, reduced);
    y = ctx.add("mul", {ctx.add("sub", {x, stats->mean}), stats->rstd});
    std::vector<int64_t> per_channel(shape.size(), 1);
    per_channel[1] = shape[1].size();
    for (size_t i = 1; i < inputs.size(); ++i) {
      Value* affine = ctx.add("reshape", {inputs[i]}, {{"shape", per_channel}});
      y = ctx.add(i == 1 ? "mul" : "add", {y, affine});
    }
  }
  if (need_statistics && !stats) stats = statistics_of(ctx, x, reduced);
  return {y, stats};
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
    std::vector<Value*> outs =
        mean_and_rstd_outputs(ctx, statistics_of(ctx, inputs[0], normalized));
    return {y, outs[0], outs[1]};
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
    std::vector<Value*> outs =
        mean_and_rstd_outputs(ctx, statistics_of(ctx, grouped, {2}), statistics);
    return {y, outs[0], outs[1]};
  });
  // Batch norm on the batch's statistics without running ones: InstanceNorm, and BatchNorm with
  // track_running_stats=False (which normalizes so in eval mode too).
  r.add("aten._native_batch_norm_legit.no_stats", [](ConvertContext& ctx) -> std::vector<Value*> {
    auto [y, stats] = batch_statistics_norm(ctx, statistics_read(ctx));
    if (!statistics_read(ctx)) return {y, nullptr, nullptr};
    const int64_t channels = ctx.tensor("input")->type().shape[1].size();
    std::vector<Value*> outs = mean_and_rstd_outputs(ctx, *stats, {channels});
    return {y, outs[0], outs[1]};
  });
  // The same in training mode with running statistics (a model called in train(), or
  // InstanceNorm with track_running_stats): also the updated running mean and variance,
  // (1 - momentum) · running + momentum · the batch's (its variance unbiased: · n / (n - 1)).
  r.add("aten._native_batch_norm_legit_functional.default",
        [](ConvertContext& ctx) -> std::vector<Value*> {
          auto [y, stats] = batch_statistics_norm(ctx, true);
          Value* x = ctx.tensor("input");
          const Shape& shape = x->type().shape;
          const int64_t channels = shape[1].size();
          int64_t count = 1;
          for (size_t d = 0; d < shape.size(); ++d) {
            if (d == 1) continue;
            if (!shape[d].is_static()) ctx.unsupported("running statistics over dynamic dims");
            count *= shape[d].size();
          }
          const double momentum = ctx.number("momentum");
          const std::vector<int64_t> per_channel{channels};
          auto updated = [&](const char* running, Value* batch, double scale) {
            Value* r = ctx.tensor(running);
            const DType dtype = stats->mean->type().dtype;
            Value* kept = ctx.add("mul", {ctx.cast(r, dtype), ctx.scalar(1 - momentum, dtype)});
            Value* drawn = ctx.add("mul", {ctx.add("reshape", {batch}, {{"shape", per_channel}}),
                                           ctx.scalar(momentum * scale, dtype)});
            return ctx.cast(ctx.add("add", {kept, drawn}), r->type().dtype);
          };
          std::vector<Value*> outs = mean_and_rstd_outputs(ctx, *stats, per_channel);
          return {y, outs[0], outs[1], updated("running_mean", stats->mean, 1.0),
                  updated("running_var", stats->var,
                          static_cast<double>(count) / static_cast<double>(count - 1))};
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
