// Matmul fusions on textual IR: epilogue fusion (fuse_matmul_epilogue) and Linear+BatchNorm
// folding (fold_linear_batch_norm), before → after, the numeric check against the unfused graph
// with the reference and the best kernels, and the cases where neither may fire.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_unchanged;
using test::run_with;
using test::random_inputs;

// The rewritten graph against the original with the best kernels (oneDNN or OpenBLAS for the
// GEMM, AVX2 for the elementwise ops). Bias, relu and residual add exactly as the unfused adds do,
// so those epilogues must agree bit for bit. A transcendental activation may run as a oneDNN
// post-op, whose approximation is not Kiln's: both are within a few f32 ULP of the true function
// measured against max(1, |y|) (docs/ops.md; oneDNN's eltwise accuracy tests), so they may differ
// by 2^-19 of that.
void expect_close_with_best_kernels(const Graph& original, const Graph& rewritten, bool exact) {
  std::vector<Tensor> inputs = random_inputs(original, 11);
  std::vector<Tensor> want = run_with(original, "best", inputs);
  std::vector<Tensor> got = run_with(rewritten, "best", inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (exact) {
      EXPECT_TRUE(test::same_values(got[i], want[i])) << "output " << i;
      continue;
    }
    for (int64_t j = 0; j < want[i].numel(); ++j) {
      const float w = want[i].data<float>()[j], v = got[i].data<float>()[j];
      ASSERT_LE(std::fabs(v - w), std::ldexp(std::max(1.f, std::fabs(w)), -19))
          << "output " << i << " element " << j;
    }
  }
}

// expect_rewrite (reference kernels, bit for bit) plus the best-kernel check.
void expect_fused(Pass& pass, const std::string& before, const std::string& after,
                  bool exact_with_best = true) {
  expect_rewrite(pass, before, after);
  auto original = parse_graph(before);
  auto fused = original->clone();
  pass.run(*fused);
  expect_close_with_best_kernels(*original, *fused, exact_with_best);
}

// ---------------------------------------------------------------- epilogue

TEST(FuseMatmulEpilogue, BiasActivationResidualChain) {
  auto pass = make_fuse_matmul_epilogue();
  expect_fused(*pass, R"(
graph @g {
  input %x : f32[2, 24, 16]
  input %w : f32[40, 16]
  input %b : f32[40]
  input %r : f32[2, 24, 40]
  %y = matmul(%x, %w) {transpose_b = true}
  %z = add(%y, %b)
  %h = gelu(%z) {approximate = "tanh"}
  %out = add(%r, %h)
  output %out
})",
               R"(
graph @g {
  input %x : f32[2, 24, 16]
  input %w : f32[40, 16]
  input %b : f32[40]
  input %r : f32[2, 24, 40]
  %out_1 = matmul(%x, %w, %b, %r) {fused_activation = "gelu_tanh", bias = true, residual = true, transpose_b = true}
  output %out_1
})",
               /*exact_with_best=*/false);
}

// A bf16 linear layer as the builder and fold_bf16_casts_into_matmul leave it: the matmul of bf16
// operands and its bias add in f32, rounded to bf16, then gelu and the residual add in bf16. With
// the rounding in the kernel, all of it fuses and is rounded once: within a few bf16 steps of the
// unfused graph, which rounds after each op (2^-7 each at most, gelu's slope below 1.13).
TEST(FuseMatmulEpilogue, Bf16LinearRoundsOnceAtTheEnd) {
  auto pass = make_fuse_matmul_epilogue();
  test::expect_recognized(*pass, R"(
graph @g {
  input %x : bf16[24, 16]
  input %w : bf16[40, 16]
  input %b : f32[40]
  input %r : bf16[24, 40]
  %y : f32[24, 40] = matmul(%x, %w) {transpose_b = true}
  %z = add(%y, %b)
  %z16 = to(%z) {dtype = "bf16"}
  %h = gelu(%z16)
  %out = add(%r, %h)
  output %out
})",
                          R"(
graph @g {
  input %x : bf16[24, 16]
  input %w : bf16[40, 16]
  input %b : f32[40]
  input %r : bf16[24, 40]
  %out_1 : bf16[24, 40] = matmul(%x, %w, %b, %r) {bias = true, dtype = "bf16", fused_activation = "gelu_erf", residual = true, transpose_b = true}
  output %out_1
})",
                          /*bound_log2=*/-5);
  // An f32 result read elsewhere keeps its rounding as a cast of its own.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : bf16[24, 16]
  input %w : bf16[40, 16]
  %y : f32[24, 40] = matmul(%x, %w) {transpose_b = true}
  %y16 = to(%y) {dtype = "bf16"}
  output %y16, %y
})");
}

