// Elementwise chain fusion (fuse_elementwise_chains) on textual IR, and the fused_elementwise op
// it produces: before → after, bit-identical results with the reference kernels (expect_rewrite)
// and with the best kernels (AVX2, which reuses the elementwise ops' own vector code), the groups
// that must stop at an intermediate someone else reads, and the op's schema checks.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_unchanged;

// expect_rewrite plus the same bit-for-bit check with the best kernels.
void expect_fused(const std::string& before, const std::string& after) {
  auto pass = make_fuse_elementwise_chains();
  test::expect_rewrite(*pass, before, after);
  auto original = parse_graph(before);
  auto fused = original->clone();
  pass->run(*fused);
  std::mt19937 rng(17);
  std::vector<Tensor> inputs;
  std::vector<TensorView> views;
  for (const Value* in : original->inputs()) {
    inputs.push_back(test::random_tensor(in->type().dtype, static_sizes(in->type().shape), rng));
    views.push_back(inputs.back().view());
  }
  CompileOptions options{.optimization_level = 0, .kernel_policy = "best", .verify = true};
  auto want = CompiledGraph::compile(*original, options)->run(views);
  auto got = CompiledGraph::compile(*fused, options)->run(views);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(test::same_values(got[i], want[i])) << i;
}

TEST(FuseElementwiseChains, ChainWithBroadcastAndPythonNumber) {
  expect_fused(R"(
graph @g {
  input %x : f32[4, 33]
  input %y : f32[33]
  const %h : f64[] = [0.5]
  %a = mul(%x, %h) {wrapped_numbers = [1]}
  %b = add(%a, %y)
  %c = tanh(%b)
  output %c
})",
               R"(
graph @g {
  input %x : f32[4, 33]
  input %y : f32[33]
  const %h : f64[] = [0.5]
  %c_1 = fused_elementwise(%x, %y) {args = [0, -2, 2, 1, 3, -1], immediates = [0.5], ops = ["mul", "add", "tanh"]}
  output %c_1
})");
}

TEST(FuseElementwiseChains, TreeDiamondAndEveryOp) {
  // A tree over three inputs with a value read twice inside the group (%e by both %s and %m).
  expect_fused(R"(
graph @g {
  input %x : f32[2, 3, 40]
  input %y : f32[3, 1]
  input %z : f32[40]
  %e = exp(%y)
  %s = sub(%x, %e)
  %m = maximum(%s, %e)
  %n = minimum(%m, %z)
  %d = div(%n, %z)
  %r = relu(%d)
  %g1 = gelu(%r)
  %g2 = gelu(%g1) {approximate = "tanh"}
  %q = sigmoid(%g2)
  %si = silu(%q)
  %ab = abs(%si)
  %ng = neg(%ab)
  %w = mul(%ng, %ng)
  output %w
})",
               R"(
graph @g {
  input %x : f32[2, 3, 40]
  input %y : f32[3, 1]
  input %z : f32[40]
  %w_1 = fused_elementwise(%y, %x, %z) {args = [0, -1, 1, 3, 4, 3, 5, 2, 6, 2, 7, -1, 8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, 14], ops = ["exp", "sub", "maximum", "minimum", "div", "relu", "gelu_erf", "gelu_tanh", "sigmoid", "silu", "abs", "neg", "mul"]}
  output %w_1
})");
  // The remaining unary ops, f64.
  expect_fused(R"(
graph @g {
  input %x : f64[70]
  %a = abs(%x)
  %b = log(%a)
  %c = sqrt(%a)
  %d = rsqrt(%c)
  %e = reciprocal(%d)
  %f = erf(%e)
  %g = add(%b, %f)
  output %g
})",
               R"(
graph @g {
  input %x : f64[70]
  %g_1 = fused_elementwise(%x) {args = [0, -1, 1, -1, 1, -1, 3, -1, 4, -1, 5, -1, 2, 6], ops = ["abs", "log", "sqrt", "rsqrt", "reciprocal", "erf", "add"]}
  output %g_1
})");
}

