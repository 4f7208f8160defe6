// Matmul epilogue fusion: a bias add, an activation and a residual add that follow a matmul are
// folded into its epilogue (kernels/cpu/gemm_epilogue.h), which the GEMM kernels apply to each
// output block while it is still in cache instead of in separate passes over memory.
//   add(matmul(a, w), b)  with b : [N]          →  matmul(a, w, b) {bias = true}
//   act(matmul(...))      act: relu, gelu (erf, tanh), silu, sigmoid, tanh
//                                                →  matmul(...) {fused_activation = act}
//   add(matmul(...), r)   with r of the output's type
//                                                →  matmul(..., r) {residual = true}
//   to(matmul(...)) {dtype = bf16}  with bf16 operands and an f32 result
//                                                →  matmul(...) {dtype = bf16}
// and the same through a reshape between them (a linear layer on [B, S, C] is traced as reshape
// → matmul → reshape), since elementwise steps commute with it:
//   act(reshape(matmul(...)))  →  reshape(matmul(...) {fused_activation = act})
//   add(reshape(matmul(...)), b)   with b : [N] and N still the last dim  →  reshape(matmul(..., b))
//   add(reshape(matmul(...)), r)   →  reshape(matmul(..., reshape(r)) {residual = true})
// Each step needs the matmul's (and the reshape's) output to have no other use and not be a graph
// output; the epilogue order is fixed (bias, activation, residual), so a step fires only when the
// later ones are still empty. The rounding to bf16 is always last: in a bf16 model each linear
// layer's result is rounded (the builder's cast after its bias add), and the activation and
// residual add that follow are bf16 ops; with the rounding in the kernel (oneDNN's bf16
// destination, as PyTorch's bf16 linear rounds) they fuse too, and the block's result is rounded
// once instead of after each op: the numerics of bf16 convolutions (fold_conv_batch_norm).
#include <functional>
#include <optional>

#include "kernels/cpu/gemm_epilogue.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;
using cpu::Activation;

// The matmul an epilogue step may extend, read by nothing but the step's op, directly or through
// a reshape read by nothing but the step's op.
Pattern fusable_matmul(bool through_reshape) {
  Pattern mm = op("matmul").single_use().as("mm");
  return through_reshape ? op("reshape", {mm}).single_use().as("view") : mm;
}

// add with alpha 1: the fused epilogue adds exactly.
Pattern unit_add(Pattern x, Pattern y) {
  return op("add", {std::move(x), std::move(y)}).attr("alpha", 1.0).commutative();
}

// The type the step sees: the reshape's output, or the matmul's.
const TensorType& step_input_type(const Match& m) {
  return m[m.has("view") ? "view" : "mm"]->type();
}

// The matmul `mm` with `extra` appended to its inputs and `update` applied to its attributes,
// reshaped again when the step looked through a reshape.
std::vector<Value*> extend(Graph& g, const Match& m, const std::vector<Value*>& extra,
                           const std::function<void(AttrMap&)>& update) {
  Node* mm = m.node("mm");
  std::vector<Value*> inputs = mm->inputs();
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  AttrMap attrs = mm->attrs();
  update(attrs);
  // Named after the value it replaces, which is what the rest of the graph knows.
  if (!m.has("view")) return {g.add_uncast("matmul", inputs, std::move(attrs), m.root->name())};
  Value* fused = g.add_uncast("matmul", inputs, std::move(attrs), m["view"]->name());
  return {g.add("reshape", {fused}, m.node("view")->attrs(), m.root->name())};
}

std::optional<Activation> activation_of(const Node& node) {
  if (node.op() == "gelu")
    return node.attr_string("approximate") == "tanh" ? Activation::GeluTanh : Activation::GeluErf;
  return cpu::parse_activation(node.op());
}

RewriteRule bias_rule(bool through_reshape) {
  return {std::string("matmul_bias") + (through_reshape ? "_through_reshape" : ""), unit_add(fusable_matmul(through_reshape), any("bias")),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* mm = m.node("mm");
            const TensorType& y = mm->output()->type();
            const TensorType& seen = step_input_type(m);
            const TensorType& bias = m["bias"]->type();
            // Through a reshape, the bias still broadcasts along the product's columns only when
            // the last dim is the same N. A vector w ([M, K]·[K], mv) leaves no N: the product's
            // last dim is M, which the kernel's per-column bias would not follow.
            if (!cpu::epilogue_of(*mm).empty() || !mm->attr_string("dtype").empty() ||
                mm->input(1)->type().rank() < 2 || bias.dtype != y.dtype || bias.rank() != 1 ||
                y.rank() == 0 || seen.rank() == 0 || bias.shape[0] != y.shape.back() ||
                seen.shape.back() != y.shape.back() || m.root->output()->type() != seen)
              return {};
            return extend(g, m, {m["bias"]}, [](AttrMap& a) { a["bias"] = true; });
          }};
}

RewriteRule activation_rule(bool through_reshape) {
  return {std::string("matmul_activation") + (through_reshape ? "_through_reshape" : ""),
          any_op({"relu", "gelu", "silu", "sigmoid", "tanh"}, {fusable_matmul(through_reshape)}),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* mm = m.node("mm");
            const cpu::GemmEpilogue e = cpu::epilogue_of(*mm);
            if (e.activation != Activation::None || e.residual ||
                m.root->output()->type() != step_input_type(m))
              return {};
            const Activation act = *activation_of(*m.root);
            return extend(g, m, {}, [act](AttrMap& a) {
              a["fused_activation"] = std::string(cpu::activation_name(act));
            });
          }};
}

RewriteRule residual_rule(bool through_reshape) {
  return {std::string("matmul_residual") + (through_reshape ? "_through_reshape" : ""), unit_add(fusable_matmul(through_reshape), any("residual")),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* mm = m.node("mm");
            const TensorType& y = mm->output()->type();
            const TensorType& seen = step_input_type(m);
            if (cpu::epilogue_of(*mm).residual || m["residual"]->type() != seen ||
                m.root->output()->type() != seen)
              return {};
            Value* residual = m["residual"];
            if (m.has("view")) {
              // The residual in the product's shape (a reshape keeps the element order).
              if (!is_static(y.shape)) return {};
              residual = g.add("reshape", {residual}, {{"shape", static_sizes(y.shape)}},
                               residual->name() + "_reshaped");
            }
            return extend(g, m, {residual}, [](AttrMap& a) { a["residual"] = true; });
          }};
}

RewriteRule bf16_result_rule() {
  return {"matmul_bf16_result", op("to", {fusable_matmul(false)}).dtype(DType::BF16),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* mm = m.node("mm");
            // A residual is of the result's dtype: an f32 one stays.
            if (mm->input(0)->type().dtype != DType::BF16 || !mm->attr_string("dtype").empty() ||
                cpu::epilogue_of(*mm).residual)
              return {};
            return extend(g, m, {}, [](AttrMap& a) { a["dtype"] = std::string("bf16"); });
          }};
}

}  // namespace

std::unique_ptr<Pass> make_fuse_matmul_epilogue() {
  std::vector<RewriteRule> rules;
  for (bool through_reshape : {false, true}) {
    rules.push_back(bias_rule(through_reshape));
    rules.push_back(activation_rule(through_reshape));
    rules.push_back(residual_rule(through_reshape));
  }
  rules.push_back(bf16_result_rule());
  return std::make_unique<PatternRewritePass>("fuse_matmul_epilogue", std::move(rules));
}

}  // namespace kiln
