// conv3d: type inference (symbolic dims included), the reference kernel on hand-computed values,
// and the oneDNN kernel (which reorders plain x and y around its primitive) against the
// reference.
#include "kernel_harness.h"
#include "kernels/cpu/cpu_features.h"

namespace kiln {
namespace {

using test::type_of;
using Ints = std::vector<int64_t>;

TensorType f32(const Ints& sizes) { return type_of(DType::F32, sizes); }

std::vector<float> reference(const Ints& x_sizes, const std::vector<float>& x, const Ints& w_sizes,
                             const std::vector<float>& w, AttrMap attrs) {
  test::OneNode node("conv3d", {f32(x_sizes), f32(w_sizes)}, std::move(attrs));
  return test::values_of<float>(
      test::run_kernel(*node.node, "reference", {test::tensor_of(x_sizes, x), test::tensor_of(w_sizes, w)})[0]);
}

TEST(OpsConv3d, ReferenceMatchesHandComputedValues) {
  // x[d, h, w] = 100d + 10h + w over 2x2x3; one tap at (1, 0, 2) picks x shifted by it.
  std::vector<float> x;
  for (int d = 0; d < 2; ++d)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w) x.push_back(100 * d + 10 * h + w);
  std::vector<float> tap(2 * 2 * 3, 0);
  tap[1 * 6 + 0 * 3 + 2] = 1;
  EXPECT_EQ(reference({1, 1, 2, 2, 3}, x, {1, 1, 2, 2, 3}, tap, {}), (std::vector<float>{102}));
  // Padding 1 on every side, the same tap: y[z, y, x] = x[z, y - 1, x + 1], 0 outside x.
  std::vector<float> shifted;
  for (int z = 0; z < 3; ++z)
    for (int y = 0; y < 3; ++y)
      for (int w = 0; w < 3; ++w) {
        const bool inside = z < 2 && y >= 1 && y - 1 < 2 && w + 1 < 3;
        shifted.push_back(inside ? x[(z * 2 + y - 1) * 3 + w + 1] : 0);
      }
  EXPECT_EQ(reference({1, 1, 2, 2, 3}, x, {1, 1, 2, 2, 3}, tap, {{"padding", Ints{1, 1, 1}}}), shifted);
  // Ones over 2x2x2 with stride 2 along the width and dilation 2 along the depth of a 3x2x4 x.
  std::vector<float> ones(8, 1), x3;
  for (int i = 0; i < 24; ++i) x3.push_back(static_cast<float>(i));
  // Output (0, 0, ox): depths 0 and 2, rows 0 and 1, columns 2ox and 2ox + 1.
  auto sum_at = [&](int ox) {
    float s = 0;
    for (int d : {0, 2})
      for (int h : {0, 1})
        for (int w : {2 * ox, 2 * ox + 1}) s += x3[(d * 2 + h) * 4 + w];
    return s;
  };
  EXPECT_EQ(reference({1, 1, 3, 2, 4}, x3, {1, 1, 2, 2, 2}, ones, {{"stride", Ints{1, 1, 2}}, {"dilation", Ints{2, 1, 1}}}),
            (std::vector<float>{sum_at(0), sum_at(1)}));
  // Two groups: output channel c sees input channel c only; a bias.
  test::OneNode grouped("conv3d", {f32({1, 2, 1, 1, 2}), f32({2, 1, 1, 1, 1}), f32({2})}, {{"groups", int64_t{2}}});
  EXPECT_EQ(test::values_of<float>(test::run_kernel(*grouped.node, "reference",
                                                    {test::tensor_of({1, 2, 1, 1, 2}, {1, 2, 3, 4}),
                                                     test::tensor_of({2, 1, 1, 1, 1}, {10, 100}),
                                                     test::tensor_of({2}, {0.5, -1})})[0]),
            (std::vector<float>{10.5, 20.5, 299, 399}));
}

struct Case {
  Ints x, w;
  AttrMap attrs;
};

// `kernel` against the reference loops on random x, w and bias (runtime or constant weights),
// within the dot-product bound of the window's terms.
void expect_matches_reference(const std::string& kernel, const Case& c, std::mt19937& rng) {
  for (bool constant : {false, true}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(kernel + " x" + shape_string(c.x) + " w" + shape_string(c.w) +
                   (constant ? " constant" : "") + (bias ? " bias" : ""));
      std::vector<Tensor> inputs = {test::random_tensor(DType::F32, c.x, rng, -1, 1),
                                    test::random_tensor(DType::F32, c.w, rng, -1, 1)};
      Graph graph;
      std::vector<Value*> operands{graph.add_input("x", f32(c.x))};
      operands.push_back(constant ? graph.add_constant("w", inputs[1]) : graph.add_input("w", f32(c.w)));
      if (bias) {
        inputs.push_back(test::random_tensor(DType::F32, {c.w[0]}, rng, -1, 1));
        operands.push_back(constant ? graph.add_constant("b", inputs[2]) : graph.add_input("b", f32({c.w[0]})));
      }
      graph.add("conv3d", operands, c.attrs);
      for (int threads : {1, 2}) {
        const KernelSpec spec = test::spec_with_constants(*graph.nodes().at(0), threads);
        ASSERT_EQ(test::kernel_of("conv3d", kernel).unsupported_reason(spec), "");
        Tensor expected = test::create_and_run("conv3d", "reference", spec, inputs);
        std::vector<Tensor> magnitudes;
        for (const Tensor& t : inputs) magnitudes.push_back(test::abs_of(t));
        Tensor magnitude = test::create_and_run("conv3d", "reference", spec, magnitudes);
        Tensor got = test::create_and_run("conv3d", kernel, spec, inputs);
        test::expect_within_dot_bound(got, expected, magnitude,
                                      c.w[1] * c.w[2] * c.w[3] * c.w[4] + (bias ? 1 : 0), kernel);
      }
    }
  }
}

