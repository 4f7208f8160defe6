// Elementwise chain fusion (fuse_elementwise_chains) on textual IR, and the fused_elementwise op
// it produces: before → after, bit-identical results with the reference kernels (expect_rewrite)
// and with the best kernels (AVX2, which reuses the elementwise ops' own vector code), the groups
// that must stop at an intermediate someone else reads, and the op's schema checks; then the
// reduction stage (a trailing sum/mean/amax/amin of a chain) and row reductions (a leading one
// broadcast back over the rows it reduced), on static and symbolic shapes; last, f16 and bf16
// chains.
#include <gtest/gtest.h>

#include <regex>

#include "kernels/cpu/float16.h"
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

std::string with_dtype(const std::string& text, DType dtype) {
  return std::regex_replace(text, std::regex("\\$T"), std::string(dtype_name(dtype)));
}

// A tree over three inputs with a value read twice inside the group (%e by both %s and %m),
// every binary op and most unary ones; $T the dtype.
constexpr const char* kTree = R"(
graph @g {
  input %x : $T[2, 3, 40]
  input %y : $T[3, 1]
  input %z : $T[40]
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
})";
constexpr const char* kTreeFused = R"(
graph @g {
  input %x : $T[2, 3, 40]
  input %y : $T[3, 1]
  input %z : $T[40]
  %w_1 = fused_elementwise(%y, %x, %z) {args = [0, -1, 1, 3, 4, 3, 5, 2, 6, 2, 7, -1, 8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, 14], ops = ["exp", "sub", "maximum", "minimum", "div", "relu", "gelu_erf", "gelu_tanh", "sigmoid", "silu", "abs", "neg", "mul"]}
  output %w_1
})";

// The remaining unary ops.
constexpr const char* kOtherUnary = R"(
graph @g {
  input %x : $T[70]
  %a = abs(%x)
  %b = log(%a)
  %c = sqrt(%a)
  %d = rsqrt(%c)
  %e = reciprocal(%d)
  %f = erf(%e)
  %g = add(%b, %f)
  output %g
})";
constexpr const char* kOtherUnaryFused = R"(
graph @g {
  input %x : $T[70]
  %g_1 = fused_elementwise(%x) {args = [0, -1, 1, -1, 1, -1, 3, -1, 4, -1, 5, -1, 2, 6], ops = ["abs", "log", "sqrt", "rsqrt", "reciprocal", "erf", "add"]}
  output %g_1
})";

TEST(FuseElementwiseChains, TreeDiamondAndEveryOp) {
  expect_fused(with_dtype(kTree, DType::F32), with_dtype(kTreeFused, DType::F32));
  expect_fused(with_dtype(kOtherUnary, DType::F64), with_dtype(kOtherUnaryFused, DType::F64));
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

// Reduction stage: a trailing reduction of a chain's result joins the group.

// Runs `original` and `fused` at level 0 with `options` on `inputs` and expects the same bits.
void expect_same_runs(const Graph& original, const Graph& fused, const std::vector<Tensor>& inputs,
                      CompileOptions options) {
  std::vector<TensorView> views;
  for (const Tensor& t : inputs) views.push_back(t.view());
  options.optimization_level = 0;
  options.verify = true;
  auto want = CompiledGraph::compile(original, options)->run(views);
  auto got = CompiledGraph::compile(fused, options)->run(views);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(test::same_values(got[i], want[i])) << i;
}

TEST(FuseElementwiseChains, TrailingSumOfSquares) {
  // Rows of 600: three of the reducer's 256-element blocks, the last one partial.
  expect_fused(R"(
graph @g {
  input %x : f32[5, 600]
  %s = mul(%x, %x)
  %r = sum(%s) {dim = [-1]}
  output %r
})",
               R"(
graph @g {
  input %x : f32[5, 600]
  %r_1 = fused_elementwise(%x) {args = [0, 0], ops = ["mul"], reduce = "sum", reduce_dims = [-1]}
  output %r_1
})");
}

TEST(FuseElementwiseChains, TrailingMeanOfSquaredDifferenceOverAllDims) {
  expect_fused(R"(
graph @g {
  input %a : f32[3, 5, 70]
  input %b : f32[5, 70]
  %d = sub(%a, %b)
  %q = mul(%d, %d)
  %m = mean(%q) {keepdim = true}
  output %m
})",
               R"(
graph @g {
  input %a : f32[3, 5, 70]
  input %b : f32[5, 70]
  %m_1 = fused_elementwise(%a, %b) {args = [0, 1, 2, 2], keepdim = true, ops = ["sub", "mul"], reduce = "mean"}
  output %m_1
})");
}

