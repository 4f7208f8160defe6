// Recognition of decomposed GELU, LayerNorm, softmax and attention (fuse_decomposed_*) on the
// forms AOTAutograd traces from model code: before → after, the fused graph against the
// decomposed one with the reference and the best kernels, and the cases that must not fire.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_harness.h"
#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_recognized;
using test::expect_unchanged;
using test::run_with;

// ---------------------------------------------------------------- GELU

constexpr const char* kGeluConstants = R"(
  const %half : f64[] = [0.5]
  const %three : f64[] = [3.0]
  const %c : f64[] = [0.044715]
  const %k : f64[] = [0.7978845608028654]
  const %one : f64[] = [1.0]
  const %sqrt2 : f64[] = [1.4142135623730951])";

std::string gelu_graph(const std::string& body, const std::string& result) {
  return std::string("graph @g {\n  input %x : f32[4, 50]") + kGeluConstants + "\n" + body +
         "\n  output " + result + "\n}\n";
}

// The decomposed chains round after each of about 8 f32 ops on values of |x| <= 4, where 1 + tanh
// or 1 + erf can be small: an absolute error of a few ulp(|x|), within 2^-19 * max(1, |y|).
TEST(FuseDecomposedGelu, TanhFormAsGpt2GeluNew) {
  auto pass = make_fuse_decomposed_gelu();
  expect_recognized(*pass, gelu_graph(R"(
  %a = mul(%x, %half) {wrapped_numbers = [1]}
  %p = pow(%x, %three) {wrapped_numbers = [1]}
  %q = mul(%p, %c) {wrapped_numbers = [1]}
  %s = add(%x, %q)
  %t = mul(%s, %k) {wrapped_numbers = [1]}
  %u = tanh(%t)
  %v = add(%u, %one) {wrapped_numbers = [1]}
  %y = mul(%a, %v))", "%y"),
                    gelu_graph(R"(  %y_1 = gelu(%x) {approximate = "tanh"})", "%y_1"), -19);
  // x*x*x, the constant first, and the grouping x * (0.5 * (1 + tanh)).
  expect_recognized(*pass, gelu_graph(R"(
  %x2 = mul(%x, %x)
  %x3 = mul(%x2, %x)
  %q = mul(%c, %x3) {wrapped_numbers = [0]}
  %s = add(%q, %x)
  %t = mul(%k, %s) {wrapped_numbers = [0]}
  %u = tanh(%t)
  %v = add(%one, %u) {wrapped_numbers = [0]}
  %w = mul(%half, %v) {wrapped_numbers = [0]}
  %y = mul(%x, %w))", "%y"),
                    gelu_graph(R"(  %y_1 = gelu(%x) {approximate = "tanh"})", "%y_1"), -19);
}

TEST(FuseDecomposedGelu, ErfForms) {
  auto pass = make_fuse_decomposed_gelu();
  expect_recognized(*pass, gelu_graph(R"(
  %a = mul(%x, %half) {wrapped_numbers = [1]}
  %d = div(%x, %sqrt2) {wrapped_numbers = [1]}
  %e = erf(%d)
  %v = add(%e, %one) {wrapped_numbers = [1]}
  %y = mul(%a, %v))", "%y"),
                    gelu_graph("  %y_1 = gelu(%x)", "%y_1"), -19);
  // (x * (1 + erf(x * 0.7071067811865476))) * 0.5
  expect_recognized(*pass, R"(
graph @g {
  input %x : f32[4, 50]
  const %r : f64[] = [0.7071067811865476]
  const %one : f64[] = [1.0]
  const %half : f64[] = [0.5]
  %d = mul(%x, %r) {wrapped_numbers = [1]}
  %e = erf(%d)
  %v = add(%e, %one) {wrapped_numbers = [1]}
  %m = mul(%x, %v)
  %y = mul(%m, %half) {wrapped_numbers = [1]}
  output %y
})",
                    R"(
graph @g {
  input %x : f32[4, 50]
  const %r : f64[] = [0.7071067811865476]
  const %one : f64[] = [1.0]
  const %half : f64[] = [0.5]
  %y_1 = gelu(%x)
  output %y_1
})",
                    -19);
}

