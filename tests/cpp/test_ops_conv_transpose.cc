// conv_transpose2d and conv_transpose3d: type inference (symbolic dims included), the reference
// kernel against hand-computed values (checked against PyTorch 2.13), and the oneDNN kernel
// against the reference on random inputs (the dot-product error bound of kernel_harness.h).
#include <sstream>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::type_of;
using Ints = std::vector<int64_t>;

TensorType f32(const Ints& sizes) { return type_of(DType::F32, sizes); }

struct Case {
  Ints x, w;  // w is [C, O/groups, (KD,) KH, KW]; 5-D tensors make a conv_transpose3d
  Ints stride{1}, padding{0}, output_padding{0}, dilation{1};
  int64_t groups = 1;

  AttrMap attrs() const {
    return {{"stride", stride}, {"padding", padding}, {"output_padding", output_padding},
            {"dilation", dilation}, {"groups", groups}};
  }
  const char* op() const { return x.size() == 5 ? "conv_transpose3d" : "conv_transpose2d"; }
  std::string name() const {
    std::ostringstream out;
    out << "x" << shape_string(x) << " w" << shape_string(w) << " stride" << shape_string(stride)
        << " padding" << shape_string(padding) << " output_padding" << shape_string(output_padding)
        << " dilation" << shape_string(dilation) << " groups " << groups;
    return out.str();
  }
};

// A graph holding one conv_transpose2d node; w and bias are constants when asked, as weights are.
struct CaseGraph {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> inputs;

  CaseGraph(const Case& c, bool bias, bool constant, std::mt19937& rng, DType dtype = DType::F32) {
    inputs = {test::random_tensor(dtype, c.x, rng, -1, 1), test::random_tensor(dtype, c.w, rng, -1, 1)};
    std::vector<Value*> operands{graph.add_input("x", type_of(dtype, c.x))};
    operands.push_back(constant ? graph.add_constant("w", inputs[1]) : graph.add_input("w", type_of(dtype, c.w)));
    if (bias) {
      const Ints size{c.w[1] * c.groups};
      inputs.push_back(test::random_tensor(dtype, size, rng, -1, 1));
      operands.push_back(constant ? graph.add_constant("b", inputs[2]) : graph.add_input("b", type_of(dtype, size)));
    }
    graph.add(c.op(), operands, c.attrs());
    node = graph.nodes().at(0);
  }
};

Tensor run_reference(const Case& c, const std::vector<Tensor>& inputs) {
  Graph g;
  const DType dtype = inputs[0].dtype();
  std::vector<Value*> operands{g.add_input("x", type_of(dtype, c.x)), g.add_input("w", type_of(dtype, c.w))};
  if (inputs.size() == 3) operands.push_back(g.add_input("b", type_of(dtype, inputs[2].sizes())));
  g.add(c.op(), operands, c.attrs());
  return test::create_and_run(c.op(), "reference", test::spec_with_constants(*g.nodes()[0]), inputs);
}

std::vector<double> values(const Tensor& t) { return test::values_as_double(t); }

// ---------------------------------------------------------------- reference, by hand