// A linear layer on [B, S, C] as AOTAutograd traces it: reshape → matmul → add bias → reshape,
// then gelu and the residual add on [B, S, N]: all of it joins the epilogue.
TEST(FuseMatmulEpilogue, ThroughTheReshapeOfALinearLayer) {
  auto pass = make_fuse_matmul_epilogue();
  expect_fused(*pass, R"(
graph @g {
  input %x : f32[2, 12, 16]
  input %w : f32[40, 16]
  input %b : f32[40]
  input %r : f32[2, 12, 40]
  %x2 = reshape(%x) {shape = [24, 16]}
  %y = matmul(%x2, %w) {transpose_b = true}
  %z = add(%y, %b)
  %v = reshape(%z) {shape = [2, 12, 40]}
  %h = gelu(%v)
  %out = add(%h, %r)
  output %out
})",
               R"(
graph @g {
  input %x : f32[2, 12, 16]
  input %w : f32[40, 16]
  input %b : f32[40]
  input %r : f32[2, 12, 40]
  %x2 = reshape(%x) {shape = [24, 16]}
  %r_reshaped = reshape(%r) {shape = [24, 40]}
  %h_1_1 = matmul(%x2, %w, %b, %r_reshaped) {bias = true, fused_activation = "gelu_erf", residual = true, transpose_b = true}
  %out_1 = reshape(%h_1_1) {shape = [2, 12, 40]}
  output %out_1
})",
               /*exact_with_best=*/false);
  // The bias through a reshape that changes the last dim is no bias of the product's columns.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f32[5]
  %y = matmul(%x, %w)
  %v = reshape(%y) {shape = [12, 5]}
  %z = add(%v, %b)
  output %z
})");
}

// One graph per activation, with the bias written first (add is commutative).
std::string activation_graph(const std::string& activation_node) {
  return R"(
graph @g {
  input %x : f32[37, 24]
  input %w : f32[24, 70]
  input %b : f32[70]
  %y = matmul(%x, %w)
  %z = add(%b, %y)
  %h = )" + activation_node + R"(
  output %h
})";
}

TEST(FuseMatmulEpilogue, EveryActivation) {
  auto pass = make_fuse_matmul_epilogue();
  const std::pair<std::string, std::string> cases[] = {
      {"relu(%z)", "relu"},
      {"gelu(%z)", "gelu_erf"},
      {R"(gelu(%z) {approximate = "tanh"})", "gelu_tanh"},
      {"silu(%z)", "silu"},
      {"sigmoid(%z)", "sigmoid"},
      {"tanh(%z)", "tanh"},
  };
  for (const auto& [node, activation] : cases) {
    SCOPED_TRACE(activation);
    expect_fused(*pass, activation_graph(node), R"(
graph @g {
  input %x : f32[37, 24]
  input %w : f32[24, 70]
  input %b : f32[70]
  %h_1 = matmul(%x, %w, %b) {fused_activation = ")" + activation + R"(", bias = true}
  output %h_1
})",
                 /*exact_with_best=*/activation == "relu");
  }
}

TEST(FuseMatmulEpilogue, ResidualOnlyAndF64) {
  auto pass = make_fuse_matmul_epilogue();
  expect_fused(*pass, R"(
graph @g {
  input %x : f32[3, 5, 8]
  input %w : f32[3, 8, 6]
  input %r : f32[3, 5, 6]
  %y = matmul(%x, %w)
  %out = add(%y, %r)
  output %out
})",
               R"(
graph @g {
  input %x : f32[3, 5, 8]
  input %w : f32[3, 8, 6]
  input %r : f32[3, 5, 6]
  %out_1 = matmul(%x, %w, %r) {residual = true}
  output %out_1
})");
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f64[4, 8]
  input %w : f64[8, 6]
  input %b : f64[6]
  %y = matmul(%x, %w)
  %z = add(%y, %b)
  %h = sigmoid(%z)
  output %h
})",
                 R"(
