#include "runtime/exec_plan.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>

namespace kiln {

namespace {

const KernelDef& select_kernel(const OpDef& def, const KernelSpec& spec,
                               const std::string& policy) {
  std::string reasons;
  auto usable = [&](const KernelDef& k) {
    std::string why = k.unsupported_reason ? k.unsupported_reason(spec) : "";
    if (!why.empty()) reasons += "\n  kernel '" + k.name + "': " + why;
    return why.empty();
  };
  if (policy == "reference") {
    if (usable(def.kernels.back())) return def.kernels.back();
  } else {
    for (const KernelDef& k : def.kernels)
      if (usable(k)) return k;
  }
  std::string types;
  for (const TensorType& t : spec.inputs) types += (types.empty() ? "" : ", ") + type_string(t);
  throw_error(ErrorCode::UnsupportedOperator, "no kernel of op '", def.name, "' can run node '",
              spec.node.name(), "' with inputs (", types, "):", reasons,
              "\nChange the input dtypes or shapes to ones the op supports (docs/ops.md).");
}

}  // namespace

ExecPlan::ExecPlan(const Graph& graph, const std::vector<std::vector<int64_t>>& input_sizes,
                   const CompileOptions& options, int threads) {
  std::unordered_map<const Value*, TensorType> types;
  std::unordered_map<const Value*, size_t> slot_of;
  auto new_slot = [&](const Value* v, Slot slot) {
    slot_of[v] = slots_.size();
    slots_.push_back(slot);
  };
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value* v = graph.inputs()[i];
    types[v] = TensorType{v->type().dtype, make_shape(input_sizes[i]), v->type().layout};
    new_slot(v, Slot{Slot::Kind::Input, i});
  }
  for (const Value* v : graph.constants()) {
    types[v] = v->type();
    new_slot(v, Slot{Slot::Kind::Constant, 0, v->constant().data()});
  }

  // The first listing of a node's output among the graph outputs is written in place.
  std::unordered_map<const Value*, size_t> direct_output;
  for (size_t j = 0; j < graph.outputs().size(); ++j) {
    const Value* v = graph.outputs()[j];
    if (v->kind() == Value::Kind::NodeOutput && !direct_output.count(v)) direct_output[v] = j;
  }

  SymbolTable symbols = graph.symbols();
  std::vector<Node*> nodes = graph.nodes();
  std::unordered_map<const Value*, int> last_use;
  for (size_t s = 0; s < nodes.size(); ++s) {
    const Node* node = nodes[s];
    const OpDef* def = OpRegistry::instance().find(node->op());
    if (!def)
      throw_error(ErrorCode::UnsupportedOperator, "node '", node->name(), "' has unknown op '",
                  node->op(), "'");
    KernelSpec spec{*node, {}, {}, {}, threads};
    for (const Value* in : node->inputs()) {
      spec.inputs.push_back(types.at(in));
      spec.constant_inputs.push_back(in->kind() == Value::Kind::Constant ? &in->constant()
                                                                         : nullptr);
      last_use[in] = static_cast<int>(s);
    }
    AttrMap attrs = node->attrs();
    spec.outputs = infer_node_types(*def, node->name(), spec.inputs, attrs, symbols);
    for (const TensorType& t : spec.outputs)
      KILN_ASSERT(is_static(t.shape), "node " << node->name() << " inferred a symbolic shape "
                                              << type_string(t) << " from static inputs");
    const KernelDef& kernel = select_kernel(*def, spec, options.kernel_policy);
    PlanStep step{node, kernel.name, kernel.create(spec), {}, {}, 0};
    for (const Value* in : node->inputs()) step.inputs.push_back(slot_of.at(in));
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      const Value* out = node->output(i);
      types[out] = spec.outputs[i];
      auto direct = direct_output.find(out);
      if (direct != direct_output.end()) {
        new_slot(out, Slot{Slot::Kind::Output, direct->second});
      } else {
        new_slot(out, Slot{Slot::Kind::Arena});
      }
      step.outputs.push_back(slot_of[out]);
    }
    max_arity_in_ = std::max(max_arity_in_, step.inputs.size());
    max_arity_out_ = std::max(max_arity_out_, step.outputs.size());
    steps_.push_back(std::move(step));
  }

  // Lifetimes of arena buffers: node outputs from their step to their last reader, and each
  // step's scratch for that step alone.
  std::vector<size_t*> offset_targets;
  for (size_t s = 0; s < steps_.size(); ++s) {
    PlanStep& step = steps_[s];
    for (const Value* out : step.node->outputs()) {
      Slot& slot = slots_[slot_of[out]];
      if (slot.kind != Slot::Kind::Arena) continue;
      const TensorType& t = types[out];
      auto it = last_use.find(out);
      buffers_.push_back(BufferLifetime{
          out->name(), static_cast<size_t>(num_elements(static_sizes(t.shape))) * dtype_size(t.dtype),
          static_cast<int>(s), it == last_use.end() ? static_cast<int>(s) : it->second});
      offset_targets.push_back(&slot.index);
    }
    if (size_t scratch = step.kernel->scratch_bytes()) {
      buffers_.push_back(BufferLifetime{"scratch of " + step.node->name(), scratch,
                                        static_cast<int>(s), static_cast<int>(s)});
      offset_targets.push_back(&step.scratch_offset);
    }
  }
  memory_plan_ = GreedyBySizePlacement().place(buffers_, kAlignment);
  for (size_t i = 0; i < buffers_.size(); ++i) *offset_targets[i] = memory_plan_.offsets[i];

  for (size_t j = 0; j < graph.outputs().size(); ++j) {
    const Value* v = graph.outputs()[j];
    const TensorType& t = types.at(v);
    output_sizes_.push_back(static_sizes(t.shape));
    output_dtypes_.push_back(t.dtype);
    auto direct = direct_output.find(v);
    if (direct == direct_output.end() || direct->second != j)
      output_copies_.push_back(OutputCopy{
          slot_of.at(v), j,
          static_cast<size_t>(num_elements(output_sizes_.back())) * dtype_size(t.dtype)});
  }
}

