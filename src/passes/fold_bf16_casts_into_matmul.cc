// A matmul of two widened bf16 values reads them as they are, on CPUs whose bf16 dot products
// run at twice the f32 FMA rate (AVX512-BF16):
//   %a32 = to(%a) {dtype = f32} ; %b32 = to(%b) {dtype = f32} ; %y = matmul(%a32, %b32, ...)
//     →  %y = matmul(%a, %b, ...)          (%a, %b bf16; %y stays f32)
// Exact up to the order of the sum: a product of two bf16 values is exact in f32, and both forms
// accumulate in f32. The builder puts the casts around every matmul of a bf16 model (docs/ops.md,
// "Low-precision floats"); folding them here, before constant folding widens the weights, also
// keeps the weights in bf16: half the memory and half the traffic per call. Elsewhere the f32
// GEMM stays, since the bf16 one would be emulated.
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  return {rebuild_root(g, m, {{0, "a"}, {1, "b"}})};
}

}  // namespace

std::unique_ptr<Pass> make_fold_bf16_casts_into_matmul(bool native_bf16) {
  // matmul takes 2 to 4 inputs (a, b, bias, residual). Without native bf16 no rule: the pass
  // keeps its name (for disabled_passes and the pass records) and changes nothing.
  std::vector<RewriteRule> rules;
  std::vector<Pattern> inputs{widened_to_f32(DType::BF16, "a"),
                              widened_to_f32(DType::BF16, "b")};
  for (int n = 2; native_bf16 && n <= 4; ++n) {
    rules.push_back({"bf16_matmul" + std::to_string(n), op("matmul", inputs), rewrite});
    inputs.push_back(any());
  }
  return std::make_unique<PatternRewritePass>("fold_bf16_casts_into_matmul", std::move(rules));
}

std::unique_ptr<Pass> make_fold_bf16_casts_into_matmul() {
  return make_fold_bf16_casts_into_matmul(cpu::onednn_has_bf16());
}

}  // namespace kiln