TEST(OpsConvTranspose, ReferenceMatchesHandComputedValues) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // x = [[1 2] [3 4]] scatters x[i, j] * w into the 2x2 block at (i, j): overlapping sums.
    Tensor x = test::tensor_of(dtype, {1, 1, 2, 2}, {1, 2, 3, 4});
    Tensor w = test::tensor_of(dtype, {1, 1, 2, 2}, {1, 10, 100, 1000});
    Case c{{1, 1, 2, 2}, {1, 1, 2, 2}};
    EXPECT_EQ(values(run_reference(c, {x, w})),
              (std::vector<double>{1, 12, 20, 103, 1234, 2040, 300, 3400, 4000}));
    // Stride 2: the blocks tile without overlap.
    c.stride = {2};
    EXPECT_EQ(values(run_reference(c, {x, w})),
              (std::vector<double>{1, 10, 2, 20, 100, 1000, 200, 2000, 3, 30, 4, 40, 300, 3000, 400, 4000}));
    // Padding 1 crops a row and column on each side; output_padding 1 gives one back at the end.
    c.padding = {1};
    c.output_padding = {1};
    EXPECT_EQ(values(run_reference(c, {x, w})),
              (std::vector<double>{1000, 200, 2000, 30, 4, 40, 3000, 400, 4000}));
  }
  // output_padding adds rows and columns no input reaches: zeros (the bias alone).
  Case spread{{1, 1, 2, 2}, {1, 1, 1, 1}, {2}, {0}, {1}};
  EXPECT_EQ(values(run_reference(spread, {test::tensor_of(DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4}),
                                          test::tensor_of(DType::F32, {1, 1, 1, 1}, {1})})),
            (std::vector<double>{1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}));
  // Dilation 2 along W: taps 2 apart, y = [1, 2, 1+3, 2, 3].
  Case dilated{{1, 1, 1, 3}, {1, 1, 1, 2}, {1}, {0}, {0}, {1, 2}};
  EXPECT_EQ(values(run_reference(dilated, {test::tensor_of(DType::F32, {1, 1, 1, 3}, {1, 2, 3}),
                                           test::tensor_of(DType::F32, {1, 1, 1, 2}, {1, 1})})),
            (std::vector<double>{1, 2, 4, 2, 3}));
  // Two groups with a bias: each output channel sees its own input channel.
  Case grouped{{1, 2, 1, 1}, {2, 1, 1, 1}};
  grouped.groups = 2;
  EXPECT_EQ(values(run_reference(grouped, {test::tensor_of(DType::F32, {1, 2, 1, 1}, {2, 3}),
                                           test::tensor_of(DType::F32, {2, 1, 1, 1}, {10, 100}),
                                           test::tensor_of(DType::F32, {2}, {1, -1})})),
            (std::vector<double>{21, 299}));
  // One group, w [C=2, O=2]: y[o] = sum_c x[c] * w[c, o].
  Case mixed{{1, 2, 1, 1}, {2, 2, 1, 1}};
  EXPECT_EQ(values(run_reference(mixed, {test::tensor_of(DType::F32, {1, 2, 1, 1}, {2, 3}),
                                         test::tensor_of(DType::F32, {2, 2, 1, 1}, {1, 2, 3, 4})})),
            (std::vector<double>{11, 16}));
}

