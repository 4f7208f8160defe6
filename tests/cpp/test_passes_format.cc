// The format stage (choose_layouts) on textual IR: convolution chains in a blocked layout with
// reorders only at their boundaries, poolings inside the chains, the numeric check against the
// plain graph with the reference and the best kernels, pinned layouts and their conflict (E30012),
// a ResNet stem through the whole pipeline; the textual IR of layouts and the rules that keep
// non-plain tensors away from ops that can't read them; the reorder op and the convolution and
// pooling kernels in every layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include "kernel_harness.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/layout.h"
#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_unchanged;
using test::run_with;

// A stem convolution (3 channels: stays plain), a residual convolution, then a 1x1 convolution
// to a graph output and a max pooling, which joins the chain: the reorder to plain moves after it,
// onto the smaller tensor.
const std::string kChain = R"(graph @g {
  input %x : f32[1, 3, 8, 8]
  input %r : f32[1, 8, 8, 8]
  input %w1 : f32[8, 3, 3, 3]
  input %w2 : f32[8, 8, 3, 3]
  input %w3 : f32[16, 8, 1, 1]
  %a = conv2d(%x, %w1) {fused_activation = "relu", padding = [1, 1]}
  %b = conv2d(%a, %w2, %r) {padding = [1, 1], residual = true}
  %c = conv2d(%b, %w3)
  %m = max_pool2d(%b) {kernel_size = [2]}
  output %c, %m
})";

const std::string kChainBlocked = R"(graph @g {
  input %x : f32[1, 3, 8, 8]
  input %r : f32[1, 8, 8, 8]
  input %w1 : f32[8, 3, 3, 3]
  input %w2 : f32[8, 8, 3, 3]
  input %w3 : f32[16, 8, 1, 1]
  %a_1 : f32[1, 8, 8, 8]<nChw8c> = conv2d(%x, %w1) {fused_activation = "relu", layout = "nChw8c", padding = [1, 1]} @a_1
  %r_nChw8c : f32[1, 8, 8, 8]<nChw8c> = reorder(%r) {layout = "nChw8c"}
  %b_1 : f32[1, 8, 8, 8]<nChw8c> = conv2d(%a_1, %w2, %r_nChw8c) {layout = "nChw8c", padding = [1, 1], residual = true} @b_1
  %c_1 : f32[1, 16, 8, 8]<nChw8c> = conv2d(%b_1, %w3) {layout = "nChw8c"} @c_1
  %c_1_plain = reorder(%c_1) {layout = "plain"}
  %m_1 : f32[1, 8, 4, 4]<nChw8c> = max_pool2d(%b_1) {kernel_size = [2]}
  %m_1_plain = reorder(%m_1) {layout = "plain"}
  output %c_1_plain, %m_1_plain
})";

TEST(ChooseLayouts, ReordersOnlyAtChainBoundaries) {
  auto pass = make_choose_layouts({Layout::NChw8c});
  // expect_rewrite also checks the reference kernels give the plain graph's results bit for bit.
  expect_rewrite(*pass, kChain, kChainBlocked);
}

// Each chain takes the candidates of its dtype: the bf16 chain (fold_bf16_casts_into_conv's
// convolutions) nhwc, the f32 one nChw8c.
TEST(ChooseLayouts, EachChainTakesItsDtypesCandidates) {
  auto pass = make_choose_layouts([](DType dtype, const std::vector<const Node*>&) {
    return std::vector<Layout>{dtype == DType::BF16 ? Layout::NHWC : Layout::NChw8c};
  });
  expect_rewrite(*pass, R"(graph @g {
  input %x : f32[1, 8, 6, 6]
  input %w : f32[8, 8, 3, 3]
  input %h : bf16[1, 8, 6, 6]
  input %v : bf16[8, 8, 3, 3]
  input %b : f32[8]
  %a = conv2d(%x, %w) {padding = [1, 1]}
  %c = conv2d(%a, %w) {padding = [1, 1]}
  %d : bf16[1, 8, 6, 6] = conv2d(%h, %v, %b) {dtype = "bf16", padding = [1, 1]}
  %e : bf16[1, 8, 6, 6] = conv2d(%d, %v, %b) {dtype = "bf16", padding = [1, 1]}
  output %c, %e
})",
                 R"(graph @g {
  input %x : f32[1, 8, 6, 6]
  input %w : f32[8, 8, 3, 3]
  input %h : bf16[1, 8, 6, 6]
  input %v : bf16[8, 8, 3, 3]
  input %b : f32[8]
  %x_nChw8c : f32[1, 8, 6, 6]<nChw8c> = reorder(%x) {layout = "nChw8c"}
  %a_1 : f32[1, 8, 6, 6]<nChw8c> = conv2d(%x_nChw8c, %w) {layout = "nChw8c", padding = [1, 1]} @a_1
  %c_1 : f32[1, 8, 6, 6]<nChw8c> = conv2d(%a_1, %w) {layout = "nChw8c", padding = [1, 1]} @c_1
  %c_1_plain = reorder(%c_1) {layout = "plain"}
  %h_nhwc : bf16[1, 8, 6, 6]<nhwc> = reorder(%h) {layout = "nhwc"}
  %d_1 : bf16[1, 8, 6, 6]<nhwc> = conv2d(%h_nhwc, %v, %b) {dtype = "bf16", layout = "nhwc", padding = [1, 1]} @d_1
  %e_1 : bf16[1, 8, 6, 6]<nhwc> = conv2d(%d_1, %v, %b) {dtype = "bf16", layout = "nhwc", padding = [1, 1]} @e_1
  %e_1_plain = reorder(%e_1) {layout = "plain"}
  output %c_1_plain, %e_1_plain
})");
}