TEST(FuseDecomposedGelu, MustNotFire) {
  auto pass = make_fuse_decomposed_gelu();
  // The tanh is also read elsewhere.
  expect_unchanged(*pass, gelu_graph(R"(
  %a = mul(%x, %half) {wrapped_numbers = [1]}
  %p = pow(%x, %three) {wrapped_numbers = [1]}
  %q = mul(%p, %c) {wrapped_numbers = [1]}
  %s = add(%x, %q)
  %t = mul(%s, %k) {wrapped_numbers = [1]}
  %u = tanh(%t)
  %v = add(%u, %one) {wrapped_numbers = [1]}
  %y = mul(%a, %v))", "%y, %u"));
  // Another constant (0.5 * x * (1 + erf(x / 2)) is no GELU), and two different inputs.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[8]
  input %z : f32[8]
  const %two : f64[] = [2.0]
  const %one : f64[] = [1.0]
  const %half : f64[] = [0.5]
  %d = div(%x, %two) {wrapped_numbers = [1]}
  %e = erf(%d)
  %v = add(%e, %one) {wrapped_numbers = [1]}
  %a = mul(%x, %half) {wrapped_numbers = [1]}
  %y = mul(%a, %v)
  %d2 = mul(%x, %half) {wrapped_numbers = [1]}
  %e2 = erf(%d2)
  %v2 = add(%e2, %one) {wrapped_numbers = [1]}
  %a2 = mul(%z, %half) {wrapped_numbers = [1]}
  %y2 = mul(%a2, %v2)
  output %y, %y2
})");
}

// ---------------------------------------------------------------- softmax

// exp(x - max) / sum rounds the shifted value, the exponential, the sum (in double, then once)
// and the quotient: a few ulp of values <= 1.
TEST(FuseDecomposedSoftmax, ShiftedAndUnshifted) {
  auto pass = make_fuse_decomposed_softmax();
  expect_recognized(*pass, R"(
graph @g {
  input %x : f32[3, 7, 10]
  %m = amax(%x) {dim = [-1], keepdim = true}
  %s = sub(%x, %m)
  %e = exp(%s)
  %t = sum(%e) {dim = [-1], keepdim = true}
  %y = div(%e, %t)
  output %y
})",
                    R"(
graph @g {
  input %x : f32[3, 7, 10]
  %y_1 = softmax(%x) {axis = 2}
  output %y_1
})",
                    -21);
  expect_recognized(*pass, R"(
graph @g {
  input %x : f64[3, 7, 10]
  %e = exp(%x)
  %t = sum(%e) {dim = [1], keepdim = true}
  %y = div(%e, %t)
  output %y
})",
                    R"(
graph @g {
  input %x : f64[3, 7, 10]
  %y_1 = softmax(%x) {axis = 1}
  output %y_1
})",
                    -40);
}

TEST(FuseDecomposedSoftmax, MustNotFire) {
  auto pass = make_fuse_decomposed_softmax();
  // The exponentials have a third reader.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[3, 7, 10]
  %m = amax(%x) {dim = [2], keepdim = true}
  %s = sub(%x, %m)
  %e = exp(%s)
  %t = sum(%e) {dim = [2], keepdim = true}
  %y = div(%e, %t)
  %n = neg(%e)
  output %y, %n
})");
  // The exponentials are also a graph output; the sum over two dims.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[3, 7, 10]
  %e = exp(%x)
  %t = sum(%e) {dim = [-1], keepdim = true}
  %y = div(%e, %t)
  %e2 = exp(%x)
  %t2 = sum(%e2) {dim = [1, 2], keepdim = true}
  %y2 = div(%e2, %t2)
  output %y, %e, %y2
})");
}

// ---------------------------------------------------------------- LayerNorm