TEST(FuseElementwiseChains, TrailingExtremaEveryReductionAndF64) {
  // amax of |x| over the last two dims, keepdim; max and min are amax and amin.
  expect_fused(R"(
graph @g {
  input %x : f32[4, 3, 50]
  %a = abs(%x)
  %r = amax(%a) {dim = [1, 2], keepdim = true}
  output %r
})",
               R"(
graph @g {
  input %x : f32[4, 3, 50]
  %r_1 = fused_elementwise(%x) {args = [0, -1], keepdim = true, ops = ["abs"], reduce = "amax", reduce_dims = [1, 2]}
  output %r_1
})");
  expect_fused(R"(
graph @g {
  input %x : f32[6, 33]
  input %y : f32[6, 1]
  %a = sub(%x, %y)
  %e = exp(%a)
  %r = min(%e) {dim = [1]}
  output %r
})",
               R"(
graph @g {
  input %x : f32[6, 33]
  input %y : f32[6, 1]
  %r_1 = fused_elementwise(%x, %y) {args = [0, 1, 2, -1], ops = ["sub", "exp"], reduce = "amin", reduce_dims = [1]}
  output %r_1
})");
  expect_fused(R"(
graph @g {
  input %x : f64[7, 40]
  %a = tanh(%x)
  %r = max(%a) {dim = [-1]}
  %s = sigmoid(%x)
  %t = sum(%s) {dim = [-1], keepdim = true}
  output %r, %t
})",
               R"(
graph @g {
  input %x : f64[7, 40]
  %t_1 = fused_elementwise(%x) {args = [0, -1], keepdim = true, ops = ["sigmoid"], reduce = "sum", reduce_dims = [-1]}
  %r_1 = fused_elementwise(%x) {args = [0, -1], ops = ["tanh"], reduce = "amax", reduce_dims = [-1]}
  output %r_1, %t_1
})");
}

TEST(FuseElementwiseChains, TrailingReductionKeepsNaNAndChainsAfterIt) {
  // A NaN in a row wins amax under both kernels; sqrt after the sum stays a separate op (a
  // group never grows through a reduction).
  const std::string before = R"(
graph @g {
  input %x : f32[3, 20]
  %l = log(%x)
  %r = amax(%l) {dim = [-1]}
  %q = mul(%x, %x)
  %s = sum(%q) {dim = [-1]}
  %n = sqrt(%s)
  output %r, %n
})";
  auto pass = make_fuse_elementwise_chains();
  test::expect_rewrite(*pass, before, R"(
graph @g {
  input %x : f32[3, 20]
  %s_1 = fused_elementwise(%x) {args = [0, 0], ops = ["mul"], reduce = "sum", reduce_dims = [-1]}
  %n = sqrt(%s_1)
  %r_1 = fused_elementwise(%x) {args = [0, -1], ops = ["log"], reduce = "amax", reduce_dims = [-1]}
  output %r_1, %n
})");
  auto original = parse_graph(before);
  auto fused = original->clone();
  pass->run(*fused);
  std::mt19937 rng(3);
  Tensor x = test::random_tensor(DType::F32, {3, 20}, rng, -1, 1);  // log of negatives: NaN
  for (const char* policy : {"reference", "best"})
    expect_same_runs(*original, *fused, {x}, CompileOptions{.kernel_policy = policy});
}

TEST(FuseElementwiseChains, TrailingReductionOnSymbolicShapes) {
  const std::string before = R"(
graph @g {
  sym B in [1, 64]
  sym N in [1, 2048]
  input %x : f32[B, N]
  input %w : f32[N]
  %a = mul(%x, %w)
  %b = abs(%a)
  %r = sum(%b) {dim = [1]}
  output %r
})";
  auto original = parse_graph(before);
  auto fused = original->clone();
  ASSERT_TRUE(make_fuse_elementwise_chains()->run(*fused));
  ASSERT_EQ(fused->nodes().size(), 1u);
  EXPECT_EQ(fused->nodes()[0]->op(), "fused_elementwise");
  std::mt19937 rng(5);
  for (auto [b, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 257}, {17, 2048}}) {
    SCOPED_TRACE(std::to_string(b) + "x" + std::to_string(n));
    std::vector<Tensor> inputs{test::random_tensor(DType::F32, {b, n}, rng),
                               test::random_tensor(DType::F32, {n}, rng)};
    for (const char* policy : {"reference", "best"})
      expect_same_runs(*original, *fused, inputs, CompileOptions{.kernel_policy = policy});
  }
}