// The best kernels (oneDNN in the blocked layout, oneDNN or Kiln's loops on plain tensors) sum in
// different orders: each result is within (K + 2) u of the magnitude |x|·|w| (+ |r|) of its
// window of K terms (kernel_harness.h), and a chain adds its layers' bounds (relu, the residual
// add and max pooling never widen a difference). The graph on |inputs| with the reference kernels
// computes the magnitude.
TEST(ChooseLayouts, BestKernelsAgreeWithThePlainGraph) {
  for (Layout layout : {Layout::NChw8c, Layout::NChw16c, Layout::NHWC}) {
    SCOPED_TRACE(layout_name(layout));
    auto original = parse_graph(kChain);
    auto g = original->clone();
    ASSERT_TRUE(make_choose_layouts({layout})->run(*g));
    std::mt19937 rng(3);
    std::vector<Tensor> inputs, magnitudes;
    for (const Value* in : original->inputs()) {
      inputs.push_back(test::random_tensor(DType::F32, static_sizes(in->type().shape), rng, -1, 1));
      magnitudes.push_back(test::abs_of(inputs.back()));
    }
    std::vector<Tensor> want = run_with(*original, "best", inputs);
    std::vector<Tensor> got = run_with(*g, "best", inputs);
    std::vector<Tensor> magnitude = run_with(*original, "reference", magnitudes);
    const int64_t terms = 3 * 9 + 8 * 9 + 1 + 8 + 3 * 2;  // the three windows, r, roundings
    for (size_t o = 0; o < want.size(); ++o)
      for (int64_t i = 0; i < want[o].numel(); ++i)
        ASSERT_LE(std::fabs(got[o].data<float>()[i] - want[o].data<float>()[i]),
                  2 * terms * std::ldexp(magnitude[o].data<float>()[i], -24))
            << "output " << o << " element " << i;
  }
}

TEST(ChooseLayouts, SecondRunChangesNothing) {
  auto pass = make_choose_layouts({Layout::NChw8c});
  expect_unchanged(*pass, kChainBlocked);
}

TEST(ChooseLayouts, LeavesUnsuitableConvolutionsPlain) {
  // No preferred layout (a CPU without AVX2), f64, and 12 output channels, which blocks of 8
  // don't divide.
  expect_unchanged(*make_choose_layouts({Layout::Plain}), kChain);
  // One conv2d y = conv2d(x, w) per case: {dtype, x's channels, y's channels}. The last: x's
  // 12 channels are too many to read plain (only oneDNN's reference kernel would).
  auto pass = make_choose_layouts({Layout::NChw8c});
  using Case = std::tuple<const char*, int, int>;
  for (const auto& [dtype, in, out] :
       {Case{"f64", 8, 8}, Case{"f32", 8, 12}, Case{"f32", 12, 16}}) {
    const std::string c = std::to_string(in), o = std::to_string(out), t = dtype;
    expect_unchanged(*pass, "graph @g {\n  input %x : " + t + "[1, " + c +
                                ", 4, 4]\n  input %w : " + t + "[" + o + ", " + c +
                                ", 1, 1]\n  %y = conv2d(%x, %w)\n  output %y\n}");
  }
}

