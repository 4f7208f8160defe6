// The head permutes around attention folded into the attention node, which reads and writes
// rows through strides either way (docs/ops.md, scaled_dot_product_attention):
//   %qh = permute(%q) {dims = [0, 2, 1, 3]} ; (%kh, %vh alike)
//   %o = scaled_dot_product_attention(%qh, %kh, %vh)
//     →  %o = scaled_dot_product_attention(%q, %k, %v) {q_heads_second_last = true, ...}
//   %y = permute(scaled_dot_product_attention(...)) {dims = [0, 2, 1, 3]}
//     →  %y = scaled_dot_product_attention(...) {out_heads_second_last = true}
// Multi-head attention splits the projections [B, S, H·E] → [B, S, H, E] → permute →
// [B, H, S, E] and merges the heads back the same way: four copies of every activation per
// layer, pure memory traffic (GPT-2: 2.3% of a run). Any rank >= 3: the permute swaps dims n-3
// and n-2 (heads and sequence) and keeps the others; each fold flips the operand's flag, so a
// permute of an operand already given heads second last restores the default. Only a permute
// with no other reader (and no graph output) is folded, and only an attention output that the
// permute alone reads: the arithmetic is unchanged, so results are bit for bit those of the
// unfolded graph.
#include <algorithm>
#include <bit>
#include <numeric>
#include <string>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

constexpr const char* kAttention = "scaled_dot_product_attention";
const char* const kCaptures[3] = {"q", "k", "v"};
// The attention op's flags for q, k, v and its output (src/ops/attention.cc).
const char* const kHeadsSecondLastAttrs[4] = {"q_heads_second_last", "k_heads_second_last",
                                              "v_heads_second_last", "out_heads_second_last"};

// Heads and sequence swapped: [..., H, S, E] <-> [..., S, H, E].
Pattern head_permute(Pattern input) { return swap_permute(std::move(input), 1); }

// q, k and v: each captured permute's input replaces it, and the operand's flag flips.
std::vector<Value*> fold_inputs(Graph& g, const Match& m) {
  std::vector<Value*> inputs = m.root->inputs();
  AttrMap attrs = m.root->attrs();
  for (int i = 0; i < 3; ++i) {
    if (!m.has(kCaptures[i])) continue;
    inputs[i] = m[kCaptures[i]];
    attrs[kHeadsSecondLastAttrs[i]] = !m.root->attr_bool(kHeadsSecondLastAttrs[i]);
  }
  // Uncast: a bf16 attention (fold_bf16_casts_into_widening_kernels) stays one.
  return {g.add_uncast(kAttention, inputs, std::move(attrs), m.root->name())};
}

// The permute of the output: the attention writes the permuted arrangement itself.
std::vector<Value*> fold_output(Graph& g, const Match& m) {
  const Node& attention = *m.node("attention");
  AttrMap attrs = attention.attrs();
  attrs[kHeadsSecondLastAttrs[3]] = !attention.attr_bool(kHeadsSecondLastAttrs[3]);
  return {g.add_uncast(kAttention, attention.inputs(), std::move(attrs), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_fold_permute_into_attention() {
  std::vector<RewriteRule> rules;
  // One rule per set of permuted operands, larger sets first: the first rule that matches a node
  // folds every foldable operand at once (the fuse stage runs each pass once).
  std::vector<int> subsets(7);
  std::iota(subsets.begin(), subsets.end(), 1);
  std::stable_sort(subsets.begin(), subsets.end(), [](int a, int b) {
    return std::popcount(unsigned(a)) > std::popcount(unsigned(b));
  });
  for (int subset : subsets) {
    std::string name = "permute_";
    std::vector<Pattern> inputs;
    for (int i = 0; i < 3; ++i) {
      const bool folded = (subset >> i) & 1;
      if (folded) name += kCaptures[i];
      inputs.push_back(folded ? head_permute(any(kCaptures[i])).single_use() : any());
    }
    rules.push_back({name, op(kAttention, inputs), fold_inputs});
    inputs.push_back(any());  // the mask
    rules.push_back({name + "_masked", op(kAttention, inputs), fold_inputs});
  }
  rules.push_back({"permute_out",
                   head_permute(op(kAttention).single_use().as("attention")),
                   fold_output});
  return std::make_unique<PatternRewritePass>("fold_permute_into_attention", std::move(rules));
}

}  // namespace kiln
