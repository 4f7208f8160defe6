// Stage prepare's clean-up passes on textual IR, before → after plus a numeric check against the
// unoptimized graph: constant_folding, common_subexpression_elimination, copy_elimination,
// dead_code_elimination.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_unchanged;

// Linear layers arrive as matmul(x, permute(w)): the GEMM reads w transposed in place.
TEST(FoldTransposeIntoMatmul, FoldsATransposedB) {
  auto pass = make_fold_transpose_into_matmul();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f32[2, 3]
  input %k : f32[5, 4, 3]
  input %q : f32[5, 2, 3]
  input %x4 : f32[2, 4]
  const %w : f32[4, 3] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  const %bias : f32[4] = [0.5, -0.25, 1, 2]
  %wt = permute(%w) {dims = [1, 0]}
  %y = matmul(%x, %wt, %bias) {bias = true}
  %kt = permute(%k) {dims = [0, -1, -2]}
  %s = matmul(%q, %kt)
  %back = permute(%w) {dims = [1, 0]}
  %z = matmul(%x4, %back) {transpose_b = true}
  output %y, %s, %z
})",
                 R"(
graph @g {
  input %x : f32[2, 3]
  input %k : f32[5, 4, 3]
  input %q : f32[5, 2, 3]
  input %x4 : f32[2, 4]
  const %w : f32[4, 3] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  const %bias : f32[4] = [0.5, -0.25, 1, 2]
  %y_1 : f32[2, 4] = matmul(%x, %w, %bias) {bias = true, transpose_b = true}
  %s_1 : f32[5, 2, 4] = matmul(%q, %k) {transpose_b = true}
  %z_1 : f32[2, 3] = matmul(%x4, %w)
  output %y_1, %s_1, %z_1
})");
}

// Mixture-of-experts weights [E, N, K] arrive as grouped_mm(x, transpose(w)): read in place too.
TEST(FoldTransposeIntoMatmul, FoldsExpertWeightsOfAGroupedMatmul) {
  auto pass = make_fold_transpose_into_matmul();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f32[4, 3]
  const %w : f32[2, 5, 3] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]
  const %offsets : i64[2] = [1, 3]
  %wt = permute(%w) {dims = [0, 2, 1]}
  %y = grouped_matmul(%x, %wt, %offsets)
  output %y
})",
                 R"(
graph @g {
  input %x : f32[4, 3]
  const %w : f32[2, 5, 3] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]
  const %offsets : i64[2] = [1, 3]
  %y_1 : f32[4, 5] = grouped_matmul(%x, %w, %offsets) {transpose_b = true}
  output %y_1
})");
}

TEST(FoldTransposeIntoMatmul, LeavesOtherPermutes) {
  auto pass = make_fold_transpose_into_matmul();
  // A permute that moves a batch dim, and one on A, are not B's transpose.
  expect_unchanged(*pass, R"(
graph @g {
  input %a : f32[4, 2, 3]
  input %b : f32[2, 4, 3]
  %bt = permute(%b) {dims = [1, 2, 0]}
  %y = matmul(%a, %bt)
  %at = permute(%a) {dims = [0, 2, 1]}
  %z = matmul(%at, %a)
  output %y, %z
})");
}