// With several candidates each chain takes the first that fits all of it: the first chain's
// channels are multiples of 16 (its stem reads x's 3 channels plain), the second has a
// 24-channel member and falls back to nhwc, where its input is reordered.
TEST(ChooseLayouts, EachChainTakesTheFirstCandidateThatFitsIt) {
  auto pass = make_choose_layouts({Layout::NChw16c, Layout::NHWC});
  expect_rewrite(*pass, R"(graph @g {
  input %x : f32[1, 3, 8, 8]
  input %y : f32[1, 16, 8, 8]
  input %w1 : f32[16, 3, 3, 3]
  input %w2 : f32[32, 16, 1, 1]
  input %v1 : f32[24, 16, 1, 1]
  input %v2 : f32[16, 24, 1, 1]
  %a = conv2d(%x, %w1) {padding = [1, 1]}
  %b = conv2d(%a, %w2)
  %c = conv2d(%y, %v1)
  %d = conv2d(%c, %v2)
  output %b, %d
})",
                 R"(graph @g {
  input %x : f32[1, 3, 8, 8]
  input %y : f32[1, 16, 8, 8]
  input %w1 : f32[16, 3, 3, 3]
  input %w2 : f32[32, 16, 1, 1]
  input %v1 : f32[24, 16, 1, 1]
  input %v2 : f32[16, 24, 1, 1]
  %a_1 : f32[1, 16, 8, 8]<nChw16c> = conv2d(%x, %w1) {layout = "nChw16c", padding = [1, 1]}
  %b_1 : f32[1, 32, 8, 8]<nChw16c> = conv2d(%a_1, %w2) {layout = "nChw16c"}
  %b_1_plain = reorder(%b_1) {layout = "plain"}
  %y_nhwc : f32[1, 16, 8, 8]<nhwc> = reorder(%y) {layout = "nhwc"}
  %c_1 : f32[1, 24, 8, 8]<nhwc> = conv2d(%y_nhwc, %v1) {layout = "nhwc"}
  %d_1 : f32[1, 16, 8, 8]<nhwc> = conv2d(%c_1, %v2) {layout = "nhwc"}
  %d_1_plain = reorder(%d_1) {layout = "plain"}
  output %b_1_plain, %d_1_plain
})");
  // An input from outside the chain with as many channels as a block or more must suit it:
  // oneDNN reads only thinner ones plain.
  expect_rewrite(*pass, R"(graph @g {
  input %x : f32[1, 24, 4, 4]
  input %w : f32[16, 24, 1, 1]
  %a = conv2d(%x, %w)
  output %a
})",
                 R"(graph @g {
  input %x : f32[1, 24, 4, 4]
  input %w : f32[16, 24, 1, 1]
  %x_nhwc : f32[1, 24, 4, 4]<nhwc> = reorder(%x) {layout = "nhwc"}
  %a_1 : f32[1, 16, 4, 4]<nhwc> = conv2d(%x_nhwc, %w) {layout = "nhwc"}
  %a_1_plain = reorder(%a_1) {layout = "plain"}
  output %a_1_plain
})");
}

TEST(ChooseLayouts, PinnedLayoutsConflictIsE30012) {
  const std::string text = R"(graph @g {
  input %x : f32[1, 16, 4, 4]
  input %w : f32[16, 16, 1, 1]
  %a = conv2d(%x, %w) {layout = "nChw8c"}
  %b = conv2d(%a, %w) {layout = "nChw16c"}
  %p = reorder(%b) {layout = "plain"}
  output %p
})";
  auto g = parse_graph(text);
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { make_choose_layouts({Layout::NChw8c})->run(*g); }, &message),
            ErrorCode::FormatMismatch);
  EXPECT_NE(message.find("'a'"), std::string::npos) << message;
  EXPECT_NE(message.find("'b'"), std::string::npos) << message;
  // An explicit reorder between them splits the chain: both keep their pinned layouts (x, whose
  // 12 channels blocks of 8 don't divide, stays plain).
  expect_unchanged(*make_choose_layouts({Layout::NChw8c}), R"(graph @g {
  input %x : f32[1, 12, 4, 4]
  input %v : f32[16, 12, 1, 1]
  input %w : f32[16, 16, 1, 1]
  %a = conv2d(%x, %v) {layout = "nChw8c"}
  %a16 = reorder(%a) {layout = "nChw16c"}
  %b = conv2d(%a16, %w) {layout = "nChw16c"}
  %p = reorder(%b) {layout = "plain"}
  output %p
})");
}

// ---------------------------------------------------------------- layouts in the IR

TEST(Layouts, TextRoundTripAndRules) {
  const std::string text = R"(graph @g {
  input %x : f32[2, 16, 3, 5]
  %b : f32[2, 16, 3, 5]<nChw16c> = reorder(%x) {layout = "nChw16c"}
  %c : f32[2, 16, 3, 5]<nhwc> = reorder(%b) {layout = "nhwc"}
  %d : f32[2, 16, 3, 5] = reorder(%c) {layout = "plain"}
  output %d
}
)";
  auto g = parse_graph(text);
  EXPECT_EQ(print_graph(*g), text);
  auto fails = [](const std::string& body) {
    return test::error_code_of([&] { verify(*parse_graph("graph @g {\n" + body + "}\n")); });
  };
  // Graph inputs and constants are plain; a layout needs 4-D and channels its block divides.
  EXPECT_EQ(fails("  input %x : f32[1, 8, 2, 2]<nChw8c>\n  output %x\n"), ErrorCode::ParseError);
  EXPECT_EQ(fails("  input %x : f32[1, 12, 2, 2]\n  %y : f32[1, 12, 2, 2]<nChw8c> = "
                  "reorder(%x) {layout = \"nChw8c\"}\n  output %x\n"),
            ErrorCode::ParseError);
  EXPECT_EQ(fails("  input %x : f32[1, 12, 2, 2]\n  %y = reorder(%x) {layout = \"nChw8c\"}\n"
                  "  output %x\n"),
            ErrorCode::ShapeInference);
  EXPECT_EQ(fails("  input %x : f32[8, 8]\n  %y = reorder(%x) {layout = \"nhwc\"}\n  output %x\n"),
            ErrorCode::ShapeInference);
  // Ops that read only plain tensors reject others; graph outputs are plain.
  EXPECT_EQ(fails("  input %x : f32[1, 8, 2, 2]\n  %y = reorder(%x) {layout = \"nChw8c\"}\n"
                  "  %z = relu(%y)\n  output %z\n"),
            ErrorCode::ShapeInference);
  EXPECT_EQ(fails("  input %x : f32[1, 8, 2, 2]\n  %y = reorder(%x) {layout = \"nChw8c\"}\n"
                  "  output %y\n"),
            ErrorCode::InvalidGraph);
}

