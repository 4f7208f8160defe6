// The op registry: each op declared once with its schema, its type inference (which works on
// symbolic dims) and its kernels, best first with a reference kernel last.
//
// Adding an op: write src/ops/<op or family>.cc defining `void register_<family>_ops(OpRegistry&)`
// and add one line `KILN_OP_FAMILY(<family>)` to src/ops/op_list.inc.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "ops/prepared_constants.h"

namespace kiln {

// ---------------------------------------------------------------- type inference

class InferContext {
 public:
  InferContext(const std::string& op, const std::string& node_name,
               std::vector<TensorType> input_types, const AttrMap& attrs, SymbolTable& symbols,
               size_t num_outputs);

  const std::string& op() const { return op_; }
  size_t num_inputs() const { return inputs_.size(); }
  const TensorType& input(size_t i) const { return inputs_.at(i); }
  const AttrMap& attrs() const { return attrs_; }
  int64_t attr_int(const std::string& key) const;
  double attr_float(const std::string& key) const;
  bool attr_bool(const std::string& key) const;
  const std::string& attr_string(const std::string& key) const;
  const std::vector<int64_t>& attr_ints(const std::string& key) const;
  SymbolTable& symbols() { return symbols_; }

  // Ops with a data-dependent output count (split, ...) declare num_outputs = 0 and set as many
  // outputs as they produce.
  void set_output(size_t i, TensorType type) {
    if (i >= outputs_.size()) outputs_.resize(i + 1);
    outputs_[i] = std::move(type);
  }
  std::vector<TensorType> take_outputs() { return std::move(outputs_); }

  // Throws E40002 naming the node, the op, every input type and the reason.
  [[noreturn]] void fail(const std::string& reason) const;
  void check(bool condition, const std::string& reason) const {
    if (!condition) fail(reason);
  }

  // A dim computed from `in` by a monotonic non-decreasing function `f`. A static dim gives
  // f(size); a symbolic one gives a derived symbol named `expr` (with "{}" replaced by the
  // symbol's name) whose range is [f(min), f(max)], or f(min) itself when that is f(max).
  Dim derive(Dim in, const std::function<int64_t(int64_t)>& f, const std::string& expr);
  // A size written as an expression over the graph's symbols (src/ir/sym_expr.h), as the
  // sym_* attributes of reshape, expand and slice hold it: static when the run binds its
  // symbols, else the symbol or a derived one. Fails (E40002) on a malformed expression.
  Dim sym_dim(const std::string& text);
  // Two dims that must be equal: a static one wins over a symbolic one; fails when both are
  // static and differ. Run-time inference on concrete shapes re-checks symbolic ones.
  Dim unify(Dim a, Dim b, const std::string& what);
  // A dim derived from symbolic ones (a sum, product, slice length): the symbol `name` over
  // [min, max], added to the graph's table on first use; a static dim when min == max.
  Dim derived_dim(const std::string& name, int64_t min, int64_t max);
  // NumPy-style broadcast of two shapes.
  Shape broadcast(const Shape& a, const Shape& b);

 private:
  std::string op_;
  std::string node_name_;
  std::vector<TensorType> inputs_;
  const AttrMap& attrs_;
  SymbolTable& symbols_;
  std::vector<TensorType> outputs_;
};

// ---------------------------------------------------------------- kernels

// What a kernel is created for: one node with concrete (static) types.
struct KernelSpec {
  const Node& node;
  std::vector<TensorType> inputs;   // all static
  std::vector<TensorType> outputs;  // all static
  // For each input, its data when it is a graph constant (weights), else null: a kernel may
  // prepack it once here and ignore the pointer at run time.
  std::vector<const Tensor*> constant_inputs;
  int threads = 1;
  // Where a kernel shares its prepared constants with the compiled graph's other kernels; null
  // (constant folding, tests) makes each kernel prepare its own.
  PreparedConstants* prepared = nullptr;
  // GEMM kernels read constant B as it is stored, no prepacked copy (gemm_weights_in_place).
  bool gemm_weights_in_place = false;