TEST(OpsConvTranspose, ReferenceHandlesZeroSizeTensors) {
  Case no_channels{{1, 0, 2, 2}, {0, 2, 2, 2}};
  EXPECT_EQ(values(run_reference(no_channels, {Tensor::empty(DType::F32, {1, 0, 2, 2}),
                                               Tensor::empty(DType::F32, {0, 2, 2, 2}),
                                               test::tensor_of(DType::F32, {2}, {-1, 2})})),
            (std::vector<double>{-1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  Graph g;
  g.add("conv_transpose2d", {g.add_input("x", f32({0, 3, 5, 5})), g.add_input("w", f32({3, 4, 3, 3}))});
  const KernelSpec spec = test::spec_with_constants(*g.nodes()[0]);
  EXPECT_EQ(test::kernel_of("conv_transpose2d", "onednn").unsupported_reason(spec), "zero-size tensor");
  EXPECT_EQ(test::create_and_run("conv_transpose2d", "reference", spec,
                                 {Tensor::empty(DType::F32, {0, 3, 5, 5}), Tensor::empty(DType::F32, {3, 4, 3, 3})})
                .sizes(),
            (Ints{0, 4, 7, 7}));
}

// ---------------------------------------------------------------- oneDNN vs reference

// With and without bias, w (and bias) constants (prepacked) and plain inputs.
void check_onednn(const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.x[1] * 31 + c.w[2] * 7 + c.groups));
  for (bool bias : {false, true}) {
    for (bool constant : {false, true}) {
      SCOPED_TRACE(c.name() + (bias ? " bias" : "") + (constant ? " (constants)" : ""));
      CaseGraph g(c, bias, constant, rng);
      const KernelSpec spec = test::spec_with_constants(*g.node);
      ASSERT_EQ(test::kernel_of(c.op(), "onednn").unsupported_reason(spec), "");
      Tensor expected = test::create_and_run(c.op(), "reference", spec, g.inputs);
      std::vector<Tensor> magnitudes;
      for (const Tensor& t : g.inputs) magnitudes.push_back(test::abs_of(t));
      Tensor magnitude = test::create_and_run(c.op(), "reference", spec, magnitudes);
      Tensor got = test::create_and_run(c.op(), "onednn", spec, g.inputs);
      int64_t terms = c.x[1] / c.groups;
      for (size_t d = 2; d < c.w.size(); ++d) terms *= c.w[d];
      terms += bias ? 1 : 0;
      test::expect_within_dot_bound(got, expected, magnitude, terms, "onednn");
    }
  }
}

TEST(OpsConvTranspose, OneDnnMatchesReferenceOnStridesAndPadding) {
  check_onednn({{1, 8, 7, 9}, {8, 4, 3, 3}});
  check_onednn({{2, 16, 8, 8}, {16, 8, 4, 4}, {2}, {1}});                 // the DCGAN/U-Net up-step
  check_onednn({{1, 6, 5, 7}, {6, 3, 2, 2}, {2}, {0}});                   // 2x2 stride 2
  check_onednn({{1, 4, 6, 5}, {4, 5, 3, 3}, {2}, {1}, {1}});               // output_padding 1
  check_onednn({{1, 3, 5, 6}, {3, 2, 3, 2}, {3, 2}, {0, 1}, {2, 1}});     // beyond the padding
  check_onednn({{2, 5, 4, 4}, {5, 3, 5, 5}, {1}, {2}});
}

TEST(OpsConvTranspose, OneDnnMatchesReferenceOnDilationAndGroups) {
  check_onednn({{1, 4, 6, 6}, {4, 3, 3, 3}, {1}, {1}, {0}, {2}});
  check_onednn({{1, 3, 5, 7}, {3, 2, 3, 2}, {2}, {1}, {1}, {2, 3}});
  check_onednn({{1, 8, 6, 5}, {8, 1, 3, 3}, {2}, {1}, {1}, {1}, 8});      // depthwise
  check_onednn({{2, 6, 5, 5}, {6, 2, 3, 3}, {1}, {0}, {0}, {1}, 3});      // 3 groups
  check_onednn({{1, 4, 1, 1}, {4, 2, 1, 1}});                             // 1x1
}

TEST(OpsConvTranspose, ThreeDReferenceMatchesHandComputedValues) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // x [1, 1, 2, 1, 1] = [1 2] along the depth, w a 2x1x1 kernel [1 10]: overlapping along the
    // depth only, y = [1, 12, 20]; with stride 2 the taps tile: [1, 10, 2, 20].
    Tensor x = test::tensor_of(dtype, {1, 1, 2, 1, 1}, {1, 2});
    Tensor w = test::tensor_of(dtype, {1, 1, 2, 1, 1}, {1, 10});
    Case c{{1, 1, 2, 1, 1}, {1, 1, 2, 1, 1}};
    EXPECT_EQ(values(run_reference(c, {x, w})), (std::vector<double>{1, 12, 20}));
    c.stride = {2, 1, 1};
    EXPECT_EQ(values(run_reference(c, {x, w})), (std::vector<double>{1, 10, 2, 20}));
  }
  // A 2x2x2 kernel of powers of ten on one input 3: each output is 3 times its tap.
  Case cube{{1, 1, 1, 1, 1}, {1, 1, 2, 2, 2}};
  EXPECT_EQ(values(run_reference(cube, {test::tensor_of(DType::F32, {1, 1, 1, 1, 1}, {3}),
                                        test::tensor_of(DType::F32, {1, 1, 2, 2, 2},
                                                        {1, 2, 3, 4, 5, 6, 7, 8})})),
            (std::vector<double>{3, 6, 9, 12, 15, 18, 21, 24}));
  // Padding along the depth crops the first and last planes; output_padding 1 on the width
  // adds a column that only the bias reaches; two groups keep their channels apart.
  Case cropped{{1, 2, 2, 1, 1}, {2, 1, 2, 1, 1}, {1, 1, 2}, {1, 0, 0}, {0, 0, 1}};
  cropped.groups = 2;
  EXPECT_EQ(values(run_reference(cropped, {test::tensor_of(DType::F32, {1, 2, 2, 1, 1}, {1, 2, 3, 4}),
                                           test::tensor_of(DType::F32, {2, 1, 2, 1, 1}, {1, 10, 100, 1000}),
                                           test::tensor_of(DType::F32, {2}, {0.5, -0.5})})),
            // channel 0: depth planes [1, 12, 20] cropped to [12], width [12, 0] + 0.5;
            // channel 1: [300, 3400, 4000] cropped to [3400], + -0.5.
            (std::vector<double>{12.5, 0.5, 3399.5, -0.5}));
}