// The decomposed norm rounds the mean, the deviation, its square, the variance, the root and the
// quotient, then the scale and shift: a few ulp of normalized values |y| <~ 4 |w| + |b|.
TEST(FuseDecomposedLayerNorm, BertStyleWithScaleAndShift) {
  auto pass = make_fuse_decomposed_layer_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %x : f32[4, 32]
  input %w : f32[32]
  input %b : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-12]
  %u = mean(%x) {dim = [-1], keepdim = true}
  %d = sub(%x, %u)
  %p = pow(%d, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [-1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = sqrt(%a)
  %n = div(%d, %r)
  %y = mul(%w, %n)
  %z = add(%y, %b)
  output %z
})",
                    R"(
graph @g {
  input %x : f32[4, 32]
  input %w : f32[32]
  input %b : f32[32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-12]
  %z_1 = layer_norm(%x, %w, %b) {eps = 1e-12, normalized_ndim = 1}
  output %z_1
})",
                    -19);
}

TEST(FuseDecomposedLayerNorm, VarAndRsqrtForms) {
  auto pass = make_fuse_decomposed_layer_norm();
  expect_recognized(*pass, R"(
graph @g {
  input %x : f64[6, 20]
  const %eps : f64[] = [1e-05]
  %u = mean(%x) {dim = [1], keepdim = true}
  %v = var(%x) {correction = 0.0, dim = [1], keepdim = true}
  %a = add(%v, %eps)
  %r = rsqrt(%a)
  %d = sub(%x, %u)
  %n = mul(%r, %d)
  output %n
})",
                    R"(
graph @g {
  input %x : f64[6, 20]
  const %eps : f64[] = [1e-05]
  %n_1 = layer_norm(%x) {eps = 1e-05, normalized_ndim = 1}
  output %n_1
})",
                    -45);
  // mean(d * d) with rsqrt, f32, weight only.
  expect_recognized(*pass, R"(
graph @g {
  input %x : f32[2, 3, 16]
  input %w : f32[16]
  const %eps : f64[] = [1e-06]
  %u = mean(%x) {dim = [2], keepdim = true}
  %d = sub(%x, %u)
  %sq = mul(%d, %d)
  %s = mean(%sq) {dim = [-1], keepdim = true}
  %a = add(%eps, %s) {wrapped_numbers = [0]}
  %r = rsqrt(%a)
  %n = mul(%d, %r)
  %y = mul(%n, %w)
  output %y
})",
                    R"(
graph @g {
  input %x : f32[2, 3, 16]
  input %w : f32[16]
  const %eps : f64[] = [1e-06]
  %y_1 = layer_norm(%x, %w) {eps = 1e-06, normalized_ndim = 1}
  output %y_1
})",
                    -19);
}

TEST(FuseDecomposedLayerNorm, MustNotFire) {
  auto pass = make_fuse_decomposed_layer_norm();
  // Unbiased variance (correction 1) is not layer norm's; the mean over another dim.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 20]
  const %eps : f64[] = [1e-05]
  %u = mean(%x) {dim = [1], keepdim = true}
  %v = var(%x) {dim = [1], keepdim = true}
  %a = add(%v, %eps)
  %r = rsqrt(%a)
  %d = sub(%x, %u)
  %n = mul(%r, %d)
  %u2 = mean(%x) {dim = [0], keepdim = true}
  %v2 = var(%x) {correction = 0.0, dim = [1], keepdim = true}
  %a2 = add(%v2, %eps)
  %r2 = rsqrt(%a2)
  %d2 = sub(%x, %u2)
  %n2 = mul(%r2, %d2)
  output %n, %n2
})");
  // The deviation is also a graph output; a weight over the wrong dim is not absorbed.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 32]
  const %two : f64[] = [2.0]
  const %eps : f64[] = [1e-12]
  %u = mean(%x) {dim = [-1], keepdim = true}
  %d = sub(%x, %u)
  %p = pow(%d, %two) {wrapped_numbers = [1]}
  %s = mean(%p) {dim = [-1], keepdim = true}
  %a = add(%s, %eps) {wrapped_numbers = [1]}
  %r = sqrt(%a)
  %n = div(%d, %r)
  output %n, %d
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[4, 32]
  input %w : f32[4, 1]
  %n = layer_norm(%x)
  %y = mul(%n, %w)
  output %y
})");
}

