// algebraic_simplification on textual IR: each identity before → after with a numeric check
// against the unoptimized graph, and where it must not fire (the result type differs from x's,
// a float x + +0.0, permutes that move data).
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_unchanged;

std::unique_ptr<Pass> pass() { return make_algebraic_simplification(); }

TEST(AlgebraicSimplification, ArithmeticIdentities) {
  expect_rewrite(*pass(), R"(
graph @g {
  input %x : f32[2, 3]
  input %i : i64[2, 3]
  const %one : f32[] = [1.0]
  const %ones : f32[3] = [1, 1, 1]
  const %nz : f32[] = [-0.0]
  const %pz : f32[] = [0.0]
  const %iz : i64[] = [0]
  %a = mul(%x, %one)
  %b = mul(%ones, %a)
  %c = div(%b, %one)
  %d = add(%nz, %c)
  %e = sub(%d, %pz)
  %f = neg(%e)
  %g = neg(%f)
  %j = add(%i, %iz)
  %k = floor(%j)
  %l = relu(%g)
  %n = clamp(%l)
  output %n, %k
})",
                 R"(
graph @g {
  input %x : f32[2, 3]
  input %i : i64[2, 3]
  const %one : f32[] = [1.0]
  const %ones : f32[3] = [1, 1, 1]
  const %nz : f32[] = [-0.0]
  const %pz : f32[] = [0.0]
  const %iz : i64[] = [0]
  %l = relu(%x)
  output %l, %i
})");
}

TEST(AlgebraicSimplification, ArithmeticMustNotFire) {
  expect_unchanged(*pass(), R"(
graph @g {
  input %x : f32[3]
  input %i : i64[3]
  const %ones : f32[2, 3] = [1, 1, 1, 1, 1, 1]
  const %one : f32[] = [1.0]
  const %two : f32[] = [2.0]
  const %pz : f32[] = [0.0]
  const %nz : f32[] = [-0.0]
  %a = mul(%x, %ones)
  %b = mul(%i, %one)
  %c = mul(%x, %two)
  %d = add(%x, %pz)
  %e = sub(%x, %nz)
  %f = add(%pz, %x) {alpha = 2.0}
  %g = div(%x, %one) {rounding_mode = "floor"}
  %h = div(%i, %one)
  %k = floor(%x)
  %l = clamp(%x) {min = 0.0}
  output %a, %b, %c, %d, %e, %f, %g, %h, %k, %l
})");
}

TEST(AlgebraicSimplification, IdentityViewsAndCasts) {
  expect_rewrite(*pass(), R"(
graph @g {
  input %x : f32[2, 3]
  %a = reshape(%x) {shape = [2, 3]}
  %b = squeeze(%a)
  %c = expand(%b) {size = [2, -1]}
  %d = slice(%c) {dim = 1, start = 0, end = 100}
  %e = to(%d) {dtype = "f32"}
  %f = concat(%e) {dim = 0}
  %g = repeat(%f) {repeats = [1, 1]}
  %h = narrow(%g) {dim = 0, start = 0, length = 2}
  %y = relu(%h)
  output %y
})",
                 R"(
graph @g {
  input %x : f32[2, 3]
  %y = relu(%x)
  output %y
})");
}

TEST(AlgebraicSimplification, ViewsThatChangeDataStay) {
  expect_unchanged(*pass(), R"(
graph @g {
  input %x : f32[3, 3]
  %a = slice(%x) {dim = 1, start = 1}
  %b = expand(%x) {size = [2, 3, 3]}
  %c = to(%x) {dtype = "f64"}
  %d = permute(%x) {dims = [1, 0]}
  %e = repeat(%x) {repeats = [2, 1]}
  output %a, %b, %c, %d, %e
})");
}

TEST(AlgebraicSimplification, TransposeOfTranspose) {
  expect_rewrite(*pass(), R"(
graph @g {
  input %x : f32[2, 3, 4]
  %a = permute(%x) {dims = [1, 0, 2]}
  %b = permute(%a) {dims = [1, 0, 2]}
  %c = permute(%b) {dims = [2, 0, 1]}
  %d = permute(%c) {dims = [0, 2, 1]}
  output %d
})",
                 R"(
graph @g {
  input %x : f32[2, 3, 4]
  %permute : f32[4, 3, 2] = permute(%x) {dims = [2, 1, 0]}
  output %permute
})");
}