// A bf16 model's matmuls arrive between casts to f32 (the builder's rule); on CPUs with bf16 dot
// products the GEMM reads the bf16 values themselves, and the result stays f32. The reference
// kernels of both forms sum the same exact products in double: bit for bit.
TEST(FoldBf16CastsIntoMatmul, MatmulsReadWidenedBf16OperandsAsTheyAre) {
  auto pass = make_fold_bf16_casts_into_matmul(/*native_bf16=*/true);
  expect_rewrite(*pass, R"(
graph @g {
  input %x : bf16[2, 3]
  input %v : f32[2, 3]
  input %h : f16[2, 3]
  const %w : bf16[4, 3] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  const %bias : f32[4] = [0.5, -0.25, 1, 2]
  %x32 = to(%x) {dtype = "f32"}
  %w32 = to(%w) {dtype = "f32"}
  %y = matmul(%x32, %w32, %bias) {bias = true, transpose_b = true}
  %z = matmul(%v, %w32) {transpose_b = true}
  %h32 = to(%h) {dtype = "f32"}
  %u = matmul(%h32, %w32) {transpose_b = true}
  output %y, %z, %u
})",
                 R"(
graph @g {
  input %x : bf16[2, 3]
  input %v : f32[2, 3]
  input %h : f16[2, 3]
  const %w : bf16[4, 3] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  const %bias : f32[4] = [0.5, -0.25, 1, 2]
  %w32 : f32[4, 3] = to(%w) {dtype = "f32"}
  %z : f32[2, 4] = matmul(%v, %w32) {transpose_b = true}
  %h32 : f32[2, 3] = to(%h) {dtype = "f32"}
  %u : f32[2, 4] = matmul(%h32, %w32) {transpose_b = true}
  %y_1 : f32[2, 4] = matmul(%x, %w, %bias) {bias = true, transpose_b = true}
  output %y_1, %z, %u
})");
}

// Without bf16 dot products the f32 GEMM stays: oneDNN would emulate the bf16 one.
TEST(FoldBf16CastsIntoMatmul, LeavesMatmulsAloneWithoutNativeBf16) {
  auto pass = make_fold_bf16_casts_into_matmul(/*native_bf16=*/false);
  expect_unchanged(*pass, R"(
graph @g {
  input %x : bf16[2, 3]
  input %w : bf16[3, 4]
  %x32 = to(%x) {dtype = "f32"}
  %w32 = to(%w) {dtype = "f32"}
  %y = matmul(%x32, %w32)
  output %y
})");
}

// A bf16 model's convolutions likewise: the casts on x and w go, the bias and an unrounded result
// stay f32, and a result only rounded to bf16 is rounded by the convolution itself. An f32
// convolution of the same widened weights keeps them.
TEST(FoldBf16CastsIntoConv, ConvolutionsReadBf16AndRoundTheirResult) {
  auto pass = make_fold_bf16_casts_into_conv(/*native_bf16=*/true);
  expect_rewrite(*pass, R"(
graph @g {
  input %x : bf16[1, 2, 4, 4]
  input %v : f32[1, 2, 4, 4]
  const %w : bf16[3, 2, 1, 1] = [1, 2, 3, 4, 5, 6]
  const %b : f32[3] = [0.5, -0.25, 1]
  %x32 = to(%x) {dtype = "f32"}
  %w32 = to(%w) {dtype = "f32"}
  %y = conv2d(%x32, %w32, %b)
  %y16 = to(%y) {dtype = "bf16"}
  %u = conv2d(%x32, %w32)
  %z = conv2d(%v, %w32)
  output %y16, %u, %z
})",
                 R"(
graph @g {
  input %x : bf16[1, 2, 4, 4]
  input %v : f32[1, 2, 4, 4]
  const %w : bf16[3, 2, 1, 1] = [1, 2, 3, 4, 5, 6]
  const %b : f32[3] = [0.5, -0.25, 1]
  %w32 : f32[3, 2, 1, 1] = to(%w) {dtype = "f32"}
  %z : f32[1, 3, 4, 4] = conv2d(%v, %w32)
  %y16_1 : bf16[1, 3, 4, 4] = conv2d(%x, %w, %b) {dtype = "bf16"}
  %u_1 : f32[1, 3, 4, 4] = conv2d(%x, %w)
  output %y16_1, %u_1, %z
})");
}

TEST(FoldBf16CastsIntoConv, LeavesConvolutionsAloneWithoutNativeBf16) {
  auto pass = make_fold_bf16_casts_into_conv(/*native_bf16=*/false);
  expect_unchanged(*pass, R"(
graph @g {
  input %x : bf16[1, 2, 4, 4]
  input %w : bf16[3, 2, 1, 1]
  %x32 = to(%x) {dtype = "f32"}
  %w32 = to(%w) {dtype = "f32"}
  %y = conv2d(%x32, %w32)
  %y16 = to(%y) {dtype = "bf16"}
  output %y16
})");
}