// ---------------------------------------------------------------- attention

// The decomposed graph rounds the E-term scores (|s| <= E * scale = 4 with inputs in [-1, 1]),
// the scaled and masked scores, the softmax and the P·V sum: each probability carries a relative
// error of about (E + 4) * 2^-24 * max|s|, so the outputs (|o| <= 1) agree within 2^-17.
TEST(FuseDecomposedAttention, BertStyleWithMask) {
  auto pass = make_fuse_decomposed_attention();
  expect_recognized(*pass, R"(
graph @g {
  input %q : f32[2, 4, 9, 16]
  input %k : f32[2, 4, 11, 16]
  input %v : f32[2, 4, 11, 8]
  input %mask : f32[2, 1, 1, 11]
  const %c : f64[] = [4.0]
  %kt = permute(%k) {dims = [0, 1, 3, 2]}
  %s = matmul(%q, %kt)
  %sc = div(%s, %c) {wrapped_numbers = [1]}
  %sm = add(%sc, %mask)
  %p = softmax(%sm) {axis = -1}
  %o = matmul(%p, %v)
  output %o
})",
                    R"(
graph @g {
  input %q : f32[2, 4, 9, 16]
  input %k : f32[2, 4, 11, 16]
  input %v : f32[2, 4, 11, 8]
  input %mask : f32[2, 1, 1, 11]
  const %c : f64[] = [4.0]
  %o_1 = scaled_dot_product_attention(%q, %k, %v, %mask) {scale = 0.25}
  output %o_1
})",
                    -17, -1, 1);
}

TEST(FuseDecomposedAttention, TransposedWeightsScaledByMul) {
  auto pass = make_fuse_decomposed_attention();
  expect_recognized(*pass, R"(
graph @g {
  input %q : f32[3, 5, 16]
  input %k : f32[3, 7, 16]
  input %v : f32[3, 7, 16]
  const %c : f64[] = [0.25]
  %s = matmul(%q, %k) {transpose_b = true}
  %sc = mul(%c, %s) {wrapped_numbers = [0]}
  %p = softmax(%sc) {axis = 2}
  %o = matmul(%p, %v)
  output %o
})",
                    R"(
graph @g {
  input %q : f32[3, 5, 16]
  input %k : f32[3, 7, 16]
  input %v : f32[3, 7, 16]
  const %c : f64[] = [0.25]
  %o_1 = scaled_dot_product_attention(%q, %k, %v) {scale = 0.25}
  output %o_1
})",
                    -17, -1, 1);
}

TEST(FuseDecomposedAttention, MustNotFire) {
  auto pass = make_fuse_decomposed_attention();
  // Softmax over the queries, not the keys.
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[3, 5, 16]
  input %k : f32[3, 5, 16]
  input %v : f32[3, 5, 16]
  %s = matmul(%q, %k) {transpose_b = true}
  %p = softmax(%s) {axis = 1}
  %o = matmul(%p, %v)
  output %o
})");
  // The probabilities are also a graph output; a permute that is no transpose of the last dims.
  expect_unchanged(*pass, R"(
graph @g {
  input %q : f32[3, 5, 16]
  input %k : f32[3, 5, 16]
  input %v : f32[3, 5, 16]
  input %k2 : f32[16, 3, 5]
  %s = matmul(%q, %k) {transpose_b = true}
  %p = softmax(%s) {axis = -1}
  %o = matmul(%p, %v)
  %kt = permute(%k2) {dims = [1, 0, 2]}
  %s2 = matmul(%q, %kt)
  %p2 = softmax(%s2) {axis = -1}
  %o2 = matmul(%p2, %v)
  output %o, %p, %o2
})");
}

}  // namespace
}  // namespace kiln