TEST(OpsConv3d, OneDnnMatchesReference) {
  std::mt19937 rng(43);
  const std::vector<Case> cases = {
      {{1, 3, 4, 32, 32}, {16, 3, 2, 8, 8}, {{"stride", Ints{2, 8, 8}}}},  // a video model's tubelets
      {{2, 8, 5, 9, 9}, {8, 8, 3, 3, 3}, {{"padding", Ints{1, 1, 1}}}},
      {{1, 16, 4, 7, 7}, {16, 16, 3, 1, 1}, {{"padding", Ints{1, 0, 0}}}},  // (2+1)-d: temporal
      {{1, 6, 5, 7, 7}, {6, 1, 3, 3, 3}, {{"padding", Ints{1, 1, 1}}, {"groups", int64_t{6}}}},  // depthwise
      {{1, 8, 4, 6, 6}, {8, 4, 1, 3, 3},
       {{"padding", Ints{0, 1, 1, 1, 2, 0}}, {"dilation", Ints{1, 2, 2}}, {"groups", int64_t{2}}}},
      {{1, 3, 1, 1, 1}, {5, 3, 1, 1, 1}, {}},
  };
  for (const Case& c : cases) expect_matches_reference("onednn", c, rng);
  // Empty batches and f64 go to the reference.
  Graph g;
  g.add("conv3d", {g.add_input("x", f32({0, 3, 4, 4, 4})), g.add_input("w", f32({4, 3, 3, 3, 3}))});
  EXPECT_EQ(test::kernel_of("conv3d", "onednn").unsupported_reason(test::spec_with_constants(*g.nodes()[0])),
            "zero-size tensor");
  g.add("conv3d", {g.add_input("x64", type_of(DType::F64, {1, 3, 4, 4, 4})),
                   g.add_input("w64", type_of(DType::F64, {4, 3, 3, 3, 3}))});
  EXPECT_EQ(test::kernel_of("conv3d", "onednn").unsupported_reason(test::spec_with_constants(*g.nodes()[1])),
            "f32 only");
}

