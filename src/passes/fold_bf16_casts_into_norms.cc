// A layer norm or RMS norm of widened bf16 values whose result is only rounded back to bf16
// reads and writes bf16 itself:
//   %x32 = to(%x) {dtype = f32} ; [%w32 = to(%w) ; %b32 = to(%b)]
//   %y = layer_norm(%x32 [, %w32 [, %b32]]) ; %z = to(%y) {dtype = bf16}
//     →  %z = layer_norm(%x [, %w [, %b]])            (all bf16)
// and the same for rms_norm(%x32 [, %w32]). Exact: the bf16 kernels compute the f32 result and
// round it to bf16, as the casts did. The builder puts the casts around every norm of a bf16
// model (docs/ops.md, "Low-precision floats"); without them the activations cross the norm in
// half the bytes and no cast kernel runs. On every CPU: the AVX2 kernels widen bf16 with integer
// shifts.
#include <string>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

std::vector<Value*> read_and_write_bf16(Graph& g, const Match& m) {
  Node* norm = m.node("y");
  std::vector<Value*> inputs;
  for (const char* capture : {"x", "w", "b"})
    if (m.has(capture)) inputs.push_back(m[capture]);
  return {g.add_uncast(norm->op(), inputs, norm->attrs(), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_fold_bf16_casts_into_norms() {
  std::vector<RewriteRule> rules;
  for (const auto& [norm, operands] : {std::pair<std::string, int>{"layer_norm", 3},
                                       std::pair<std::string, int>{"rms_norm", 2}}) {
    std::vector<Pattern> inputs;
    for (const char* capture : {"x", "w", "b"}) {
      if (static_cast<int>(inputs.size()) == operands) break;
      inputs.push_back(widened_to_f32(DType::BF16, capture));
      rules.push_back({"bf16_" + norm + std::to_string(inputs.size()),
                       op("to", {op(norm, inputs).single_use().as("y")}).dtype(DType::BF16),
                       read_and_write_bf16});
    }
  }
  return std::make_unique<PatternRewritePass>("fold_bf16_casts_into_norms", std::move(rules));
}

}  // namespace kiln