// A bf16 model's layer and RMS norms, poolings, reductions and attention likewise read and write
// bf16 themselves (on every CPU), with each count of operands, when the f32 result is only
// rounded back (attention's mask staying as it is); one whose f32 result has another use keeps
// its casts.
TEST(FoldBf16CastsIntoWideningKernels, OpsBetweenCastsReadAndWriteBf16) {
  auto pass = make_fold_bf16_casts_into_widening_kernels();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : bf16[2, 3]
  input %p : bf16[1, 2, 4, 4]
  input %a : bf16[2, 4, 8]
  input %mask : f32[4, 4]
  const %w : bf16[3] = [1, 2, 3]
  const %b : bf16[3] = [0.5, -0.25, 1]
  %x32 = to(%x) {dtype = "f32"}
  %w32 = to(%w) {dtype = "f32"}
  %b32 = to(%b) {dtype = "f32"}
  %y = layer_norm(%x32, %w32, %b32) {eps = 1e-06}
  %y16 = to(%y) {dtype = "bf16"}
  %u = layer_norm(%x32, %w32)
  %u16 = to(%u) {dtype = "bf16"}
  %v = layer_norm(%x32)
  %v16 = to(%v) {dtype = "bf16"}
  %t = layer_norm(%x32)
  %t16 = to(%t) {dtype = "bf16"}
  %r = rms_norm(%x32, %w32)
  %r16 = to(%r) {dtype = "bf16"}
  %q = rms_norm(%x32) {eps = 1e-05}
  %q16 = to(%q) {dtype = "bf16"}
  %p32 = to(%p) {dtype = "f32"}
  %m = max_pool2d(%p32) {kernel_size = [2]}
  %m16 = to(%m) {dtype = "bf16"}
  %ap = avg_pool2d(%p32) {kernel_size = [2]}
  %ap16 = to(%ap) {dtype = "bf16"}
  %gp = adaptive_avg_pool2d(%p32) {output_size = [1, 1]}
  %gp16 = to(%gp) {dtype = "bf16"}
  %mn = mean(%p32) {dim = [-1, -2], keepdim = true}
  %mn16 = to(%mn) {dtype = "bf16"}
  %sum = sum(%p32) {dim = [1]}
  %sum16 = to(%sum) {dtype = "bf16"}
  %va = var(%p32) {dim = [-1], correction = 0}
  %va16 = to(%va) {dtype = "bf16"}
  %ls = log_softmax(%p32) {dim = -1}
  %ls16 = to(%ls) {dtype = "bf16"}
  %a32 = to(%a) {dtype = "f32"}
  %s = scaled_dot_product_attention(%a32, %a32, %a32)
  %s16 = to(%s) {dtype = "bf16"}
  %sm = scaled_dot_product_attention(%a32, %a32, %a32, %mask) {is_causal = true}
  %sm16 = to(%sm) {dtype = "bf16"}
  output %y16, %u16, %v16, %t16, %t, %r16, %q16, %m16, %ap16, %gp16, %mn16, %sum16, %va16, %ls16,
         %s16, %sm16
})",
                 R"(
