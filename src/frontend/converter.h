// ATen → Kiln converters. The Python side serializes an FX graph generically (docs/frontend.md):
// each node's target ("aten.convolution.default"), its arguments by schema name, and the dtype
// and shape PyTorch computed for each output. A converter turns one such node into Kiln nodes.
//
// Adding a converter: write it in the src/frontend/aten/ file of its op family, which defines
// `void register_<family>_converters(ConverterRegistry&)`; a new family adds one line to
// src/frontend/converter_list.inc.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

using Json = nlohmann::json;

// Every (FX node name, output index) that a node's argument or the graph's outputs refer to.
using ReadOutputs = std::set<std::pair<std::string, size_t>>;

// One FX node being converted: typed access to its arguments, and the graph to emit into.
class ConvertContext {
 public:
  ConvertContext(Graph& graph, const Json& node, const ReadOutputs& read,
                 const std::function<Value*(const Json& ref)>& resolve);

  Graph& graph() { return graph_; }
  const std::string& node_name() const { return name_; }
  const std::string& target() const { return target_; }

  bool has(const std::string& arg) const;  // present and not None
  bool is_tensor(const std::string& arg) const;
  Value* tensor(const std::string& arg) const;
  Value* optional_tensor(const std::string& arg) const;  // null for None
  std::vector<Value*> tensors(const std::string& arg) const;
  std::vector<Value*> optional_tensors(const std::string& arg) const;  // null for each None
  int64_t integer(const std::string& arg) const;
  double number(const std::string& arg) const;  // an int or a float
  bool boolean(const std::string& arg) const;
  std::string string(const std::string& arg) const;
  std::vector<int64_t> integers(const std::string& arg) const;
  std::vector<double> numbers(const std::string& arg) const;
  // A list of sizes whose entries may be symbolic ({"sym": "s0*s1"}, docs/dynamic-shapes.md):
  // the integers (-1 where symbolic) and, when any entry is symbolic, each entry's expression
  // ("" where static) for the ops' sym_* attributes; `syms` is empty when all are static.
  struct Sizes {
    std::vector<int64_t> ints;
    std::vector<std::string> syms;
  };
  Sizes sizes(const std::string& arg) const;
  // The expression of a symbolic size argument ({"sym": "s0"}), or "" when it is not one.
  std::string sym(const std::string& arg) const;
  std::optional<DType> dtype(const std::string& arg) const;  // None → nullopt
  // An enum argument's name ("torch.contiguous_format"), "" for None.
  std::string enum_name(const std::string& arg) const;
  // The PyTorch-computed type of output i (dtype and shape, symbols by name).
  const Json& output_meta(size_t i = 0) const;
  DType output_dtype(size_t i = 0) const;
  // Whether anything in the FX graph reads output i: a converter may skip computing an unread
  // one, or pick a cheaper op.
  bool output_used(size_t i) const;

  // A new node named after the FX node. An ATen op computes f16 and bf16 in f32 and rounds its
  // results once (docs/ops.md, "Low-precision floats"): a node of an op that computes them in
  // f32 (OpDef::computes_low_precision_in_f32), and any node reading its result, is built in f32
  // and its result stays f32 (unrounded) until round_results, so a converter emitting several
  // nodes (addmm: matmul, then add) rounds once, as PyTorch does.
  Value* add(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs = {});
  // The converter's outputs, each unrounded one cast to its f16 or bf16 dtype.
  std::vector<Value*> round_results(std::vector<Value*> outputs);
  // A scalar constant of the given dtype, e.g. the `other` of add.Scalar.
  Value* scalar(double value, DType dtype);
  // A Python number argument as a rank-0 tensor of the dtype PyTorch gives it: bool, i64 (an int)
  // or f64 (a float), its value exact; a size (a SymInt) computed by the graph (size_value).
  Value* number_tensor(const std::string& arg);
  // A size PyTorch passes as a number ({"sym": "s1 - 1"}), computed by the graph as an i64 0-d
  // tensor: dim_size of an input having each symbol it reads as a dim, and integer ops.
  Value* size_value(const std::string& expr);
  // `v` in `dtype`: v itself when it has it, else a cast node.
  Value* cast(Value* v, DType dtype);
  // `v` reshaped to output i's shape as PyTorch computed it, symbolic dims included (a single
  // -1 can't stand for two dynamic dims: [s0*s1, 64] for view(x, [-1, 64]) of [s0, s1, 64]).
  Value* reshape_to_output(Value* v, size_t i = 0);
  // The dim argument `arg` of a tensor of rank `rank`, a negative one counted from the end:
  // in [0, rank), or E50001 naming the argument.
  int64_t dim(const std::string& arg, size_t rank) const;

  // This node can't be converted (an argument Kiln doesn't take): E50001 with the reason.
  [[noreturn]] void unsupported(const std::string& reason) const;

 private:
  const Json& arg(const std::string& name) const;
  Graph& graph_;
  const Json& node_;
  std::string name_;
  std::string target_;
  const ReadOutputs& read_;
  const std::function<Value*(const Json&)>& resolve_;
  std::map<const Value*, DType> unrounded_;  // f32 results and the dtype they round to
};

// Returns the node's outputs in order (one per FX output; null where an output isn't computed,
// like native_layer_norm's mean and rstd, which inference graphs don't use).
using Converter = std::function<std::vector<Value*>(ConvertContext&)>;

class ConverterRegistry {
 public:
  static const ConverterRegistry& instance();
  void add(const std::string& target, Converter converter);
  const Converter* find(const std::string& target) const;
  std::vector<std::string> targets() const;

 private:
  std::map<std::string, Converter> converters_;
};

// Builds a Kiln graph from a serialized FX graph; constants maps each placeholder of kind
// "constant" to its data (a borrowed tensor is used in place: the frozen weights). Throws E50001 for a node without a converter, E10020 for
// malformed JSON, E40001 when a converter's types disagree with PyTorch's.
std::unique_ptr<Graph> import_fx_graph(const std::string& json_text,
                                       const std::map<std::string, Tensor>& constants);

// For each call_function node: "" when it converts, else why not. Used to partition a graph
// between Kiln and PyTorch.
std::map<std::string, std::string> fx_node_support(const std::string& json_text);

}  // namespace kiln