TEST(FuseElementwiseChains, TrailingReductionOfOneLongRowOverThreads) {
  // One row of 300000: the reducer splits its blocks over the threads, and its tree (as the
  // unfused reduction's) depends on n only.
  const std::string before = R"(
graph @g {
  input %x : f32[3000, 100]
  %a = mul(%x, %x)
  %r = sum(%a)
  output %r
})";
  auto original = parse_graph(before);
  auto fused = original->clone();
  ASSERT_TRUE(make_fuse_elementwise_chains()->run(*fused));
  std::mt19937 rng(9);
  std::vector<Tensor> inputs{test::random_tensor(DType::F32, {3000, 100}, rng)};
  for (int threads : {1, 2})
    expect_same_runs(*original, *fused, inputs,
                     CompileOptions{.threads = threads, .kernel_policy = "best"});
}

TEST(FuseElementwiseChains, TrailingReductionMustNotFire) {
  auto pass = make_fuse_elementwise_chains();
  // The chain's result is also read elsewhere, or is a graph output: the reduction stays.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8]
  %a = exp(%x)
  %r = sum(%a) {dim = [-1]}
  %n = neg(%a)
  output %r, %n
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8]
  %a = exp(%x)
  %r = sum(%a) {dim = [-1]}
  output %r, %a
})");
  // Reduced dims that are not the trailing ones: a column sum, or dims 0 and 2.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8]
  %a = exp(%x)
  %r = sum(%a) {dim = [0]}
  output %r
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8, 3]
  %a = exp(%x)
  %r = amax(%a) {dim = [0, 2], keepdim = true}
  output %r
})");
  // Reductions the stage doesn't take (prod, var), and a reduction of a graph input.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8]
  %a = exp(%x)
  %r = prod(%a) {dim = [-1]}
  %b = neg(%x)
  %v = var(%b) {dim = [-1]}
  %s = sum(%x) {dim = [-1]}
  output %r, %v, %s
})");
}

// Row reductions: a reduction of a value the group reads too, broadcast back along its rows.

TEST(FuseElementwiseChains, LeadingMeanAndSum) {
  expect_fused(R"(
graph @g {
  input %x : f32[6, 300]
  %m = mean(%x) {dim = [-1], keepdim = true}
  %d = sub(%x, %m)
  output %d
})",
               R"(
graph @g {
  input %x : f32[6, 300]
  %d_1 = fused_elementwise(%x) {args = [0, -1, 0, 1], ops = ["row_mean", "sub"], row_ndim = 1}
  output %d_1
})");
  // Over all dims, no keepdim: a scalar that broadcasts over the one row.
  expect_fused(R"(
graph @g {
  input %x : f32[4, 50]
  %e = exp(%x)
  %s = sum(%e)
  %y = div(%e, %s)
  output %y
})",
               R"(
graph @g {
  input %x : f32[4, 50]
  %e = exp(%x)
  %y_1 = fused_elementwise(%e) {args = [0, -1, 0, 1], ops = ["row_sum", "div"], row_ndim = 2}
  output %y_1
})");
}

TEST(FuseElementwiseChains, LeadingExtremaTwoDimsAndF64) {
  expect_fused(R"(
graph @g {
  input %x : f32[3, 4, 70]
  input %w : f32[70]
  %m = amax(%x) {dim = [1, 2], keepdim = true}
  %d = sub(%x, %m)
  %e = exp(%d)
  %y = mul(%e, %w)
  output %y
})",
               R"(
graph @g {
  input %x : f32[3, 4, 70]
  input %w : f32[70]
  %y_1 = fused_elementwise(%x, %w) {args = [0, -1, 0, 2, 3, -1, 4, 1], ops = ["row_amax", "sub", "exp", "mul"], row_ndim = 2}
  output %y_1
})");
  expect_fused(R"(
graph @g {
  input %x : f64[5, 33]
  %m = min(%x) {dim = [-1], keepdim = true}
  %d = sub(%x, %m)
  output %d
})",
               R"(
graph @g {
  input %x : f64[5, 33]
  %d_1 = fused_elementwise(%x) {args = [0, -1, 0, 1], ops = ["row_amin", "sub"], row_ndim = 1}
  output %d_1
})");
}

