// Elementwise chain fusion: a connected group of elementwise ops (unary, binary with
// broadcasting, Python-number operands) becomes one fused_elementwise node that evaluates the
// group's expression per element, reading each input once and writing the output once.
//   %a = mul(%x, 0.5) ; %b = add(%a, %y) ; %c = tanh(%b)
//     →  %c = fused_elementwise(%x, %y) {ops = ["mul", "add", "tanh"],
//                                        args = [0, -2, 2, 1, 3, -1], immediates = [0.5]}
// A group grows backwards from its last op through operands whose every use is inside the group
// and that are not graph outputs, so no intermediate anyone else reads is lost; it is limited to
// the kernel's 4 tensor inputs and kMaxOps ops, all of one dtype (f32, f64, f16 or bf16). An f16
// or bf16 group computes each op in f32 and rounds its result to the 2-byte dtype, as the unfused
// ops store it; an op reading another dtype (a 2-byte value with an f32 one) stays unfused.
// A reduction (sum, mean, amax/max, amin/min) over trailing dims whose input is such a chain's
// result, read by nothing else, is the root of the group and becomes its reduction stage, so the
// chain's result is never written:
//   %s = mul(%x, %x) ; %r = sum(%s) {dim = [-1]}
//     →  %r = fused_elementwise(%x) {ops = ["mul"], args = [0, 0], reduce = "sum",
//                                    reduce_dims = [-1]}
// A reduction over other dims (a column sum [N, C] → [C]) is left alone: the fused kernel folds
// contiguous rows, and the reduction ops' column kernels beat producing the chain column-wise.
// A reduction over trailing dims of a value x of the group's shape that the group also reads
// (keepdim, or over all dims, so it broadcasts along x's rows) joins as a row reduction: the
// kernel reduces each row of x and then runs the chain over that row while it is in cache.
//   %m = mean(%x) {dim = [-1], keepdim = true} ; %d = sub(%x, %m)
//     →  %d = fused_elementwise(%x) {ops = ["row_mean", "sub"], args = [0, -1, 0, 1],
//                                    row_ndim = 1}
// x stays the group's input (its producer never joins); a group has row reductions or a
// reduction stage, not both, and only over f32 or f64 (2-byte reductions compute in f32 between
// casts, docs/ops.md, so no 2-byte group meets one).
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
  if (!is_floating(dtype)) return std::nullopt;
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

// The fused_elementwise reduce stage of a reduction node over trailing dims of an f32 or f64
// value, or nullopt.
std::optional<std::string> trailing_reduction(const Node& n) {
  static const std::unordered_map<std::string, std::string> stages{
      {"sum", "sum"}, {"mean", "mean"}, {"amax", "amax"},
      {"max", "amax"}, {"amin", "amin"}, {"min", "amin"}};
  auto stage = stages.find(n.op());
  if (stage == stages.end() || n.inputs().size() != 1 || n.outputs().size() != 1)
    return std::nullopt;
  const TensorType& x = n.input(0)->type();
  if (x.dtype != DType::F32 && x.dtype != DType::F64) return std::nullopt;
  const auto rank = static_cast<int64_t>(x.rank());
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t d : n.attr_ints("dim"))
    if (rank > 0) reduced[static_cast<size_t>(d < 0 ? d + rank : d)] = true;
  // Empty: all dims. Otherwise no kept dim may follow a reduced one.
  if (!n.attr_ints("dim").empty() && !std::is_sorted(reduced.begin(), reduced.end()))
    return std::nullopt;
  return stage->second;
}

