// Elementwise chain fusion: a connected group of elementwise ops (unary, binary with
// broadcasting, Python-number operands) becomes one fused_elementwise node that evaluates the
// group's expression per element, reading each input once and writing the output once.
//   %a = mul(%x, 0.5) ; %b = add(%a, %y) ; %c = tanh(%b)
//     →  %c = fused_elementwise(%x, %y) {ops = ["mul", "add", "tanh"],
//                                        args = [0, -2, 2, 1, 3, -1], immediates = [0.5]}
// A group grows backwards from its last op through operands whose every use is inside the group
// and that are not graph outputs, so no intermediate anyone else reads is lost; it is limited to
// the kernel's 4 tensor inputs and kMaxOps ops, all of one dtype (f32 or f64).
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "passes/pass_list.h"
#include "passes/scalar_constant.h"

namespace kiln {

namespace {

constexpr size_t kMaxInputs = 4;  // fused_elementwise's BroadcastPlan limit
constexpr size_t kMaxOps = 16;    // the AVX2 kernel keeps one L1 block per op

// The fused_elementwise op name of a node, or nullopt when the node can't join a group.
std::optional<std::string> fused_op(const Node& n) {
  static const std::unordered_set<std::string> plain{
      "relu", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh",
      "erf", "silu", "mul", "maximum", "minimum"};
  if (n.outputs().size() != 1) return std::nullopt;
  const DType dtype = n.output()->type().dtype;
  if (dtype != DType::F32 && dtype != DType::F64) return std::nullopt;
  const std::string& op = n.op();
  if (plain.count(op)) return op;
  if (op == "gelu") return n.attr_string("approximate") == "tanh" ? "gelu_tanh" : "gelu_erf";
  if ((op == "add" || op == "sub") && n.attr_float("alpha") == 1) return op;
  if (op == "div" && n.attr_string("rounding_mode") == "none") return op;
  return std::nullopt;
}

// A rank-0 f32 or f64 constant: an immediate of the program rather than an input.
std::optional<double> immediate(const Value& v) {
  if (v.type().rank() != 0) return std::nullopt;
  return scalar_value(v);
}

// Every operand is a tensor of the node's dtype or an immediate (converted as the op converts it).
bool operands_fit(const Node& n) {
  const DType dtype = n.output()->type().dtype;
  for (const Value* in : n.inputs())
    if (in->type().dtype != dtype && !immediate(*in)) return false;
  return true;
}

class FuseElementwiseChains final : public Pass {
 public:
  std::string name() const override { return "fuse_elementwise_chains"; }

  bool run(Graph& graph) override {
    std::vector<Node*> nodes = graph.nodes();
    std::unordered_map<const Node*, size_t> position;
    for (size_t i = 0; i < nodes.size(); ++i) position[nodes[i]] = i;
    std::unordered_set<const Value*> outputs(graph.outputs().begin(), graph.outputs().end());
    std::unordered_set<const Node*> taken;
    bool changed = false;
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* root = *it;
      if (taken.count(root) || !fusable(*root)) continue;
      std::vector<Node*> group = grow(root, outputs, taken);
      if (group.size() < 2) continue;
      std::sort(group.begin(), group.end(),
                [&](const Node* a, const Node* b) { return position.at(a) < position.at(b); });
      for (const Node* n : group) taken.insert(n);
      changed |= replace(graph, group);
    }
    if (changed) graph.topological_sort();
    return changed;
  }

 private:
  static bool fusable(const Node& n) { return fused_op(n) && operands_fit(n); }

  // The group's tensor inputs: operands defined outside it that are not immediates.
  static std::vector<Value*> external_inputs(const std::vector<Node*>& group) {
    std::vector<Value*> inputs;
    for (const Node* n : group)
      for (Value* in : n->inputs()) {
        const bool inside = in->producer() && std::find(group.begin(), group.end(),
                                                        in->producer()) != group.end();
        if (!inside && !immediate(*in) && std::find(inputs.begin(), inputs.end(), in) == inputs.end())
          inputs.push_back(in);
      }
    return inputs;
  }

  // Adds producers whose outputs only the group reads until none can join (a value read by two
  // group ops joins once both are in).
  static std::vector<Node*> grow(Node* root, const std::unordered_set<const Value*>& outputs,
                                 const std::unordered_set<const Node*>& taken) {
    std::vector<Node*> group{root};
    const DType dtype = root->output()->type().dtype;
    for (bool added = true; added && group.size() < kMaxOps;) {
      added = false;
      for (size_t g = 0; g < group.size() && group.size() < kMaxOps; ++g) {
        for (Value* in : group[g]->inputs()) {
          Node* p = in->producer();
          if (!p || taken.count(p) || std::find(group.begin(), group.end(), p) != group.end() ||
              outputs.count(in) || !fusable(*p) || p->output()->type().dtype != dtype)
            continue;
          const bool private_value = std::all_of(in->users().begin(), in->users().end(), [&](Node* u) {
            return std::find(group.begin(), group.end(), u) != group.end();
          });
          if (!private_value) continue;
          group.push_back(p);
          if (external_inputs(group).size() > kMaxInputs) {
            group.pop_back();
            continue;
          }
          added = true;
        }
      }
    }
    return group;
  }

  // `group` in topological order, its root last. False (and the graph unchanged) when the fused
  // node's inferred type differs from the root's, which symbolic broadcasting could give.
  static bool replace(Graph& graph, const std::vector<Node*>& group) {
    std::vector<Value*> inputs = external_inputs(group);
    std::unordered_map<const Value*, int64_t> reg;
    for (size_t i = 0; i < inputs.size(); ++i) reg[inputs[i]] = static_cast<int64_t>(i);
    std::vector<std::string> ops;
    std::vector<int64_t> args;
    std::vector<double> immediates;
    for (const Node* n : group) {
      for (size_t k = 0; k < 2; ++k) {
        if (k >= n->inputs().size()) {
          args.push_back(-1);
          continue;
        }
        const Value* in = n->input(k);
        if (std::optional<double> value = immediate(*in)) {
          args.push_back(-2 - static_cast<int64_t>(immediates.size()));
          immediates.push_back(*value);
        } else {
          args.push_back(reg.at(in));
        }
      }
      reg[n->output()] = static_cast<int64_t>(inputs.size() + ops.size());
      ops.push_back(*fused_op(*n));
    }
    Node* root = group.back();
    Value* fused = graph.add("fused_elementwise", inputs,
                             {{"ops", ops}, {"args", args}, {"immediates", immediates}},
                             root->output()->name());
    if (fused->type() != root->output()->type()) {
      graph.remove_node(fused->producer());
      return false;
    }
    fused->producer()->inherit_source(*root);  // dumps and the precision check: the root's origin
    graph.replace_all_uses(root->output(), fused);
    for (auto it = group.rbegin(); it != group.rend(); ++it) graph.remove_node(*it);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_elementwise_chains() {
  return std::make_unique<FuseElementwiseChains>();
}

}  // namespace kiln