graph @g {
  input %x : f64[4, 8]
  input %w : f64[8, 6]
  input %b : f64[6]
  %h_1 = matmul(%x, %w, %b) {fused_activation = "sigmoid", bias = true}
  output %h_1
})");
}

TEST(FuseMatmulEpilogue, WithSymbolicBatch) {
  auto pass = make_fuse_matmul_epilogue();
  auto g = parse_graph(R"(
graph @g {
  sym B in [1, 8]
  input %x : f32[B, 16]
  input %w : f32[16, 12]
  input %b : f32[12]
  %y = matmul(%x, %w)
  %z = add(%y, %b)
  %h = relu(%z)
  output %h
})");
  EXPECT_TRUE(pass->run(*g));
  verify(*g);
  ASSERT_EQ(g->num_nodes(), 1u);
  EXPECT_EQ(g->nodes()[0]->attr_string("fused_activation"), "relu");
}

// The chain stops where the epilogue's fixed order (bias, activation, residual) or a use outside
// it says so.
TEST(FuseMatmulEpilogue, StopsAtOrderAndOtherUses) {
  auto pass = make_fuse_matmul_epilogue();
  // relu after the residual add can't join: only the residual fuses.
  expect_fused(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %r : f32[6, 10]
  %y = matmul(%x, %w)
  %s = add(%y, %r)
  %h = relu(%s)
  output %h
})",
               R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %r : f32[6, 10]
  %s_1 = matmul(%x, %w, %r) {residual = true}
  %h = relu(%s_1)
  output %h
})");
  // %z is read by the activation and by a second consumer: the bias fuses, the relu doesn't.
  expect_fused(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f32[10]
  %y = matmul(%x, %w)
  %z = add(%y, %b)
  %h = relu(%z)
  %n = neg(%z)
  output %h, %n
})",
               R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f32[10]
  %z_1 = matmul(%x, %w, %b) {bias = true}
  %h = relu(%z_1)
  %n = neg(%z_1)
  output %h, %n
})");
}

// A matrix-vector product's [M] result has no column dim: an add of an [M] vector is a residual
// (element by element), never a bias (per column), which gave every row the bias of row 0.
TEST(FuseMatmulEpilogue, MatrixVectorAddIsAResidual) {
  auto pass = make_fuse_matmul_epilogue();
  expect_fused(*pass, R"(
graph @g {
  input %m : f32[5, 10]
  input %v : f32[10]
  input %s : f32[5]
  %y = matmul(%m, %v)
  %z = add(%y, %s)
  output %z
})",
               R"(
graph @g {
  input %m : f32[5, 10]
  input %v : f32[10]
  input %s : f32[5]
  %z_1 = matmul(%m, %v, %s) {residual = true}
  output %z_1
})");
}

TEST(FuseMatmulEpilogue, MustNotFire) {
  auto pass = make_fuse_matmul_epilogue();
  // The product has another consumer.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f32[10]
  %y = matmul(%x, %w)
  %z = add(%y, %b)
  %n = neg(%y)
  output %z, %n
})");
  // The product is a graph output.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  %y = matmul(%x, %w)
  %h = relu(%y)
  output %h, %y
})");
  // Not a bias or a residual: broadcast along the columns, alpha != 1, an add that broadcasts
  // the product to a larger shape, another dtype.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %c : f32[6, 1]
  %y = matmul(%x, %w)
  %z = add(%y, %c)
  output %z
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f32[10]
  %y = matmul(%x, %w)
  %z = add(%y, %b) {alpha = 2.0}
  output %z
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %r : f32[3, 6, 10]
  %y = matmul(%x, %w)
  %z = add(%y, %r)
  output %z
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f64[10]
  %y = matmul(%x, %w)
  %z = add(%y, %b)
  output %z
})");
  // An activation the epilogue doesn't have.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  %y = matmul(%x, %w)
  %z = exp(%y)
  output %z
})");
}

