// A transpose of matmul's B folded into the GEMM, which reads B either way:
//   %t = permute(%b) {dims = [0, ..., n-3, n-1, n-2]} ; %y = matmul(%a, %t) {transpose_b = f}
//     →  %y = matmul(%a, %b) {transpose_b = !f}
// Linear layers arrive as addmm(bias, x, t(w)): without this, constant folding writes a
// transposed copy of every weight (BERT-base: 340 MB and most of its compile time) that the
// kernels then prepack again. Runs first in stage prepare, before constant folding sees %t.
// The permute stays while something else reads it. grouped_matmul's B (experts' weights) folds
// the same way.
#include <string>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  return {rebuild_root(g, m, {{1, "b"}}, {{"transpose_b", !m.root->attr_bool("transpose_b")}})};
}

}  // namespace

std::unique_ptr<Pass> make_fold_transpose_into_matmul() {
  // matmul takes 2 to 4 inputs (a, b, bias, residual); b is the permute in each.
  std::vector<RewriteRule> rules;
  std::vector<Pattern> inputs{any(), swap_permute(any("b"), 0)};
  for (int n = 2; n <= 4; ++n) {
    rules.push_back({"transpose_matmul" + std::to_string(n), op("matmul", inputs), rewrite});
    inputs.push_back(any());
  }
  // Mixture-of-experts weights, [E, N, K] read as [E, K, N]: the same for grouped_matmul.
  rules.push_back({"transpose_grouped_matmul",
                   op("grouped_matmul", {any(), swap_permute(any("b"), 0), any()}), rewrite});
  return std::make_unique<PatternRewritePass>("fold_transpose_into_matmul", std::move(rules));
}

}  // namespace kiln
