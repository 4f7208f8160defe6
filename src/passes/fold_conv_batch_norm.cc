// Conv+BatchNorm folding: an inference batch_norm after a convolution with constant weights
// becomes part of the weights and the bias (scale = gamma / sqrt(var + eps)):
//   %y = conv2d(%x, %w [, %b]) ; %z = batch_norm(%y, %gamma, %beta, %mean, %var)
//     →  %z = conv2d(%x, %w' , %b')
//   with w'[o, ...] = w[o, ...] * scale[o] and b'[o] = (b[o] - mean[o]) * scale[o] + beta[o]
//   (b = 0 without a bias). Only a convolution with no epilogue yet, whose output nothing else
//   reads and which is not a graph output.
#include <cmath>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

Pattern batch_norm_of(Pattern conv) {
  return op("batch_norm", {std::move(conv).single_use().as("y"), constant("gamma"),
                           constant("beta"), constant("mean"), constant("var")});
}

// Folds in double and rounds each new constant once.
template <typename T>
std::vector<Value*> fold(Graph& g, const Match& m) {
  Node* conv = m.node("y");
  const Tensor& w = m["w"]->constant();
  const int64_t out_channels = w.sizes()[0];
  const int64_t per_channel = out_channels == 0 ? 0 : w.numel() / out_channels;
  auto param = [&](const char* name, int64_t c) {
    return static_cast<double>(m[name]->constant().data<T>()[c]);
  };
  const double eps = m.root->attr_float("eps");
  Tensor new_w = Tensor::empty(w.dtype(), w.sizes());
  Tensor new_b = Tensor::empty(w.dtype(), {out_channels});
  for (int64_t o = 0; o < out_channels; ++o) {
    const double scale = param("gamma", o) / std::sqrt(param("var", o) + eps);
    const double bias = m.has("b") ? param("b", o) : 0.0;
    new_b.data<T>()[o] = static_cast<T>((bias - param("mean", o)) * scale + param("beta", o));
    for (int64_t i = o * per_channel; i < (o + 1) * per_channel; ++i)
      new_w.data<T>()[i] = static_cast<T>(static_cast<double>(w.data<T>()[i]) * scale);
  }
  Value* weights = g.add_constant(m["w"]->name() + "_bn", new_w);
  Value* bias = g.add_constant(m.root->name() + "_bias", new_b);
  return {g.add("conv2d", {m["x"], weights, bias}, conv->attrs(), m.root->name())};
}

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  Node* conv = m.node("y");
  const TensorType& y = conv->output()->type();
  // The epilogue would run before the normalization, so only a bare convolution folds.
  if (conv->attr_string("fused_activation") != "none" || conv->attr_bool("residual") ||
      !std::isinf(conv->attr_float("clamp_min")) || !std::isinf(conv->attr_float("clamp_max")) ||
      !y.shape[1].is_static() || m.root->output()->type() != y)
    return {};
  for (const char* param : {"gamma", "beta", "mean", "var"}) {
    const TensorType& t = m[param]->type();
    if (t.dtype != y.dtype || t.shape != Shape{y.shape[1]}) return {};
  }
  if (y.dtype == DType::F64) return fold<double>(g, m);
  return fold<float>(g, m);
}

}  // namespace

std::unique_ptr<Pass> make_fold_conv_batch_norm() {
  return std::make_unique<PatternRewritePass>(
      "fold_conv_batch_norm",
      std::vector<RewriteRule>{
          {"conv_bias_batch_norm",
           batch_norm_of(op("conv2d", {any("x"), constant("w"), constant("b")})), rewrite},
          {"conv_batch_norm", batch_norm_of(op("conv2d", {any("x"), constant("w")})), rewrite}});
}

}  // namespace kiln