// The row reduction a node would be in a group rooted at `root`: its row_ndim, or nullopt.
std::optional<int64_t> row_reduction(const Node& n, const Node& root,
                                     const std::vector<Node*>& group) {
  if (trailing_reduction(root) || !trailing_reduction(n)) return std::nullopt;
  const Value* x = n.input(0);
  if (x->type().rank() == 0 || x->type().shape != root.output()->type().shape) return std::nullopt;
  const std::vector<int64_t>& dims = n.attr_ints("dim");
  if (!dims.empty() && !n.attr_bool("keepdim")) return std::nullopt;
  // Only where the group reads x too: that second read is what the row-wise kernel saves.
  const bool read_by_group = std::any_of(x->users().begin(), x->users().end(), [&](Node* u) {
    return u != &n && std::find(group.begin(), group.end(), u) != group.end();
  });
  if (!read_by_group) return std::nullopt;
  return dims.empty() ? static_cast<int64_t>(x->type().rank()) : static_cast<int64_t>(dims.size());
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
      if (taken.count(root) || !(fusable(*root) || trailing_reduction(*root))) continue;
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
    std::optional<int64_t> group_row_ndim;  // of the row reductions in the group
    auto in_group = [&](const Node* n) {
      return std::find(group.begin(), group.end(), n) != group.end();
    };
    for (bool added = true; added && group.size() < kMaxOps;) {
      added = false;
      for (size_t g = 0; g < group.size() && group.size() < kMaxOps; ++g) {
        for (Value* in : group[g]->inputs()) {
          Node* p = in->producer();
          if (!p || taken.count(p) || in_group(p) || outputs.count(in) ||
              p->output()->type().dtype != dtype)
            continue;
          // The input of a row reduction stays the group's input.
          if (std::any_of(in->users().begin(), in->users().end(), [&](Node* u) {
                return u != root && in_group(u) && trailing_reduction(*u);
              }))
            continue;
          const std::optional<int64_t> rows = row_reduction(*p, *root, group);
          if (!fusable(*p) && !(rows && (!group_row_ndim || *rows == *group_row_ndim))) continue;
          const bool private_value = std::all_of(in->users().begin(), in->users().end(), [&](Node* u) {
            return std::find(group.begin(), group.end(), u) != group.end();
          });
          if (!private_value) continue;
          group.push_back(p);
          if (external_inputs(group).size() > kMaxInputs) {
            group.pop_back();
            continue;
          }
          if (rows) group_row_ndim = rows;
          added = true;
        }
      }
    }
    return group;
  }

  // `group` in topological order, its root (an elementwise op or a reduction) last. False (and
  // the graph unchanged) when the fused node's inferred type differs from the root's, which
  // symbolic broadcasting could give.
  static bool replace(Graph& graph, const std::vector<Node*>& group) {
    std::vector<Value*> inputs = external_inputs(group);
    std::unordered_map<const Value*, int64_t> reg;
    for (size_t i = 0; i < inputs.size(); ++i) reg[inputs[i]] = static_cast<int64_t>(i);
    std::vector<std::string> ops;
    std::vector<int64_t> args;
    std::vector<double> immediates;
    Node* root = group.back();
    const std::optional<std::string> reduce = trailing_reduction(*root);
    int64_t row_ndim = 0;
    for (const Node* n : group) {
      if (n == root && reduce) break;
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
      if (std::optional<std::string> stage = trailing_reduction(*n)) {  // a row reduction
        ops.push_back("row_" + *stage);
        const std::vector<int64_t>& dims = n->attr_ints("dim");
        row_ndim = dims.empty() ? static_cast<int64_t>(n->input(0)->type().rank())
                                : static_cast<int64_t>(dims.size());
      } else {
        ops.push_back(*fused_op(*n));
      }
    }
    AttrMap attrs{{"ops", ops}, {"args", args}, {"immediates", immediates}};
    if (reduce) {
      attrs["reduce"] = *reduce;
      attrs["reduce_dims"] = root->attr_ints("dim");
      attrs["keepdim"] = root->attr_bool("keepdim");
    }
    if (row_ndim > 0) attrs["row_ndim"] = row_ndim;
    Value* fused = graph.add("fused_elementwise", inputs, attrs, root->output()->name());
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
