// fold_permute_into_attention on textual IR: the head permutes before and after attention become
// the op's *_heads_second_last flags, before → after, bit for bit the unfolded graph's results
// with the reference and the best (flash) kernels, and the cases where it must not fire.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_rewritten;
using test::expect_unchanged;
using test::random_inputs;
using test::run_with;

// expect_rewrite (reference kernels, bit for bit) plus the same with the best kernels: only
// addressing changes, so the flash kernel gives the same bits too.
void expect_folded(const std::string& before, const std::string& after) {
  auto pass = make_fold_permute_into_attention();
  expect_rewrite(*pass, before, after);
  auto original = parse_graph(before);
  auto folded = original->clone();
  pass->run(*folded);
  const std::vector<Tensor> inputs = random_inputs(*original, 5);
  const std::vector<Tensor> want = run_with(*original, "best", inputs);
  const std::vector<Tensor> got = run_with(*folded, "best", inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(test::same_values(got[i], want[i])) << "output " << i;
}

// GPT-2's layer: the fused QKV projection split, each part [B, S, H·E] viewed as [B, S, H, E]
// and permuted to [B, H, S, E]; the output permuted back and merged. In bf16 the attention
// (which fold_bf16_casts_into_widening_kernels made read bf16) stays bf16, with no casts put
// back around it.
TEST(FoldPermuteIntoAttention, Gpt2HeadSplitAndMerge) {
  for (const std::string t : {"f32", "bf16"}) {
    SCOPED_TRACE(t);
    expect_folded(R"(
graph @g {
  input %q : )" + t + R"([2, 17, 3, 16]
  input %k : )" + t + R"([2, 17, 3, 16]
  input %v : )" + t + R"([2, 17, 3, 16]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %kh = permute(%k) {dims = [0, 2, 1, 3]}
  %vh = permute(%v) {dims = [0, 2, 1, 3]}
  %a : )" + t + R"([2, 3, 17, 16] = scaled_dot_product_attention(%qh, %kh, %vh) {is_causal = true}
  %y = permute(%a) {dims = [0, 2, 1, 3]}
  %m = reshape(%y) {shape = [2, 17, 48]}
  output %m
})",
                  R"(
graph @g {
  input %q : )" + t + R"([2, 17, 3, 16]
  input %k : )" + t + R"([2, 17, 3, 16]
  input %v : )" + t + R"([2, 17, 3, 16]
  %y_1 : )" + t + R"([2, 17, 3, 16] = scaled_dot_product_attention(%q, %k, %v) {is_causal = true, k_heads_second_last = true, out_heads_second_last = true, q_heads_second_last = true, v_heads_second_last = true}
  %m = reshape(%y_1) {shape = [2, 17, 48]}
  output %m
})");
  }
}

// An additive mask and the scale stay; k, given as [B, H, S, E] already, keeps its flag;
// negative dims count from the end; q of one head broadcast over v's three.
TEST(FoldPermuteIntoAttention, SomeOperandsWithMask) {
  expect_folded(R"(
graph @g {
  input %q : f32[2, 5, 1, 8]
  input %k : f32[2, 3, 7, 8]
  input %v : f32[2, 7, 3, 12]
  input %mask : f32[5, 7]
  %qh = permute(%q) {dims = [0, -2, 1, -1]}
  %vh = permute(%v) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%qh, %k, %vh, %mask) {scale = 0.5}
  output %a
})",
                R"(
graph @g {
  input %q : f32[2, 5, 1, 8]
  input %k : f32[2, 3, 7, 8]
  input %v : f32[2, 7, 3, 12]
  input %mask : f32[5, 7]
  %a_1 = scaled_dot_product_attention(%q, %k, %v, %mask) {q_heads_second_last = true, scale = 0.5, v_heads_second_last = true}
  output %a_1
})");
}

// Rank 3 ([S, H, E]: heads as the batch) and rank 5 fold too: the permute swaps the two dims
// before the last and keeps the others.
TEST(FoldPermuteIntoAttention, OtherRanks) {
  expect_folded(R"(
graph @g {
  input %q : f32[9, 2, 8]
  input %kv : f32[2, 6, 8]
  %qh = permute(%q) {dims = [1, 0, 2]}
  %a = scaled_dot_product_attention(%qh, %kv, %kv)
  %y = permute(%a) {dims = [1, 0, 2]}
  output %y
})",
                R"(
graph @g {
  input %q : f32[9, 2, 8]
  input %kv : f32[2, 6, 8]
  %y_1 = scaled_dot_product_attention(%q, %kv, %kv) {out_heads_second_last = true, q_heads_second_last = true}
  output %y_1
})");
  expect_folded(R"(
graph @g {
  input %q : f32[2, 2, 5, 3, 8]
  input %k : f32[2, 2, 6, 3, 8]
  %qh = permute(%q) {dims = [0, 1, 3, 2, 4]}
  %kh = permute(%k) {dims = [0, 1, 3, 2, 4]}
  %vh = permute(%k) {dims = [0, 1, 3, 2, 4]}
  %a = scaled_dot_product_attention(%qh, %kh, %vh)
  output %a
})",
                R"(
