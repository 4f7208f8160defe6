// conv1d: type inference (symbolic dims included), the reference kernel on hand-computed values,
// and the oneDNN kernel against the reference: both are conv2d's kernels run on [N, C, 1, L].
#include "kernel_harness.h"

namespace kiln {
namespace {

using test::type_of;
using Ints = std::vector<int64_t>;

TensorType f32(const Ints& sizes) { return type_of(DType::F32, sizes); }

// A graph holding one conv1d node; w and bias are constants when asked, as weights are.
struct Conv1dGraph {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> inputs;

  Conv1dGraph(const Ints& x, const Ints& w, AttrMap attrs, bool bias, bool constant, std::mt19937& rng) {
    inputs = {test::random_tensor(DType::F32, x, rng, -1, 1), test::random_tensor(DType::F32, w, rng, -1, 1)};
    std::vector<Value*> operands{graph.add_input("x", f32(x))};
    operands.push_back(constant ? graph.add_constant("w", inputs[1]) : graph.add_input("w", f32(w)));
    if (bias) {
      inputs.push_back(test::random_tensor(DType::F32, {w[0]}, rng, -1, 1));
      operands.push_back(constant ? graph.add_constant("b", inputs[2]) : graph.add_input("b", f32({w[0]})));
    }
    graph.add("conv1d", operands, std::move(attrs));
    node = graph.nodes().at(0);
  }
};

std::vector<float> reference(const Ints& x_sizes, const std::vector<float>& x, const Ints& w_sizes,
                             const std::vector<float>& w, AttrMap attrs) {
  test::OneNode node("conv1d", {f32(x_sizes), f32(w_sizes)}, std::move(attrs));
  return test::values_of<float>(
      test::run_kernel(*node.node, "reference", {test::tensor_of(x_sizes, x), test::tensor_of(w_sizes, w)})[0]);
}

TEST(OpsConv1d, HasConv2dsKernelsInConv2dsOrder) {
  const OpDef* conv1d = OpRegistry::instance().find("conv1d");
  const OpDef* conv2d = OpRegistry::instance().find("conv2d");
  ASSERT_EQ(conv1d->kernels.size(), conv2d->kernels.size());
  for (size_t i = 0; i < conv1d->kernels.size(); ++i) EXPECT_EQ(conv1d->kernels[i].name, conv2d->kernels[i].name);
}

TEST(OpsConv1d, ReferenceMatchesHandComputedValues) {
  // w = [1 0 -1]: y[i] = x[i] - x[i + 2].
  const std::vector<float> x = {1, 2, 3, 4, 5};
  const std::vector<float> w = {1, 0, -1};
  EXPECT_EQ(reference({1, 1, 5}, x, {1, 1, 3}, w, {}), (std::vector<float>{-2, -2, -2}));
  // Padding 1 on both ends: [0 1 2 3 4 5 0].
  EXPECT_EQ(reference({1, 1, 5}, x, {1, 1, 3}, w, {{"padding", Ints{1}}}), (std::vector<float>{-2, -2, -2, -2, 4}));
  // Two on the left only, stride 2: [0 0 1 2 3 4 5] at 0, 2, 4.
  EXPECT_EQ(reference({1, 1, 5}, x, {1, 1, 3}, w, {{"padding", Ints{2, 0}}, {"stride", Ints{2}}}),
            (std::vector<float>{-1, -2, -2}));
  // Dilation 2: y[i] = x[i] - x[i + 4].
  EXPECT_EQ(reference({1, 1, 5}, x, {1, 1, 3}, w, {{"dilation", Ints{2}}}), (std::vector<float>{-4}));
  // Two groups: channel c sees input channel c only.
  EXPECT_EQ(reference({1, 2, 2}, {1, 2, 3, 4}, {2, 1, 1}, {10, 100}, {{"groups", int64_t{2}}}),
            (std::vector<float>{10, 20, 300, 400}));
  // A bias, then relu.
  test::OneNode relu("conv1d", {f32({1, 1, 3}), f32({1, 1, 1}), f32({1})}, {{"fused_activation", std::string("relu")}});
  EXPECT_EQ(test::values_of<float>(test::run_kernel(*relu.node, "reference",
                                                    {test::tensor_of({1, 1, 3}, {1, 2, 3}),
                                                     test::tensor_of({1, 1, 1}, {1}),
                                                     test::tensor_of({1}, {-2})})[0]),
            (std::vector<float>{0, 0, 1}));
}

TEST(OpsConv1d, OneDnnMatchesReference) {
  std::mt19937 rng(41);
  struct Case {
    Ints x, w;
    AttrMap attrs;
  };
  const std::vector<Case> cases = {
      {{2, 8, 50}, {16, 8, 3}, {{"padding", Ints{1}}}},
      {{1, 16, 400}, {32, 16, 10}, {{"stride", Ints{5}}}},                  // a wav2vec2-style stem
      {{1, 6, 33}, {6, 1, 5}, {{"padding", Ints{2}}, {"groups", int64_t{6}}}},  // depthwise
      {{3, 4, 17}, {6, 2, 3}, {{"padding", Ints{3, 1}}, {"dilation", Ints{2}}, {"groups", int64_t{2}}}},
      {{1, 3, 1}, {5, 3, 1}, {}},
  };
  for (const Case& c : cases) {
    for (bool constant : {false, true}) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE("x" + shape_string(c.x) + " w" + shape_string(c.w) + (constant ? " constant" : "") +
                     (bias ? " bias" : ""));
        AttrMap attrs = c.attrs;
        attrs["fused_activation"] = std::string(bias ? "relu" : "none");
        Conv1dGraph g(c.x, c.w, attrs, bias, constant, rng);
        const KernelSpec spec = test::spec_with_constants(*g.node);
        ASSERT_EQ(test::kernel_of("conv1d", "onednn").unsupported_reason(spec), "");
        Tensor expected = test::create_and_run("conv1d", "reference", spec, g.inputs);
        std::vector<Tensor> magnitudes;
        for (const Tensor& t : g.inputs) magnitudes.push_back(test::abs_of(t));
        Tensor magnitude = test::create_and_run("conv1d", "reference", spec, magnitudes);
        Tensor got = test::create_and_run("conv1d", "onednn", spec, g.inputs);
        test::expect_within_dot_bound(got, expected, magnitude, c.w[1] * c.w[2] + (bias ? 1 : 0), "onednn");
      }
    }
  }
  // Empty batches go to the reference, as conv2d's do.
  Graph g;
  g.add("conv1d", {g.add_input("x", f32({0, 3, 9})), g.add_input("w", f32({4, 3, 3}))});
  EXPECT_EQ(test::kernel_of("conv1d", "onednn").unsupported_reason(test::spec_with_constants(*g.nodes()[0])),
            "zero-size tensor");
}