graph @g {
  input %x : bf16[2, 3]
  input %p : bf16[1, 2, 4, 4]
  input %a : bf16[2, 4, 8]
  input %mask : f32[4, 4]
  const %w : bf16[3] = [1, 2, 3]
  const %b : bf16[3] = [0.5, -0.25, 1]
  %x32 : f32[2, 3] = to(%x) {dtype = "f32"}
  %t : f32[2, 3] = layer_norm(%x32)
  %t16 : bf16[2, 3] = to(%t) {dtype = "bf16"}
  %y16_1 : bf16[2, 3] = layer_norm(%x, %w, %b) {eps = 1e-06}
  %u16_1 : bf16[2, 3] = layer_norm(%x, %w)
  %v16_1 : bf16[2, 3] = layer_norm(%x)
  %r16_1 : bf16[2, 3] = rms_norm(%x, %w)
  %q16_1 : bf16[2, 3] = rms_norm(%x) {eps = 1e-05}
  %m16_1 : bf16[1, 2, 2, 2] = max_pool2d(%p) {kernel_size = [2]}
  %ap16_1 : bf16[1, 2, 2, 2] = avg_pool2d(%p) {kernel_size = [2]}
  %gp16_1 : bf16[1, 2, 1, 1] = adaptive_avg_pool2d(%p) {output_size = [1, 1]}
  %mn16_1 : bf16[1, 2, 1, 1] = mean(%p) {dim = [-1, -2], keepdim = true}
  %sum16_1 : bf16[1, 4, 4] = sum(%p) {dim = [1]}
  %va16_1 : bf16[1, 2, 4] = var(%p) {dim = [-1], correction = 0.0}
  %ls16_1 : bf16[1, 2, 4, 4] = log_softmax(%p) {dim = -1}
  %s16_1 : bf16[2, 4, 8] = scaled_dot_product_attention(%a, %a, %a)
  %sm16_1 : bf16[2, 4, 8] = scaled_dot_product_attention(%a, %a, %a, %mask) {is_causal = true}
  output %y16_1, %u16_1, %v16_1, %t16, %t, %r16_1, %q16_1, %m16_1, %ap16_1, %gp16_1,
         %mn16_1, %sum16_1, %va16_1, %ls16_1, %s16_1, %sm16_1
})");
}

TEST(ConstantFolding, FoldsSubgraphsThatDependOnlyOnWeights) {
  auto pass = make_constant_folding();
  // permute(w) and b + b depend on weights only; the matmul and the final add read %x.
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f32[2, 3]
  const %w : f32[2, 3] = [1, 2, 3, 4, 5, 6]
  const %b : f32[2] = [0.5, -0.25]
  %wt = permute(%w) {dims = [1, 0]}
  %bb = add(%b, %b)
  %b4 = mul(%bb, %bb)
  %y = matmul(%x, %wt)
  %z = add(%y, %b4)
  output %z
})",
                 R"(
graph @g {
  input %x : f32[2, 3]
  const %w : f32[2, 3] = [1, 2, 3, 4, 5, 6]
  const %b : f32[2] = [0.5, -0.25]
  const %wt_1 : f32[3, 2] = [1, 4, 2, 5, 3, 6]
  const %bb_1 : f32[2] = [1.0, -0.5]
  const %b4_1 : f32[2] = [1.0, 0.25]
  %y = matmul(%x, %wt_1)
  %z = add(%y, %b4_1)
  output %z
})");
}

TEST(ConstantFolding, FoldsNodesWithoutInputsAndGraphOutputs) {
  auto pass = make_constant_folding();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : i64[3]
  %r = arange() {end = 3, dtype = "i64"}
  %s = add(%x, %r)
  output %s, %r
})",
                 R"(
graph @g {
  input %x : i64[3]
  const %r_1 : i64[3] = [0, 1, 2]
  %s = add(%x, %r_1)
  output %s, %r_1
})");
}

TEST(ConstantFolding, LeavesGrowingAndInputDependentNodes) {
  auto pass = make_constant_folding();
  // 1 MiB of expanded bias would replace 16 bytes: it stays an expand.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[1024, 256, 4]
  const %b : f32[4] = [1, 2, 3, 4]
  %e = expand(%b) {size = [1024, 256, 4]}
  %y = add(%x, %e)
  %z = relu(%x)
  output %y, %z
})");
}