TEST(OpsConvTranspose, ThreeDOneDnnMatchesReference) {
  check_onednn({{1, 4, 3, 4, 5}, {4, 3, 3, 3, 3}});
  check_onednn({{2, 8, 4, 4, 4}, {8, 4, 2, 2, 2}, {2}});                  // the 3-D U-Net up-step
  check_onednn({{1, 6, 3, 5, 4}, {6, 2, 3, 2, 3}, {1, 2, 3}, {1, 0, 1}, {0, 1, 2}});
  check_onednn({{1, 4, 3, 3, 3}, {4, 3, 3, 3, 3}, {1}, {2}, {0}, {2, 1, 1}});  // dilation
  check_onednn({{1, 6, 2, 3, 3}, {6, 2, 3, 3, 1}, {2, 1, 1}, {1}, {1, 0, 0}, {1}, 3});  // groups
  check_onednn({{1, 4, 3, 3, 3}, {4, 1, 2, 2, 2}, {2}, {0}, {0}, {1}, 4});  // depthwise
}

// ---------------------------------------------------------------- type inference

TEST(OpsConvTranspose, InfersOutputShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({2, 6, 5, 7}));
  auto shape = [&](Ints w, AttrMap attrs) {
    return g.add("conv_transpose2d", {x, g.add_input("w", f32(w))}, std::move(attrs))->type().shape;
  };
  EXPECT_EQ(shape({6, 4, 3, 3}, {}), make_shape({2, 4, 7, 9}));
  EXPECT_EQ(shape({6, 4, 4, 4}, {{"stride", Ints{2}}, {"padding", Ints{1}}}), make_shape({2, 4, 10, 14}));
  // (5-1)*2 - 2 + 3 + 1 = 10; (7-1)*3 - 0 + 2*(3-1)+1 + 2 = 25.
  EXPECT_EQ(shape({6, 4, 3, 3}, {{"stride", Ints{2, 3}}, {"padding", Ints{1, 0}}, {"output_padding", Ints{1, 2}},
                                 {"dilation", Ints{1, 2}}}),
            make_shape({2, 4, 10, 25}));
  EXPECT_EQ(shape({6, 2, 3, 3}, {{"groups", int64_t{3}}}), make_shape({2, 6, 7, 9}));
}

TEST(OpsConvTranspose, InfersThreeDOutputShapes) {
  Graph g;
  Dim t = g.add_symbol("T", 2, 16);
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(1), Dim(6), t, Dim(5), Dim(7)}});
  auto shape = [&](Ints w, AttrMap attrs) {
    return g.add("conv_transpose3d", {x, g.add_input("w", f32(w))}, std::move(attrs))->type().shape;
  };
  // Depth (T-1)*2 - 2 + 4 = 2T; rows (5-1)*1 + 3 = 7 (+ output_padding 0); columns
  // (7-1)*3 - 0 + 2*(3-1)+1 + 2 = 25.
  const Shape s = shape({6, 4, 4, 3, 3}, {{"stride", Ints{2, 1, 3}}, {"padding", Ints{1, 0, 0}},
                                          {"output_padding", Ints{0, 0, 2}}, {"dilation", Ints{1, 1, 2}}});
  ASSERT_FALSE(s[2].is_static());
  EXPECT_EQ(g.symbols()[s[2].symbol()].name, "T*2");
  EXPECT_EQ(s[3], Dim(7));
  EXPECT_EQ(s[4], Dim(25));
  EXPECT_EQ(shape({6, 2, 1, 1, 1}, {{"groups", int64_t{3}}})[1], Dim(6));
  std::string msg = test::error_message(
      [&] { g.add("conv_transpose3d", {x, g.add_input("w2", f32({6, 2, 3, 3}))}); },
      ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("w must be 5-D [C, O/groups, KD, KH, KW]"), std::string::npos) << msg;
  msg = test::error_message(
      [&] { g.add("conv_transpose3d", {x, g.add_input("w3", f32({6, 2, 3, 3, 3}))}, {{"stride", Ints{1, 2}}}); },
      ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("stride must be one int or three [d, h, w], each positive"), std::string::npos) << msg;
  msg = test::error_message(
      [&] { g.add("conv_transpose3d", {x, g.add_input("w4", f32({6, 2, 3, 3, 3}))}, {{"padding", Ints{0, 4, 0}}}); },
      ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("rows from 5 input rows"), std::string::npos) << msg;
}