  std::vector<int64_t> input_sizes(size_t i) const { return static_sizes(inputs.at(i).shape); }
  std::vector<int64_t> output_sizes(size_t i) const { return static_sizes(outputs.at(i).shape); }
};

// A kernel bound to concrete shapes. run() is const and reentrant: one instance serves several
// concurrent runs, each with its own scratch memory of scratch_bytes().
class KernelInstance {
 public:
  virtual ~KernelInstance() = default;
  virtual size_t scratch_bytes() const { return 0; }
  // False for a constant input that the kernel prepared a copy of at creation and never reads
  // at run time: when no kernel reads a constant the compile made, the compiled graph drops it.
  virtual bool reads_input_at_run_time(size_t /*input*/) const { return true; }
  virtual void run(std::span<const void* const> inputs, std::span<void* const> outputs,
                   void* scratch) const = 0;
};

// A KernelInstance from a lambda, for kernels that keep no prepared state beyond the spec.
template <typename Fn>
class LambdaKernel final : public KernelInstance {
 public:
  explicit LambdaKernel(Fn fn) : fn_(std::move(fn)) {}
  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void*) const override {
    fn_(inputs, outputs);
  }

 private:
  Fn fn_;
};
template <typename Fn>
std::unique_ptr<KernelInstance> make_kernel(Fn fn) {
  return std::make_unique<LambdaKernel<Fn>>(std::move(fn));
}

struct KernelDef {
  std::string name;    // e.g. "onednn", "openblas", "avx2", "reference"
  std::string engine;  // "onednn", "openblas" or "native" (Kiln's own code): dumps show it
  // Empty when the kernel can run this spec, else why not (shown in dumps and errors).
  std::function<std::string(const KernelSpec&)> unsupported_reason;
  std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> create;
  // In-place execution: the inputs whose memory output 0 may reuse. Declare an input only when
  // the kernel never reads one of its elements after writing the output element at the same
  // position (elementwise ops; row ops that read a row's statistics before writing the row).
  // The planner uses it only when that input dies at this node, lives in the arena and has
  // output 0's dtype and byte size. Empty (the default): never in place.
  std::vector<size_t> in_place_inputs = {};
  // A view: output 0 is input 0's bytes unchanged (a reshape of row-major data). The planner
  // then gives output 0 input 0's buffer, alive until the last reader of either, whether or
  // not input 0 dies here, and the kernel finds its output already written. Used only when
  // both live in the arena with the same dtype and byte size; otherwise the kernel copies.
  bool output_aliases_input = false;
};

// ---------------------------------------------------------------- ops

struct ArgSpec {
  std::string name;
  bool variadic = false;  // only the last input; takes zero or more values
};

struct AttrSpec {
  std::string name;
  Attr default_value;     // also fixes the attribute's kind
  bool required = false;  // no default: the builder must give it
};

struct OpDef {
  std::string name;
  std::vector<ArgSpec> inputs;
  size_t num_outputs = 1;  // 0: decided by infer
  std::vector<AttrSpec> attrs;
  std::function<void(InferContext&)> infer;
  std::vector<KernelDef> kernels;  // best first; the last is the reference kernel
  // Whether infer and every kernel handle inputs in layouts other than Plain (include/kiln/
  // shape.h); other ops get a Plain-only check before infer, so they never misread a tensor.
  bool layout_aware = false;
  // PyTorch's CPU kernels compute this op's f16 and bf16 inputs in f32 and round each floating
  // result once: the builder (Graph::add_node) then builds the node in f32 between casts
  // (src/ops/low_precision.h), so infer and the kernels see only f32 and wider.
  bool computes_low_precision_in_f32 = false;
  // With it: the result takes input 0's dtype rather than torch.result_type of all operands, as
  // PyTorch's norms do (a bf16 input with f32 weights gives bf16).
  bool low_precision_keeps_input_dtype = false;
  // The node does something beyond its outputs (a check that raises): dead-code elimination keeps
  // it though nothing reads them.
  bool has_side_effects = false;
};

class OpRegistry {
 public:
  static const OpRegistry& instance();
  const OpDef* find(const std::string& op) const;
  std::vector<std::string> op_names() const;
  void add(OpDef def);

 private:
  std::vector<OpDef> ops_;
};

// Checks attributes against the schema (E40002: unknown, missing or of the wrong kind), fills in
// defaults and converts lossless kinds (an int for a float, an empty list of another kind).
void complete_attrs(const OpDef& def, const std::string& node_name, AttrMap& attrs);

// Checks inputs and attributes against the schema (E40002), completes the attributes, and
// returns the inferred output types. Shared by the builder, the parser and the verifier.
std::vector<TensorType> infer_node_types(const OpDef& def, const std::string& node_name,
                                         const std::vector<TensorType>& input_types,
                                         AttrMap& attrs, SymbolTable& symbols);

}  // namespace kiln
