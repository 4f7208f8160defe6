// Kiln's graph IR and the public builder API (the counterpart of GE's Graph/GraphBuilder).
//
// A Graph owns Values and Nodes. Each Value is defined exactly once: as a graph input, as a
// constant (weights), or as an output of one Node; any number of Nodes use it. Nodes are kept in
// a topological order. Every node's op is declared in the op registry (src/ops), which infers the
// types of its outputs when the node is added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln {

using Attr = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                          std::vector<double>, std::vector<bool>, std::vector<std::string>,
                          Tensor>;
using AttrMap = std::map<std::string, Attr>;  // ordered: printing is deterministic

class Graph;
class Node;

class Value {
 public:
  enum class Kind : uint8_t { Input, Constant, NodeOutput };

  Kind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  void set_type(TensorType type) { type_ = std::move(type); }
  // The defining node for NodeOutput values, else null.
  Node* producer() const { return producer_; }
  int producer_index() const { return producer_index_; }
  // Each using node once per operand position that refers to this value.
  const std::vector<Node*>& users() const { return users_; }
  const Tensor& constant() const { return constant_; }  // Constant values only
  const Graph* graph() const { return graph_; }

 private:
  friend class Graph;
  friend struct GraphTestAccess;  // tests corrupt graphs on purpose to exercise the verifier
  Kind kind_ = Kind::NodeOutput;
  const Graph* graph_ = nullptr;
  std::string name_;
  TensorType type_;
  Node* producer_ = nullptr;
  int producer_index_ = 0;
  std::vector<Node*> users_;
  Tensor constant_;
};

class Node {
 public:
  const std::string& op() const { return op_; }
  const std::string& name() const { return name_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return inputs_.at(i); }
  Value* output(size_t i = 0) const { return outputs_.at(i); }
  const AttrMap& attrs() const { return attrs_; }

  bool has_attr(const std::string& key) const { return attrs_.count(key) != 0; }
  // Typed attribute access; the op registry fills in defaults, so declared attributes exist.
  int64_t attr_int(const std::string& key) const;
  double attr_float(const std::string& key) const;
  bool attr_bool(const std::string& key) const;
  const std::string& attr_string(const std::string& key) const;
  const std::vector<int64_t>& attr_ints(const std::string& key) const;

  // Free-form notes that passes and the runtime fill and graph dumps show; never semantics (the
  // textual IR prints them only as comments). Keys: "source" (the PyTorch module path, e.g.
  // encoder.layer.3.attention.self.query), "aten" (the ATen op it came from), "fx" (the name of
  // the FX node whose output(s) this node computes: the precision check compares them); "engine",
  // "kernel", "subgraph" on per-plan copies (runtime/kernel_selection.h); "layout" if a pass
  // notes one (dumps otherwise show the output's). A node that replaces others takes the source of the node it replaces (a
  // fusion: its anchor, the node whose output it computes) via inherit_source.
  const std::map<std::string, std::string>& annotations() const { return annotations_; }
  std::string annotation(const std::string& key) const;  // "" when absent
  void annotate(const std::string& key, std::string value) { annotations_[key] = std::move(value); }
  void inherit_source(const Node& from);  // copies from's "source", "aten" and "fx"

 private:
  friend class Graph;
  friend struct GraphTestAccess;
  std::map<std::string, std::string> annotations_;
  std::string op_;
  std::string name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  AttrMap attrs_;
};

// Hands out unique names: the hint itself if free, else hint_1, hint_2, ...
class NamePool {
 public:
  std::string take(const std::string& hint);

 private:
  std::set<std::string> used_;
  std::map<std::string, int> next_suffix_;
};

class Graph {
 public:
  explicit Graph(std::string name = "main");
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // A deep copy (constants share their storage, which is immutable).
  std::unique_ptr<Graph> clone() const;

