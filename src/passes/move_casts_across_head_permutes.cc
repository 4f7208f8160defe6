// A cast between attention and a head permute moves to the permute's far side, so that
// fold_permute_into_attention (next in the fuse stage) finds the permute next to attention:
//   %a = scaled_dot_product_attention(to(permute(%q)), ...)   (to: the f32 widening of a bf16 q)
//     →  %a = scaled_dot_product_attention(permute(to(%q)), ...)
//   %y = permute(to(scaled_dot_product_attention(...)))        (to: the bf16 rounding of its result)
//     →  %y = to(permute(scaled_dot_product_attention(...)))
// Attention computes f16 and bf16 in f32 between such casts (docs/ops.md, "Low-precision floats"),
// which kept the head split and merge of bf16 transformers as four copies per layer. A cast and a
// permute commute exactly, so results are bit for bit those of the graph before. Only a permute
// and a cast with no other reader move; the casts' dtype attributes stay as they were.
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

constexpr const char* kAttention = "scaled_dot_product_attention";

// Heads and sequence swapped, as fold_permute_into_attention folds them.
Pattern head_permute(Pattern input) { return swap_permute(std::move(input), 1); }

bool read_by_attention_only(const Value& v) {
  if (v.users().empty()) return false;
  for (const Node* user : v.users())
    if (user->op() != kAttention) return false;
  return true;
}

// to(permute(x)) → permute(to(x)): the cast of x, then the permute under the root's name.
std::vector<Value*> cast_before_permute(Graph& g, const Match& m) {
  Value* cast = g.add("to", {m["x"]}, m.root->attrs(), m.root->name() + "_unpermuted");
  return {g.add("permute", {cast}, m.node("permute")->attrs(), m.root->name())};
}

// permute(to(y)) → to(permute(y)): the permute of y, then the cast under the root's name.
std::vector<Value*> permute_before_cast(Graph& g, const Match& m) {
  Value* permuted = g.add("permute", {m["y"]}, m.root->attrs(), m.root->name() + "_uncast");
  return {g.add("to", {permuted}, m.node("cast")->attrs(), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_move_casts_across_head_permutes() {
  std::vector<RewriteRule> rules;
  rules.push_back({"cast_into_attention",
                   op("to", {head_permute(any("x")).single_use().as("permute")})
                       .where(read_by_attention_only, "read by attention only"),
                   cast_before_permute});
  rules.push_back(
      {"cast_out_of_attention",
       head_permute(op("to", {op(kAttention).single_use().as("y")}).single_use().as("cast")),
       permute_before_cast});
  return std::make_unique<PatternRewritePass>("move_casts_across_head_permutes",
                                              std::move(rules));
}

}  // namespace kiln