graph @g {
  input %q : f32[2, 2, 5, 3, 8]
  input %k : f32[2, 2, 6, 3, 8]
  %a_1 = scaled_dot_product_attention(%q, %k, %k) {k_heads_second_last = true, q_heads_second_last = true, v_heads_second_last = true}
  output %a_1
})");
}

// A flag already set flips back: the permute of an operand given heads second last restores the
// default arrangement, and so does the permute of such an output.
TEST(FoldPermuteIntoAttention, FlipsAFlagAlreadySet) {
  expect_folded(R"(
graph @g {
  input %q : f32[2, 3, 5, 8]
  input %k : f32[2, 7, 3, 8]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%qh, %k, %k) {k_heads_second_last = true, out_heads_second_last = true, q_heads_second_last = true, v_heads_second_last = true}
  %y = permute(%a) {dims = [0, 2, 1, 3]}
  output %y
})",
                R"(
graph @g {
  input %q : f32[2, 3, 5, 8]
  input %k : f32[2, 7, 3, 8]
  %y_1 = scaled_dot_product_attention(%q, %k, %k) {k_heads_second_last = true, v_heads_second_last = true}
  output %y_1
})");
}

// Symbolic batch and sequence: the folded node infers the same symbolic type.
TEST(FoldPermuteIntoAttention, SymbolicDims) {
  auto pass = make_fold_permute_into_attention();
  expect_rewritten(*pass, *parse_graph(R"(
graph @g {
  sym B in [1, 8]
  sym S in [1, 1024]
  input %q : f32[B, S, 4, 16]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%qh, %qh, %qh) {is_causal = true}
  %y = permute(%a) {dims = [0, 2, 1, 3]}
  output %y
})"),
                   // q is read three times through one permute: the permute has other readers
                   // and stays; the output permute folds.
                   R"(
graph @g {
  sym B in [1, 8]
  sym S in [1, 1024]
  input %q : f32[B, S, 4, 16]
  %qh : f32[B, 4, S, 16] = permute(%q) {dims = [0, 2, 1, 3]}
  %y_1 : f32[B, S, 4, 16] = scaled_dot_product_attention(%qh, %qh, %qh) {is_causal = true, out_heads_second_last = true}
  output %y_1
})");
  expect_rewritten(*pass, *parse_graph(R"(
graph @g {
  sym B in [1, 8]
  sym S in [1, 1024]
  input %q : f32[B, S, 4, 16]
  input %k : f32[B, S, 4, 16]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %kh = permute(%k) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%qh, %kh, %kh)
  output %a
})"),
                   // k's permute feeds k and v: two readers, so only q folds.
                   R"(
graph @g {
  sym B in [1, 8]
  sym S in [1, 1024]
  input %q : f32[B, S, 4, 16]
  input %k : f32[B, S, 4, 16]
  %kh : f32[B, 4, S, 16] = permute(%k) {dims = [0, 2, 1, 3]}
  %a_1 : f32[B, 4, S, 16] = scaled_dot_product_attention(%q, %kh, %kh) {q_heads_second_last = true}
  output %a_1
})");
}

TEST(FoldPermuteIntoAttention, MustNotFire) {
  auto pass = make_fold_permute_into_attention();
  // The permutes have another reader (an op, a graph output).
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[2, 5, 3, 8]
  input %k : f32[2, 5, 3, 8]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %kh = permute(%k) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%qh, %kh, %qh)
  %r = relu(%kh)
  output %a, %r
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[2, 5, 3, 8]
  input %k : f32[2, 3, 7, 8]
  %qh = permute(%q) {dims = [0, 2, 1, 3]}
  %a = scaled_dot_product_attention(%qh, %k, %k)
  output %a, %qh
})");
  // Other dims: the last two swapped, heads moved to the end, a batch dim moved.
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[2, 3, 8, 5]
  input %k : f32[2, 5, 8, 3]
  input %v : f32[3, 2, 5, 8]
  %qh = permute(%q) {dims = [0, 1, 3, 2]}
  %kh = permute(%k) {dims = [0, 3, 1, 2]}
  %vh = permute(%v) {dims = [1, 0, 2, 3]}
  %a = scaled_dot_product_attention(%qh, %kh, %vh)
  output %a
})");
  // Rank 2: a transpose of q is no head permute; the output permute swaps other dims.
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[8, 5]
  input %k : f32[3, 2, 5, 8]
  %qt = permute(%q) {dims = [1, 0]}
  %a = scaled_dot_product_attention(%qt, %k, %k)
  %y = permute(%a) {dims = [0, 1, 3, 2]}
  output %y
})");
  // The attention output has another reader, or is itself a graph output.
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[2, 3, 5, 8]
  %a = scaled_dot_product_attention(%q, %q, %q)
  %y = permute(%a) {dims = [0, 2, 1, 3]}
  %z = relu(%a)
  output %y, %z
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[2, 3, 5, 8]
  %a = scaled_dot_product_attention(%q, %q, %q)
  %y = permute(%a) {dims = [0, 2, 1, 3]}
  output %y, %a
})");
}

}  // namespace
}  // namespace kiln
