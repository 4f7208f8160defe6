// Convolution epilogue fusion: a residual add, an activation and a hardtanh that follow a conv2d
// are folded into its epilogue (kernels/cpu/conv.h), which oneDNN applies as post-ops while each
// output block is still in registers instead of in separate passes over memory.
//   %y = conv2d(...) ; %z = add(%y, %r)   with %r of %y's type   →  conv2d(..., %r) {residual = true}
//   %y = conv2d(...) ; %z = act(%y)       act: relu, gelu, silu, sigmoid, tanh
//                                                                 →  conv2d(...) {fused_activation = act}
//   %y = conv2d(...) ; %z = hardtanh(%y)  (relu6 included)       →  conv2d(...) {clamp_min, clamp_max}
// Each step needs %y to have no other use and not be a graph output. The epilogue order is fixed
// (bias, residual, activation, clamp), so a step fires only when the later ones are still empty:
// ResNet's relu(conv + identity) and MobileNetV2's conv + identity and relu6(conv) all fuse.
#include <cmath>
#include <functional>
#include <optional>

#include "kernels/cpu/gemm_epilogue.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;
using cpu::Activation;

Pattern fusable_conv() { return op("conv2d").single_use().as("conv"); }

bool has_activation(const Node& conv) { return conv.attr_string("fused_activation") != "none"; }
bool has_clamp(const Node& conv) {
  return !std::isinf(conv.attr_float("clamp_min")) || !std::isinf(conv.attr_float("clamp_max"));
}

// The convolution `conv` with `extra` appended to its inputs and `update` applied to its
// attributes, named after the value it replaces.
std::vector<Value*> extend(Graph& g, const Match& m, Value* extra,
                           const std::function<void(AttrMap&)>& update) {
  Node* conv = m.node("conv");
  std::vector<Value*> inputs = conv->inputs();
  if (extra) inputs.push_back(extra);
  AttrMap attrs = conv->attrs();
  update(attrs);
  return {g.add_uncast("conv2d", inputs, std::move(attrs), m.root->name())};
}

std::optional<Activation> activation_of(const Node& node) {
  if (node.op() == "gelu")
    return node.attr_string("approximate") == "tanh" ? Activation::GeluTanh : Activation::GeluErf;
  return cpu::parse_activation(node.op());
}

RewriteRule residual_rule() {
  return {"conv_residual",
          op("add", {fusable_conv(), any("r")}).attr("alpha", 1.0).commutative(),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* conv = m.node("conv");
            const TensorType& y = conv->output()->type();
            if (conv->attr_bool("residual") || has_activation(*conv) || has_clamp(*conv) ||
                m["r"]->type() != y || m.root->output()->type() != y)
              return {};
            return extend(g, m, m["r"], [](AttrMap& a) { a["residual"] = true; });
          }};
}

RewriteRule activation_rule() {
  return {"conv_activation",
          any_op({"relu", "gelu", "silu", "sigmoid", "tanh"}, {fusable_conv()}),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* conv = m.node("conv");
            const std::optional<Activation> a = activation_of(*m.root);
            if (!a || has_activation(*conv) || has_clamp(*conv)) return {};
            return extend(g, m, nullptr, [&](AttrMap& attrs) {
              attrs["fused_activation"] = std::string(cpu::activation_name(*a));
            });
          }};
}

RewriteRule clamp_rule() {
  return {"conv_hardtanh", op("hardtanh", {fusable_conv()}),
          [](Graph& g, const Match& m) -> std::vector<Value*> {
            Node* conv = m.node("conv");
            const double lo = m.root->attr_float("min_val"), hi = m.root->attr_float("max_val");
            // hardtanh with a NaN or crossed bound is not a clamp the epilogue can express.
            if (has_clamp(*conv) || std::isnan(lo) || std::isnan(hi) || lo > hi) return {};
            return extend(g, m, nullptr, [&](AttrMap& attrs) {
              attrs["clamp_min"] = lo;
              attrs["clamp_max"] = hi;
            });
          }};
}

}  // namespace

std::unique_ptr<Pass> make_fuse_conv_epilogue() {
  return std::make_unique<PatternRewritePass>(
      "fuse_conv_epilogue",
      std::vector<RewriteRule>{residual_rule(), activation_rule(), clamp_rule()});
}

}  // namespace kiln