  const std::string& name() const { return name_; }
  SymbolTable& symbols() { return symbols_; }
  const SymbolTable& symbols() const { return symbols_; }
  // Declares a dynamic dimension; returns a Dim usable in input shapes.
  Dim add_symbol(const std::string& name, int64_t min, int64_t max);

  // --- building ---
  Value* add_input(const std::string& name, TensorType type);
  Value* add_constant(const std::string& name, Tensor data);
  // Adds a node at the end, checks its inputs and attributes against the op's schema, fills in
  // attribute defaults and infers its output types. Throws E50001 for an unknown op and E40002
  // when the op can't take these inputs. A node of an op that computes f16 and bf16 in f32
  // (docs/ops.md) on such inputs is built as casts to f32, the op and casts back: the values
  // returned are then the casts' (and the node named `name` is the op's).
  std::vector<Value*> add_node(const std::string& op, const std::vector<Value*>& inputs,
                               AttrMap attrs = {}, const std::string& name = "");
  // Single-output convenience.
  Value* add(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs = {},
             const std::string& name = "");
  // add() without the f16/bf16 casts, for passes rebuilding a node on operands its kernels take
  // as they are (a matmul on bf16 operands, docs/passes.md).
  Value* add_uncast(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs = {},
                    const std::string& name = "");
  void set_outputs(std::vector<Value*> outputs);

  // --- rewriting (used by passes) ---
  // Adds a node whose output types are given rather than inferred (the textual IR parser and
  // passes that know the types); the verifier checks them against inference.
  Node* add_node_with_types(const std::string& op, const std::vector<Value*>& inputs,
                            AttrMap attrs, const std::vector<TensorType>& output_types,
                            const std::string& name = "",
                            const std::vector<std::string>& output_names = {});
  // Every use of `from` (node operands and graph outputs) becomes a use of `to`.
  void replace_all_uses(Value* from, Value* to);
  void remove_node(Node* node);  // the node's outputs must have no users
  void remove_constant(Value* constant);  // must have no users and not be a graph output
  // Keeps the constant's type and uses but drops its data (Tensor::without_data): for a compiled
  // graph whose kernels read only prepared copies of it (CompileOptions::release_prepacked_constants).
  void release_constant_data(Value* constant);
  // Restores topological order after rewrites that appended nodes out of order.
  void topological_sort();

  // --- reading ---
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& constants() const { return constants_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  // Nodes in topological order.
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return nodes_.size(); }
  Value* find_value(const std::string& name) const;

 private:
  friend struct GraphTestAccess;
  Value* new_value(Value::Kind kind, const std::string& name, TensorType type);
  Value* new_constant(const std::string& name, Tensor data);  // add_constant, unchecked
  // Throws E10001 for a null value or one that belongs to another graph.
  void check_owned(const Value* v, const std::string& where) const;
  Node* append_node(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs,
                    const std::string& name);
  // add_node, with or without the f16/bf16 casts.
  std::vector<Value*> add_node_cast(const std::string& op, const std::vector<Value*>& inputs,
                                    AttrMap attrs, const std::string& name, bool cast);

  std::string name_;
  SymbolTable symbols_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> constants_;
  std::vector<Value*> outputs_;
  NamePool value_names_;
  NamePool node_names_;
};

// Checks every structural rule of the IR and the types of every node against its op's
// inference; throws E40001 naming the first broken rule and where.
void verify(const Graph& graph);

// The textual IR (docs/ir.md). parse(print(g)) reproduces g exactly, constants included.
std::string print_graph(const Graph& graph);
// For graph dumps: print_graph with each node's annotations as a trailing comment, and constants
// of more than max_constant_bytes declared as inputs with their data elided. It still parses
// (the annotations are dropped, elided constants become inputs).
std::string print_graph_annotated(const Graph& graph, size_t max_constant_bytes = SIZE_MAX);
std::unique_ptr<Graph> parse_graph(const std::string& text);  // throws E10010 with line:column

}  // namespace kiln
