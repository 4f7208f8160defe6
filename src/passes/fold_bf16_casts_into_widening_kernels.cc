// An op whose bf16 kernels widen their operands to f32 themselves, compute the f32 op's result
// and round it, reads and writes bf16 where its operands are widened bf16 values and its result
// is only rounded back to bf16:
//   %x32 = to(%x) {dtype = f32} ; [%w32 = to(%w) ; %b32 = to(%b)]
//   %y = layer_norm(%x32 [, %w32 [, %b32]]) ; %z = to(%y) {dtype = bf16}
//     →  %z = layer_norm(%x [, %w [, %b]])            (all bf16)
// and the same for rms_norm(%x32 [, %w32]), max_pool2d(%x32), avg_pool2d(%x32),
// adaptive_avg_pool2d(%x32), the float reductions with a vector kernel (mean, as AOTAutograd
// decomposes a CNN's global pooling; sum, amax, amin, max, min, var, std, logsumexp,
// log_softmax), softmax and
// scaled_dot_product_attention(%q32, %k32, %v32 [, %mask]) (the mask stays as it is: bool, or
// f32 added to the f32 scores). Exact: the bf16 kernels give the bits of the casts (a maximum
// is one of its window's values: rounding it changes nothing). The builder puts the casts
// around each of these ops in a bf16 model (docs/ops.md, "Low-precision floats"); without them
// the activations cross the op in half the bytes and no cast kernel runs. On every CPU: the
// AVX2 kernels widen bf16 with integer shifts.
#include <string>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

// The operands' captures, in order: the widened ones, then one taken as it is.
constexpr const char* kWidened[] = {"0", "1", "2"};
constexpr const char* kAsIs = "as_is";

std::vector<Value*> read_and_write_bf16(Graph& g, const Match& m) {
  Node* op = m.node("y");
  std::vector<Value*> inputs;
  for (const char* capture : kWidened)
    if (m.has(capture)) inputs.push_back(m[capture]);
  if (m.has(kAsIs)) inputs.push_back(m[kAsIs]);
  return {g.add_uncast(op->op(), inputs, op->attrs(), m.root->name())};
}

struct WideningOp {
  std::string name;
  int min_widened, max_widened;  // how many leading operands are widened bf16
  bool extra_as_is;              // and one more operand (attention's mask) may follow
};

}  // namespace

std::unique_ptr<Pass> make_fold_bf16_casts_into_widening_kernels() {
  const WideningOp ops[] = {{"layer_norm", 1, 3, false},
                            {"rms_norm", 1, 2, false},
                            {"max_pool2d", 1, 1, false},
                            {"avg_pool2d", 1, 1, false},
                            {"adaptive_avg_pool2d", 1, 1, false},
                            {"mean", 1, 1, false},
                            {"sum", 1, 1, false},
                            {"amax", 1, 1, false},
                            {"amin", 1, 1, false},
                            {"max", 1, 1, false},
                            {"min", 1, 1, false},
                            {"var", 1, 1, false},
                            {"std", 1, 1, false},
                            {"logsumexp", 1, 1, false},
                            {"log_softmax", 1, 1, false},
                            {"softmax", 1, 1, false},
                            {"scaled_dot_product_attention", 3, 3, true}};
  std::vector<RewriteRule> rules;
  for (const WideningOp& w : ops) {
    std::vector<Pattern> inputs;
    for (int i = 0; i < w.max_widened; ++i) {
      inputs.push_back(widened_to_f32(DType::BF16, kWidened[i]));
      if (i + 1 < w.min_widened) continue;
      auto add_rule = [&](const std::vector<Pattern>& operands, const std::string& suffix) {
        rules.push_back({"bf16_" + w.name + std::to_string(i + 1) + suffix,
                         op("to", {op(w.name, operands).single_use().as("y")}).dtype(DType::BF16),
                         read_and_write_bf16});
      };
      add_rule(inputs, "");
      if (w.extra_as_is) {
        std::vector<Pattern> with_extra = inputs;
        with_extra.push_back(any(kAsIs));
        add_rule(with_extra, "_with_mask");
      }
    }
  }
  return std::make_unique<PatternRewritePass>("fold_bf16_casts_into_widening_kernels",
                                              std::move(rules));
}

}  // namespace kiln
