// Constant folding: a node whose inputs are all constants (weights, folded values) — so every
// subgraph that depends only on weights — is evaluated at compile time with its op's reference
// kernel and becomes a constant.
//   %y = op(%c1, ..., %cn)   with every %ci constant   →   const %y = op(c1, ..., cn)
// A node is kept when its result would hold more than twice its inputs' elements and more than
// kGrowthAllowance bytes (an expand of a bias to a huge shape stays an expand: folding must not
// blow up memory; a dtype change, such as a bool mask selected into f32 scores, folds), when
// its result type is symbolic, or when the reference kernel can't run it (its error then
// surfaces at run time, where it would have without the pass).
#include <algorithm>

#include "ops/op_registry.h"
#include "passes/pass.h"
#include "passes/pass_list.h"

namespace kiln {

namespace {

constexpr size_t kGrowthAllowance = size_t{1} << 20;  // bytes

// The node's outputs computed by its reference kernel, or {} when it can't be folded.
std::vector<Tensor> evaluate(const Node& node) {
  const OpDef* def = OpRegistry::instance().find(node.op());
  KILN_ASSERT(def, "node " << node.name() << " has unknown op " << node.op());
  KernelSpec spec{node, {}, {}, {}, 1};
  int64_t input_elements = 0;
  for (const Value* in : node.inputs()) {
    spec.inputs.push_back(in->type());
    spec.constant_inputs.push_back(&in->constant());
    input_elements += in->constant().numel();
  }
  int64_t output_elements = 0;
  size_t output_bytes = 0;
  for (const Value* out : node.outputs()) {
    if (!is_static(out->type().shape)) return {};
    spec.outputs.push_back(out->type());
    const int64_t elements = num_elements(static_sizes(out->type().shape));
    output_elements += elements;
    output_bytes += static_cast<size_t>(elements) * dtype_size(out->type().dtype);
  }
  // Counted in elements, so that a widening (an f16 or bf16 weight to f32, docs/ops.md) or a
  // bool mask selected into f32 (torch.export's attention masks at batch 8: 1.2 MB) folds.
  if (output_bytes > kGrowthAllowance && output_elements > 2 * input_elements) return {};
  const KernelDef& reference = def->kernels.back();
  if (reference.unsupported_reason && !reference.unsupported_reason(spec).empty()) return {};
  try {
    std::unique_ptr<KernelInstance> kernel = reference.create(spec);
    Tensor scratch = Tensor::empty(DType::U8, {static_cast<int64_t>(kernel->scratch_bytes())});
    std::vector<const void*> in_ptrs;
    for (const Value* in : node.inputs()) in_ptrs.push_back(in->constant().data());
    std::vector<Tensor> results;
    std::vector<void*> out_ptrs;
    for (const TensorType& t : spec.outputs) {
      results.push_back(Tensor::empty(t.dtype, static_sizes(t.shape)));
      out_ptrs.push_back(results.back().data());
    }
    kernel->run(in_ptrs, out_ptrs, scratch.data());
    return results;
  } catch (const Error&) {
    return {};  // e.g. a constant index out of range: reported by the run, as unoptimized
  }
}

class ConstantFolding final : public Pass {
 public:
  std::string name() const override { return "constant_folding"; }

  bool run(Graph& graph) override {
    bool changed = false;
    for (Node* node : graph.nodes()) {
      bool all_constant = std::all_of(node->inputs().begin(), node->inputs().end(), [](Value* v) {
        return v->kind() == Value::Kind::Constant;
      });
      if (!all_constant || node->outputs().empty()) continue;
      std::vector<Tensor> results = evaluate(*node);
      if (results.empty()) continue;
      for (size_t i = 0; i < results.size(); ++i) {
        Value* out = node->output(i);
        graph.replace_all_uses(out, graph.add_constant(out->name(), results[i]));
      }
      graph.remove_node(node);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_constant_folding() { return std::make_unique<ConstantFolding>(); }

}  // namespace kiln