TEST(FuseElementwiseChains, LeadingReductionOfAChainIsTrailingInstead) {
  // amax(|x|) is not read by the division: it becomes its own group with a reduction stage
  // (x is read twice either way), and the division stays.
  expect_fused(R"(
graph @g {
  input %x : f32[4, 40]
  %a = abs(%x)
  %m = amax(%a) {dim = [-1], keepdim = true}
  %q = div(%x, %m)
  output %q
})",
               R"(
graph @g {
  input %x : f32[4, 40]
  %m_1 = fused_elementwise(%x) {args = [0, -1], keepdim = true, ops = ["abs"], reduce = "amax", reduce_dims = [-1]}
  %q = div(%x, %m_1)
  output %q
})");
}

TEST(FuseElementwiseChains, LeadingReductionOnSymbolicShapesAndThreads) {
  const std::string before = R"(
graph @g {
  sym B in [1, 64]
  sym N in [1, 400000]
  input %x : f32[B, N]
  %m = mean(%x) {dim = [1], keepdim = true}
  %d = sub(%x, %m)
  %q = mul(%d, %d)
  output %q
})";
  auto original = parse_graph(before);
  auto fused = original->clone();
  ASSERT_TRUE(make_fuse_elementwise_chains()->run(*fused));
  ASSERT_EQ(fused->nodes().size(), 1u);
  std::mt19937 rng(11);
  // The last two: one long row split over the threads, and more rows than threads.
  for (auto [b, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 257}, {1, 300000}, {5, 40000}}) {
    SCOPED_TRACE(std::to_string(b) + "x" + std::to_string(n));
    std::vector<Tensor> inputs{test::random_tensor(DType::F32, {b, n}, rng)};
    for (const char* policy : {"reference", "best"})
      for (int threads : {1, 2})
        expect_same_runs(*original, *fused, inputs,
                         CompileOptions{.threads = threads, .kernel_policy = policy});
  }
}

TEST(FuseElementwiseChains, LeadingReductionMustNotFire) {
  auto pass = make_fuse_elementwise_chains();
  // No keepdim: [4] broadcasts along the columns, not the rows.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 4]
  %m = mean(%x) {dim = [-1]}
  %d = sub(%x, %m)
  output %d
})");
  // The mean is also a graph output; a column mean.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8]
  %m = mean(%x) {dim = [-1], keepdim = true}
  %d = sub(%x, %m)
  output %d, %m
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 8]
  %m = mean(%x) {dim = [0], keepdim = true}
  %d = sub(%x, %m)
  output %d
})");
  // x is broadcast to a larger chain, so its rows are not the chain's: the sum stays.
  expect_fused(R"(
graph @g {
  input %x : f32[8]
  input %y : f32[4, 8]
  %m = sum(%x) {dim = [-1], keepdim = true}
  %d = sub(%y, %m)
  %e = add(%d, %x)
  output %e
})",
               R"(
graph @g {
  input %x : f32[8]
  input %y : f32[4, 8]
  %m = sum(%x) {dim = [-1], keepdim = true}
  %e_1 = fused_elementwise(%y, %m, %x) {args = [0, 1, 3, 2], ops = ["sub", "add"]}
  output %e_1
})");
}

TEST(FusedElementwiseOp, SchemaRejectsBadRowReductions) {
  auto expect_rejected = [](const std::string& attrs) {
    const std::string text = "graph @g {\n  input %x : f32[4, 6]\n  input %y : f32[6]\n"
                             "  %z = fused_elementwise(%x, %y) " + attrs + "\n  output %z\n}\n";
    EXPECT_EQ(test::error_code_of([&] { parse_graph(text); }), ErrorCode::ShapeInference) << attrs;
  };
  // The operand is a result, or broadcast along the row; row_ndim out of range or unused; the
  // row reduction last; combined with a reduce stage.
  expect_rejected(R"({args = [0, -1, 2, -1, 0, 3], ops = ["exp", "row_sum", "sub"], row_ndim = 1})");
  expect_rejected(R"({args = [1, -1, 0, 2], ops = ["row_sum", "sub"], row_ndim = 2})");
  expect_rejected(R"({args = [0, -1, 0, 2], ops = ["row_sum", "sub"], row_ndim = 3})");
  expect_rejected(R"({args = [0, 1], ops = ["sub"], row_ndim = 1})");
  expect_rejected(R"({args = [0, 1, 0, -1], ops = ["sub", "row_sum"], row_ndim = 1})");
  expect_rejected(R"({args = [0, -1, 0, 2], ops = ["row_sum", "sub"], reduce = "sum", row_ndim = 1})");
}