// ---------------------------------------------------------------- kernels

// oneDNN's reorder and the reference element copy agree exactly between every pair of layouts,
// and both put element (1, 25, 2, 3) of a [2, 32, 3, 5] tensor where each layout says.
TEST(Layouts, ReorderKernelsPlaceEveryElement) {
  const Layout layouts[] = {Layout::Plain, Layout::NHWC, Layout::NChw8c, Layout::NChw16c};
  const std::vector<int64_t> sizes{2, 32, 3, 5};
  std::mt19937 rng(1);
  Tensor x = test::random_tensor(DType::F32, sizes, rng, -1, 1);
  auto reorder = [](Graph& g, Value* v, Layout to) {
    return g.add("reorder", {v}, {{"layout", std::string(layout_name(to))}});
  };
  for (Layout from : layouts) {
    for (Layout to : layouts) {
      SCOPED_TRACE(std::string(layout_name(from)) + " -> " + layout_name(to));
      Graph g;
      Value* v = g.add_input("x", TensorType{DType::F32, make_shape(sizes)});
      g.set_outputs({reorder(g, reorder(g, reorder(g, v, from), to), Layout::Plain)});
      for (const char* policy : {"best", "reference"})
        EXPECT_TRUE(test::same_values(run_with(g, policy, {x})[0], x)) << policy;
    }
  }
  // Offsets by hand: plain ((1*32+25)*3+2)*5+3, nhwc ((1*3+2)*5+3)*32+25, nChw8c
  // (((1*4+3)*3+2)*5+3)*8+1, nChw16c (((1*2+1)*3+2)*5+3)*16+9.
  const float element = x.data<float>()[868];
  const std::pair<Layout, int64_t> offsets[] = {
      {Layout::NHWC, 921}, {Layout::NChw8c, 945}, {Layout::NChw16c, 937}};
  for (const auto& [layout, offset] : offsets) {
    Graph g;
    Value* y = reorder(g, g.add_input("x", TensorType{DType::F32, make_shape(sizes)}), layout);
    KernelSpec spec = test::spec_with_constants(*y->producer());
    for (const char* kernel : {"onednn", "reference"}) {
      Tensor stored = test::create_and_run("reorder", kernel, spec, {x});
      EXPECT_EQ(stored.data<float>()[offset], element) << layout_name(layout) << " " << kernel;
    }
  }
}

// oneDNN's convolution reads x and r and writes y in each layout, with every epilogue step, within
// the dot bound of the reference (which goes through plain copies).
TEST(Layouts, ConvKernelsInEveryLayout) {
  std::mt19937 rng(5);
  for (Layout layout : {Layout::NHWC, Layout::NChw8c, Layout::NChw16c}) {
    for (bool grouped : {false, true}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + (grouped ? " depthwise" : ""));
      const int64_t c = 16, groups = grouped ? c : 1;
      Graph g;
      Value* x = g.add("reorder", {g.add_input("x", TensorType{DType::F32, make_shape({2, c, 7, 6})})},
                       {{"layout", std::string(layout_name(layout))}});
      Value* w = g.add_constant("w", test::random_tensor(DType::F32, {c, c / groups, 3, 3}, rng, -1, 1));
      Value* b = g.add_constant("b", test::random_tensor(DType::F32, {c}, rng, -1, 1));
      Value* r = g.add("reorder", {g.add_input("r", TensorType{DType::F32, make_shape({2, c, 7, 6})})},
                       {{"layout", std::string(layout_name(layout))}});
      AttrMap attrs{{"padding", std::vector<int64_t>{1, 1}}, {"groups", groups},
                    {"residual", true}, {"layout", std::string(layout_name(layout))}};
      // The magnitude comes from the convolution without relu and clamp, which never widen a
      // difference but would bound the magnitude itself.
      KernelSpec magnitude_spec =
          test::spec_with_constants(*g.add("conv2d", {x, w, b, r}, attrs)->producer());
      attrs["fused_activation"] = std::string("relu");
      attrs["clamp_min"] = 0.0;
      attrs["clamp_max"] = 6.0;
      Value* y = g.add("conv2d", {x, w, b, r}, attrs);
      KernelSpec spec = test::spec_with_constants(*y->producer());
      ASSERT_EQ(test::kernel_of("conv2d", "onednn").unsupported_reason(spec), "");
      std::vector<Tensor> inputs{test::random_tensor(DType::F32, {2, c, 7, 6}, rng, -2, 2),
                                 w->constant(), b->constant(),
                                 test::random_tensor(DType::F32, {2, c, 7, 6}, rng, -2, 2)};
      // x and r as the kernel reads them: the inputs are stored in `layout` by the reference copy.
      for (size_t i : {size_t{0}, size_t{3}}) {
        KernelSpec to_layout = test::spec_with_constants(*(i == 0 ? x : r)->producer());
        inputs[i] = test::create_and_run("reorder", "reference", to_layout, {inputs[i]});
      }
      std::vector<Tensor> magnitudes;
      for (const Tensor& t : inputs) magnitudes.push_back(test::abs_of(t));
      Tensor want = test::create_and_run("conv2d", "reference", spec, inputs);
      Tensor got = test::create_and_run("conv2d", "onednn", spec, inputs);
      Tensor magnitude = test::create_and_run("conv2d", "reference", magnitude_spec, magnitudes);
      test::expect_within_dot_bound(got, want, magnitude, c / groups * 9 + 2,
                                    std::string("onednn ") + layout_name(layout));
    }
  }
}