TEST(OpsConv1d, InfersShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({2, 6, 20}));
  auto conv = [&](Ints w, AttrMap attrs) {
    return g.add("conv1d", {x, g.add_input("w", f32(w))}, std::move(attrs))->type().shape;
  };
  EXPECT_EQ(conv({8, 6, 3}, {}), make_shape({2, 8, 18}));
  EXPECT_EQ(conv({8, 6, 3}, {{"padding", Ints{1}}}), make_shape({2, 8, 20}));
  EXPECT_EQ(conv({8, 6, 3}, {{"stride", Ints{3}}, {"padding", Ints{0, 2}}}), make_shape({2, 8, 7}));  // (20+2-3)/3+1
  EXPECT_EQ(conv({8, 3, 5}, {{"dilation", Ints{2}}, {"groups", int64_t{2}}}), make_shape({2, 8, 12}));

  // Symbolic lengths take conv2d's derived names.
  Dim length = g.add_symbol("L", 16, 1024);
  Value* s = g.add_input("s", TensorType{DType::F32, {Dim(1), Dim(6), length}});
  Value* y = g.add("conv1d", {s, g.add_input("k", f32({4, 6, 3}))}, {{"stride", Ints{2}}, {"padding", Ints{1}}});
  const Symbol& out = g.symbols()[y->type().shape[2].symbol()];
  EXPECT_EQ(out.name, "(L-1)/2+1");
  EXPECT_EQ(out.min, 8);
  EXPECT_EQ(out.max, 512);
  EXPECT_EQ(g.add("conv1d", {s, g.add_input("k3", f32({4, 6, 3}))}, {{"padding", Ints{1}}})->type().shape[2], length);

  auto fails = [&](Ints w, AttrMap attrs, const std::string& reason) {
    std::string msg = test::error_message([&] { g.add("conv1d", {x, g.add_input("w", f32(w))}, attrs); },
                                          ErrorCode::ShapeInference);
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 6, 20]"), std::string::npos) << msg;
  };
  fails({4, 5, 3}, {}, "x has 6 channels but w takes 5 per group x 1 groups = 5");
  fails({4, 6, 3, 3}, {}, "w must be 3-D [O, C/groups, K]");
  fails({4, 6, 30}, {}, "a window spans 30 input positions");
  fails({4, 6, 3}, {{"stride", Ints{1, 1}}}, "stride must be one positive int [s]");
  fails({4, 6, 3}, {{"padding", Ints{1, 1, 1}}}, "padding must be non-negative ints below 2^31, [p] or [left, right]");
  fails({4, 2, 3}, {{"groups", int64_t{3}}}, "groups=3 must divide w's output channels 4");
  fails({4, 3, 3}, {{"groups", int64_t{4}}}, "groups=4 must divide x's channels 6");
  fails({4, 6, 3}, {{"fused_activation", std::string("gelu")}}, "fused_activation must be");
}

TEST(OpsConv1d, CompiledGraphRunsWithPrepackedWeights) {
  std::mt19937 rng(42);
  Graph g;
  Dim length = g.add_symbol("L", 8, 64);
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(2), Dim(4), length}});
  Value* y = g.add("conv1d", {x, g.add_constant("w", test::random_tensor(DType::F32, {8, 4, 3}, rng, -1, 1)),
                              g.add_constant("b", test::random_tensor(DType::F32, {8}, rng, -1, 1))},
                   {{"padding", Ints{1}}});
  g.set_outputs({y});
  auto best = CompiledGraph::compile(g);
  auto slow = CompiledGraph::compile(g, {.kernel_policy = "reference"});
  EXPECT_NE(best->describe_plan({{2, 4, 30}}).find("[kernel onednn]"), std::string::npos);
  Tensor input = test::random_tensor(DType::F32, {2, 4, 30}, rng, -1, 1);
  Tensor got = best->run({input.view()})[0];
  Tensor expected = slow->run({input.view()})[0];
  ASSERT_EQ(got.sizes(), (Ints{2, 8, 30}));
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-5) << i;
}

}  // namespace
}  // namespace kiln