TEST(AlgebraicSimplification, PermuteOfUnitDimsIsAReshape) {
  expect_rewrite(*pass(), R"(
graph @g {
  input %x : f32[1, 5, 1, 3]
  %a = permute(%x) {dims = [1, 0, 3, 2]}
  %b = permute(%x) {dims = [2, 1, 0, 3]}
  output %a, %b
})",
                 R"(
graph @g {
  input %x : f32[1, 5, 1, 3]
  %reshape : f32[5, 1, 3, 1] = reshape(%x) {shape = [5, 1, 3, 1]}
  output %reshape, %x
})");
}

TEST(AlgebraicSimplification, ReshapeChainsBecomeOneReshape) {
  expect_rewrite(*pass(), R"(
graph @g {
  input %x : f32[2, 3, 4]
  %a = reshape(%x) {shape = [6, 4]}
  %b = flatten(%a)
  %c = unsqueeze(%b) {dim = 0}
  %d = reshape(%c) {shape = [4, 6]}
  %e = reshape(%x) {shape = [24]}
  %f = reshape(%e) {shape = [2, 3, 4]}
  %y = add(%d, %d)
  output %y, %f
})",
                 R"(
graph @g {
  input %x : f32[2, 3, 4]
  %reshape_2 : f32[4, 6] = reshape(%x) {shape = [4, 6]}
  %y = add(%reshape_2, %reshape_2)
  output %y, %x
})");
}

TEST(AlgebraicSimplification, ReshapeChainsOnDynamicDims) {
  auto g = parse_graph(R"(
graph @g {
  sym B in [1, 8]
  input %x : f32[B, 3, 4]
  %a = reshape(%x) {shape = [-1, 12]}
  %b = reshape(%a) {shape = [-1, 3, 4]}
  output %b
})");
  EXPECT_TRUE(pass()->run(*g));
  verify(*g);
  EXPECT_EQ(g->num_nodes(), 0u);
  EXPECT_EQ(g->outputs()[0], g->inputs()[0]);
}

// torch.export materializes an all-ones padding mask as a constant: attending with it is
// attending without it, and the kernel's unmasked path is faster.
TEST(AlgebraicSimplification, AttentionMaskThatMasksNothing) {
  expect_rewrite(*pass(), R"(
graph @g {
  input %q : f32[1, 2, 3, 4]
  input %k : f32[1, 2, 3, 4]
  input %v : f32[1, 2, 3, 4]
  const %all : bool[1, 1, 3, 3] = [true, true, true, true, true, true, true, true, true]
  const %zero : f32[1, 1, 1, 3] = [0.0, -0.0, 0.0]
  %a = scaled_dot_product_attention(%q, %k, %v, %all) {scale = 0.5}
  %b = scaled_dot_product_attention(%q, %k, %v, %zero) {is_causal = true}
  output %a, %b
})",
                 R"(
graph @g {
  input %q : f32[1, 2, 3, 4]
  input %k : f32[1, 2, 3, 4]
  input %v : f32[1, 2, 3, 4]
  const %all : bool[1, 1, 3, 3] = [true, true, true, true, true, true, true, true, true]
  const %zero : f32[1, 1, 1, 3] = [0.0, -0.0, 0.0]
  %scaled_dot_product_attention : f32[1, 2, 3, 4] = scaled_dot_product_attention(%q, %k, %v) {scale = 0.5}
  %scaled_dot_product_attention_1 : f32[1, 2, 3, 4] = scaled_dot_product_attention(%q, %k, %v) {is_causal = true}
  output %scaled_dot_product_attention, %scaled_dot_product_attention_1
})");
}

TEST(AlgebraicSimplification, AttentionMaskThatMasksMustStay) {
  expect_unchanged(*pass(), R"(
graph @g {
  input %q : f32[1, 2, 3, 4]
  input %k : f32[1, 2, 3, 4]
  input %v : f32[1, 2, 3, 4]
  input %runtime : bool[1, 1, 3, 3]
  const %one_false : bool[1, 1, 1, 3] = [true, false, true]
  const %bias : f32[1, 1, 1, 3] = [0.0, -inf, 0.0]
  %a = scaled_dot_product_attention(%q, %k, %v, %runtime)
  %b = scaled_dot_product_attention(%q, %k, %v, %one_false)
  %c = scaled_dot_product_attention(%q, %k, %v, %bias)
  output %a, %b, %c
})");
}

}  // namespace
}  // namespace kiln