// ---------------------------------------------------------------- pooling in the chains

// A stride-2 stem convolution, its max pooling and a 1x1 convolution, then an average pooling to
// the graph output: the poolings take the chain's layout, so the only reorder left is the one to
// the plain graph output (x's 3 channels don't suit nChw8c: the stem reads it plain).
const std::string kPoolingChainAfter = R"(graph @g {
  input %x : f32[1, 3, 16, 16]
  input %w1 : f32[8, 3, 3, 3]
  input %w2 : f32[16, 8, 1, 1]
  %a_1 : f32[1, 8, 8, 8]<nChw8c> = conv2d(%x, %w1) {fused_activation = "relu", layout = "nChw8c", padding = [1, 1], stride = [2, 2]}
  %m_1 : f32[1, 8, 4, 4]<nChw8c> = max_pool2d(%a_1) {kernel_size = [3], padding = [1], stride = [2]}
  %b_1 : f32[1, 16, 4, 4]<nChw8c> = conv2d(%m_1, %w2) {layout = "nChw8c"}
  %p_1 : f32[1, 16, 2, 2]<nChw8c> = avg_pool2d(%b_1) {kernel_size = [2]}
  %p_1_plain = reorder(%p_1) {layout = "plain"}
  output %p_1_plain
})";

TEST(ChooseLayouts, PoolingsJoinTheChain) {
  auto pass = make_choose_layouts({Layout::NChw8c});
  expect_rewrite(*pass, R"(graph @g {
  input %x : f32[1, 3, 16, 16]
  input %w1 : f32[8, 3, 3, 3]
  input %w2 : f32[16, 8, 1, 1]
  %a = conv2d(%x, %w1) {fused_activation = "relu", padding = [1, 1], stride = [2, 2]}
  %m = max_pool2d(%a) {kernel_size = [3], padding = [1], stride = [2]}
  %b = conv2d(%m, %w2)
  %p = avg_pool2d(%b) {kernel_size = [2]}
  output %p
})",
                 kPoolingChainAfter);
  expect_unchanged(*pass, kPoolingChainAfter);
}

// A pooling of something outside any chain stays plain; so does one of a graph input.
TEST(ChooseLayouts, PoolingOutsideChainsStaysPlain) {
  expect_unchanged(*make_choose_layouts({Layout::NChw8c}), R"(graph @g {
  input %x : f32[1, 8, 8, 8]
  input %w : f32[8, 8, 1, 1]
  %r = relu(%x)
  %m = max_pool2d(%r) {kernel_size = [2]}
  %m8 = reorder(%m) {layout = "nChw8c"}
  %c = conv2d(%m8, %w) {layout = "nChw8c"}
  %p = reorder(%c) {layout = "plain"}
  output %p
})");
}

// Without Winograd shapes, f32 chains take format `any`'s pick (oneDNN's preferred layout) where
// the CPU's 512-bit FMAs are full width, and try the blocked layouts first where a 512-bit
// instruction takes two 256-bit units (docs/passes.md, choose_layouts).
TEST(ChooseLayouts, BlockedLayoutsFirstOnlyWhereAvx512IsHalfWidth) {
  const Layout preferred = cpu::onednn_preferred_conv_layout(DType::F32);
  const std::vector<Layout> candidates = cpu::conv_layout_candidates(DType::F32);
  if (preferred == Layout::NHWC && !cpu::avx512_fma_full_width()) {
    EXPECT_EQ(candidates, (std::vector<Layout>{Layout::NChw16c, Layout::NChw8c, Layout::NHWC}));
  } else {
    EXPECT_EQ(candidates, std::vector<Layout>{preferred});
  }
  // Measured once: every later call gives the first call's answer.
  EXPECT_EQ(cpu::avx512_fma_full_width(), cpu::avx512_fma_full_width());
  if (!cpu::has_avx512f()) {
    EXPECT_FALSE(cpu::avx512_fma_full_width());
  }
}