TEST(FuseElementwiseChains, StopsAtValuesReadOutsideTheGroup) {
  // %a is read by the chain and by %n: the chain after it fuses, %a itself stays.
  expect_fused(R"(
graph @g {
  input %x : f32[5, 16]
  const %one : f64[] = [1.0]
  %a = exp(%x)
  %b = add(%a, %one) {wrapped_numbers = [1]}
  %c = relu(%b)
  %n = neg(%a)
  output %c, %n
})",
               R"(
graph @g {
  input %x : f32[5, 16]
  const %one : f64[] = [1.0]
  %a = exp(%x)
  %n = neg(%a)
  %c_1 = fused_elementwise(%a) {args = [0, -2, 1, -1], immediates = [1.0], ops = ["add", "relu"]}
  output %c_1, %n
})");
  // %b is a graph output: it must be written, so the group starts after it.
  expect_fused(R"(
graph @g {
  input %x : f32[5, 16]
  %a = exp(%x)
  %b = tanh(%a)
  %c = relu(%b)
  %d = neg(%c)
  output %d, %b
})",
               R"(
graph @g {
  input %x : f32[5, 16]
  %b_1 = fused_elementwise(%x) {args = [0, -1, 1, -1], ops = ["exp", "tanh"]}
  %d_1 = fused_elementwise(%b_1) {args = [0, -1, 1, -1], ops = ["relu", "neg"]}
  output %d_1, %b_1
})");
}

TEST(FuseElementwiseChains, AtMostFourInputs) {
  expect_fused(R"(
graph @g {
  input %a : f32[8]
  input %b : f32[8]
  input %c : f32[8]
  input %d : f32[8]
  input %e : f32[8]
  %s1 = add(%a, %b)
  %s2 = add(%s1, %c)
  %s3 = add(%s2, %d)
  %s4 = add(%s3, %e)
  output %s4
})",
               R"(
graph @g {
  input %a : f32[8]
  input %b : f32[8]
  input %c : f32[8]
  input %d : f32[8]
  input %e : f32[8]
  %s1 = add(%a, %b)
  %s4_1 = fused_elementwise(%s1, %c, %d, %e) {args = [0, 1, 4, 2, 5, 3], ops = ["add", "add", "add"]}
  output %s4_1
})");
}

TEST(FuseElementwiseChains, MustNotFire) {
  auto pass = make_fuse_elementwise_chains();
  // A single op, ops outside the set (alpha, rounding mode, other dtypes), a mixed-dtype operand.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4]
  %a = exp(%x)
  output %a
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4]
  input %y : f32[4]
  %a = add(%x, %y) {alpha = 2.0}
  %b = div(%a, %y) {rounding_mode = "floor"}
  %c = sub(%b, %y) {alpha = 3.0}
  output %c
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : i64[4]
  input %y : i64[4]
  %a = add(%x, %y)
  %b = mul(%a, %y)
  output %b
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4]
  input %y : f64[4]
  %a = exp(%x)
  %b = mul(%a, %y)
  output %b
})");
  // The intermediate is also a graph output.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4]
  %a = exp(%x)
  %b = neg(%a)
  output %b, %a
})");
  // The intermediate has another consumer outside the group.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4]
  %a = exp(%x)
  %b = neg(%a)
  %s = sum(%a)
  output %b, %s
})");
}

TEST(FusedElementwiseOp, SchemaRejectsBadPrograms) {
  auto expect_rejected = [](const std::string& attrs) {
    const std::string text = "graph @g {\n  input %x : f32[4]\n  input %y : f32[4]\n"
                             "  %z = fused_elementwise(%x, %y) " + attrs + "\n  output %z\n}\n";
    EXPECT_EQ(test::error_code_of([&] { parse_graph(text); }), ErrorCode::ShapeInference) << attrs;
  };
  expect_rejected(R"({args = [0, -1], ops = ["cosh"]})");                // unknown op
  expect_rejected(R"({args = [0, 1], ops = ["exp"]})");                  // unary with 2 operands
  expect_rejected(R"({args = [0, 2], ops = ["add"]})");                  // its own result
  expect_rejected(R"({args = [0, -2], ops = ["add"]})");                 // no immediate 0
  expect_rejected(R"({args = [0], ops = ["add"]})");                     // too few args
  expect_rejected(R"({args = [], ops = []})");                           // empty program
  expect_rejected(R"({args = [0, -7], immediates = [1.0], ops = ["mul"]})");
  EXPECT_EQ(test::error_code_of([] {
              parse_graph(R"(
graph @g {
  input %x : f32[4]
  input %y : f64[4]
  %z = fused_elementwise(%x, %y) {args = [0, 1], ops = ["add"]}
  output %z
})");
            }),
            ErrorCode::ShapeInference);
}

}  // namespace
}  // namespace kiln
