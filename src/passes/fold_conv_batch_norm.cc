// Conv+BatchNorm folding: an inference batch_norm after a convolution with constant weights
// becomes part of the weights and the bias (scale = gamma / sqrt(var + eps)):
//   %y = conv2d(%x, %w [, %b]) ; %z = batch_norm(%y, %gamma, %beta, %mean, %var)
//     →  %z = conv2d(%x, %w' , %b')
//   with w'[o, ...] = w[o, ...] * scale[o] and b'[o] = (b[o] - mean[o]) * scale[o] + beta[o]
//   (b = 0 without a bias). Only a convolution with no epilogue yet, whose output nothing else
//   reads and which is not a graph output.
// In a bf16 model, after fold_bf16_casts_into_conv, the normalization computes in f32 between
// casts, and the convolution of bf16 x and w (with or without a bias) rounds to bf16:
//   %y = conv2d(%x, %w) {dtype = bf16} ; %n = batch_norm(to(%y) {f32}, ...) ; %z = to(%n) {bf16}
//     →  %z = conv2d(%x, %w', %b') {dtype = bf16}
// with w' rounded to bf16 (through f32) and b' f32: the folding that Inductor's freezing and
// OpenVINO do to bf16 models. It rounds the product w·scale instead of the convolution's result
// before the normalization, and the normalization's result is rounded once, in the kernel;
// docs/ops.md ("Low-precision floats") has its error on ResNet-50 against eager's.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

Pattern batch_norm_of(Pattern x) {
  return op("batch_norm",
            {std::move(x), constant("gamma"), constant("beta"), constant("mean"), constant("var")});
}

// Folds in double and rounds each new constant once (bf16 weights through f32). W is the
// weights' type; the normalization's parameters and the new bias are f64 for f64 weights, else
// f32.
template <typename W>
std::vector<Value*> fold(Graph& g, const Match& m, AttrMap attrs) {
  using P = std::conditional_t<std::is_same_v<W, double>, double, float>;
  const Tensor& w = m["w"]->constant();
  const int64_t out_channels = w.sizes()[0];
  const int64_t per_channel = out_channels == 0 ? 0 : w.numel() / out_channels;
  auto param = [&](const char* name, int64_t c) {
    return static_cast<double>(m[name]->constant().data<P>()[c]);
  };
  const double eps = m.node("normalized")->attr_float("eps");
  Tensor new_w = Tensor::empty(w.dtype(), w.sizes());
  Tensor new_b = Tensor::empty(DTypeOf<P>::value, {out_channels});
  for (int64_t o = 0; o < out_channels; ++o) {
    const double scale = param("gamma", o) / std::sqrt(param("var", o) + eps);
    const double bias = m.has("b") ? param("b", o) : 0.0;
    new_b.data<P>()[o] = static_cast<P>((bias - param("mean", o)) * scale + param("beta", o));
    for (int64_t i = o * per_channel; i < (o + 1) * per_channel; ++i)
      new_w.data<W>()[i] = cpu::convert<W>(cpu::convert<double>(w.data<W>()[i]) * scale);
  }
  Value* weights = g.add_constant(m["w"]->name() + "_bn", new_w);
  Value* bias = g.add_constant(m.root->name() + "_bias", new_b);
  return {g.add_uncast("conv2d", {m["x"], weights, bias}, std::move(attrs), m.root->name())};
}

// Why not: the epilogue would run before the normalization, so only a bare convolution folds,
// and the parameters must be per-channel vectors of the normalization's dtype.
bool foldable(const Match& m) {
  Node* conv = m.node("y");
  const TensorType& normalized = m["normalized"]->type();
  if (conv->attr_string("fused_activation") != "none" || conv->attr_bool("residual") ||
      !std::isinf(conv->attr_float("clamp_min")) || !std::isinf(conv->attr_float("clamp_max")) ||
      !conv->output()->type().shape[1].is_static() ||
      normalized.shape != conv->output()->type().shape)
    return false;
  for (const char* param : {"gamma", "beta", "mean", "var"}) {
    const TensorType& t = m[param]->type();
    if (t.dtype != normalized.dtype || t.shape != Shape{normalized.shape[1]}) return false;
  }
  return true;
}

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  Node* conv = m.node("y");
  const TensorType& y = conv->output()->type();
  if (!foldable(m) || m["normalized"]->type() != y || m["w"]->type().dtype != y.dtype) return {};
  if (y.dtype == DType::F64) return fold<double>(g, m, conv->attrs());
  return fold<float>(g, m, conv->attrs());
}

std::vector<Value*> rewrite_bf16(Graph& g, const Match& m) {
  Node* conv = m.node("y");
  if (!foldable(m) || m["normalized"]->type().dtype != DType::F32 ||
      conv->input(1)->type().dtype != DType::BF16)
    return {};
  return fold<cpu::BFloat16>(g, m, conv->attrs());
}

Pattern conv_of(bool bias) {
  std::vector<Pattern> inputs{any("x"), constant("w")};
  if (bias) inputs.push_back(constant("b"));
  return op("conv2d", std::move(inputs)).single_use().as("y");
}

// to(batch_norm(to(conv) {f32}, ...)) {bf16}, the convolution rounding to bf16.
Pattern bf16_batch_norm_of(Pattern conv) {
  Pattern widened = op("to", {std::move(conv).attr("dtype", std::string("bf16"))})
                        .dtype(DType::F32)
                        .single_use();
  return op("to", {batch_norm_of(std::move(widened)).single_use().as("normalized")})
      .dtype(DType::BF16);
}

}  // namespace

std::unique_ptr<Pass> make_fold_conv_batch_norm() {
  return std::make_unique<PatternRewritePass>(
      "fold_conv_batch_norm",
      std::vector<RewriteRule>{
          {"conv_bias_batch_norm", batch_norm_of(conv_of(true)).as("normalized"), rewrite},
          {"conv_batch_norm", batch_norm_of(conv_of(false)).as("normalized"), rewrite},
          {"bf16_conv_bias_batch_norm", bf16_batch_norm_of(conv_of(true)), rewrite_bf16},
          {"bf16_conv_batch_norm", bf16_batch_norm_of(conv_of(false)), rewrite_bf16}});
}

}  // namespace kiln
