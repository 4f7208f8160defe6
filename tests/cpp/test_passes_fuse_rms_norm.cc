// Recognition of decomposed RMSNorm (fuse_decomposed_rms_norm) on the forms AOTAutograd traces
// from torch.nn.RMSNorm and from LLaMA- and T5-style model code: before → after, the fused graph
// against the decomposed one with the reference and the best kernels, the cases that must not
// fire, and the pass in the default pipeline.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_recognized;
using test::expect_unchanged;

// Bounds: the decomposed f32 chain rounds the square, the mean (of 32 terms: about 5 u of it in
// pairwise order, 32 u sequentially), the sum with eps, the root (1 ULP for the AVX2 rsqrt), the
// product and the scaling, while rms_norm rounds once. Normalized values |x / rms| stay below
// √32 and weights in [-4, 4] keep |y| < 23: a relative error of at most ~40 u, within
// 2^-19 · max(1, |y|).

// LLaMA's `weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))` in f32 (its casts
// to f32 and back are no-ops there, which AOTAutograd drops).
TEST(FuseDecomposedRmsNorm, LlamaStyleWithWeight) {
  auto pass = make_fuse_decomposed_rms_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %x : f32[4, 32]
  input %w : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %p = pow(%x, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [-1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = rsqrt(%a)
  %n = mul(%x, %r)
  %y = mul(%w, %n)
  output %y
})",
                    R"(
graph @g {
  input %x : f32[4, 32]
  input %w : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %y_1 = rms_norm(%x, %w) {eps = 1e-06, normalized_ndim = 1}
  output %y_1
})",
                    -19);
}

// What AOTAutograd makes of torch.nn.RMSNorm(32) (eps=None: f32's machine epsilon, added as a
// Python number; the integer exponent; the mean over dim 1 of a rank-2 x; the weight last).
TEST(FuseDecomposedRmsNorm, TorchRmsNormDecomposition) {
  auto pass = make_fuse_decomposed_rms_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %x : f32[6, 32]
  input %w : f32[32]
  const %two : i64[] = [2]
  const %eps : f64[] = [1.1920928955078125e-07]
  %p = pow(%x, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = rsqrt(%a)
  %n = mul(%x, %r)
  %y = mul(%n, %w)
  output %y
})",
                    R"(
graph @g {
  input %x : f32[6, 32]
  input %w : f32[32]
  const %two : i64[] = [2]
  const %eps : f64[] = [1.1920928955078125e-07]
  %y_1 = rms_norm(%x, %w) {eps = 1.1920928955078125e-07, normalized_ndim = 1}
  output %y_1
})",
                    -19);
}

// x / sqrt(eps + mean(x * x)) in f64 over the last of three dims, without a weight. The f64
// chain's error is the same count of roundings of 2^-53.
TEST(FuseDecomposedRmsNorm, DivSqrtFormF64) {
  auto pass = make_fuse_decomposed_rms_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %x : f64[2, 3, 20]
  const %eps : f64[] = [1e-05]
  %sq = mul(%x, %x)
  %s = mean(%sq) {dim = [2], keepdim = true}
  %a = add(%eps, %s) {wrapped_numbers = [0]}
  %r = sqrt(%a)
  %y = div(%x, %r)
  output %y
})",
                    R"(
graph @g {
  input %x : f64[2, 3, 20]
  const %eps : f64[] = [1e-05]
  %y_1 = rms_norm(%x) {eps = 1e-05, normalized_ndim = 1}
  output %y_1
})",
                    -45);
}

// LLaMA in bf16: x.to(f32), the norm in f32, .to(bf16), then the bf16 weight. The norm between
// the casts is recognized; the casts and the bf16 product stay (absorbing the weight would round
// once where PyTorch rounds twice). Rounding the f32 norm to bf16 may land one bf16 ulp (2^-8
// relative) apart where the two f32 results straddle a rounding boundary, and the bf16 product
// rounds once more: within 2^-6 · max(1, |y|).
TEST(FuseDecomposedRmsNorm, LlamaCastToF32AndBack) {
  auto pass = make_fuse_decomposed_rms_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %xf : f32[4, 32]
  input %wf : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %x = to(%xf) {dtype = "bf16"}
  %w = to(%wf) {dtype = "bf16"}
  %x32 = to(%x) {dtype = "f32"}
  %p = pow(%x32, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [-1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = rsqrt(%a)
  %n = mul(%x32, %r)
  %nb = to(%n) {dtype = "bf16"}
  %y = mul(%w, %nb)
  %yf = to(%y) {dtype = "f32"}
  output %yf
})",
                    R"(
graph @g {
  input %xf : f32[4, 32]
  input %wf : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %x = to(%xf) {dtype = "bf16"}
  %w = to(%wf) {dtype = "bf16"}
  %x32 = to(%x) {dtype = "f32"}
  %n_1 = rms_norm(%x32) {eps = 1e-06, normalized_ndim = 1}
  %nb = to(%n_1) {dtype = "bf16"}
  %y = mul(%w, %nb)
  %yf = to(%y) {dtype = "f32"}
  output %yf
})",
                    -6);
}

