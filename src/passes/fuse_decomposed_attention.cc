// Decomposed attention recognition: scores, scaling, an optional additive mask, softmax over the
// keys and the weighted sum of values (BERT's and most eager attention code) become one
// scaled_dot_product_attention node, whose flash kernel never materializes the scores.
//   %s = matmul(%q, permute(%k) {dims = [..., n-1, n-2]})  or  matmul(%q, %k) {transpose_b = true}
//   [%s = mul(%s, c) | div(%s, c)] ; [%s = add(%s, %mask)]
//   %o = matmul(softmax(%s) {axis = -1}, %v)
//     →  %o = scaled_dot_product_attention(%q, %k, %v, [%mask]) {scale = c | 1/c | 1}
// Every intermediate has no other use; the mask has the scores' dtype and doesn't enlarge them.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "kiln/error.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"
#include "passes/scalar_constant.h"

namespace kiln {

namespace {

using namespace pat;

// A plain matmul (no epilogue, B not transposed) whose inputs are left free.
bool plain_matmul(const Node& n, bool transpose_b) {
  return n.op() == "matmul" && n.inputs().size() == 2 && n.attr_bool("transpose_b") == transpose_b &&
         n.attr_string("fused_activation") == "none";
}

// A permutation that swaps the last two dims and keeps the others.
bool swaps_last_two(const Node& permute) {
  std::vector<int64_t> expected(permute.output()->type().rank());
  if (expected.size() < 2) return false;
  std::iota(expected.begin(), expected.end(), 0);
  std::swap(expected[expected.size() - 1], expected[expected.size() - 2]);
  return permute.attr_ints("dims") == expected;
}

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  Node* scores = m.node("scores");
  Value* k = nullptr;
  if (plain_matmul(*scores, /*transpose_b=*/true)) {
    k = scores->input(1);
  } else if (plain_matmul(*scores, false) && scores->input(1)->producer() &&
             scores->input(1)->producer()->op() == "permute" &&
             swaps_last_two(*scores->input(1)->producer()) &&
             scores->input(1)->users().size() == 1 &&
             std::find(g.outputs().begin(), g.outputs().end(), scores->input(1)) ==
                 g.outputs().end()) {
    k = scores->input(1)->producer()->input(0);
  } else {
    return {};
  }
  if (!plain_matmul(*m.root, false)) return {};
  const Node& softmax = *m.node("p");
  const int64_t rank = static_cast<int64_t>(softmax.output()->type().rank());
  if (softmax.attr_int("axis") != -1 && softmax.attr_int("axis") != rank - 1) return {};
  const TensorType& s = scores->output()->type();
  double scale = 1.0;
  if (m.has("c")) {
    std::optional<double> c = scalar_value(*m["c"]);
    if (!c || !std::isfinite(*c) || *c == 0) return {};
    scale = m.node("scaled")->op() == "mul" ? *c : 1 / *c;
    if (m.node("scaled")->output()->type() != s) return {};
  }
  std::vector<Value*> inputs{scores->input(0), k, m.root->input(1)};
  if (m.has("mask")) {
    if (m["mask"]->type().dtype != s.dtype || m.node("masked")->output()->type() != s) return {};
    inputs.push_back(m["mask"]);
  }
  Value* out;
  try {
    out = g.add("scaled_dot_product_attention", inputs, {{"scale", scale}}, m.root->name());
  } catch (const Error&) {
    return {};  // shapes the attention op doesn't take (inference runs before the node is added)
  }
  if (out->type() != m.root->output()->type()) {
    g.remove_node(out->producer());
    return {};
  }
  return {out};
}

}  // namespace

std::unique_ptr<Pass> make_fuse_decomposed_attention() {
  Pattern scores = op("matmul").single_use().as("scores");
  std::vector<Pattern> scaled{
      scores,
      op("mul", {scores, constant("c")}).commutative().single_use().as("scaled"),
      op("div", {scores, constant("c")}).single_use().as("scaled"),
  };
  std::vector<RewriteRule> rules;
  for (const Pattern& s : scaled) {
    for (bool masked : {true, false}) {
      Pattern logits =
          masked ? op("add", {s, any("mask")}).attr("alpha", 1.0).commutative().single_use().as(
                       "masked")
                 : s;
      rules.push_back({std::string("attention") + (masked ? "_masked" : ""),
                       op("matmul", {op("softmax", {logits}).single_use().as("p"), any("v")}),
                       rewrite});
    }
  }
  return std::make_unique<PatternRewritePass>("fuse_decomposed_attention", std::move(rules));
}

}  // namespace kiln