std::unique_ptr<RunContext> ExecPlan::acquire() const {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!idle_contexts_.empty()) {
      auto context = std::move(idle_contexts_.back());
      idle_contexts_.pop_back();
      return context;
    }
  }
  auto context = std::make_unique<RunContext>();
  context->arena = Tensor::empty(DType::U8, {static_cast<int64_t>(memory_plan_.arena_size)});
  context->slot_pointers.resize(slots_.size());
  context->step_inputs.resize(max_arity_in_);
  context->step_outputs.resize(max_arity_out_);
  return context;
}

void ExecPlan::release(std::unique_ptr<RunContext> context) const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  idle_contexts_.push_back(std::move(context));
}

void ExecPlan::run(const std::vector<TensorView>& inputs, const std::vector<void*>& outputs) const {
  std::unique_ptr<RunContext> context = acquire();
  struct Release {
    const ExecPlan* plan;
    std::unique_ptr<RunContext>& context;
    ~Release() { plan->release(std::move(context)); }
  } release{this, context};

  auto* arena = static_cast<std::byte*>(context->arena.data());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    switch (slot.kind) {
      case Slot::Kind::Input: context->slot_pointers[i] = inputs[slot.index].data; break;
      case Slot::Kind::Constant: context->slot_pointers[i] = const_cast<void*>(slot.constant); break;
      case Slot::Kind::Arena: context->slot_pointers[i] = arena + slot.index; break;
      case Slot::Kind::Output: context->slot_pointers[i] = outputs[slot.index]; break;
    }
  }
  for (const PlanStep& step : steps_) {
    for (size_t i = 0; i < step.inputs.size(); ++i)
      context->step_inputs[i] = context->slot_pointers[step.inputs[i]];
    for (size_t i = 0; i < step.outputs.size(); ++i)
      context->step_outputs[i] = context->slot_pointers[step.outputs[i]];
    step.kernel->run(std::span<const void* const>(context->step_inputs.data(), step.inputs.size()),
                     std::span<void* const>(context->step_outputs.data(), step.outputs.size()),
                     arena + step.scratch_offset);
  }
  for (const OutputCopy& copy : output_copies_)
    if (copy.bytes) std::memcpy(outputs[copy.output], context->slot_pointers[copy.slot], copy.bytes);
}

std::string ExecPlan::describe() const {
  std::ostringstream out;
  out << "steps:\n";
  for (size_t s = 0; s < steps_.size(); ++s) {
    const PlanStep& step = steps_[s];
    out << "  " << s << ": " << step.node->name() << " = " << step.node->op() << " [kernel "
        << step.kernel_name << "]\n";
  }
  out << memory_plan_.to_string(buffers_);
  return out.str();
}

}  // namespace kiln