// T5 in bf16: the variance of x.to(f32), times the uncast x (the product promotes it to f32
// exactly); torch.nn.RMSNorm in bf16: the f32 norm times the bf16 weight, which promotes too.
TEST(FuseDecomposedRmsNorm, T5VarianceInF32AndHalfWeight) {
  auto pass = make_fuse_decomposed_rms_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %xf : f32[4, 32]
  input %wf : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %x = to(%xf) {dtype = "bf16"}
  %w = to(%wf) {dtype = "bf16"}
  %x32 = to(%x) {dtype = "f32"}
  %p = pow(%x32, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [-1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = rsqrt(%a)
  %n = mul(%x, %r)
  %y = mul(%n, %w)
  output %y
})",
                    R"(
graph @g {
  input %xf : f32[4, 32]
  input %wf : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %x = to(%xf) {dtype = "bf16"}
  %w = to(%wf) {dtype = "bf16"}
  %x32 = to(%x) {dtype = "f32"}
  %w_f32 = to(%w) {dtype = "f32"}
  %y_1 = rms_norm(%x32, %w_f32) {eps = 1e-06, normalized_ndim = 1}
  output %y_1
})",
                    -19);
}

TEST(FuseDecomposedRmsNorm, MustNotFire) {
  auto pass = make_fuse_decomposed_rms_norm();
  auto graph = [](const std::string& decls, const std::string& body, const std::string& out) {
    return "graph @g {\n  input %x : f32[4, 32]\n  const %two : f64[] = [2.0]\n" + decls + body +
           "  output " + out + "\n}\n";
  };
  const std::string eps = "  const %eps : f32[] = [1e-06]\n";
  auto chain = [](const std::string& mean_dim, const std::string& eps_name) {
    return "  %p = pow(%x, %two) {wrapped_numbers = [1]}\n  %s = mean(%p) {dim = [" + mean_dim +
           "], keepdim = true}\n  %a = add(%s, " + eps_name +
           ")\n  %r = rsqrt(%a)\n  %n = mul(%x, %r)\n";
  };
  // The mean over another dim (a norm over the batch is no RMSNorm).
  expect_unchanged(*pass, graph(eps, chain("0", "%eps"), "%n"));
  // eps not a scalar constant: a graph input, a constant of several values.
  expect_unchanged(*pass, graph("  input %e : f32[]\n", chain("-1", "%e"), "%n"));
  expect_unchanged(*pass, graph("  const %eps : f32[4, 1] = [1e-06, 1e-06, 1e-06, 1e-06]\n",
                                chain("-1", "%eps"), "%n"));
  // An intermediate with another reader: the root, the mean square, the square.
  expect_unchanged(*pass, graph(eps, chain("-1", "%eps"), "%n, %r"));
  expect_unchanged(*pass, graph(eps, chain("-1", "%eps") + "  %t = relu(%s)\n", "%n, %t"));
  expect_unchanged(*pass, graph(eps, chain("-1", "%eps"), "%n, %p"));
  // Another exponent; x times the root of another tensor's mean square.
  expect_unchanged(*pass, graph(eps + "  const %three : f64[] = [3.0]\n",
                                "  %p = pow(%x, %three) {wrapped_numbers = [1]}\n"
                                "  %s = mean(%p) {dim = [-1], keepdim = true}\n"
                                "  %a = add(%s, %eps)\n  %r = rsqrt(%a)\n  %n = mul(%x, %r)\n",
                                "%n"));
  expect_unchanged(*pass, graph(eps + "  input %z : f32[4, 32]\n",
                                "  %p = pow(%z, %two) {wrapped_numbers = [1]}\n"
                                "  %s = mean(%p) {dim = [-1], keepdim = true}\n"
                                "  %a = add(%s, %eps)\n  %r = rsqrt(%a)\n  %n = mul(%x, %r)\n",
                                "%n"));
  // A weight that is not over the normalized dim, a norm that already has one.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 32]
  input %w : f32[4, 1]
  input %v : f32[32]
  %n = rms_norm(%x)
  %y = mul(%n, %w)
  %m = rms_norm(%x, %v)
  %z = mul(%m, %v)
  output %y, %z
})");
}

// In the default pipeline the recognizer runs before the elementwise chains would take the
// pieces, and the norm reaches the plan as one node.
TEST(FuseDecomposedRmsNorm, RunsInTheDefaultPipeline) {
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[4, 32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-06]
  %p = pow(%x, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [-1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = rsqrt(%a)
  %n = mul(%x, %r)
  output %n
})");
  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  ASSERT_EQ(compiled->graph().nodes().size(), 1u);
  EXPECT_EQ(compiled->graph().nodes()[0]->op(), "rms_norm");
  bool fired = false;
  for (const PassRecord& r : compiled->pass_records())
    fired |= r.pass == "fuse_decomposed_rms_norm" && r.changed;
  EXPECT_TRUE(fired);
}

}  // namespace
}  // namespace kiln