// A chain holding a 3x3 stride-1 convolution runs in nChw16c where oneDNN has Winograd kernels,
// which read and write only that layout, and its convolution takes them; a chain without one
// keeps the CPU's other candidates.
TEST(ChooseLayouts, ChainsWithWinogradShapesTryNChw16cFirst) {
  std::mt19937 rng(9);
  Graph g("g");
  Value* x = g.add_input("x", TensorType{DType::F32, make_shape({1, 32, 14, 14})});
  auto conv = [&](int64_t k, int64_t stride, const std::string& name) {
    Value* w = g.add_constant("w_" + name,
                              test::random_tensor(DType::F32, {32, 32, k, k}, rng, -0.2, 0.2));
    return g.add("conv2d", {x, w},
                 {{"stride", std::vector<int64_t>{stride, stride}},
                  {"padding", std::vector<int64_t>{k / 2, k / 2}},
                  {"fused_activation", std::string("relu")}},
                 name);
  };
  Value* dense3x3 = conv(3, 1, "dense3x3");
  Value* pointwise = conv(1, 1, "pointwise");
  Value* strided = conv(3, 2, "strided");
  g.set_outputs({dense3x3, pointwise, strided});
  const Node* winograd_shaped = dense3x3->producer();
  const std::vector<Layout> usual = cpu::conv_layout_candidates(DType::F32);
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {pointwise->producer()}), usual);
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {pointwise->producer(), strided->producer()}),
            usual);
  if (!cpu::onednn_has_winograd()) {
    EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {winograd_shaped}), usual);
    return;
  }
  const std::vector<Layout> winograd = cpu::conv_layout_candidates(DType::F32, {winograd_shaped});
  EXPECT_EQ(winograd.front(), Layout::NChw16c);
  EXPECT_EQ(std::count(winograd.begin(), winograd.end(), Layout::NChw16c), 1);
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {pointwise->producer(), winograd_shaped}),
            winograd);
  // Through the pipeline: the 3x3 stride-1 convolution runs in nChw16c on the Winograd kernel.
  auto compiled = CompiledGraph::compile(g, CompileOptions{.verify = true});
  for (const Node* n : compiled->graph().nodes()) {
    if (n->name() == "dense3x3") {
      EXPECT_EQ(n->attr_string("layout"), "nChw16c");
    }
  }
  const std::string plan = compiled->describe_plan({{1, 32, 14, 14}});
  EXPECT_NE(plan.find("onednn_winograd"), std::string::npos) << plan;
}

// A blocked layout that splits a grouped convolution's groups of channels leaves oneDNN only its
// reference kernel (a ResNeXt block, 32 groups of 4 channels, took 48x eager's time in
// nChw16c): such layouts leave the candidates, and a convolution that no blocked layout fits
// stays plain. Depthwise convolutions (one channel a group) keep them all.
TEST(ChooseLayouts, GroupedConvolutionsKeepTheirGroupsInWholeBlocks) {
  std::mt19937 rng(12);
  Graph g("g");
  auto conv = [&](int64_t channels, int64_t groups, const std::string& name) {
    Value* x = g.add_input("x_" + name, TensorType{DType::F32, make_shape({1, channels, 8, 8})});
    Value* w = g.add_constant(
        "w_" + name,
        test::random_tensor(DType::F32, {channels, channels / groups, 3, 3}, rng, -0.2, 0.2));
    return g.add("conv2d", {x, w},
                 {{"padding", std::vector<int64_t>{1, 1}}, {"groups", groups}}, name);
  };
  Value* groups_of_8 = conv(32, 4, "groups_of_8");
  Value* groups_of_4 = conv(128, 32, "groups_of_4");
  Value* depthwise = conv(32, 32, "depthwise");
  g.set_outputs({groups_of_8, groups_of_4, depthwise});
  const std::vector<Layout> usual = cpu::conv_layout_candidates(DType::F32);
  auto without = [&](std::vector<Layout> layouts, int64_t max_block) {
    std::erase_if(layouts, [&](Layout l) { return layout_channel_block(l) > max_block; });
    return layouts.empty() ? std::vector<Layout>{Layout::Plain} : layouts;
  };
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {groups_of_8->producer()}), without(usual, 8));
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {groups_of_4->producer()}), without(usual, 1));
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32, {depthwise->producer()}), usual);
  EXPECT_EQ(cpu::conv_layout_candidates(DType::F32,
                                        {depthwise->producer(), groups_of_8->producer()}),
            without(usual, 8));

  // Through the pipeline each convolution's layout keeps its groups whole, and the results are
  // the reference kernels' (a reference kernel of oneDNN's would give them too, slowly: the
  // candidates above are what rules it out).
  std::vector<Tensor> inputs;
  for (const Value* in : g.inputs())
    inputs.push_back(test::random_tensor(DType::F32, {1, in->type().shape[1].size(), 8, 8}, rng,
                                         -1, 1));
  auto compiled = CompiledGraph::compile(g, {.verify = true});
  for (const Node* n : compiled->graph().nodes()) {
    if (n->op() != "conv2d") continue;
    SCOPED_TRACE(n->name());
    Layout layout = Layout::Plain;
    ASSERT_TRUE(parse_layout(n->attr_string("layout"), layout));
    const int64_t per_group = n->input(1)->type().shape[1].size();
    EXPECT_TRUE(per_group == 1 || per_group % layout_channel_block(layout) == 0)
        << layout_name(layout);
  }
  std::vector<TensorView> views;
  for (const Tensor& t : inputs) views.push_back(t.view());
  const std::vector<Tensor> got = compiled->run(views);
  const std::vector<Tensor> expected =
      CompiledGraph::compile(g, {.optimization_level = 0})->run(views);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    for (int64_t e = 0; e < got[i].numel(); ++e)
      ASSERT_NEAR(got[i].data<float>()[e], expected[i].data<float>()[e], 1e-4)
          << "output " << i << " at " << e;
}

