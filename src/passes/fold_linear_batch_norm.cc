// Linear+BatchNorm folding: an inference batch_norm over the output columns of a matmul with
// constant weights becomes part of the weights and the bias (scale = gamma / sqrt(var + eps)):
//   %y = matmul(%x, %w) ; [%y = add(%y, %b)] ; %z = batch_norm(%y, %gamma, %beta, %mean, %var)
//     →  %y = matmul(%x, %w') ; %z = add(%y, %b')
//   with w'[., c] = w[., c] * scale[c] and b'[c] = (b[c] - mean[c]) * scale[c] + beta[c] (b = 0
//   without a bias). batch_norm normalizes dim 1, so only [M, N] outputs (dim 1 = N) fold.
#include <cmath>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

Pattern weight_matmul() {
  return op("matmul", {any("x"), constant("w")}).single_use().as("mm");
}

Pattern batch_norm_of(Pattern x) {
  return op("batch_norm",
            {std::move(x), constant("gamma"), constant("beta"), constant("mean"), constant("var")});
}

// Folds in double and rounds each new constant once.
template <typename T>
std::vector<Value*> fold(Graph& g, const Match& m) {
  Node* mm = m.node("mm");
  const bool transpose_b = mm->attr_bool("transpose_b");
  const Tensor& w = m["w"]->constant();
  const int64_t n = mm->output()->type().shape[1].size();
  const int64_t k = w.numel() / n;
  auto param = [&](const char* name, int64_t c) {
    return static_cast<double>(m[name]->constant().data<T>()[c]);
  };
  const double eps = m.root->attr_float("eps");
  Tensor new_w = Tensor::empty(w.dtype(), w.sizes());
  Tensor new_b = Tensor::empty(w.dtype(), {n});
  for (int64_t c = 0; c < n; ++c) {
    const double scale = param("gamma", c) / std::sqrt(param("var", c) + eps);
    const double bias = m.has("b") ? param("b", c) : 0.0;
    new_b.data<T>()[c] = static_cast<T>((bias - param("mean", c)) * scale + param("beta", c));
    for (int64_t p = 0; p < k; ++p) {
      // w is [N, K] with transpose_b, else [K, N].
      const int64_t at = transpose_b ? c * k + p : p * n + c;
      new_w.data<T>()[at] = static_cast<T>(static_cast<double>(w.data<T>()[at]) * scale);
    }
  }
  Value* weights = g.add_constant(m["w"]->name() + "_bn", new_w);
  Value* bias = g.add_constant(m.root->name() + "_bias", new_b);
  Value* y = g.add_uncast("matmul", {m["x"], weights}, mm->attrs(), mm->output()->name());
  return {g.add("add", {y, bias}, {}, m.root->name())};
}

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  Node* mm = m.node("mm");
  const TensorType& y = mm->output()->type();
  // A plain [M, N] product of 2-D weights, N static (the constants' size) and not 0.
  if (mm->inputs().size() != 2 || mm->attr_string("fused_activation") != "none" || y.rank() != 2 ||
      !y.shape[1].is_static() || y.shape[1].size() == 0 || m["w"]->type().rank() != 2)
    return {};
  for (const char* param : {"w", "gamma", "beta", "mean", "var"})  // not a bf16-operand matmul
    if (m[param]->type().dtype != y.dtype) return {};
  if (m.has("b")) {
    const TensorType& b = m["b"]->type();
    if (b.dtype != y.dtype || b.rank() != 1 || b.shape[0] != y.shape[1] ||
        m["biased"]->type() != y)
      return {};
  }
  if (y.dtype == DType::F64) return fold<double>(g, m);
  return fold<float>(g, m);
}

}  // namespace

std::unique_ptr<Pass> make_fold_linear_batch_norm() {
  Pattern biased = op("add", {weight_matmul(), constant("b")})
                       .attr("alpha", 1.0)
                       .commutative()
                       .single_use()
                       .as("biased");
  return std::make_unique<PatternRewritePass>(
      "fold_linear_batch_norm",
      std::vector<RewriteRule>{{"linear_bias_batch_norm", batch_norm_of(biased), rewrite},
                               {"linear_batch_norm", batch_norm_of(weight_matmul()), rewrite}});
}

}  // namespace kiln