// A result of as many elements as its inputs folds however many bytes it takes: torch.export's
// attention mask, a bool tensor selected into an f32 one of 1.2 MB at batch 8 (ViT-B/16), which
// algebraic simplification then drops as masking nothing.
TEST(ConstantFolding, FoldsALargeResultOfAsManyElements) {
  auto g = parse_graph(R"(
graph @g {
  input %q : f32[8, 12, 197, 64]
  const %zero : f32[] = [0]
  const %minus_inf : f32[] = [-inf]
  %keep = full() {size = [8, 1, 197, 197], fill_value = 1.0, dtype = "bool"}
  %mask = where(%keep, %zero, %minus_inf)
  %y = scaled_dot_product_attention(%q, %q, %q, %mask)
  output %y
})");
  ASSERT_TRUE(make_constant_folding()->run(*g));
  const Node& attention = *g->outputs()[0]->producer();
  ASSERT_EQ(attention.inputs().size(), 4u);
  const Value& mask = *attention.input(3);
  ASSERT_EQ(mask.kind(), Value::Kind::Constant);
  EXPECT_EQ(mask.constant().nbytes(), size_t{8 * 197 * 197 * 4});
  ASSERT_TRUE(make_algebraic_simplification()->run(*g));
  EXPECT_EQ(g->outputs()[0]->producer()->inputs().size(), 3u);
}

TEST(ConstantFolding, LeavesNodesWhoseKernelFailsForTheRunToReport) {
  auto pass = make_constant_folding();
  // Index 7 is out of range: folding must not throw at compile time nor fold garbage.
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[2]
  const %t : f32[3] = [1, 2, 3]
  const %i : i64[1] = [7]
  %s = index_select(%t, %i) {dim = 0}
  %y = add(%x, %s)
  output %y
})");
}

TEST(CommonSubexpressionElimination, MergesEqualNodes) {
  auto pass = make_common_subexpression_elimination();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f32[2, 3]
  %a = relu(%x)
  %b = relu(%x)
  %c = add(%a, %b)
  %d = add(%b, %a)
  %s1 = sum(%c) {dim = [1]}
  %s2 = sum(%d) {dim = [1]}
  output %s1, %s2
})",
                 R"(
graph @g {
  input %x : f32[2, 3]
  %a = relu(%x)
  %c = add(%a, %a)
  %s1 = sum(%c) {dim = [1]}
  output %s1, %s1
})");
}

TEST(CommonSubexpressionElimination, KeepsNodesThatDifferInAttributesOrOperandOrder) {
  auto pass = make_common_subexpression_elimination();
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[2, 3]
  input %y : f32[2, 3]
  %a = sum(%x) {dim = [1]}
  %b = sum(%x) {dim = [0]}
  %c = sub(%x, %y)
  %d = sub(%y, %x)
  %e = gelu(%x)
  %f = gelu(%x) {approximate = "tanh"}
  output %a, %b, %c, %d, %e, %f
})");
}

TEST(CopyElimination, RemovesCopiesOfSameLayoutTensors) {
  auto pass = make_copy_elimination();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f32[2, 3]
  %c = copy(%x)
  %r = relu(%c)
  %c2 = copy(%r)
  output %c2, %c
})",
                 R"(
graph @g {
  input %x : f32[2, 3]
  %r = relu(%x)
  output %r, %x
})");
}

TEST(CopyElimination, LeavesOtherNodes) {
  auto pass = make_copy_elimination();
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[2, 3]
  %c = to(%x) {dtype = "f64"}
  %r = relu(%c)
  output %r
})");
}

TEST(DeadCodeElimination, RemovesUnusedNodesAndConstants) {
  auto pass = make_dead_code_elimination();
  expect_rewrite(*pass, R"(
graph @g {
  input %x : f32[3]
  input %unused : f32[3]
  const %w : f32[3] = [1, 2, 3]
  const %v : f32[3] = [4, 5, 6]
  const %k : f32[3] = [7, 8, 9]
  %a = mul(%x, %w)
  %dead = add(%a, %v)
  %dead2 = relu(%dead)
  output %a, %k
})",
                 R"(
graph @g {
  input %x : f32[3]
  input %unused : f32[3]
  const %w : f32[3] = [1, 2, 3]
  const %k : f32[3] = [7, 8, 9]
  %a = mul(%x, %w)
  output %a, %k
})");
  expect_unchanged(*pass, R"(
graph @g {
  input %x : f32[3]
  %a = relu(%x)
  output %a
})");
}

}  // namespace
}  // namespace kiln