// ResNet-50's stem, conv → batch_norm → relu → max_pool2d → conv, through the whole pipeline (the
// fuse stage folds the norm and fuses the relu): the max pooling reads the stem's output and
// feeds the next convolution in the chain's layout, with no reorder around it; the format dump
// shows it in that layout.
TEST(ChooseLayouts, ResNetStemHasNoReorderAroundTheMaxPool) {
  const Layout layout = cpu::conv_layout_candidates().front();  // its 16 channels fit any
  if (layout == Layout::Plain) GTEST_SKIP() << "oneDNN prefers plain tensors on this CPU";
  std::mt19937 rng(8);
  Graph g("stem");
  Value* x = g.add_input("x", TensorType{DType::F32, make_shape({1, 3, 32, 32})});
  auto constant = [&](const std::string& name, std::vector<int64_t> sizes, double lo, double hi) {
    return g.add_constant(name, test::random_tensor(DType::F32, sizes, rng, lo, hi));
  };
  Value* conv1 = g.add("conv2d", {x, constant("w1", {16, 3, 7, 7}, -0.2, 0.2)},
                       {{"stride", std::vector<int64_t>{2, 2}},
                        {"padding", std::vector<int64_t>{3, 3}}},
                       "conv1");
  Value* bn = g.add("batch_norm", {conv1, constant("gamma", {16}, 0.5, 1.5),
                                   constant("beta", {16}, -0.5, 0.5),
                                   constant("mean", {16}, -0.5, 0.5),
                                   constant("var", {16}, 0.5, 1.5)},
                    {}, "bn1");
  Value* pool = g.add("max_pool2d", {g.add("relu", {bn}, {}, "relu")},
                      {{"kernel_size", std::vector<int64_t>{3}},
                       {"stride", std::vector<int64_t>{2}},
                       {"padding", std::vector<int64_t>{1}}},
                      "maxpool");
  g.set_outputs({g.add("conv2d", {pool, constant("w2", {16, 16, 1, 1}, -0.3, 0.3)}, {}, "conv2")});

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln_stem_" + std::to_string(rng()));
  auto compiled = CompiledGraph::compile(
      g, CompileOptions{.verify = true, .dump_type = "txt", .dump_path = dir.string()});
  const Graph& optimized = compiled->graph();
  const Node* maxpool = nullptr;
  int reorders = 0;
  for (const Node* n : optimized.nodes()) {
    if (n->op() == "max_pool2d") maxpool = n;
    reorders += n->op() == "reorder";
  }
  ASSERT_NE(maxpool, nullptr);
  EXPECT_EQ(maxpool->input(0)->producer()->op(), "conv2d");
  EXPECT_EQ(maxpool->output()->type().layout, layout);
  for (const Node* user : maxpool->output()->users()) EXPECT_EQ(user->op(), "conv2d");
  // The output's reorder to plain, and the input's when x's 3 channels suit the layout (nhwc).
  EXPECT_EQ(reorders, layout_problem(x->type().shape, layout).empty() ? 2 : 1);

  std::string format_dump;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().ends_with("_format.txt")) {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      format_dump = text.str();
    }
  std::filesystem::remove_all(dir);
  // The dump shows the pooling in the layout, reading the stem's output and read by no reorder.
  std::istringstream lines(format_dump);
  std::string line, pool_line;
  while (std::getline(lines, line))
    if (line.find(" = max_pool2d(") != std::string::npos) pool_line = line;
  EXPECT_NE(pool_line.find(std::string("<") + layout_name(layout) + "> = max_pool2d(%"),
            std::string::npos)
      << format_dump;
  const std::string pooled = pool_line.substr(pool_line.find('%'), pool_line.find(' ', 2) - 2);
  EXPECT_EQ(format_dump.find("reorder(" + pooled + ")"), std::string::npos) << format_dump;
  EXPECT_EQ(format_dump.find("reorder(%" + maxpool->input(0)->name() + ")"), std::string::npos)
      << format_dump;

  // And the pipeline's result is the plain reference's within the convolutions' dot bounds:
  // |x| <= 1 and |w1| <= 0.2 over 147 terms bound conv1's error by 149·2⁻²⁴·29.4 < 2.7e-4; the
  // folded norm scales it by at most 1.5/√0.5 < 2.2 and conv2's 16 terms of |w2| <= 0.3 by 4.8
  // (2.9e-3), and conv2 rounds at most 18·2⁻²⁴·Σ|m·w2| < 3.4e-4 with |m| <= 2.2·29.4 + 0.5 more:
  // under 4e-3 in all.
  std::vector<Tensor> inputs = test::random_inputs(g, 9);
  std::vector<Tensor> want = run_with(g, "reference", inputs);
  std::vector<Tensor> got = compiled->run({inputs[0].view()});
  ASSERT_EQ(got.size(), 1u);
  for (int64_t i = 0; i < want[0].numel(); ++i)
    ASSERT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], 4e-3) << "element " << i;
}

