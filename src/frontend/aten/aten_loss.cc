// The loss functions, as Kiln's elementwise ops and reductions, each in PyTorch's order of
// operations (a model run with labels computes its loss in the forward: Hugging Face's models
// call cross_entropy there): mse_loss, smooth_l1_loss, huber_loss, soft_margin_loss,
// binary_cross_entropy (with its input check), binary_cross_entropy_with_logits, and
// nll_loss_forward / nll_loss2d_forward (cross_entropy after log_softmax).
#include "frontend/aten/compositions.h"
#include "frontend/converter.h"

namespace kiln {

namespace {

// PyTorch's reduction argument: 0 none, 1 mean (the default), 2 sum, over every element.
int64_t reduction_of(ConvertContext& ctx) {
  const int64_t reduction = ctx.has("reduction") ? ctx.integer("reduction") : 1;
  if (reduction < 0 || reduction > 2)
    ctx.unsupported("reduction " + std::to_string(reduction) + " (PyTorch's are 0, 1 and 2)");
  return reduction;
}

Value* reduced(ConvertContext& ctx, Value* losses) {
  const int64_t reduction = reduction_of(ctx);
  if (reduction == 0) return losses;
  return ctx.add(reduction == 1 ? "mean" : "sum", {losses}, {{"dim", std::vector<int64_t>{}}});
}

Value* scalar_like(ConvertContext& ctx, double value, const Value* like) {
  return ctx.scalar(value, like->type().dtype);
}

// |self - target|.
Value* distance(ConvertContext& ctx) {
  return ctx.add("abs", {ctx.add("sub", {ctx.tensor("self"), ctx.tensor("target")})});
}

// nll_loss_forward (self [N, C] or [C], target [N] or []) and nll_loss2d_forward (self
// [N, C, H, W], target [N, H, W]): each position's loss is -weight[t]·self[.., t, ..] along the
// class dim (1, or 0 without a batch), 0 where t is ignore_index; the result is those (none),
// their sum, or their sum over total_weight, the sum of weight[t] over the counted positions
// (mean: NaN when none is counted, as PyTorch). A target outside [0, C) fails at run time
// (E40002, the gather's index check).
std::vector<Value*> nll_loss(ConvertContext& ctx) {
  Value* x = ctx.tensor("self");
  Value* target = ctx.tensor("target");
  Value* weight = ctx.optional_tensor("weight");
  const DType index_dtype = target->type().dtype;
  const int64_t class_dim = x->type().rank() == 1 ? 0 : 1;
  const int64_t reduction = reduction_of(ctx);

  Value* counted = ctx.add("ne", {target, ctx.scalar(static_cast<double>(ctx.integer("ignore_index")),
                                                     index_dtype)});
  // An ignored position reads class 0, whatever ignore_index is (it may lie outside [0, C)).
  Value* safe = ctx.add("where", {counted, target, ctx.scalar(0, index_dtype)});
  Value* picked = ctx.add(
      "squeeze",
      {ctx.add("gather", {x, ctx.add("unsqueeze", {safe}, {{"dim", class_dim}})}, {{"dim", class_dim}})},
      {{"dim", std::vector<int64_t>{class_dim}}});
  // weight[t]: rows of weight as [C, 1] looked up by the targets, the last dim dropped.
  Value* target_weight =
      weight ? ctx.add("squeeze",
                       {ctx.add("embedding", {ctx.add("unsqueeze", {weight}, {{"dim", int64_t{1}}}), safe})},
                       {{"dim", std::vector<int64_t>{-1}}})
             : nullptr;
  Value* zero = scalar_like(ctx, 0, x);
  Value* losses = ctx.add(
      "where",
      {counted, ctx.add("neg", {target_weight ? ctx.add("mul", {picked, target_weight}) : picked}),
       zero});
  Value* total_weight = nullptr;
  if (reduction == 1 || (reduction == 2 && ctx.output_used(1))) {
    total_weight = ctx.add(
        "sum", {ctx.add("where", {counted, target_weight ? target_weight : scalar_like(ctx, 1, x), zero})},
        {{"dim", std::vector<int64_t>{}}});
  } else if (ctx.output_used(1)) {
    total_weight = ctx.add("zeros", {}, {{"size", std::vector<int64_t>{}},
                                          {"dtype", std::string(dtype_name(x->type().dtype))}});
  }
  if (reduction == 0) return {losses, total_weight};
  Value* sum = ctx.add("sum", {losses}, {{"dim", std::vector<int64_t>{}}});
  return {reduction == 2 ? sum : ctx.add("div", {sum, total_weight}), total_weight};
}

}  // namespace

void register_aten_loss_converters(ConverterRegistry& r) {
  // (self - target)²; DAC's quantizers compute their commitment loss in every forward.
  r.add("aten.mse_loss.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* difference = ctx.add("sub", {ctx.tensor("self"), ctx.tensor("target")});
    return {reduced(ctx, ctx.add("mul", {difference, difference}))};
  });
  // z = |self - target|: z < beta ? 0.5·z·z / beta : z - 0.5·beta (z itself for beta 0).
  r.add("aten.smooth_l1_loss.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* z = distance(ctx);
    const double beta = ctx.has("beta") ? ctx.number("beta") : 1.0;
    if (beta == 0) return {reduced(ctx, z)};
    Value* quadratic = ctx.add("div", {ctx.add("mul", {ctx.add("mul", {z, scalar_like(ctx, 0.5, z)}), z}),
                                       scalar_like(ctx, beta, z)});
    Value* linear = ctx.add("sub", {z, scalar_like(ctx, 0.5 * beta, z)});
    return {reduced(ctx, ctx.add("where", {ctx.add("lt", {z, scalar_like(ctx, beta, z)}), quadratic,
                                           linear}))};
  });
  // z = |self - target|: z < delta ? 0.5·z·z : delta·(z - 0.5·delta).
  r.add("aten.huber_loss.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* z = distance(ctx);
    const double delta = ctx.has("delta") ? ctx.number("delta") : 1.0;
    Value* quadratic = ctx.add("mul", {ctx.add("mul", {z, scalar_like(ctx, 0.5, z)}), z});
    Value* linear = ctx.add("mul", {scalar_like(ctx, delta, z),
                                    ctx.add("sub", {z, scalar_like(ctx, 0.5 * delta, z)})});
    return {reduced(ctx, ctx.add("where", {ctx.add("lt", {z, scalar_like(ctx, delta, z)}), quadratic,
                                           linear}))};
  });
  // log1p(exp(-self·target)).
  r.add("aten.soft_margin_loss.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* margin = ctx.add("mul", {ctx.add("neg", {ctx.tensor("self")}), ctx.tensor("target")});
    return {reduced(ctx, ctx.add("log1p", {ctx.add("exp", {margin})}))};
  });
  // (t - 1)·max(log1p(-x), -100) - t·max(log(x), -100), times weight; an x outside [0, 1] (or
  // NaN) fails at run time with PyTorch's message, as in eager.
  r.add("aten.binary_cross_entropy.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    Value* t = ctx.tensor("target");
    Value* floor = scalar_like(ctx, -100, x);
    Value* in_range = ctx.add("logical_and", {ctx.add("ge", {x, scalar_like(ctx, 0, x)}),
                                              ctx.add("le", {x, scalar_like(ctx, 1, x)})});
    ctx.add("assert", {ctx.add("all", {in_range}, {{"dim", std::vector<int64_t>{}}})},
            {{"message", std::string("all elements of input should be between 0 and 1")}});
    Value* log_x = ctx.add("maximum", {ctx.add("log", {x}), floor});
    Value* log_rest = ctx.add("maximum", {ctx.add("log1p", {ctx.add("neg", {x})}), floor});
    Value* losses = ctx.add("sub", {ctx.add("mul", {ctx.add("sub", {t, scalar_like(ctx, 1, t)}), log_rest}),
                                    ctx.add("mul", {t, log_x})});
    if (Value* weight = ctx.optional_tensor("weight")) losses = ctx.add("mul", {losses, weight});
    return {reduced(ctx, losses)};
  });
  // (1 - t)·x - w_pos·log_sigmoid(x), w_pos = (pos_weight - 1)·t + 1 (1 without pos_weight),
  // times weight.
  r.add("aten.binary_cross_entropy_with_logits.default",
        [](ConvertContext& ctx) -> std::vector<Value*> {
          Value* x = ctx.tensor("self");
          Value* t = ctx.tensor("target");
          Value* log_sigmoid_x = log_sigmoid(ctx, x);
          if (Value* pos_weight = ctx.optional_tensor("pos_weight")) {
            Value* w_pos = ctx.add("add", {ctx.add("mul", {ctx.add("sub", {pos_weight, scalar_like(ctx, 1, x)}), t}),
                                           scalar_like(ctx, 1, x)});
            log_sigmoid_x = ctx.add("mul", {w_pos, log_sigmoid_x});
          }
          Value* losses = ctx.add(
              "sub", {ctx.add("mul", {ctx.add("sub", {scalar_like(ctx, 1, t), t}), x}), log_sigmoid_x});
          if (Value* weight = ctx.optional_tensor("weight")) losses = ctx.add("mul", {losses, weight});
          return {reduced(ctx, losses)};
        });
  r.add("aten.nll_loss_forward.default", nll_loss);
  r.add("aten.nll_loss2d_forward.default", nll_loss);
}

}  // namespace kiln
