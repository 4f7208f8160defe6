// Decomposed RMSNorm recognition: what AOTAutograd makes of torch.nn.RMSNorm / F.rms_norm, and
// the hand-written norms of LLaMA, T5 and their kin, over the last dim, become one rms_norm node,
// and a following scale joins it:
//   %ms = mean(pow(%x, 2)) | mean(mul(%x, %x))    {dim = [-1], keepdim = true}
//   %y  = mul(%x, rsqrt(add(%ms, eps))) | div(%x, sqrt(add(%ms, eps)))
//                                     →  %y = rms_norm(%x) {eps = eps, normalized_ndim = 1}
//   the same with %ms over %x32 = to(%x) and %y from the uncast %x (T5's variance in f32 of an
//   f16/bf16 x; the multiplication promotes x to %x32's dtype exactly)
//                                     →  %y = rms_norm(%x32) {...}
//   mul(rms_norm(%x), %w)             →  rms_norm(%x, %w)   with %w : [C] of x's dtype, or f16/bf16
//                                        for an f32 x (the product promotes it: to(%w) is exact)
// eps is a scalar constant; the square, the mean, the sum and the root have no other reader. The
// casts LLaMA writes around the norm (to f32 before, back to the input's dtype after) stay: the
// norm is recognized between them.
#include "passes/pass_list.h"
#include "passes/pattern.h"
#include "passes/scalar_constant.h"

namespace kiln {

namespace {

using namespace pat;

// A keepdim reduction over the last dim only.
bool over_last_dim(const Node& reduction, size_t rank) {
  const std::vector<int64_t>& dims = reduction.attr_ints("dim");
  return reduction.attr_bool("keepdim") && dims.size() == 1 &&
         (dims[0] == -1 || dims[0] == static_cast<int64_t>(rank) - 1);
}

bool is_half(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

// The norm's input: %x, or %x32 in the cast form.
std::vector<Value*> normalize(Graph& g, const Match& m) {
  Value* input = m.has("x32") ? m["x32"] : m["x"];
  const TensorType& t = input->type();
  if ((t.dtype != DType::F32 && t.dtype != DType::F64) || t.rank() == 0 ||
      m.root->output()->type() != t)
    return {};
  if (m.has("x32") && !is_floating(m["x"]->type().dtype)) return {};
  if (!over_last_dim(*m.node("ms"), t.rank())) return {};
  std::optional<double> eps = scalar_value(*m["eps"]);
  if (!eps || !(*eps >= 0)) return {};
  return {g.add("rms_norm", {input}, {{"eps", *eps}, {"normalized_ndim", int64_t{1}}},
                m.root->name())};
}

// Absorbs a weight with the normalized dims into an rms_norm that has none.
std::vector<Value*> absorb(Graph& g, const Match& m) {
  Node* norm = m.node("norm");
  const TensorType& x = norm->input(0)->type();
  Value* w = m["w"];
  const size_t k = static_cast<size_t>(norm->attr_int("normalized_ndim"));
  const Shape normalized(x.shape.end() - static_cast<std::ptrdiff_t>(k), x.shape.end());
  const DType wd = w->type().dtype;
  if (norm->inputs().size() != 1 || w->type().shape != normalized ||
      !(wd == x.dtype || (x.dtype == DType::F32 && is_half(wd))) ||
      m.root->output()->type() != x)
    return {};
  if (wd != x.dtype) {
    const std::string dtype(dtype_name(x.dtype));
    w = g.add("to", {w}, {{"dtype", dtype}}, w->name() + "_" + dtype);
  }
  return {g.add("rms_norm", {norm->input(0), w}, norm->attrs(), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_fuse_decomposed_rms_norm() {
  auto mean_squares = [](const Pattern& base) {
    return std::vector<Pattern>{
        op("mean", {op("pow", {base, splat(2.0)}).single_use()}).single_use().as("ms"),
        op("mean", {op("mul", {base, base}).single_use()}).single_use().as("ms")};
  };
  auto plus_eps = [](const Pattern& ms) {
    return op("add", {ms, constant("eps")}).attr("alpha", 1.0).commutative().single_use();
  };
  std::vector<RewriteRule> rules;
  for (bool cast : {false, true}) {
    const Pattern base = cast ? op("to", {any("x")}).as("x32") : any("x");
    const std::string suffix = cast ? "_cast" : "";
    for (const Pattern& ms : mean_squares(base)) {
      rules.push_back(
          {"rms_norm_mul_rsqrt" + suffix,
           op("mul", {any("x"), op("rsqrt", {plus_eps(ms)}).single_use()}).commutative(),
           normalize});
      rules.push_back({"rms_norm_div_sqrt" + suffix,
                       op("div", {any("x"), op("sqrt", {plus_eps(ms)}).single_use()}),
                       normalize});
    }
  }
  rules.push_back({"rms_norm_weight",
                   op("mul", {op("rms_norm").single_use().as("norm"), any("w")}).commutative(),
                   absorb});
  return std::make_unique<PatternRewritePass>("fuse_decomposed_rms_norm", std::move(rules));
}

}  // namespace kiln
