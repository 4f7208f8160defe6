// The IR verifier. Each rule below has its own test in tests/cpp/test_verifier.cc.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/graph.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

[[noreturn]] void broken(const Graph& g, const std::string& rule, const std::string& what) {
  throw_error(ErrorCode::InvalidGraph, "graph '", g.name(), "' breaks the rule '", rule, "': ",
              what);
}

void check_symbols(const Graph& g, const Value* v) {
  for (const Dim& d : v->type().shape) {
    if (!d.is_static() && static_cast<size_t>(d.symbol()) >= g.symbols().size())
      broken(g, "symbols are declared", "value %" + v->name() + " uses undeclared symbol #" +
                                            std::to_string(d.symbol()));
    if (d.is_static() && d.size() < 0)
      broken(g, "dims are non-negative", "value %" + v->name() + " has a negative dim");
  }
}

}  // namespace

void verify(const Graph& g) {
  // Rule: single definition — each value is defined once, by exactly one of: the input list, the
  // constant list, or one output slot of one node.
  std::unordered_map<const Value*, std::string> defined_by;
  auto define = [&](const Value* v, const std::string& by) {
    auto [it, fresh] = defined_by.emplace(v, by);
    if (!fresh)
      broken(g, "single definition", "value %" + v->name() + " is defined by " + it->second +
                                         " and again by " + by);
  };
  for (const Value* v : g.inputs()) {
    if (v->kind() != Value::Kind::Input)
      broken(g, "single definition", "%" + v->name() + " is listed as an input but is not one");
    define(v, "the input list");
  }
  for (const Value* v : g.constants()) {
    if (v->kind() != Value::Kind::Constant)
      broken(g, "single definition", "%" + v->name() + " is listed as a constant but is not one");
    const Tensor& t = v->constant();
    if (t.dtype() != v->type().dtype || make_shape(t.sizes()) != v->type().shape)
      broken(g, "constants match their type",
             "constant %" + v->name() + " is declared " + type_string(v->type()) +
                 " but holds " + std::string(dtype_name(t.dtype())) + shape_string(t.sizes()));
    define(v, "the constant list");
  }
  std::vector<Node*> nodes = g.nodes();
  for (const Node* n : nodes) {
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      const Value* out = n->output(i);
      if (out->kind() != Value::Kind::NodeOutput || out->producer() != n ||
          out->producer_index() != static_cast<int>(i))
        broken(g, "single definition",
               "output " + std::to_string(i) + " of node " + n->name() + " (%" + out->name() +
                   ") does not name that node as its producer");
      define(out, "node " + n->name());
    }
  }

  // Rule: unique value names (the textual IR and dumps refer to values by name).
  std::unordered_set<std::string> names;
  for (const auto& [v, by] : defined_by)
    if (!names.insert(v->name()).second)
      broken(g, "unique names", "two values are named %" + v->name());

  // Rule: every operand and graph output is defined in this graph.
  for (const Node* n : nodes)
    for (const Value* in : n->inputs())
      if (!defined_by.count(in))
        broken(g, "operands are defined", "node " + n->name() + " uses a value that no input, "
                                          "constant or node of this graph defines");
  if (g.outputs().empty()) broken(g, "outputs exist", "the graph has no outputs");

  // Rule: graph inputs and outputs are plain (callers pass and get plain tensors, as PyTorch).
  for (const auto* list : {&g.inputs(), &g.outputs()})
    for (const Value* v : *list)
      if (v->type().layout != Layout::Plain)
        broken(g, "graph inputs and outputs are plain",
               "%" + v->name() + " is " + type_string(v->type(), &g.symbols()) +
                   "; reorder it to plain");
  for (const Value* out : g.outputs())
    if (!defined_by.count(out))
      broken(g, "operands are defined", "a graph output is not defined in this graph");

  // Rule: use lists agree with operands (each operand position is one use).
  std::unordered_map<const Value*, std::vector<const Node*>> uses;
  for (const Node* n : nodes)
    for (const Value* in : n->inputs()) uses[in].push_back(n);
  for (const auto& [v, by] : defined_by) {
    std::vector<const Node*> expected = uses[v];
    std::vector<const Node*> recorded(v->users().begin(), v->users().end());
    std::sort(expected.begin(), expected.end());
    std::sort(recorded.begin(), recorded.end());
    if (expected != recorded)
      broken(g, "use lists are consistent", "the users of %" + v->name() +
                                                " disagree with the nodes that take it as input");
  }

  // Rule: acyclic (Kahn's algorithm, independent of the stored order).
  std::unordered_map<const Node*, size_t> pending;
  for (const Node* n : nodes) {
    size_t deps = 0;
    for (const Value* in : n->inputs()) deps += in->producer() != nullptr;
    pending[n] = deps;
  }
  std::vector<const Node*> ready;
  for (const Node* n : nodes)
    if (pending[n] == 0) ready.push_back(n);
  size_t visited = 0;
  while (!ready.empty()) {
    const Node* n = ready.back();
    ready.pop_back();
    ++visited;
    for (const Value* out : n->outputs())
      for (const Node* user : out->users())
        if (--pending[user] == 0) ready.push_back(user);
  }
  if (visited != nodes.size()) {
    std::string cycle;
    for (const Node* n : nodes)
      if (pending[n] > 0) cycle += (cycle.empty() ? "" : ", ") + n->name();
    broken(g, "acyclic", "these nodes are on or after a cycle: " + cycle);
  }

  // Rule: the stored node order is topological (each operand defined before its use).
  std::unordered_set<const Value*> available(g.inputs().begin(), g.inputs().end());
  available.insert(g.constants().begin(), g.constants().end());
  for (const Node* n : nodes) {
    for (const Value* in : n->inputs())
      if (!available.count(in))
        broken(g, "topological order",
               "node " + n->name() + " uses %" + in->name() + " before its definition");
    available.insert(n->outputs().begin(), n->outputs().end());
  }

  // Rule: declared symbols and non-negative dims.
  for (const auto& [v, by] : defined_by) check_symbols(g, v);

  // Rule: every node's op exists and its recorded types and attributes are what the op infers.
  SymbolTable symbols = g.symbols();
  for (const Node* n : nodes) {
    const OpDef* def = OpRegistry::instance().find(n->op());
    if (!def) broken(g, "ops are registered", "node " + n->name() + " has unknown op " + n->op());
    std::vector<TensorType> in_types;
    for (const Value* in : n->inputs()) in_types.push_back(in->type());
    AttrMap attrs = n->attrs();
    std::vector<TensorType> inferred;
    try {
      inferred = infer_node_types(*def, n->name(), in_types, attrs, symbols);
    } catch (const Error& e) {
      broken(g, "types agree with inference", e.detail());
    }
    // Same keys and kinds (values may be NaN, which never compares equal).
    bool complete = attrs.size() == n->attrs().size() &&
                    std::equal(attrs.begin(), attrs.end(), n->attrs().begin(),
                               [](const auto& a, const auto& b) {
                                 return a.first == b.first && a.second.index() == b.second.index();
                               });
    if (!complete)
      broken(g, "attributes are complete", "node " + n->name() +
                                              " lacks attributes that its op declares");
    if (inferred.size() != n->outputs().size())
      broken(g, "types agree with inference",
             "node " + n->name() + " has " + std::to_string(n->outputs().size()) +
                 " outputs but " + n->op() + " produces " + std::to_string(inferred.size()));
    for (size_t i = 0; i < inferred.size(); ++i) {
      const TensorType& recorded = n->output(i)->type();
      // A derived symbol in the recorded type and a fresh one from inference name the same dim
      // when their names agree.
      bool same = recorded.dtype == inferred[i].dtype && recorded.layout == inferred[i].layout &&
                  recorded.rank() == inferred[i].rank();
      for (size_t d = 0; same && d < recorded.rank(); ++d) {
        const Dim &a = recorded.shape[d], &b = inferred[i].shape[d];
        same = a.is_static() == b.is_static() &&
               (a.is_static() ? a.size() == b.size()
                              : g.symbols()[a.symbol()].name == symbols[b.symbol()].name);
      }
      if (!same)
        broken(g, "types agree with inference",
               "node " + n->name() + " output %" + n->output(i)->name() + " is recorded as " +
                   type_string(recorded, &g.symbols()) + " but " + n->op() + " infers " +
                   type_string(inferred[i], &symbols));
    }
  }
}

}  // namespace kiln
