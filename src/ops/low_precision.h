// f16 and bf16 through f32 (docs/ops.md, "Low-precision floats"). PyTorch's CPU kernels of
// matmul, convolution, the norms, softmax, the float reductions, pooling and attention read f16
// and bf16 into f32, compute in f32 and round each floating result once. Ops declaring
// OpDef::computes_low_precision_in_f32 get the same from the builder: Graph::add_node (and the
// textual IR's untyped nodes) build such a node in f32 between `to` casts, so no kernel of
// theirs sees a 2-byte float.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "ops/op_registry.h"
#include "ops/type_promotion.h"

namespace kiln {

bool is_low_precision_float(DType dtype);  // f16 or bf16

// For a node of `def` with an f16 or bf16 operand: the dtype of its floating results,
// torch.result_type of its operands (torch.promote_types of their dtypes, rank-0 ones aside), or
// input 0's dtype for ops that keep it (OpDef::low_precision_keeps_input_dtype). f16 or bf16:
// the node computes in f32 and rounds its results to it once; f32 (f16 with bf16, or an f32
// tensor among them): it computes in f32 and keeps the results. nullopt without such an operand.
std::optional<DType> low_precision_result(const OpDef& def,
                                          std::span<const Value* const> inputs);
// The same from the operands' dtypes and ranks (`operands` non-empty, input 0 first).
DType low_precision_result(const OpDef& def, std::span<const PromotionOperand> operands);

// Adds `def`'s node on `inputs` with each f16 or bf16 input cast to f32 (by a `to` named
// `<input>_f32`), and casts each of its f32 results to `result` when that is f16 or bf16 (f32:
// the results stay f32, for the caller to round). Returns the results, the casts where cast.
// `names` name the results (default: `name`, or `name_out<i>` for several); the node itself is
// `name`, or `<name>_f32` when it has a result cast back, which then takes the plain name.
std::vector<Value*> add_node_through_f32(Graph& graph, const OpDef& def,
                                         const std::vector<Value*>& inputs, AttrMap attrs,
                                         const std::string& name, DType result,
                                         const std::vector<std::string>& names = {});

}  // namespace kiln
