// f16 and bf16 through f32: the casts around a node of an op that computes them in f32.
#include "ops/low_precision.h"

namespace kiln {

namespace {

AttrMap cast_to(DType dtype) { return {{"dtype", std::string(dtype_name(dtype))}}; }

}  // namespace

bool is_low_precision_float(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

DType low_precision_result(const OpDef& def, std::span<const PromotionOperand> operands) {
  return def.low_precision_keeps_input_dtype ? operands.front().dtype : result_type(operands);
}

std::optional<DType> low_precision_result(const OpDef& def,
                                          std::span<const Value* const> inputs) {
  std::vector<PromotionOperand> operands;
  bool low = false;
  for (const Value* in : inputs) {
    if (!in) continue;
    operands.push_back({in->type().dtype, in->type().rank()});
    low |= is_low_precision_float(in->type().dtype);
  }
  if (!low) return std::nullopt;
  return low_precision_result(def, operands);
}

std::vector<Value*> add_node_through_f32(Graph& graph, const OpDef& def,
                                         const std::vector<Value*>& inputs, AttrMap attrs,
                                         const std::string& name, DType result,
                                         const std::vector<std::string>& names) {
  const std::string base = name.empty() ? def.name : name;
  std::vector<TensorType> wide_types;
  for (const Value* in : inputs) {
    wide_types.push_back(in->type());
    if (is_low_precision_float(in->type().dtype)) wide_types.back().dtype = DType::F32;
  }
  // Inferred before any cast is added: a node the op refuses leaves the graph as it was.
  const std::vector<TensorType> types =
      infer_node_types(def, base, wide_types, attrs, graph.symbols());
  std::vector<Value*> wide;
  for (Value* in : inputs)
    wide.push_back(is_low_precision_float(in->type().dtype)
                       ? graph.add("to", {in}, cast_to(DType::F32), in->name() + "_f32")
                       : in);
  const bool round = is_low_precision_float(result);
  auto cast_back = [&](size_t i) { return round && types[i].dtype == DType::F32; };
  std::vector<std::string> result_names = names;
  for (size_t i = result_names.size(); i < types.size(); ++i)
    result_names.push_back(types.size() == 1 ? base : base + "_out" + std::to_string(i));
  std::vector<std::string> node_names;  // the op's own results: "_f32" where cast back
  bool any_cast = false;
  for (size_t i = 0; i < types.size(); ++i) {
    node_names.push_back(result_names[i] + (cast_back(i) ? "_f32" : ""));
    any_cast |= cast_back(i);
  }
  Node* node = graph.add_node_with_types(def.name, wide, std::move(attrs), types,
                                         any_cast ? base + "_f32" : base, node_names);
  std::vector<Value*> outs = node->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (cast_back(i)) outs[i] = graph.add("to", {outs[i]}, cast_to(result), result_names[i]);
  return outs;
}

}  // namespace kiln