TEST(FusedElementwiseOp, SchemaRejectsBadReductions) {
  auto expect_rejected = [](const std::string& attrs) {
    const std::string text = "graph @g {\n  input %x : f32[4, 6]\n"
                             "  %z = fused_elementwise(%x) " + attrs + "\n  output %z\n}\n";
    EXPECT_EQ(test::error_code_of([&] { parse_graph(text); }), ErrorCode::ShapeInference) << attrs;
  };
  expect_rejected(R"({args = [0, -1], ops = ["exp"], reduce = "prod"})");  // unknown
  expect_rejected(R"({args = [0, -1], ops = ["exp"], reduce = "sum", reduce_dims = [0]})");
  expect_rejected(R"({args = [0, -1], ops = ["exp"], reduce = "sum", reduce_dims = [2]})");
  expect_rejected(R"({args = [0, -1], ops = ["exp"], reduce = "sum", reduce_dims = [1, -1]})");
  expect_rejected(R"({args = [0, -1], ops = ["exp"], reduce_dims = [1]})");  // no reduce
  expect_rejected(R"({args = [0, -1], keepdim = true, ops = ["exp"]})");
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

// f16 and bf16 chains: the fused node computes each op in f32 and rounds its result to the
// 2-byte dtype before the next op reads it, as the unfused ops do, so fused and unfused chains
// give the same bits (a NaN where they give a NaN) under either kernel policy and through the
// whole pipeline, on any size and on NaN, inf and subnormal inputs.

constexpr DType kLowDTypes[] = {DType::BF16, DType::F16};

// Values of a 2-byte float dtype: mostly uniform in [-4, 4) rounded to it, and one in eight
// each of any bit pattern (NaNs with payloads, infinities, huge and tiny values), a value in the
// subnormal range (of f32 for bf16, of f16 for f16) and a special (NaN, ±inf, ±0).
Tensor random_low(DType dtype, const std::vector<int64_t>& sizes, std::mt19937& rng) {
  auto bits_of = [dtype](float v) {
    return dtype == DType::BF16 ? cpu::to_bfloat16(v).bits : cpu::to_float16(v).bits;
  };
  const float tiny = dtype == DType::BF16 ? 0x1p-127f : 0x1p-15f;
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
  std::uniform_real_distribution<float> dist(-4, 4);
  Tensor t = Tensor::empty(dtype, sizes);
  uint16_t* bits = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (rng() % 8) {
      case 0: bits[i] = static_cast<uint16_t>(rng()); break;
      case 1: bits[i] = bits_of(dist(rng) * tiny); break;
      case 2: bits[i] = bits_of(specials[rng() % 5]); break;
      default: bits[i] = bits_of(dist(rng)); break;
    }
  }
  return t;
}

std::vector<Tensor> random_low_inputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> inputs;
  for (const Value* in : g.inputs())
    inputs.push_back(random_low(in->type().dtype, static_sizes(in->type().shape), rng));
  return inputs;
}

// The same bits, but any NaN matches any NaN: which operand's NaN an f32 operation on two NaNs
// passes on (and so its sign) is up to the compiler's operand order, in the unfused ops too.
void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dtype(), want[i].dtype());
    ASSERT_EQ(got[i].sizes(), want[i].sizes());
    const uint16_t inf = got[i].dtype() == DType::BF16 ? 0x7F80 : 0x7C00;
    auto is_nan = [inf](uint16_t bits) { return (bits & 0x7FFF) > inf; };
    for (int64_t k = 0; k < got[i].numel(); ++k) {
      const uint16_t a = got[i].data<uint16_t>()[k], b = want[i].data<uint16_t>()[k];
      if (!(is_nan(a) && is_nan(b))) {
        ASSERT_EQ(a, b) << "output " << i << " element " << k;
      }
    }
  }
}

