// Algebraic simplification: identities that change no element, written as patterns.
//   mul(x, 1), mul(1, x), div(x, 1)                             → x
//   add(x, 0), add(0, x)   (integer or bool x; float x only with -0.0, as +0.0 turns -0.0 into
//                           +0.0)                                → x
//   sub(x, +0)                                                  → x
//   neg(neg(x))                                                 → x
//   floor|ceil|trunc|round(x) on integers, clamp(x, -inf, inf)   → x
//   reshape|flatten|squeeze|unsqueeze|expand|slice|narrow|repeat|to|concat(x) of x's type → x
//   permute(permute(x, p), q)                                   → permute(x, p∘q), or x
//   permute(x, p) moving only size-1 dims                       → reshape(x), or x
//   reshape-like(reshape-like(x))                               → reshape(x), or x
//   attention(q, k, v, mask) with a constant mask that masks nothing (bool: all true; float:
//   all ±0, added to the scores)                               → attention(q, k, v)
//   (torch.export materializes BERT's all-ones padding mask as such a constant)
// Each rewrite applies only when the result has exactly x's type (dtype after promotion, shape
// after broadcasting): mul(x: f32[3], ones: f32[2, 3]) broadcasts and stays.
#include <cmath>

#include "kiln/error.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

const std::vector<std::string> kReshapeLike = {"reshape", "flatten", "squeeze", "unsqueeze"};

RewriteRule identity(std::string name, Pattern pattern) {
  return RewriteRule{std::move(name), std::move(pattern), forward("x")};
}

bool is_integral(const Value& v) { return !is_floating(v.type().dtype); }

// `x` reshaped to `target`'s shape, or null when Kiln's reshape can't express it with x's dims
// (several dynamic dims, a -1 next to a size 0, a -1 inferring another symbol than the
// target's) — then nothing is left added.
Value* reshape_to(Graph& g, Value* x, const Value& target) {
  std::vector<int64_t> sizes;
  int dynamic = 0;
  for (const Dim& d : target.type().shape) {
    sizes.push_back(d.is_static() ? d.size() : -1);
    dynamic += !d.is_static();
  }
  if (dynamic > 1) return nullptr;
  Value* y = nullptr;
  try {
    y = g.add("reshape", {x}, {{"shape", sizes}});
  } catch (const Error&) {
    return nullptr;  // inference rejected the target: the chain stays as it is
  }
  if (y->type() == target.type()) return y;
  g.remove_node(y->producer());
  return nullptr;
}

std::vector<Value*> just(Value* v) { return v ? std::vector<Value*>{v} : std::vector<Value*>{}; }

std::vector<size_t> perm_of(const Node& permute) {
  std::vector<size_t> perm;
  const auto rank = static_cast<int64_t>(permute.output(0)->type().rank());
  for (int64_t d : permute.attr_ints("dims")) perm.push_back(static_cast<size_t>(d < 0 ? d + rank : d));
  return perm;
}

// True when permute keeps the order of every dim that isn't statically 1: the elements keep
// their row-major order, so it is a reshape.
bool moves_only_unit_dims(const Value& v) {
  const Node& n = *v.producer();
  const Shape& in = n.input(0)->type().shape;
  size_t last = 0;
  bool first = true;
  for (size_t d : perm_of(n)) {
    if (in[d] == Dim(1)) continue;
    if (!first && d < last) return false;
    last = d;
    first = false;
  }
  return true;
}

// The attention of the match without its mask input; same attributes.
std::vector<Value*> drop_mask(Graph& g, const Match& m) {
  Value* out = g.add("scaled_dot_product_attention", {m["q"], m["k"], m["v"]}, m.root->attrs());
  if (out->type() != m.root->output(0)->type()) {  // the mask broadcast the output: keep it
    g.remove_node(out->producer());
    return {};
  }
  return {out};
}

std::vector<RewriteRule> rules() {
  auto zero_where = [](bool negative) {
    return constant_where([negative](double e) { return e == 0 && std::signbit(e) == negative; },
                          negative ? "every element is -0.0" : "every element is +0.0");
  };
  auto integral = [] { return any("x").where(is_integral, "integer or bool"); };
  std::vector<RewriteRule> r = {
      identity("mul_one", op("mul", {any("x"), splat(1.0)}).commutative()),
      identity("div_one",
               op("div", {any("x"), splat(1.0)}).attr("rounding_mode", std::string("none"))),
      identity("add_zero", op("add", {integral(), splat(0.0)}).attr("alpha", 1.0).commutative()),
      identity("add_negative_zero",
               op("add", {any("x"), zero_where(true)}).attr("alpha", 1.0).commutative()),
      identity("sub_zero", op("sub", {any("x"), zero_where(false)}).attr("alpha", 1.0)),
      identity("neg_neg", op("neg", {op("neg", {any("x")})})),
      identity("round_integer", any_op({"floor", "ceil", "trunc", "round"}, {integral()})),
      identity("clamp_unbounded",
               op("clamp", {any("x")}).attr("min", -INFINITY).attr("max", INFINITY)),
      identity("identity_view",
               any_op({"reshape", "flatten", "squeeze", "unsqueeze", "expand", "slice", "narrow",
                   "repeat", "to", "concat"},
                  {any("x")})),
      RewriteRule{"permute_permute", op("permute", {op("permute", {any("x")}).as("inner")}),
                  [](Graph& g, const Match& m) -> std::vector<Value*> {
                    std::vector<size_t> p = perm_of(*m.node("inner")), q = perm_of(*m.root);
                    std::vector<int64_t> dims;
                    bool identity = true;
                    for (size_t i = 0; i < q.size(); ++i) {
                      dims.push_back(static_cast<int64_t>(p[q[i]]));
                      identity &= p[q[i]] == i;
                    }
                    if (identity) return {m["x"]};
                    return {g.add("permute", {m["x"]}, {{"dims", dims}})};
                  }},
      RewriteRule{"permute_unit_dims",
                  op("permute", {any("x")}).where(moves_only_unit_dims, "moves only size-1 dims"),
                  [](Graph& g, const Match& m) -> std::vector<Value*> {
                    if (m["x"]->type() == m.root->output(0)->type()) return {m["x"]};
                    return just(reshape_to(g, m["x"], *m.root->output(0)));
                  }},
      RewriteRule{"attention_all_true_mask",
                  op("scaled_dot_product_attention",
                     {any("q"), any("k"), any("v"),
                      constant_where([](double e) { return e != 0; }, "every element is true")
                          .dtype(DType::Bool)}),
                  drop_mask},
      RewriteRule{"attention_zero_mask",
                  op("scaled_dot_product_attention",
                     {any("q"), any("k"), any("v"),
                      constant_where([](double e) { return e == 0; }, "every element is ±0")
                          .where([](const Value& m) { return m.type().dtype != DType::Bool; },
                                 "added to the scores")}),
                  drop_mask},
      RewriteRule{"reshape_chain", any_op(kReshapeLike, {any_op(kReshapeLike, {any("x")})}),
                  [](Graph& g, const Match& m) -> std::vector<Value*> {
                    if (m["x"]->type() == m.root->output(0)->type()) return {m["x"]};
                    return just(reshape_to(g, m["x"], *m.root->output(0)));
                  }},
  };
  return r;
}

}  // namespace

std::unique_ptr<Pass> make_algebraic_simplification() {
  return std::make_unique<PatternRewritePass>("algebraic_simplification", rules());
}

}  // namespace kiln
