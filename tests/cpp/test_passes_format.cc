// The format stage (choose_layouts) on textual IR: convolution chains in a blocked layout with
// reorders only at their boundaries, the numeric check against the plain graph with the reference
// and the best kernels, pinned layouts and their conflict (E30012); the textual IR of layouts and
// the rules that keep non-plain tensors away from ops that can't read them; the reorder op and
// the convolution kernels in every layout.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_harness.h"
#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

using test::expect_rewrite;
using test::expect_unchanged;
using test::run_with;

// A stem convolution (3 channels: stays plain), a residual convolution, then a 1x1 convolution
// to a graph output and a max pooling, which reads only plain tensors.
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
  %b_1_plain = reorder(%b_1) {layout = "plain"}
  %m = max_pool2d(%b_1_plain) {kernel_size = [2]}
  %c_1 : f32[1, 16, 8, 8]<nChw8c> = conv2d(%b_1, %w3) {layout = "nChw8c"} @c_1
  %c_1_plain = reorder(%c_1) {layout = "plain"}
  output %c_1_plain, %m
})";

TEST(ChooseLayouts, ReordersOnlyAtChainBoundaries) {
  auto pass = make_choose_layouts(Layout::NChw8c);
  // expect_rewrite also checks the reference kernels give the plain graph's results bit for bit.
  expect_rewrite(*pass, kChain, kChainBlocked);
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
    ASSERT_TRUE(make_choose_layouts(layout)->run(*g));
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
  auto pass = make_choose_layouts(Layout::NChw8c);
  expect_unchanged(*pass, kChainBlocked);
}

TEST(ChooseLayouts, LeavesUnsuitableConvolutionsPlain) {
  // No preferred layout (a CPU without AVX2), f64, and 12 channels, which blocks of 8 don't divide.
  expect_unchanged(*make_choose_layouts(Layout::Plain), kChain);
  auto pass = make_choose_layouts(Layout::NChw8c);
  expect_unchanged(*pass, R"(graph @g {
  input %x : f64[1, 8, 4, 4]
  input %w : f64[8, 8, 1, 1]
  %y = conv2d(%x, %w)
  output %y
})");
  expect_unchanged(*pass, R"(graph @g {
  input %x : f32[1, 8, 4, 4]
  input %w : f32[12, 8, 1, 1]
  %y = conv2d(%x, %w)
  output %y
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
  EXPECT_EQ(test::error_code_of([&] { make_choose_layouts(Layout::NChw8c)->run(*g); }, &message),
            ErrorCode::FormatMismatch);
  EXPECT_NE(message.find("'a'"), std::string::npos) << message;
  EXPECT_NE(message.find("'b'"), std::string::npos) << message;
  // An explicit reorder between them splits the chain: both keep their pinned layouts (x, whose
  // 12 channels blocks of 8 don't divide, stays plain).
  expect_unchanged(*make_choose_layouts(Layout::NChw8c), R"(graph @g {
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

}  // namespace
}  // namespace kiln
