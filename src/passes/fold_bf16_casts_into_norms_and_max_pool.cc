// An op with a bf16 kernel that computes the f32 op's result and rounds it, whose operands are
// widened bf16 values and whose result is only rounded back to bf16, reads and writes bf16
// itself:
//   %x32 = to(%x) {dtype = f32} ; [%w32 = to(%w) ; %b32 = to(%b)]
//   %y = layer_norm(%x32 [, %w32 [, %b32]]) ; %z = to(%y) {dtype = bf16}
//     →  %z = layer_norm(%x [, %w [, %b]])            (all bf16)
// and the same for rms_norm(%x32 [, %w32]) and max_pool2d(%x32). Exact: the bf16 kernels give
// the bits of the casts (a maximum is one of its window's values: rounding it changes nothing).
// The builder puts the casts around each of these ops in a bf16 model (docs/ops.md,
// "Low-precision floats"); without them the activations cross the op in half the bytes and no
// cast kernel runs. On every CPU: the AVX2 kernels widen bf16 with integer shifts.
#include <string>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

std::vector<Value*> read_and_write_bf16(Graph& g, const Match& m) {
  Node* op = m.node("y");
  std::vector<Value*> inputs;
  for (const char* capture : {"x", "w", "b"})
    if (m.has(capture)) inputs.push_back(m[capture]);
  return {g.add_uncast(op->op(), inputs, op->attrs(), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_fold_bf16_casts_into_norms_and_max_pool() {
  // Each op with bf16 kernels, and how many operands (x, then weight, then bias) it may take.
  const std::pair<std::string, int> ops[] = {{"layer_norm", 3}, {"rms_norm", 2}, {"max_pool2d", 1}};
  std::vector<RewriteRule> rules;
  for (const auto& [name, operands] : ops) {
    std::vector<Pattern> inputs;
    for (const char* capture : {"x", "w", "b"}) {
      if (static_cast<int>(inputs.size()) == operands) break;
      inputs.push_back(widened_to_f32(DType::BF16, capture));
      rules.push_back({"bf16_" + name + std::to_string(inputs.size()),
                       op("to", {op(name, inputs).single_use().as("y")}).dtype(DType::BF16),
                       read_and_write_bf16});
    }
  }
  return std::make_unique<PatternRewritePass>("fold_bf16_casts_into_norms_and_max_pool", std::move(rules));
}

}  // namespace kiln