// Kiln's depthwise kernel: every output row width around its 8-column vectors and 32-column
// passes, strides 1 to 3 (the phase split), dilation, symmetric and asymmetric padding, padding
// wider than the kernel reads, 1-wide and 5-wide windows, two batches; declines what isn't
// depthwise.
TEST(OpsConv3d, DepthwiseKernelMatchesReference) {
  std::mt19937 rng(45);
  auto depthwise = [](int64_t channels, Ints x_spatial, Ints kernel, AttrMap attrs) {
    Ints x{2, channels};
    x.insert(x.end(), x_spatial.begin(), x_spatial.end());
    Ints w{channels, 1};
    w.insert(w.end(), kernel.begin(), kernel.end());
    attrs["groups"] = channels;
    return Case{x, w, attrs};
  };
  const std::vector<Case> cases = {
      depthwise(3, {4, 7, 1}, {3, 3, 3}, {{"padding", Ints{1, 1, 1}}}),
      depthwise(5, {3, 6, 8}, {3, 3, 3}, {{"padding", Ints{1, 1, 1}}}),
      depthwise(2, {2, 5, 9}, {1, 3, 3}, {{"padding", Ints{0, 1, 1}}}),
      depthwise(4, {5, 4, 33}, {3, 1, 1}, {{"padding", Ints{1, 0, 0}}}),
      depthwise(3, {4, 9, 40}, {3, 3, 3}, {{"padding", Ints{1, 1, 1}}, {"stride", Ints{1, 2, 2}}}),
      depthwise(2, {6, 11, 29}, {3, 3, 3}, {{"stride", Ints{2, 3, 3}}}),
      depthwise(2, {5, 9, 17}, {3, 3, 3},
                {{"padding", Ints{2, 2, 2}}, {"dilation", Ints{2, 2, 2}}, {"stride", Ints{1, 1, 2}}}),
      depthwise(3, {3, 8, 12}, {2, 5, 5}, {{"padding", Ints{0, 1, 2, 1, 3, 4}}}),
      depthwise(2, {1, 3, 3}, {1, 1, 1}, {{"padding", Ints{1, 4, 4}}}),
  };
  // Without AVX2 (or with KILN_MAX_CPU_ISA below it) the kernel declines, saying why.
  if (const std::string no_avx2 = cpu::isa_unavailable_reason(cpu::Isa::Avx2); !no_avx2.empty()) {
    Graph g;
    g.add("conv3d", {g.add_input("x", f32({1, 4, 3, 5, 5})), g.add_input("w", f32({4, 1, 3, 3, 3}))},
          {{"groups", int64_t{4}}});
    EXPECT_EQ(test::kernel_of("conv3d", "depthwise").unsupported_reason(test::spec_with_constants(*g.nodes()[0])),
              no_avx2);
    return;
  }
  for (const Case& c : cases) expect_matches_reference("depthwise", c, rng);

  Graph g;
  g.add("conv3d", {g.add_input("x", f32({1, 4, 3, 5, 5})), g.add_input("w", f32({4, 2, 3, 3, 3}))},
        {{"groups", int64_t{2}}});
  g.add("conv3d", {g.add_input("x2", f32({1, 4, 3, 5, 5})), g.add_input("w2", f32({8, 1, 3, 3, 3}))},
        {{"groups", int64_t{4}}});
  for (const Node* node : g.nodes())
    EXPECT_EQ(test::kernel_of("conv3d", "depthwise").unsupported_reason(test::spec_with_constants(*node)),
              "not depthwise (one filter per channel)");
}

