// move_casts_across_head_permutes on textual IR: the f32 casts around a bf16 attention move past
// the head permutes (bit for bit the graph before), after which fold_permute_into_attention folds
// the permutes as it does in f32; and the cases where it must not fire.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_unchanged;

// A bf16 GPT-2 layer as the builder makes it: q, k and v split into heads and widened for the
// f32 attention, the result rounded to bf16 and its heads merged.
const char* const kBf16Layer = R"(
graph @g {
  input %q : bf16[2, 17, 3, 16]
  input %k : bf16[2, 17, 3, 16]
  input %v : bf16[2, 17, 3, 16]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %kh = permute(%k) {dims = [0, 2, 1, 3]}
  %vh = permute(%v) {dims = [0, 2, 1, 3]}
  %q32 = to(%qh) {dtype = "f32"}
  %k32 = to(%kh) {dtype = "f32"}
  %v32 = to(%vh) {dtype = "f32"}
  %a = scaled_dot_product_attention(%q32, %k32, %v32) {is_causal = true}
  %a16 = to(%a) {dtype = "bf16"}
  %y = permute(%a16) {dims = [0, 2, 1, 3]}
  %m = reshape(%y) {shape = [2, 17, 48]}
  output %m
})";

TEST(MoveCastsAcrossHeadPermutes, Bf16HeadSplitAndMergeThenFold) {
  auto move = make_move_casts_across_head_permutes();
  expect_rewrite(*move, kBf16Layer, R"(
graph @g {
  input %q : bf16[2, 17, 3, 16]
  input %k : bf16[2, 17, 3, 16]
  input %v : bf16[2, 17, 3, 16]
  %q32_unpermuted = to(%q) {dtype = "f32"}
  %q32_1 = permute(%q32_unpermuted) {dims = [0, 2, 1, 3]}
  %k32_unpermuted = to(%k) {dtype = "f32"}
  %k32_1 = permute(%k32_unpermuted) {dims = [0, 2, 1, 3]}
  %v32_unpermuted = to(%v) {dtype = "f32"}
  %v32_1 = permute(%v32_unpermuted) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%q32_1, %k32_1, %v32_1) {is_causal = true}
  %y_uncast = permute(%a) {dims = [0, 2, 1, 3]}
  %y_1 = to(%y_uncast) {dtype = "bf16"}
  %m = reshape(%y_1) {shape = [2, 17, 48]}
  output %m
})");
  // Then the permutes fold as in f32: the casts read and write [B, S, H, E] in place.
  auto g = parse_graph(kBf16Layer);
  move->run(*g);
  auto fold = make_fold_permute_into_attention();
  EXPECT_TRUE(fold->run(*g));
  int permutes = 0;
  for (const Node* node : g->nodes()) permutes += node->op() == "permute";
  EXPECT_EQ(permutes, 0) << print_graph(*g);
  test::expect_same_results(*parse_graph(kBf16Layer), *g);
}

TEST(MoveCastsAcrossHeadPermutes, LeavesOtherCastsAndPermutes) {
  auto move = make_move_casts_across_head_permutes();
  // The cast has another reader than attention; the permute has another reader; the permute
  // swaps other dims than heads and sequence.
  expect_unchanged(*move, R"(
graph @g {
  input %q : bf16[2, 5, 3, 8]
  input %k : bf16[2, 5, 3, 8]
  input %v : bf16[2, 3, 8, 5]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %q32 = to(%qh) {dtype = "f32"}
  %kh = permute(%k) {dims = [0, 2, 1, 3]}
  %k32 = to(%kh) {dtype = "f32"}
  %vt = permute(%v) {dims = [0, 1, 3, 2]}
  %v32 = to(%vt) {dtype = "f32"}
  %a = scaled_dot_product_attention(%q32, %k32, %v32)
  %z = relu(%q32)
  output %a, %z, %kh
})");
  // The rounded result has another reader, or is a graph output.
  expect_unchanged(*move, R"(
graph @g {
  input %q : f32[2, 3, 5, 8]
  %a = scaled_dot_product_attention(%q, %q, %q)
  %a16 = to(%a) {dtype = "bf16"}
  %y = permute(%a16) {dims = [0, 2, 1, 3]}
  output %y, %a16
})");
}

}  // namespace
}  // namespace kiln