TEST(OpsConvTranspose, InfersSymbolicSpatialDims) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 8), h = g.add_symbol("H", 4, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {n, Dim(3), h, Dim(8)}});
  Value* w = g.add_input("w", f32({3, 2, 4, 4}));
  Value* up = g.add("conv_transpose2d", {x, w}, {{"stride", Ints{2}}, {"padding", Ints{1}}});
  const Dim oh = up->type().shape[2];
  ASSERT_FALSE(oh.is_static());
  const Symbol& s = g.symbols()[oh.symbol()];
  EXPECT_EQ(s.name, "H*2");  // (H-1)*2 - 2 + 4 = 2H
  EXPECT_EQ(s.min, 8);
  EXPECT_EQ(s.max, 64);
  EXPECT_EQ(up->type().shape[0], n);
  EXPECT_EQ(up->type().shape[3], Dim(16));
  // A 3x3 stride-1 transposed convolution with padding 1 keeps the symbol.
  EXPECT_EQ(g.add("conv_transpose2d", {x, g.add_input("w3", f32({3, 2, 3, 3}))},
                  {{"padding", Ints{1}}})->type().shape[2], h);
}

TEST(OpsConvTranspose, ShapeInferenceFailuresNameTheShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({1, 6, 4, 4}));
  auto fails = [&](Ints w, AttrMap attrs, const std::string& reason, std::vector<Value*> extra = {}) {
    Value* weights = g.add_input("w", f32(w));
    std::vector<Value*> operands{x, weights};
    operands.insert(operands.end(), extra.begin(), extra.end());
    std::string msg = test::error_message([&] { g.add("conv_transpose2d", operands, attrs); },
                                          ErrorCode::ShapeInference);
    EXPECT_NE(msg.find("f32[1, 6, 4, 4], " + type_string(weights->type())), std::string::npos) << msg;
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  };
  fails({5, 2, 3, 3}, {}, "x's channels and w's input channels (dim 0) differ: 6 vs 5");
  fails({6, 2, 3, 3}, {{"groups", int64_t{4}}}, "groups=4 must divide the input channels 6");
  fails({6, 2, 3, 3}, {{"groups", int64_t{0}}}, "groups must be at least 1");
  fails({6, 2, 3, 3}, {{"stride", Ints{2}}, {"output_padding", Ints{2}}},
        "output_padding 2 must be smaller than the stride (2) or the dilation (1)");
  fails({6, 2, 3, 3}, {{"padding", Ints{4}}}, "the output would have -2 rows from 4 input rows");
  fails({6, 2, 3, 3}, {{"stride", Ints{1, 0}}}, "stride must be one int or two [h, w], each positive");
  fails({6, 2, 3, 3}, {{"padding", Ints{-1}}}, "padding must be one int or two [h, w], each non-negative");
  fails({6, 2, 3, 3}, {}, "bias size and the output channels differ: 3 vs 2", {g.add_input("b", f32({3}))});
  fails({6, 2, 3}, {}, "w must be 4-D");
  Value* ints = g.add_input("i", type_of(DType::I32, {1, 6, 4, 4}));
  EXPECT_NE(test::error_message([&] { g.add("conv_transpose2d", {ints, g.add_input("wi", type_of(DType::I32, {6, 2, 3, 3}))}); },
                                ErrorCode::ShapeInference)
                .find("conv_transpose2d takes f32 or f64, not i32"),
            std::string::npos);
}

// ---------------------------------------------------------------- through the executor

TEST(OpsConvTranspose, CompiledGraphRunsWithPrepackedWeights) {
  std::mt19937 rng(11);
  Graph g;
  Dim batch = g.add_symbol("N", 1, 4);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(8), Dim(6), Dim(6)}});
  Tensor w = test::random_tensor(DType::F32, {8, 4, 4, 4}, rng, -1, 1);
  Tensor b = test::random_tensor(DType::F32, {4}, rng, -1, 1);
  g.set_outputs({g.add("conv_transpose2d", {x, g.add_constant("w", w), g.add_constant("b", b)},
                       {{"stride", Ints{2}}, {"padding", Ints{1}}})});
  auto best = CompiledGraph::compile(g);
  auto slow = CompiledGraph::compile(g, {.kernel_policy = "reference"});
  EXPECT_NE(best->describe_plan({{2, 8, 6, 6}}).find("[kernel onednn]"), std::string::npos);
  Tensor input = test::random_tensor(DType::F32, {2, 8, 6, 6}, rng, -1, 1);
  Tensor got = best->run({input.view()})[0];
  Tensor expected = slow->run({input.view()})[0];
  ASSERT_EQ(got.sizes(), (Ints{2, 4, 12, 12}));
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-5) << i;
}

}  // namespace
}  // namespace kiln
