// Decomposed GELU recognition: the formulas model code writes out (GPT-2's gelu_new, BERT-era
// hand-written gelu), as AOTAutograd traces them, become one gelu node, whose kernel evaluates
// the function in one pass and can later join a matmul epilogue.
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   →  gelu(x) {approximate = "tanh"}
//   0.5 x (1 + erf(x / sqrt(2)))    (or x * (1/sqrt 2)) →  gelu(x) {approximate = "none"}
// The three factors x, 0.5 and (1 + ...) may be multiplied in any order and grouping, x^3 may be
// pow(x, 3) or x*x*x, and every intermediate must have no other use.
#include <cmath>
#include <numbers>
#include <optional>

#include "passes/pass_list.h"
#include "passes/pattern.h"
#include "passes/scalar_constant.h"

namespace kiln {

namespace {

using namespace pat;

// A one-element f32 or f64 constant (a Python number or a folded scalar) equal to `value` up to
// the digits model code writes for an irrational constant (0.7978845608 for sqrt(2/pi)).
Pattern scalar_near(double value) {
  return constant().where(
      [value](const Value& v) {
        std::optional<double> x = scalar_value(v);
        return x && std::fabs(*x - value) <= 1e-6 * std::fabs(value);
      },
      "a scalar near " + std::to_string(value));
}

Pattern mul(Pattern a, Pattern b) {
  return op("mul", {std::move(a), std::move(b)}).commutative().single_use();
}
Pattern add(Pattern a, Pattern b) {
  return op("add", {std::move(a), std::move(b)}).attr("alpha", 1.0).commutative().single_use();
}

// x^3 as pow(x, 3), x * (x * x) or (x * x) * x.
std::vector<Pattern> cubes() {
  return {op("pow", {any("x"), scalar_near(3.0)}).single_use(),
          mul(any("x"), mul(any("x"), any("x")))};
}

// 1 + f(inner) for f = tanh or erf.
std::vector<Pattern> one_plus(const std::string& f, const std::vector<Pattern>& inners) {
  std::vector<Pattern> out;
  for (const Pattern& inner : inners)
    out.push_back(add(op(f, {inner}).single_use(), scalar_near(1.0)));
  return out;
}

// 0.5 * x * one_plus, in each grouping; the root is not single_use (it is what gets replaced).
std::vector<Pattern> half_x_times(const std::vector<Pattern>& one_pluses) {
  std::vector<Pattern> out;
  for (const Pattern& p : one_pluses) {
    out.push_back(op("mul", {mul(any("x"), scalar_near(0.5)), p}).commutative());
    out.push_back(op("mul", {any("x"), mul(scalar_near(0.5), p)}).commutative());
    out.push_back(op("mul", {mul(any("x"), p), scalar_near(0.5)}).commutative());
  }
  return out;
}

std::vector<Pattern> tanh_forms() {
  std::vector<Pattern> inners;
  for (const Pattern& cube : cubes())
    inners.push_back(mul(add(any("x"), mul(cube, scalar_near(0.044715))),
                         scalar_near(std::sqrt(2 / std::numbers::pi))));
  return half_x_times(one_plus("tanh", inners));
}

std::vector<Pattern> erf_forms() {
  return half_x_times(one_plus(
      "erf", {op("div", {any("x"), scalar_near(std::numbers::sqrt2)}).single_use(),
              mul(any("x"), scalar_near(1 / std::numbers::sqrt2))}));
}

std::vector<RewriteRule> rules_for(const std::string& name, const std::vector<Pattern>& forms,
                                   const std::string& approximate) {
  std::vector<RewriteRule> rules;
  for (size_t i = 0; i < forms.size(); ++i)
    rules.push_back({name + "_" + std::to_string(i), forms[i],
                     [approximate](Graph& g, const Match& m) -> std::vector<Value*> {
                       // Same dtype in and out: no promotion hidden in the chain.
                       const TensorType& x = m["x"]->type();
                       if (!is_floating(x.dtype) || m.root->output()->type() != x) return {};
                       return {g.add("gelu", {m["x"]}, {{"approximate", approximate}},
                                     m.root->name())};
                     }});
  return rules;
}

}  // namespace

std::unique_ptr<Pass> make_fuse_decomposed_gelu() {
  std::vector<RewriteRule> rules = rules_for("gelu_tanh", tanh_forms(), "tanh");
  for (RewriteRule& r : rules_for("gelu_erf", erf_forms(), "none")) rules.push_back(std::move(r));
  return std::make_unique<PatternRewritePass>("fuse_decomposed_gelu", std::move(rules));
}

}  // namespace kiln