TEST(FuseMatmulEpilogue, SchemaRejectsInconsistentEpilogues) {
  auto expect_rejected = [](const std::string& text) {
    EXPECT_EQ(test::error_code_of([&] { parse_graph(text); }), ErrorCode::ShapeInference) << text;
  };
  expect_rejected(R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  %y = matmul(%x, %w) {bias = true}
  output %y
})");
  expect_rejected(R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %b : f32[6]
  %y = matmul(%x, %w, %b) {bias = true}
  output %y
})");
  expect_rejected(R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  %y = matmul(%x, %w) {fused_activation = "swish"}
  output %y
})");
  expect_rejected(R"(
graph @g {
  input %x : f32[6, 8]
  input %w : f32[8, 10]
  input %r : f32[6, 1]
  %y = matmul(%x, %w, %r) {residual = true}
  output %y
})");
}

// ---------------------------------------------------------------- Linear+BatchNorm

// A [rows, cols] constant in textual IR with values from `rng` in [lo, hi].
std::string constant_text(const std::string& name, int64_t rows, int64_t cols, std::mt19937& rng,
                          double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::ostringstream s;
  s << "  const %" << name << " : f32[" << rows;
  if (cols) s << ", " << cols;
  s << "] = [";
  for (int64_t i = 0; i < rows * std::max<int64_t>(cols, 1); ++i)
    s << (i ? ", " : "") << static_cast<float>(dist(rng));
  s << "]\n";
  return s.str();
}

// x [5, 12] · w ([9, 12] with transpose_b, else [12, 9]) [+ b] → batch_norm.
std::string linear_bn_graph(bool transpose_b, bool with_bias) {
  std::mt19937 rng(3);
  std::string text = "graph @g {\n  input %x : f32[5, 12]\n";
  text += transpose_b ? constant_text("w", 9, 12, rng, -1, 1) : constant_text("w", 12, 9, rng, -1, 1);
  text += constant_text("b", 9, 0, rng, -1, 1) + constant_text("gamma", 9, 0, rng, 0.5, 2) +
          constant_text("beta", 9, 0, rng, -1, 1) + constant_text("mean", 9, 0, rng, -1, 1) +
          constant_text("var", 9, 0, rng, 0.1, 3);
  text += std::string("  %y = matmul(%x, %w) {transpose_b = ") + (transpose_b ? "true" : "false") +
          "}\n";
  text += with_bias ? "  %yb = add(%y, %b)\n  %z = batch_norm(%yb, %gamma, %beta, %mean, %var)\n"
                    : "  %z = batch_norm(%y, %gamma, %beta, %mean, %var)\n";
  return text + "  output %z\n}\n";
}

// The folded graph against the unfused one, both with reference kernels. Folding rounds w * scale
// and the new bias once each instead of normalizing the product, so the two differ by rounding:
// with u = 2^-24, at most (K + 4) u of |x|·|w'| + |b'| (the dot bound of kernel_harness.h plus the
// folded constants' and batch_norm's roundings).
void expect_folded_close(const Graph& original, const Graph& folded) {
  std::vector<Tensor> inputs = random_inputs(original, 5);
  Tensor want = run_with(original, "reference", inputs)[0];
  Tensor got = run_with(folded, "reference", inputs)[0];
  const Tensor& x = inputs[0];
  const Node& mm = *folded.nodes()[0];
  const Tensor& w = mm.input(1)->constant();
  const bool transpose_b = mm.attr_bool("transpose_b");
  const Tensor& b = folded.nodes()[1]->input(1)->constant();
  const int64_t m = x.sizes()[0], k = x.sizes()[1], n = b.numel();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double magnitude = std::fabs(b.data<float>()[j]);
      for (int64_t p = 0; p < k; ++p)
        magnitude += std::fabs(x.data<float>()[i * k + p] *
                               w.data<float>()[transpose_b ? j * k + p : p * n + j]);
      EXPECT_LE(std::fabs(got.data<float>()[i * n + j] - want.data<float>()[i * n + j]),
                static_cast<double>(k + 4) * std::ldexp(magnitude, -24))
          << i << ", " << j;
    }
  }
}