// Max and average pooling in every layout: the reference (through plain copies) gives the plain
// reference's values exactly; the AVX2 kernel gives max bit for bit (NaN and inf included) and
// averages within (KH·KW + 2)·2⁻²⁴ of the windows' mean |x|, as does oneDNN's average pooling
// where it has a jit kernel for the layout.
TEST(Layouts, PoolKernelsInEveryLayout) {
  struct Case {
    std::string op;
    AttrMap attrs;
    int64_t window;  // KH·KW
  };
  auto ints = [](std::vector<int64_t> v) { return Attr(std::move(v)); };
  const std::vector<Case> cases = {
      {"max_pool2d", {{"kernel_size", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})}},
       9},
      {"max_pool2d", {{"kernel_size", ints({2, 3})}, {"dilation", ints({2, 1})},
                      {"ceil_mode", true}},
       6},
      {"avg_pool2d", {{"kernel_size", ints({3})}, {"stride", ints({2})}, {"padding", ints({1})},
                      {"count_include_pad", false}},
       9},
      {"avg_pool2d", {{"kernel_size", ints({2})}, {"ceil_mode", true}}, 4},
      {"avg_pool2d", {{"kernel_size", ints({3})}, {"stride", ints({1})},
                      {"divisor_override", int64_t{5}}},
       9},
  };
  const std::vector<std::pair<Layout, int64_t>> layouts = {
      {Layout::NHWC, 3}, {Layout::NHWC, 20}, {Layout::NChw8c, 24}, {Layout::NChw16c, 32}};
  std::mt19937 rng(4);
  for (const auto& [layout, channels] : layouts) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.op + " in " + layout_name(layout) + " with " + std::to_string(channels) +
                   " channels, " + std::to_string(&c - cases.data()));
      const std::vector<int64_t> sizes{2, channels, 11, 9};
      Graph g;
      Value* plain_x = g.add_input("x", TensorType{DType::F32, make_shape(sizes)});
      Value* x = g.add("reorder", {plain_x}, {{"layout", std::string(layout_name(layout))}});
      Value* y = g.add(c.op, {x}, c.attrs);
      Value* plain_y = g.add(c.op, {plain_x}, c.attrs);
      ASSERT_EQ(y->type().layout, layout);
      KernelSpec spec = test::spec_with_constants(*y->producer());
      KernelSpec plain_spec = test::spec_with_constants(*plain_y->producer());
      KernelSpec to_layout = test::spec_with_constants(*x->producer());

      Tensor input = test::random_tensor(DType::F32, sizes, rng, -2, 2);
      const bool max = c.op == "max_pool2d";
      if (max) test::sprinkle_extremes(input, rng);
      Tensor stored = test::create_and_run("reorder", "reference", to_layout, {input});
      // The plain reference's result, stored in the layout as the kernels write it.
      Graph r;
      Value* rv = r.add_input("y", plain_y->type());
      r.add("reorder", {rv}, {{"layout", std::string(layout_name(layout))}});
      KernelSpec y_to_layout = test::spec_with_constants(*r.nodes()[0]);
      Tensor want = test::create_and_run(
          "reorder", "reference", y_to_layout,
          {test::create_and_run(c.op, "reference", plain_spec, {input})});
      EXPECT_TRUE(test::same_values(test::create_and_run(c.op, "reference", spec, {stored}), want));

      std::vector<std::string> kernels;
      for (const KernelDef& k : OpRegistry::instance().find(c.op)->kernels)
        if (k.name != "reference" && k.unsupported_reason(spec).empty()) kernels.push_back(k.name);
      if (test::has_kernel(c.op, "avx2") && cpu::has_avx2_fma()) {
        EXPECT_NE(std::find(kernels.begin(), kernels.end(), "avx2"), kernels.end());
      }
      Tensor magnitude;
      if (!max) {
        Tensor abs_stored = test::abs_of(stored);
        magnitude = test::create_and_run(c.op, "reference", spec, {abs_stored});
      }
      for (const std::string& kernel : kernels) {
        SCOPED_TRACE(kernel);
        Tensor got = test::create_and_run(c.op, kernel, spec, {stored});
        if (max) {
          EXPECT_TRUE(test::same_values(got, want));
          continue;
        }
        for (int64_t i = 0; i < got.numel(); ++i)
          ASSERT_LE(std::fabs(got.data<float>()[i] - want.data<float>()[i]),
                    (c.window + 2) * std::ldexp(magnitude.data<float>()[i], -24))
              << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