TEST(OpsConv3d, InfersShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({2, 6, 8, 20, 20}));
  auto conv = [&](Ints w, AttrMap attrs) {
    return g.add("conv3d", {x, g.add_input("w", f32(w))}, std::move(attrs))->type().shape;
  };
  EXPECT_EQ(conv({8, 6, 3, 3, 3}, {}), make_shape({2, 8, 6, 18, 18}));
  EXPECT_EQ(conv({8, 6, 3, 3, 3}, {{"padding", Ints{1, 1, 1}}}), make_shape({2, 8, 8, 20, 20}));
  EXPECT_EQ(conv({8, 6, 2, 4, 4}, {{"stride", Ints{2, 4, 4}}}), make_shape({2, 8, 4, 5, 5}));
  // (8+0+1-3)/1+1, (20+2+0-3)/3+1, 20-2·2
  EXPECT_EQ(conv({8, 3, 3, 3, 3}, {{"padding", Ints{0, 2, 0, 1, 0, 0}}, {"stride", Ints{1, 3, 1}},
                                   {"dilation", Ints{1, 1, 2}}, {"groups", int64_t{2}}}),
            make_shape({2, 8, 7, 7, 16}));

  // A symbolic frame count takes the window's derived name.
  Dim frames = g.add_symbol("T", 4, 64);
  Value* s = g.add_input("s", TensorType{DType::F32, {Dim(1), Dim(6), frames, Dim(16), Dim(16)}});
  Value* y = g.add("conv3d", {s, g.add_input("k", f32({4, 6, 2, 16, 16}))}, {{"stride", Ints{2, 16, 16}}});
  const Symbol& out = g.symbols()[y->type().shape[2].symbol()];
  EXPECT_EQ(out.name, "(T-2)/2+1");
  EXPECT_EQ(out.min, 2);
  EXPECT_EQ(out.max, 32);
  EXPECT_EQ(y->type().shape[3], Dim(1));

  auto fails = [&](Ints w, AttrMap attrs, const std::string& reason) {
    std::string msg = test::error_message([&] { g.add("conv3d", {x, g.add_input("w", f32(w))}, attrs); },
                                          ErrorCode::ShapeInference);
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 6, 8, 20, 20]"), std::string::npos) << msg;
  };
  fails({4, 5, 3, 3, 3}, {}, "x has 6 channels but w takes 5 per group x 1 groups = 5");
  fails({4, 6, 3, 3}, {}, "w must be 5-D [O, C/groups, KD, KH, KW]");
  fails({4, 6, 9, 3, 3}, {}, "a window spans 9 input frames");
  fails({4, 6, 3, 3, 3}, {{"stride", Ints{1, 1}}}, "stride must be three positive ints");
  fails({4, 6, 3, 3, 3}, {{"dilation", Ints{1, 0, 1}}}, "dilation must be three positive ints");
  fails({4, 6, 3, 3, 3}, {{"padding", Ints{1, 1, 1, 1}}}, "padding must be non-negative ints below 2^31");
  fails({4, 2, 3, 3, 3}, {{"groups", int64_t{3}}}, "groups=3 must divide w's output channels 4");
  fails({4, 3, 3, 3, 3}, {{"groups", int64_t{4}}}, "groups=4 must divide x's channels 6");
  std::string msg = test::error_message(
      [&] { g.add("conv3d", {g.add_input("h", type_of(DType::I32, {1, 2, 3, 3, 3})), g.add_input("hw", type_of(DType::I32, {1, 2, 1, 1, 1}))}); },
      ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("conv3d takes f32 or f64, not i32"), std::string::npos) << msg;
}

TEST(OpsConv3d, CompiledGraphRunsWithPrepackedWeights) {
  std::mt19937 rng(44);
  Graph g;
  Dim frames = g.add_symbol("T", 2, 16);
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(1), Dim(4), frames, Dim(8), Dim(8)}});
  Value* y = g.add("conv3d", {x, g.add_constant("w", test::random_tensor(DType::F32, {8, 4, 3, 3, 3}, rng, -1, 1)),
                              g.add_constant("b", test::random_tensor(DType::F32, {8}, rng, -1, 1))},
                   {{"padding", Ints{1, 1, 1}}});
  g.set_outputs({y});
  auto best = CompiledGraph::compile(g);
  auto slow = CompiledGraph::compile(g, {.kernel_policy = "reference"});
  EXPECT_NE(best->describe_plan({{1, 4, 6, 8, 8}}).find("[kernel onednn]"), std::string::npos);
  for (int64_t t : {2, 6}) {
    Tensor input = test::random_tensor(DType::F32, {1, 4, t, 8, 8}, rng, -1, 1);
    Tensor got = best->run({input.view()})[0];
    Tensor expected = slow->run({input.view()})[0];
    ASSERT_EQ(got.sizes(), (Ints{1, 8, t, 8, 8}));
    for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace kiln
