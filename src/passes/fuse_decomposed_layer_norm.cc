// Decomposed LayerNorm recognition: hand-written layer norms (the TF-style BertLayerNorm, and
// what model code writes with var or rsqrt) over the last dim become one layer_norm node, and a
// following scale and shift join it:
//   %mu = mean(%x) {dim = [-1], keepdim = true} ; %d = sub(%x, %mu)
//   %v = mean(pow(%d, 2)) | mean(mul(%d, %d)) | var(%x) {correction = 0}   (same dim, keepdim)
//   %y = div(%d, sqrt(add(%v, eps))) | mul(%d, rsqrt(add(%v, eps)))
//                                        →  %y = layer_norm(%x) {eps = eps, normalized_ndim = 1}
//   mul(layer_norm(%x), %w)              →  layer_norm(%x, %w)       with %w : [C]
//   add(layer_norm(%x, %w), %b)          →  layer_norm(%x, %w, %b)   with %b : [C]
// %d is read by nothing but the variance and the normalization; the other intermediates have no
// other use.
#include <algorithm>

#include "passes/pass_list.h"
#include "passes/pattern.h"
#include "passes/scalar_constant.h"

namespace kiln {

namespace {

using namespace pat;

bool is_graph_output(const Graph& g, const Value* v) {
  return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
}

// Every use of `v` is by one of `nodes`.
bool read_only_by(const Value& v, const std::vector<Node*>& nodes) {
  return std::all_of(v.users().begin(), v.users().end(), [&](Node* user) {
    return std::find(nodes.begin(), nodes.end(), user) != nodes.end();
  });
}

// A keepdim reduction over the last dim only.
bool over_last_dim(const Node& reduction, size_t rank) {
  const std::vector<int64_t>& dims = reduction.attr_ints("dim");
  return reduction.attr_bool("keepdim") && dims.size() == 1 &&
         (dims[0] == -1 || dims[0] == static_cast<int64_t>(rank) - 1);
}

std::vector<Value*> normalize(Graph& g, const Match& m) {
  const TensorType& x = m["x"]->type();
  if ((x.dtype != DType::F32 && x.dtype != DType::F64) || x.rank() == 0 ||
      m.root->output()->type() != x)
    return {};
  Node* var = m.node("var");
  if (var->op() == "var" && var->attr_float("correction") != 0) return {};
  Value* d = m["d"];
  if (!read_only_by(*d, m.nodes) || is_graph_output(g, d)) return {};
  if (!over_last_dim(*m.node("mu"), x.rank()) || !over_last_dim(*var, x.rank())) return {};
  std::optional<double> eps = scalar_value(*m["eps"]);
  if (!eps || !(*eps >= 0)) return {};
  return {g.add("layer_norm", {m["x"]}, {{"eps", *eps}, {"normalized_ndim", int64_t{1}}},
                m.root->name())};
}

// Absorbs a weight (after none) or a bias (after a weight) of shape [C] into layer_norm.
std::vector<Value*> absorb(Graph& g, const Match& m) {
  Node* ln = m.node("ln");
  const TensorType& x = ln->input(0)->type();
  const TensorType& p = m["p"]->type();
  const size_t expected_inputs = m.root->op() == "mul" ? 1 : 2;
  if (ln->inputs().size() != expected_inputs || ln->attr_int("normalized_ndim") != 1 ||
      p.dtype != x.dtype || p.rank() != 1 || p.shape[0] != x.shape.back() ||
      m.root->output()->type() != x)
    return {};
  std::vector<Value*> inputs = ln->inputs();
  inputs.push_back(m["p"]);
  return {g.add("layer_norm", inputs, ln->attrs(), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_fuse_decomposed_layer_norm() {
  Pattern centered = op("sub", {any("x"), op("mean", {any("x")}).single_use().as("mu")})
                         .attr("alpha", 1.0)
                         .as("d");
  auto variance_plus_eps = [](Pattern variance) {
    return op("add", {std::move(variance), constant("eps")})
        .attr("alpha", 1.0)
        .commutative()
        .single_use();
  };
  std::vector<Pattern> variances{
      op("mean", {op("pow", {any("d"), splat(2.0)}).single_use()}).single_use().as("var"),
      op("mean", {op("mul", {any("d"), any("d")}).single_use()}).single_use().as("var"),
      op("var", {any("x")}).single_use().as("var")};
  std::vector<RewriteRule> rules;
  for (const Pattern& v : variances) {
    rules.push_back({"layer_norm_div_sqrt",
                     op("div", {centered, op("sqrt", {variance_plus_eps(v)}).single_use()}),
                     normalize});
    rules.push_back(
        {"layer_norm_mul_rsqrt",
         op("mul", {centered, op("rsqrt", {variance_plus_eps(v)}).single_use()}).commutative(),
         normalize});
  }
  Pattern ln = op("layer_norm").single_use().as("ln");
  rules.push_back({"layer_norm_weight", op("mul", {ln, any("p")}).commutative(), absorb});
  rules.push_back(
      {"layer_norm_bias", op("add", {ln, any("p")}).attr("alpha", 1.0).commutative(), absorb});
  return std::make_unique<PatternRewritePass>("fuse_decomposed_layer_norm", std::move(rules));
}

}  // namespace kiln