TEST(FoldLinearBatchNorm, FoldsIntoWeightsAndBias) {
  auto pass = make_fold_linear_batch_norm();
  for (bool transpose_b : {false, true}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(std::string(transpose_b ? "transpose_b" : "") + (with_bias ? " bias" : ""));
      auto original = parse_graph(linear_bn_graph(transpose_b, with_bias));
      auto g = original->clone();
      EXPECT_TRUE(pass->run(*g));
      verify(*g);
      // matmul with the new weights, then add of the new bias.
      std::vector<Node*> nodes = g->nodes();
      ASSERT_EQ(nodes.size(), 2u);
      EXPECT_EQ(nodes[0]->op(), "matmul");
      EXPECT_EQ(nodes[0]->input(1)->kind(), Value::Kind::Constant);
      EXPECT_EQ(nodes[0]->attr_bool("transpose_b"), transpose_b);
      EXPECT_EQ(nodes[1]->op(), "add");
      EXPECT_EQ(nodes[1]->input(1)->kind(), Value::Kind::Constant);
      EXPECT_EQ(g->outputs()[0], nodes[1]->output());
      expect_folded_close(*original, *g);
    }
  }
}

TEST(FoldLinearBatchNorm, FoldedWeightsByHand) {
  // w = [[1, 2], [3, 4]] (K = N = 2), scale = gamma / sqrt(var + eps) = [2, 0.5] with eps = 0,
  // shift from mean [1, 2], beta [0, 1], bias [1, 1]: w' = [[2, 1], [6, 2]],
  // b' = (b - mean) * scale + beta = [0, 0.5].
  auto pass = make_fold_linear_batch_norm();
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[3, 2]
  const %w : f32[2, 2] = [1.0, 2.0, 3.0, 4.0]
  const %b : f32[2] = [1.0, 1.0]
  const %gamma : f32[2] = [2.0, 1.0]
  const %beta : f32[2] = [0.0, 1.0]
  const %mean : f32[2] = [1.0, 2.0]
  const %var : f32[2] = [1.0, 4.0]
  %y = matmul(%x, %w)
  %yb = add(%b, %y)
  %z = batch_norm(%yb, %gamma, %beta, %mean, %var) {eps = 0.0}
  output %z
})");
  ASSERT_TRUE(pass->run(*g));
  std::vector<Node*> nodes = g->nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(test::values_of<float>(nodes[0]->input(1)->constant()),
            (std::vector<float>{2, 1, 6, 2}));
  EXPECT_EQ(test::values_of<float>(nodes[1]->input(1)->constant()), (std::vector<float>{0, 0.5}));
}

TEST(FoldLinearBatchNorm, MustNotFire) {
  auto pass = make_fold_linear_batch_norm();
  std::mt19937 rng(9);
  const std::string params = constant_text("gamma", 4, 0, rng, 0.5, 2) +
                             constant_text("beta", 4, 0, rng, -1, 1) +
                             constant_text("mean", 4, 0, rng, -1, 1) +
                             constant_text("var", 4, 0, rng, 0.1, 3);
  const std::string w = constant_text("w", 3, 4, rng, -1, 1);
  // The product has another consumer.
  expect_unchanged(*pass, "graph @g {\n  input %x : f32[2, 3]\n" + w + params + R"(
  %y = matmul(%x, %w)
  %z = batch_norm(%y, %gamma, %beta, %mean, %var)
  %n = neg(%y)
  output %z, %n
})");
  // The product is a graph output.
  expect_unchanged(*pass, "graph @g {\n  input %x : f32[2, 3]\n" + w + params + R"(
  %y = matmul(%x, %w)
  %z = batch_norm(%y, %gamma, %beta, %mean, %var)
  output %z, %y
})");
  // Weights that are not constant.
  expect_unchanged(*pass, "graph @g {\n  input %x : f32[2, 3]\n  input %v : f32[3, 4]\n" + params +
                              R"(
  %y = matmul(%x, %v)
  %z = batch_norm(%y, %gamma, %beta, %mean, %var)
  output %z
})");
  // Rank 3: batch_norm's channels (dim 1) are not the product's columns.
  expect_unchanged(*pass, "graph @g {\n  input %x : f32[2, 4, 3]\n" + w + params + R"(
  %y = matmul(%x, %w)
  %z = batch_norm(%y, %gamma, %beta, %mean, %var)
  output %z
})");
}

}  // namespace
}  // namespace kiln