// `fused` (the pass's result on `original`) computes what `original` does, bit for bit, with
// the reference and the best (AVX2) kernels; so does the whole pipeline with and without the
// pass, and with it the chain is one fused_elementwise node.
void expect_fused_matches_unfused(const Graph& original, const Graph& fused, uint32_t seed = 5) {
  const std::vector<Tensor> inputs = random_low_inputs(original, seed);
  for (const char* policy : {"reference", "best"}) {
    SCOPED_TRACE(policy);
    expect_same_bits(test::run_with(fused, policy, inputs),
                     test::run_with(original, policy, inputs));
  }
  std::vector<TensorView> views;
  for (const Tensor& t : inputs) views.push_back(t.view());
  auto on = CompiledGraph::compile(original, {.verify = true});
  auto off = CompiledGraph::compile(
      original, {.verify = true, .disabled_passes = {"fuse_elementwise_chains"}});
  size_t fused_nodes = 0;
  for (const Node* n : on->graph().nodes()) fused_nodes += n->op() == "fused_elementwise";
  EXPECT_EQ(fused_nodes, 1u);
  for (const Node* n : off->graph().nodes()) EXPECT_NE(n->op(), "fused_elementwise");
  SCOPED_TRACE("pipeline");
  expect_same_bits(on->run(views), off->run(views));
}

TEST(FuseElementwiseLowPrecision, Bf16AndF16ChainsFuseIntoOneNode) {
  auto pass = make_fuse_elementwise_chains();
  for (DType dtype : kLowDTypes)
    for (auto [before, after] : {std::pair{kTree, kTreeFused},
                                 std::pair{kOtherUnary, kOtherUnaryFused}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + before);
      auto original = parse_graph(with_dtype(before, dtype));
      auto fused = test::expect_rewritten(*pass, *original, with_dtype(after, dtype));
      EXPECT_EQ(fused->outputs()[0]->type().dtype, dtype);
      expect_fused_matches_unfused(*original, *fused);
    }
}

TEST(FuseElementwiseLowPrecision, OddSizesAndAMillionElements) {
  // tanh(x * sigmoid(x) + 1) / b, b broadcast; sizes that leave partial blocks and vectors.
  const std::string text = R"(
graph @g {
  input %x : $T[$N]
  input %b : $T[1]
  const %one : f64[] = [1.0]
  %s = sigmoid(%x)
  %m = mul(%x, %s)
  %a = add(%m, %one) {wrapped_numbers = [1]}
  %t = tanh(%a)
  %y = div(%t, %b)
  output %y
})";
  auto pass = make_fuse_elementwise_chains();
  for (DType dtype : kLowDTypes)
    for (int64_t n : {1, 3, 7, 17, 1000003}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n = " + std::to_string(n));
      auto original = parse_graph(
          std::regex_replace(with_dtype(text, dtype), std::regex("\\$N"), std::to_string(n)));
      auto fused = original->clone();
      ASSERT_TRUE(pass->run(*fused));
      const Node* node = fused->outputs()[0]->producer();
      ASSERT_EQ(node->op(), "fused_elementwise");
      EXPECT_EQ(std::get<std::vector<std::string>>(node->attrs().at("ops")),
                (std::vector<std::string>{"sigmoid", "mul", "add", "tanh", "div"}));
      expect_fused_matches_unfused(*original, *fused, static_cast<uint32_t>(n));
    }
}

TEST(FuseElementwiseLowPrecision, MixedDTypesStayUnfused) {
  auto pass = make_fuse_elementwise_chains();
  // A bf16 value with an f32 one computes and gives f32: the op reads two dtypes.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : bf16[4]
  input %y : f32[4]
  %a = exp(%x)
  %b = mul(%a, %y)
  %c = neg(%b)
  output %c
})");
  // f16 with bf16 gives f32, and a cast between two ops splits them.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f16[4]
  input %y : bf16[4]
  %a = add(%x, %y)
  %b = neg(%a)
  output %b
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : bf16[4]
  %a = exp(%x)
  %b = to(%a) {dtype = "f32"}
  %c = neg(%b)
  output %c
})");
}

TEST(FuseElementwiseLowPrecision, SchemaRejectsReductionsOfTwoByteChains) {
  for (const char* attrs : {R"({args = [0, -1], ops = ["exp"], reduce = "sum"})",
                            R"({args = [0, -1, 0, 1], ops = ["row_sum", "sub"], row_ndim = 1})"})
    for (DType dtype : kLowDTypes) {
      const std::string text = with_dtype(
          "graph @g {\n  input %x : $T[4, 6]\n  %z = fused_elementwise(%x) " + std::string(attrs) +
              "\n  output %z\n}\n",
          dtype);
      std::string message;
      EXPECT_EQ(test::error_code_of([&] { parse_graph(text); }, &message),
                ErrorCode::ShapeInference)
          << text;
      EXPECT_NE(message.find("an f16 or bf16 chain takes no reduction"), std::string::npos)
          << message;
    }
}

}  // namespace
}  // namespace kiln
