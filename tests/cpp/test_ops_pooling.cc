// max_pool2d, avg_pool2d and adaptive_avg_pool2d: type inference (symbolic dims included), the
// reference kernels against hand-computed values (checked against PyTorch 2.13), and the oneDNN
// and AVX2 kernels against the reference on random inputs.
#include <cmath>
#include <limits>
#include <thread>

#include "kernel_harness.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/pooling.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using Ints = std::vector<int64_t>;

std::vector<float> floats(const Tensor& t) { return test::values_of<float>(t); }

// 1, 2, ..., n as an f32 tensor of the given sizes.
Tensor iota(const Ints& sizes) {
  Tensor t = Tensor::empty(DType::F32, sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i + 1);
  return t;
}

Tensor reference(const OneNode& n, const std::vector<Tensor>& inputs, int threads = 1) {
  return test::run_kernel(*n.node, "reference", inputs, threads)[0];
}

// ---------------------------------------------------------------- type inference

TEST(OpsPooling, InfersOutputShapes) {
  auto shape = [](const std::string& op, Ints x, AttrMap attrs) {
    return OneNode(op, {type_of(DType::F32, x)}, std::move(attrs)).output_type().shape;
  };
  const AttrMap k3s2p1 = {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}};
  EXPECT_EQ(shape("max_pool2d", {1, 64, 112, 112}, k3s2p1), make_shape({1, 64, 56, 56}));
  // stride defaults to the kernel; [C, H, W] without a batch.
  EXPECT_EQ(shape("max_pool2d", {3, 7, 9}, {{"kernel_size", Ints{2, 3}}}), make_shape({3, 3, 3}));
  // Dilation 2 spreads a 3-window over 5 rows; the stride is still the kernel size, 3.
  EXPECT_EQ(shape("max_pool2d", {1, 1, 9, 9}, {{"kernel_size", Ints{3}}, {"dilation", Ints{2}}}),
            make_shape({1, 1, 2, 2}));
  // ceil_mode: one more window where the last one starts inside the input...
  EXPECT_EQ(shape("max_pool2d", {1, 1, 6, 6}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}},
                                               {"ceil_mode", true}}),
            make_shape({1, 1, 3, 3}));
  // ...but not where it would start in the right padding: (5 + 2 - 2) / 2 rounded up is 3, and
  // window 3 would start at 3 * 2 - 1 = 5, past the input.
  EXPECT_EQ(shape("avg_pool2d", {1, 1, 5, 5}, {{"kernel_size", Ints{2}}, {"stride", Ints{2}},
                                               {"padding", Ints{1}}, {"ceil_mode", true}}),
            make_shape({1, 1, 3, 3}));
  // ceil_mode gives a window even where the input is smaller than the kernel by less than a stride.
  EXPECT_EQ(shape("max_pool2d", {1, 1, 2, 2}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}},
                                               {"ceil_mode", true}}),
            make_shape({1, 1, 1, 1}));
  EXPECT_EQ(shape("adaptive_avg_pool2d", {2, 8, 7, 5}, {{"output_size", Ints{3, 1}}}),
            make_shape({2, 8, 3, 1}));
  EXPECT_EQ(shape("adaptive_avg_pool2d", {8, 7, 5}, {{"output_size", Ints{1}}}),
            make_shape({8, 1, 1}));
  EXPECT_EQ(shape("max_pool2d", {0, 3, 4, 4}, {{"kernel_size", Ints{2}}}), make_shape({0, 3, 2, 2}));
}

TEST(OpsPooling, InfersSymbolicSpatialDims) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 8), h = g.add_symbol("H", 8, 64), w = g.add_symbol("W", 8, 64);
  Value* x = g.add_input("x", TensorType{DType::F32, {n, Dim(3), h, w}});
  // Floor mode: the same derived symbol as a conv2d with the same window (conv's naming).
  Value* pooled = g.add("max_pool2d", {x}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}},
                                            {"padding", Ints{1}}});
  Value* conv = g.add("conv2d", {x, g.add_input("k", type_of(DType::F32, {4, 3, 3, 3}))},
                      {{"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}});
  EXPECT_EQ(pooled->type().shape[2], conv->type().shape[2]);
  EXPECT_EQ(pooled->type().shape[0], n);
  const Symbol& s = g.symbols()[pooled->type().shape[2].symbol()];
  EXPECT_EQ(s.name, "(H-1)/2+1");
  EXPECT_EQ(s.min, 4);
  EXPECT_EQ(s.max, 32);
  // A "same" window keeps the symbol.
  EXPECT_EQ(g.add("max_pool2d", {x}, {{"kernel_size", Ints{3}}, {"stride", Ints{1}},
                                      {"padding", Ints{1}}})->type().shape[3], w);
  // Ceil mode names its own function: ceil((H-2)/2)+1, and with the start-inside rule in play
  // (padding + stride > window) the min with (H+padding-1)/2+1.
  Value* ceil = g.add("max_pool2d", {x}, {{"kernel_size", Ints{2}}, {"stride", Ints{2}},
                                          {"ceil_mode", true}});
  EXPECT_EQ(g.symbols()[ceil->type().shape[2].symbol()].name, "ceil((H-2)/2)+1");
  Value* ruled = g.add("avg_pool2d", {x}, {{"kernel_size", Ints{2}}, {"stride", Ints{2}},
                                           {"padding", Ints{1}}, {"ceil_mode", true}});
  const Symbol& r = g.symbols()[ruled->type().shape[2].symbol()];
  EXPECT_EQ(r.name, "min(ceil((H)/2),(H)/2)+1");
  EXPECT_EQ(r.min, 5);   // 8 rows: windows at -1, 1, 3, 5, 7 (8 + 1 = 9 > 7)
  EXPECT_EQ(r.max, 33);
  // Adaptive pooling fixes the spatial dims and keeps the others.
  EXPECT_EQ(g.add("adaptive_avg_pool2d", {x}, {{"output_size", Ints{1, 1}}})->type().shape,
            (Shape{n, Dim(3), Dim(1), Dim(1)}));
}

TEST(OpsPooling, ShapeInferenceFailuresNameTheProblem) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {1, 2, 5, 5}));
  // Schema errors (attributes missing, unknown or of the wrong kind) name the node; shape errors
  // also show the input types.
  auto fails = [&](const std::string& op, Value* input, AttrMap attrs, const std::string& reason) {
    std::string msg = test::error_message([&] { g.add(op, {input}, attrs); }, ErrorCode::ShapeInference);
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
    EXPECT_NE(msg.find("node '" + op), std::string::npos) << msg;
    if (input == x && msg.find("attribute '") == std::string::npos) {
      EXPECT_NE(msg.find("f32[1, 2, 5, 5]"), std::string::npos) << msg;
    }
  };
  fails("max_pool2d", x, {}, "needs the attribute 'kernel_size'");
  fails("max_pool2d", x, {{"kernel_size", Ints{3}}, {"padding", Ints{2}}},
        "padding 2 is more than half the window (3 elements: kernel 3, dilation 1)");
  fails("max_pool2d", x, {{"kernel_size", Ints{6}}, {"padding", Ints{0}}},
        "no window fits: a window spans 6 input rows (kernel 6, dilation 1) but the input has 5 rows");
  fails("max_pool2d", x, {{"kernel_size", Ints{3}}, {"dilation", Ints{1, 3}}},
        "a window spans 7 input columns");
  fails("max_pool2d", x, {{"kernel_size", Ints{0}}}, "kernel_size must be one int or two [h, w], each positive");
  fails("max_pool2d", x, {{"kernel_size", Ints{2, 2, 2}}}, "kernel_size must be one int or two");
  fails("avg_pool2d", x, {{"kernel_size", Ints{2}}, {"stride", Ints{0}}}, "stride must be empty, one int");
  fails("avg_pool2d", x, {{"kernel_size", Ints{2}}, {"dilation", Ints{2}}}, "has no attribute 'dilation'");
  fails("adaptive_avg_pool2d", x, {{"output_size", Ints{-1, 2}}}, "output_size must be one int or two");
  fails("max_pool2d", g.add_input("v", type_of(DType::F32, {5, 5})), {{"kernel_size", Ints{2}}},
        "x must be [N, C, H, W] or [C, H, W]");
  fails("max_pool2d", g.add_input("e", type_of(DType::F32, {1, 0, 5, 5})), {{"kernel_size", Ints{2}}},
        "x's dims other than the batch must not be empty");
  fails("avg_pool2d", g.add_input("i", type_of(DType::I32, {1, 1, 4, 4})), {{"kernel_size", Ints{2}}},
        "avg_pool2d takes f32, f64, bf16, i64, not i32");
  fails("max_pool2d", g.add_input("b", type_of(DType::Bool, {1, 1, 4, 4})), {{"kernel_size", Ints{2}}},
        "max_pool2d takes f32, f64, bf16, i64, i32, i16, i8, u8, not bool");
  fails("adaptive_avg_pool2d", g.add_input("l", type_of(DType::I64, {1, 1, 4, 4})),
        {{"output_size", Ints{2}}}, "adaptive_avg_pool2d takes f32, f64, bf16, not i64");
  // A symbolic height too small even at its largest.
  Value* small = g.add_input("s", TensorType{DType::F32, {Dim(1), Dim(1), g.add_symbol("H", 1, 2), Dim(8)}});
  fails("max_pool2d", small, {{"kernel_size", Ints{3}}}, "but the input has at most 2 rows");
}

// ---------------------------------------------------------------- reference kernels, by hand

TEST(OpsPooling, ReferenceMaxPoolMatchesHandComputedValues) {
  // x = [[1 2 3 4] [5 6 7 8] [9 10 11 12] [13 14 15 16]].
  const Tensor x = iota({1, 1, 4, 4});
  OneNode k2("max_pool2d", {type_of(DType::F32, {1, 1, 4, 4})}, {{"kernel_size", Ints{2}}});
  EXPECT_EQ(floats(reference(k2, {x})), (std::vector<float>{6, 8, 14, 16}));
  // 3x3 windows at rows/cols -1 and 1: the padding never wins.
  OneNode padded("max_pool2d", {type_of(DType::F32, {1, 1, 4, 4})},
                 {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
  EXPECT_EQ(floats(reference(padded, {x})), (std::vector<float>{6, 8, 14, 16}));
  // Dilation 2: the window {0, 2} x {0, 2} has max x[2, 2] = 11.
  OneNode dilated("max_pool2d", {type_of(DType::F32, {1, 1, 4, 4})},
                  {{"kernel_size", Ints{2}}, {"dilation", Ints{2}}});
  EXPECT_EQ(floats(reference(dilated, {x})), (std::vector<float>{11}));
  // ceil_mode on 5x5 with padding 1: windows start at -1, 1, 3 (5 would start past the input).
  OneNode ceil("max_pool2d", {type_of(DType::F32, {1, 1, 5, 5})},
               {{"kernel_size", Ints{2}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"ceil_mode", true}});
  EXPECT_EQ(floats(reference(ceil, {iota({1, 1, 5, 5})})),
            (std::vector<float>{1, 3, 5, 11, 13, 15, 21, 23, 25}));
  // NaN wins over everything; -inf stays when alone with smaller values.
  OneNode pairs("max_pool2d", {type_of(DType::F32, {1, 3, 1, 2})}, {{"kernel_size", Ints{1, 2}}});
  std::vector<float> got = floats(reference(
      pairs, {test::tensor_of({1, 3, 1, 2}, {1, kNaN, kNaN, -kInf, -kInf, -kInf})}));
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
  EXPECT_EQ(got[2], -kInf);
  // Integers: the maximum even when it is the dtype's lowest value.
  OneNode ints("max_pool2d", {type_of(DType::I8, {1, 2, 1, 2})}, {{"kernel_size", Ints{1, 2}}});
  Tensor i8 = Tensor::empty(DType::I8, {1, 2, 1, 2});
  const int8_t i8_values[] = {-100, -5, -128, -128};
  std::copy(std::begin(i8_values), std::end(i8_values), i8.data<int8_t>());
  EXPECT_EQ(test::values_of<int8_t>(reference(ints, {i8})), (std::vector<int8_t>{-5, -128}));
}

// Indices are flat within the input plane; ties, NaNs and -inf follow PyTorch 2.13's CPU kernel.
TEST(OpsPooling, MaxPoolWithIndicesPointsAtTheElementPyTorchTakes) {
  auto run = [](const Ints& sizes, const std::vector<float>& values, AttrMap attrs) {
    OneNode n("max_pool2d_with_indices", {type_of(DType::F32, sizes)}, std::move(attrs));
    EXPECT_EQ(n.node->output(1)->type().dtype, DType::I64);
    EXPECT_EQ(n.node->output(1)->type().shape, n.output_type().shape);
    std::vector<Tensor> out = test::run_kernel(*n.node, "reference",
                                               {test::tensor_of(sizes, values)}, 2);
    return std::make_pair(floats(out[0]), test::values_of<int64_t>(out[1]));
  };
  // 3x3 windows, stride 2, padding 1 over iota 4x4: maxima at (1, 1), (1, 3), (3, 1), (3, 3).
  std::vector<float> x(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  auto [y, idx] = run({1, 1, 4, 4}, x,
                      {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
  EXPECT_EQ(y, (std::vector<float>{6, 8, 14, 16}));
  EXPECT_EQ(idx, (std::vector<int64_t>{5, 7, 13, 15}));
  // Windows of 4 over a row, one plane each: the first of equal maxima; the last NaN; a window
  // of -inf gives its first element; -inf loses to anything finite.
  auto [y2, idx2] = run({4, 1, 1, 4},
                        {2, 7, 7, 1, kNaN, 3, kNaN, 9, -kInf, -kInf, -kInf, -kInf, -kInf, -5, -kInf,
                         -7},
                        {{"kernel_size", Ints{1, 4}}});
  EXPECT_EQ(idx2, (std::vector<int64_t>{1, 2, 0, 1}));
  EXPECT_EQ(y2[0], 7);
  EXPECT_TRUE(std::isnan(y2[1]));
  EXPECT_EQ(y2[2], -kInf);
  EXPECT_EQ(y2[3], -5);
  // Dilation and ceil_mode on [C, H, W]: 2x2 windows dilated 2 over 5x5 at stride 2 start at
  // 0 and 2 (a third would need column 6); the window at 2 reads rows/columns 2 and 4.
  std::vector<float> x3(25);
  for (size_t i = 0; i < x3.size(); ++i) x3[i] = static_cast<float>((i * 7) % 11);
  auto [y3, idx3] = run({1, 5, 5}, x3,
                        {{"kernel_size", Ints{2}}, {"stride", Ints{2}}, {"dilation", Ints{2}},
                         {"ceil_mode", true}});
  ASSERT_EQ(idx3.size(), 4u);
  for (size_t o = 0; o < 4; ++o) EXPECT_EQ(y3[o], x3[static_cast<size_t>(idx3[o])]);
  // Window (0, 0) reads 0, 2, 10, 12: values 0, 3, 4, 7 → index 12.
  EXPECT_EQ(idx3[0], 12);
}

// 3-d windows number their elements (depth * H + row) * W + column within the plane; adaptive
// windows are PyTorch's [floor(o * in / out), ceil((o + 1) * in / out)), unequal and overlapping.
TEST(OpsPooling, MaxPool3dAndAdaptiveWithIndicesTakeEachWindowsElement) {
  auto run = [](const std::string& op, const Ints& sizes, const std::vector<float>& values,
                AttrMap attrs) {
    OneNode n(op, {type_of(DType::F32, sizes)}, std::move(attrs));
    EXPECT_EQ(n.node->output(1)->type().dtype, DType::I64);
    EXPECT_EQ(n.node->output(1)->type().shape, n.output_type().shape);
    std::vector<Tensor> out = test::run_kernel(*n.node, "reference",
                                               {test::tensor_of(sizes, values)}, 2);
    return std::make_pair(floats(out[0]), test::values_of<int64_t>(out[1]));
  };
  std::vector<float> cube(27);  // 3x3x3, value = index
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = static_cast<float>(i);
  // 2x2x2 windows at stride 1: each window's last corner.
  auto [y, idx] = run("max_pool3d_with_indices", {1, 1, 3, 3, 3}, cube,
                      {{"kernel_size", Ints{2}}, {"stride", Ints{1}}});
  EXPECT_EQ(idx, (std::vector<int64_t>{13, 14, 16, 17, 22, 23, 25, 26}));
  EXPECT_EQ(y, (std::vector<float>{13, 14, 16, 17, 22, 23, 25, 26}));
  // Padding 1, stride 2 on [C, D, H, W]: the 8 windows clip to the cube's corners' 2x2x2 blocks.
  auto [y2, idx2] = run("max_pool3d_with_indices", {1, 3, 3, 3}, cube,
                        {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
  EXPECT_EQ(idx2, (std::vector<int64_t>{13, 14, 16, 17, 22, 23, 25, 26}));
  // Dilation 2 along the depth only: window (0, 0, 0) reads depths 0 and 2.
  auto [y3, idx3] = run("max_pool3d_with_indices", {1, 1, 3, 3, 3}, cube,
                        {{"kernel_size", Ints{2, 1, 1}}, {"dilation", Ints{2, 1, 1}}});
  EXPECT_EQ(idx3.size(), 9u);
  EXPECT_EQ(idx3[0], 18);
  EXPECT_EQ(idx3[8], 26);
  // 5 columns into 3 windows: [0, 2), [1, 4), [3, 5). The largest of each, ties to the first.
  auto [y4, idx4] = run("adaptive_max_pool2d", {1, 1, 1, 5}, {4, 9, 9, 1, 2},
                        {{"output_size", Ints{1, 3}}});
  EXPECT_EQ(idx4, (std::vector<int64_t>{1, 1, 4}));
  EXPECT_EQ(y4, (std::vector<float>{9, 9, 2}));
  // More outputs than inputs: 2 rows into 3 windows [0, 1), [0, 2), [1, 2); a NaN wins.
  auto [y5, idx5] = run("adaptive_max_pool2d", {1, 2, 1}, {kNaN, 3}, {{"output_size", Ints{3, 1}}});
  EXPECT_EQ(idx5, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_TRUE(std::isnan(y5[0]) && std::isnan(y5[1]));
  EXPECT_EQ(y5[2], 3);
  // 3-d: one window over the whole cube, and [1, 1, 2] splitting the columns 0-1 and 1-2.
  auto [y6, idx6] = run("adaptive_max_pool3d", {1, 1, 3, 3, 3}, cube, {{"output_size", Ints{1}}});
  EXPECT_EQ(idx6, (std::vector<int64_t>{26}));
  auto [y7, idx7] = run("adaptive_max_pool3d", {1, 3, 3, 3}, cube, {{"output_size", Ints{1, 1, 2}}});
  EXPECT_EQ(idx7, (std::vector<int64_t>{25, 26}));
}

TEST(OpsPooling, MaxPool3dAndAdaptiveWithIndicesRejectWhatPyTorchRejects) {
  auto fails = [](const std::string& op, DType dtype, const Ints& sizes, AttrMap attrs) {
    EXPECT_THROW(OneNode(op, {type_of(dtype, sizes)}, std::move(attrs)), Error) << op;
  };
  fails("max_pool3d_with_indices", DType::F32, {1, 4, 4}, {{"kernel_size", Ints{2}}});
  fails("max_pool3d_with_indices", DType::I64, {1, 1, 4, 4, 4}, {{"kernel_size", Ints{2}}});
  fails("max_pool3d_with_indices", DType::F32, {1, 1, 4, 4, 4}, {{"kernel_size", Ints{2, 2}}});
  fails("max_pool3d_with_indices", DType::F32, {1, 1, 4, 4, 4},
        {{"kernel_size", Ints{2}}, {"padding", Ints{2}}});
  fails("max_pool3d_with_indices", DType::F32, {1, 1, 1, 4, 4}, {{"kernel_size", Ints{2}}});
  fails("adaptive_max_pool2d", DType::I32, {1, 1, 4, 4}, {{"output_size", Ints{2}}});
  fails("adaptive_max_pool2d", DType::F32, {1, 0, 4, 4}, {{"output_size", Ints{2}}});
  fails("adaptive_max_pool2d", DType::F32, {1, 1, 4, 4}, {{"output_size", Ints{2, 2, 2}}});
  fails("adaptive_max_pool3d", DType::F32, {1, 4, 4}, {{"output_size", Ints{2, 2, 2}}});
  fails("adaptive_max_pool3d", DType::F32, {1, 1, 4, 4, 4}, {{"output_size", Ints{-1}}});
}

TEST(OpsPooling, MaxPoolWithIndicesTakesFloatsOnly) {
  EXPECT_THROW(OneNode("max_pool2d_with_indices", {type_of(DType::I32, {1, 1, 4, 4})},
                       {{"kernel_size", Ints{2}}}),
               Error);
}

TEST(OpsPooling, ReferenceAvgPoolMatchesHandComputedValues) {
  const Tensor x5 = iota({1, 1, 5, 5});
  const AttrMap ceil_padded = {{"kernel_size", Ints{2}}, {"stride", Ints{2}}, {"padding", Ints{1}},
                               {"ceil_mode", true}};
  // Including the padding: the corner window holds x[0, 0] = 1 and three zeros.
  OneNode include("avg_pool2d", {type_of(DType::F32, {1, 1, 5, 5})}, ceil_padded);
  EXPECT_EQ(floats(reference(include, {x5})),
            (std::vector<float>{0.25f, 1.25f, 2.25f, 4.25f, 10, 12, 9.25f, 20, 22}));
  AttrMap exclude_attrs = ceil_padded;
  exclude_attrs["count_include_pad"] = false;
  OneNode exclude("avg_pool2d", {type_of(DType::F32, {1, 1, 5, 5})}, exclude_attrs);
  EXPECT_EQ(floats(reference(exclude, {x5})),
            (std::vector<float>{1, 2.5f, 4.5f, 8.5f, 10, 12, 18.5f, 20, 22}));
  // A ceil-mode window overhanging the input (no padding): counted up to the input's end, so the
  // bottom-right window {2, 3} x {2, 3} of [[1..4] [6..9] [11..14] [16..19]] divides by 4.
  Tensor x4 = test::tensor_of({1, 1, 4, 4}, {1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14, 16, 17, 18, 19});
  OneNode overhang("avg_pool2d", {type_of(DType::F32, {1, 1, 4, 4})},
                   {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"ceil_mode", true}});
  EXPECT_EQ(floats(reference(overhang, {x4})), (std::vector<float>{7, 8.5f, 14.5f, 16}));
  OneNode divisor("avg_pool2d", {type_of(DType::F32, {1, 1, 4, 4})},
                  {{"kernel_size", Ints{2}}, {"divisor_override", int64_t{3}}});
  EXPECT_EQ(floats(reference(divisor, {iota({1, 1, 4, 4})})),
            (std::vector<float>{14.0f / 3, 22.0f / 3, 46.0f / 3, 18}));
  // Integer averages truncate toward zero: -3/4 -> 0, -5/2 -> -2.
  Tensor xi = Tensor::empty(DType::I64, {1, 1, 2, 2});
  const int64_t xi_values[] = {-7, 2, 3, -1};
  std::copy(std::begin(xi_values), std::end(xi_values), xi.data<int64_t>());
  OneNode ints("avg_pool2d", {type_of(DType::I64, {1, 1, 2, 2})}, {{"kernel_size", Ints{2}}});
  EXPECT_EQ(test::values_of<int64_t>(reference(ints, {xi})), (std::vector<int64_t>{0}));
  OneNode rows("avg_pool2d", {type_of(DType::I64, {1, 1, 2, 2})}, {{"kernel_size", Ints{1, 2}}});
  EXPECT_EQ(test::values_of<int64_t>(reference(rows, {xi})), (std::vector<int64_t>{-2, 1}));
  // Dividing the lowest i64 by -1 wraps around instead of trapping.
  Tensor lowest = Tensor::empty(DType::I64, {1, 1, 1, 1});
  lowest.data<int64_t>()[0] = std::numeric_limits<int64_t>::lowest();
  OneNode negate("avg_pool2d", {type_of(DType::I64, {1, 1, 1, 1})},
                 {{"kernel_size", Ints{1}}, {"divisor_override", int64_t{-1}}});
  EXPECT_EQ(test::values_of<int64_t>(reference(negate, {lowest})),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::lowest()}));
}

TEST(OpsPooling, ReferenceAdaptiveAvgPoolMatchesHandComputedValues) {
  // 5 -> 3: windows [0, 2), [1, 4), [3, 5) along each axis (they overlap).
  OneNode node("adaptive_avg_pool2d", {type_of(DType::F32, {1, 1, 5, 5})}, {{"output_size", Ints{3}}});
  EXPECT_EQ(floats(reference(node, {iota({1, 1, 5, 5})})),
            (std::vector<float>{4, 5.5f, 7, 11.5f, 13, 14.5f, 19, 20.5f, 22}));
  // Upsampling: 2 -> 3 windows [0, 1), [0, 2), [1, 2).
  OneNode up("adaptive_avg_pool2d", {type_of(DType::F64, {1, 1, 1, 2})}, {{"output_size", Ints{1, 3}}});
  Tensor x = test::tensor_of(DType::F64, {1, 1, 1, 2}, {1, 4});
  EXPECT_EQ(test::values_of<double>(reference(up, {x})), (std::vector<double>{1, 2.5, 4}));
  // An output of size 0 is empty.
  OneNode empty("adaptive_avg_pool2d", {type_of(DType::F32, {1, 2, 3, 3})}, {{"output_size", Ints{0, 2}}});
  EXPECT_EQ(reference(empty, {iota({1, 2, 3, 3})}).numel(), 0);
}

// ---------------------------------------------------------------- optimized kernels

struct PoolCase {
  Ints x;
  AttrMap attrs;
};

// An average of n terms summed in f32 in any order is within the bound of a dot product of n
// terms (kernel_harness.h) of the reference, which sums in double. Where the terms' magnitudes
// reach f32's range an f32 sum may overflow (PyTorch's too) where the double one does not: any
// infinity or NaN is accepted there. Elsewhere NaN and infinities must match the reference's.
void expect_average_within_bound(const Tensor& got, const Tensor& expected, const Tensor& magnitude,
                                 int64_t n) {
  const double u = std::ldexp(1.0, -24), tiny = static_cast<double>(n) * std::numeric_limits<float>::min();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.data<float>()[i], e = expected.data<float>()[i];
    const double m = magnitude.data<float>()[i];
    if (!std::isfinite(g) && m * static_cast<double>(n) >= std::numeric_limits<float>::max()) continue;
    if (!std::isfinite(e)) {
      EXPECT_TRUE(std::isnan(e) ? std::isnan(g) : g == e) << "element " << i << ": " << g << " vs " << e;
      continue;
    }
    ASSERT_LE(std::fabs(double{g} - double{e}), static_cast<double>(n + 2) * u * m + tiny)
        << "element " << i << ": " << g << " vs " << e;
  }
}

bool avx2_available() {
  OneNode n("max_pool2d", {type_of(DType::F32, {1, 1, 2, 2})}, {{"kernel_size", Ints{2}}});
  return test::has_kernel("max_pool2d", "avx2") && test::unsupported_reason(*n.node, "avx2").empty();
}

// An optimized kernel of `op` against the reference: max is exact (it selects an element), an
// average is within the rounding bound of a sum of window-many terms.
void check_kernel(const std::string& op, const std::string& kernel, const PoolCase& c,
                  std::mt19937& rng, bool extremes = false) {
  SCOPED_TRACE(op + " " + kernel + " on " + shape_string(c.x) + (extremes ? " with extremes" : ""));
  OneNode node(op, {type_of(DType::F32, c.x)}, c.attrs);
  ASSERT_EQ(test::unsupported_reason(*node.node, kernel), "");
  Tensor x = test::random_tensor(DType::F32, c.x, rng);
  if (extremes) test::sprinkle_extremes(x, rng);
  const KernelSpec spec = test::spec_with_constants(*node.node);
  Tensor expected = test::create_and_run(op, "reference", spec, {x});
  Tensor got = test::create_and_run(op, kernel, spec, {x});
  if (op == "max_pool2d") {
    EXPECT_TRUE(test::same_values(got, expected));
    return;
  }
  Tensor magnitude = test::create_and_run(op, "reference", spec, {test::abs_of(x)});
  const Ints k = op == "adaptive_avg_pool2d" ? Ints{c.x[2] / node.output_type().shape[2].size(),
                                                    c.x[3] / node.output_type().shape[3].size()}
                                             : std::get<Ints>(c.attrs.at("kernel_size"));
  expect_average_within_bound(got, expected, magnitude, k[0] * k.back());
}

TEST(OpsPooling, Avx2MaxPoolMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(3);
  auto attrs = [](Ints k, Ints s, Ints p, Ints d = {1}, bool ceil = false) {
    return AttrMap{{"kernel_size", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"ceil_mode", ceil}};
  };
  const std::vector<PoolCase> cases = {
      {{1, 64, 112, 112}, attrs({3}, {2}, {1})},            // ResNet's stem: stride-2 loads
      {{2, 3, 17, 13}, attrs({2}, {2}, {0})},
      {{1, 4, 19, 37}, attrs({3}, {1}, {1})},               // contiguous loads
      {{1, 2, 20, 20}, attrs({5}, {1}, {2})},               // SPPF
      {{1, 5, 7, 7}, attrs({3, 2}, {2, 1}, {1, 0}, {1}, true)},
      {{1, 2, 5, 5}, attrs({2}, {2}, {1}, {1}, true)},
      {{1, 1, 2, 2}, attrs({3}, {2}, {0}, {1}, true)},
      {{1, 3, 11, 40}, attrs({3}, {1}, {1}, {2, 3})},       // dilation
      {{1, 3, 9, 50}, attrs({2}, {3}, {1})},                // stride 3: gathers
      {{3, 7, 1, 1}, attrs({1}, {1}, {0})},
      {{7, 9, 9}, attrs({3}, {3}, {0}, {1}, true)},
      {{1, 1, 1, 17}, attrs({1, 3}, {1, 2}, {0, 1})},
      {{1, 1, 3, 1000000 / 3}, attrs({1, 2}, {1, 2}, {0})},
  };
  for (const PoolCase& c : cases)
    for (bool extremes : {false, true}) check_kernel("max_pool2d", "avx2", c, rng, extremes);
}

// A bf16 max or average pooling (what fold_bf16_casts_into_widening_kernels makes) is each
// kernel's f32 result on the widened input rounded to bf16, the bits of the casts it replaces,
// NaNs included: in every layout, through each kernel that takes it, and through the 8-lane max
// loop on AVX-512 CPUs too. A maximum is the f32 reference's whatever the kernel.
TEST(OpsPooling, Bf16PoolingIsTheF32OneBetweenCasts) {
  std::mt19937 rng(11);
  const std::vector<AttrMap> windows = {
      {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}},
      {{"kernel_size", Ints{2, 3}}, {"ceil_mode", true}},
      {{"kernel_size", Ints{3}}, {"stride", Ints{1}}, {"padding", Ints{1}}}};
  const std::vector<std::pair<Layout, int64_t>> layouts = {
      {Layout::Plain, 5},   {Layout::NHWC, 3},      {Layout::NHWC, 20},
      {Layout::NHWC, 64},   {Layout::NChw8c, 24},   {Layout::NChw16c, 32}};
  for (const char* op : {"max_pool2d", "avg_pool2d"}) {
    for (const auto& [layout, channels] : layouts) {
      for (const AttrMap& window : windows) {
        AttrMap attrs = window;
        if (std::string(op) == "max_pool2d" && &window == &windows[1]) attrs["dilation"] = Ints{2, 1};
        if (std::string(op) == "avg_pool2d" && &window == &windows[2]) attrs["count_include_pad"] = false;
        SCOPED_TRACE(std::string(op) + " in " + layout_name(layout) + " with " +
                     std::to_string(channels) + " channels, window " +
                     std::to_string(&window - windows.data()));
        const Ints sizes{2, channels, 11, 9};
        // bf16 values, and the same widened, both stored in the layout (the widening and the
        // rounding are elementwise: they commute with it).
        const auto [x, wide] = test::random_bf16_and_widened(sizes, rng);
        const cpu::Nchw dims{sizes[0], sizes[1], sizes[2], sizes[3]};
        Tensor stored = Tensor::empty(DType::BF16, sizes), wide_stored = Tensor::empty(DType::F32, sizes);
        cpu::convert_layout(dims, Layout::Plain, x.data<cpu::BFloat16>(), layout,
                            stored.data<cpu::BFloat16>(), 1);
        cpu::convert_layout(dims, Layout::Plain, wide.data<float>(), layout,
                            wide_stored.data<float>(), 1);

        // The bf16 node as the pass adds it, uncast, and the f32 one, both in the layout.
        Graph g;
        const Node& node =
            *g.add_uncast(op, {g.add_input("x", TensorType{DType::BF16, make_shape(sizes), layout})},
                          attrs)->producer();
        const Node& f32_node =
            *g.add(op, {g.add_input("w", TensorType{DType::F32, make_shape(sizes), layout})}, attrs)
                 ->producer();
        ASSERT_EQ(node.outputs()[0]->type().layout, layout);
        const Tensor f32_reference = test::run_kernel(f32_node, "reference", {wide_stored})[0];
        std::vector<std::string> kernels = {"reference"};
        if (avx2_available()) {
          if (layout == Layout::Plain) {
            EXPECT_EQ(test::unsupported_reason(node, "avx2"),
                      "bf16 runs in channels-inner layouts (nhwc, nChw8c, nChw16c) only");
          } else {
            kernels.push_back("avx2");
          }
        }
        for (const std::string& kernel : kernels) {
          SCOPED_TRACE(kernel);
          const Tensor got = test::run_kernel(node, kernel, {stored}, 2)[0];
          EXPECT_TRUE(test::is_rounded_to_bf16(got, test::run_kernel(f32_node, kernel, {wide_stored})[0]));
          if (std::string(op) == "max_pool2d") {
            EXPECT_TRUE(test::is_rounded_to_bf16(got, f32_reference));
          }
        }
#ifdef KILN_X86
        // The registry runs the 16-lane max loop on AVX-512 CPUs: the 8-lane one directly too.
        if (std::string(op) == "max_pool2d" && layout != Layout::Plain && cpu::has_avx2_fma()) {
          SCOPED_TRACE("8-lane loop");
          const auto pair = [&](const char* name, Ints fallback) {
            const Ints v = attrs.count(name) ? std::get<Ints>(attrs.at(name)) : fallback;
            return std::pair<int64_t, int64_t>{v[0], v.back()};
          };
          const auto [kh, kw] = pair("kernel_size", {1});
          const auto [sh, sw] = pair("stride", {kh, kw});
          const auto [ph, pw] = pair("padding", {0});
          const auto [dh, dw] = pair("dilation", {1});
          const Ints out = f32_reference.sizes();
          const cpu::Pool2dGeometry geometry{
              .layout = layout, .n = sizes[0], .c = sizes[1], .h = sizes[2], .w = sizes[3],
              .oh = out[2], .ow = out[3], .kh = kh, .kw = kw, .stride_h = sh, .stride_w = sw,
              .dilation_h = dh, .dilation_w = dw, .pad_h = ph, .pad_w = pw};
          Tensor got = Tensor::empty(DType::BF16, out);
          cpu::avx2::max_pool_channels_inner(geometry, stored.data<cpu::BFloat16>(),
                                             got.data<cpu::BFloat16>(), 0,
                                             cpu::channels_inner(geometry).outer * geometry.oh);
          EXPECT_TRUE(test::is_rounded_to_bf16(got, f32_reference));
        }
#endif
      }
    }
  }
}

// bf16 adaptive average pooling: each kernel that takes it (the global average's and the
// reference) gives its f32 result on the widened input, rounded; the f32-only kernels say so.
TEST(OpsPooling, Bf16AdaptiveAverageIsTheF32OneBetweenCasts) {
  std::mt19937 rng(12);
  for (const Ints& output_size : {Ints{1, 1}, Ints{2, 3}, Ints{4, 4}}) {
    SCOPED_TRACE("output_size " + std::to_string(output_size[0]) + "x" +
                 std::to_string(output_size[1]));
    const Ints sizes{2, 19, 7, 9};
    const auto [x, wide] = test::random_bf16_and_widened(sizes, rng);
    Graph g;
    const AttrMap attrs{{"output_size", output_size}};
    const Node& node = *g.add_uncast("adaptive_avg_pool2d",
                                     {g.add_input("x", type_of(DType::BF16, sizes))}, attrs)
                            ->producer();
    ASSERT_EQ(node.output()->type().dtype, DType::BF16);
    const Node& f32_node =
        *g.add("adaptive_avg_pool2d", {g.add_input("w", type_of(DType::F32, sizes))}, attrs)
             ->producer();
    std::vector<std::string> kernels = {"reference"};
    if (avx2_available() && output_size == Ints{1, 1}) kernels.push_back("global_avx2");
    for (const std::string& kernel : kernels) {
      SCOPED_TRACE(kernel);
      ASSERT_EQ(test::unsupported_reason(node, kernel), "");
      EXPECT_TRUE(test::is_rounded_to_bf16(test::run_kernel(node, kernel, {x}, 2)[0],
                                           test::run_kernel(f32_node, kernel, {wide})[0]));
    }
    for (const char* f32_only : {"onednn", "avx2"})
      if (test::has_kernel("adaptive_avg_pool2d", f32_only)) {
        EXPECT_NE(test::unsupported_reason(node, f32_only), "") << f32_only;
      }
  }
}

// oneDNN runs plain-NCHW pooling with a jit kernel only on AVX-512 CPUs, elsewhere it steps
// aside; it also declines divisors it can't express (tested apart).
bool onednn_may_decline(const std::string& reason) {
  return reason.rfind("oneDNN has only its reference implementation", 0) == 0 ||
         reason == "divisor_override is set" ||
         reason == "a ceil_mode window overhangs the padding and count_include_pad is set";
}

// Every optimized average kernel that can run the case, against the reference.
void check_average_kernels(const std::string& op, const PoolCase& c, std::mt19937& rng) {
  OneNode node(op, {type_of(DType::F32, c.x)}, c.attrs);
  const std::string onednn = test::unsupported_reason(*node.node, "onednn");
  if (onednn.empty()) {
    check_kernel(op, "onednn", c, rng, false);
  } else {
    EXPECT_TRUE(onednn_may_decline(onednn)) << onednn;
  }
  if (avx2_available()) {
    check_kernel(op, "avx2", c, rng, false);
    check_kernel(op, "avx2", c, rng, true);
  }
}

TEST(OpsPooling, AvgPoolKernelsMatchReference) {
  std::mt19937 rng(5);
  for (bool include : {true, false}) {
    AttrMap common = {{"count_include_pad", include}};
    auto with = [&](AttrMap a) {
      a.insert(common.begin(), common.end());
      return a;
    };
    check_average_kernels("avg_pool2d", {{1, 64, 56, 56}, with({{"kernel_size", Ints{3}}, {"stride", Ints{1}}, {"padding", Ints{1}}})}, rng);
    check_average_kernels("avg_pool2d", {{2, 3, 17, 13}, with({{"kernel_size", Ints{2}}})}, rng);
    check_average_kernels("avg_pool2d", {{1, 5, 9, 7}, with({{"kernel_size", Ints{3, 2}}, {"stride", Ints{2, 1}}, {"padding", Ints{1, 0}}})}, rng);
    check_average_kernels("avg_pool2d", {{1, 3, 1, 1}, with({{"kernel_size", Ints{1}}})}, rng);
    // ceil_mode windows within the declared padding, and overhanging it.
    check_average_kernels("avg_pool2d", {{1, 2, 5, 5}, with({{"kernel_size", Ints{2}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"ceil_mode", true}})}, rng);
    check_average_kernels("avg_pool2d", {{1, 3, 8, 10}, with({{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"ceil_mode", true}})}, rng);
    check_average_kernels("avg_pool2d", {{1, 3, 17, 40}, with({{"kernel_size", Ints{5}}, {"stride", Ints{3}}, {"padding", Ints{2}}, {"ceil_mode", true}})}, rng);
  }
  // About a million elements, once.
  check_average_kernels("avg_pool2d", {{1, 2, 3, 1000000 / 6}, {{"kernel_size", Ints{1, 3}}, {"stride", Ints{1, 2}}, {"padding", Ints{0, 1}}}}, rng);
  const AttrMap divisor = {{"kernel_size", Ints{2}}, {"divisor_override", int64_t{3}}};
  check_average_kernels("avg_pool2d", {{1, 3, 8, 10}, divisor}, rng);
  // oneDNN divides by the whole window: it declines where PyTorch counts less of an overhanging one.
  OneNode counted("avg_pool2d", {type_of(DType::F32, {1, 3, 8, 10})},
                  {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"ceil_mode", true}});
  EXPECT_EQ(test::unsupported_reason(*counted.node, "onednn"),
            "a ceil_mode window overhangs the padding and count_include_pad is set");
  OneNode overridden("avg_pool2d", {type_of(DType::F32, {1, 3, 8, 10})}, divisor);
  EXPECT_EQ(test::unsupported_reason(*overridden.node, "onednn"), "divisor_override is set");
}

TEST(OpsPooling, AdaptiveAvgPoolKernelsMatchReferenceWhereSizesDivide) {
  std::mt19937 rng(6);
  check_average_kernels("adaptive_avg_pool2d", {{1, 16, 14, 12}, {{"output_size", Ints{7, 3}}}}, rng);
  check_average_kernels("adaptive_avg_pool2d", {{2, 3, 6, 6}, {{"output_size", Ints{6}}}}, rng);
  OneNode uneven("adaptive_avg_pool2d", {type_of(DType::F32, {1, 1, 5, 5})}, {{"output_size", Ints{3}}});
  EXPECT_NE(test::unsupported_reason(*uneven.node, "onednn"), "");
  if (test::has_kernel("adaptive_avg_pool2d", "avx2") && cpu::has_avx2_fma()) {
    EXPECT_EQ(test::unsupported_reason(*uneven.node, "avx2"),
              "the output size does not divide the input size (windows of varying size)");
  }
}

TEST(OpsPooling, OneDnnDeclinesZeroSizeAndOtherDTypes) {
  OneNode empty("avg_pool2d", {type_of(DType::F32, {0, 3, 4, 4})}, {{"kernel_size", Ints{2}}});
  EXPECT_EQ(test::unsupported_reason(*empty.node, "onednn"), "zero-size tensor");
  EXPECT_EQ(reference(empty, {Tensor::empty(DType::F32, {0, 3, 4, 4})}).sizes(), (Ints{0, 3, 2, 2}));
  OneNode f64("avg_pool2d", {type_of(DType::F64, {1, 3, 4, 4})}, {{"kernel_size", Ints{2}}});
  EXPECT_EQ(test::unsupported_reason(*f64.node, "onednn"), "f32 only");
  if (test::has_kernel("avg_pool2d", "avx2")) {
    EXPECT_NE(test::unsupported_reason(*f64.node, "avx2"), "");
  }
}

// Two sums of the same n floats in double, in different orders, round to the same f32 mean or
// neighbouring ones, unless values of very different magnitudes cancel: then each sum is still
// within n * 2^-53 of sum |x| of the exact value.
void expect_mean_within_bound(const Tensor& got, const Tensor& expected, const Tensor& magnitude,
                              int64_t n) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.data<float>()[i], e = expected.data<float>()[i];
    if (test::ulp_distance(g, e) <= 1) continue;
    EXPECT_LE(std::fabs(double{g} - double{e}),
              2 * static_cast<double>(n) * std::ldexp(1.0, -53) * magnitude.data<float>()[i])
        << "element " << i << ": " << g << " vs " << e;
  }
}

TEST(OpsPooling, GlobalAveragePoolMatchesReference) {
  if (!test::has_kernel("adaptive_avg_pool2d", "global_avx2")) GTEST_SKIP() << "not an x86 build";
  std::mt19937 rng(7);
  const std::vector<Ints> cases = {{1, 1, 1, 1}, {1, 3, 1, 1}, {2, 7, 1, 7}, {1, 17, 17, 1},
                                   {1, 2048, 7, 7}, {1, 1, 1024, 1024}, {3, 5, 3, 5}, {0, 4, 2, 2}};
  for (const Ints& sizes : cases) {
    OneNode node("adaptive_avg_pool2d", {type_of(DType::F32, sizes)}, {{"output_size", Ints{1}}});
    if (!test::unsupported_reason(*node.node, "global_avx2").empty()) GTEST_SKIP() << "no AVX2+FMA";
    for (bool extremes : {false, true}) {
      SCOPED_TRACE(shape_string(sizes) + (extremes ? " with extremes" : ""));
      Tensor x = test::random_tensor(DType::F32, sizes, rng, -3, 5);
      if (extremes) test::sprinkle_extremes(x, rng);
      Tensor expected = reference(node, {x});
      Tensor got = test::run_kernel(*node.node, "global_avx2", {x}, 2)[0];
      expect_mean_within_bound(got, expected, reference(node, {test::abs_of(x)}), sizes[2] * sizes[3]);
    }
  }
  OneNode not_global("adaptive_avg_pool2d", {type_of(DType::F32, {1, 1, 4, 4})}, {{"output_size", Ints{2}}});
  EXPECT_EQ(test::unsupported_reason(*not_global.node, "global_avx2"), "output_size is not [1, 1]");
}

// One kernel instance serves concurrent runs, each with its own scratch (the AVX2 kernels keep
// their row reductions there, oneDNN its scratchpad).
TEST(OpsPooling, ConcurrentRunsOfOneInstanceMatchSerial) {
  std::mt19937 rng(9);
  Tensor x = test::random_tensor(DType::F32, {2, 16, 28, 28}, rng);
  for (const char* op : {"max_pool2d", "avg_pool2d"}) {
    OneNode node(op, {type_of(DType::F32, {2, 16, 28, 28})},
                 {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
    const KernelSpec spec = test::spec_with_constants(*node.node, 2);
    for (const KernelDef& def : OpRegistry::instance().find(op)->kernels) {
      if (!def.unsupported_reason(spec).empty()) continue;
      SCOPED_TRACE(std::string(op) + " " + def.name);
      auto kernel = def.create(spec);
      const Tensor serial = test::run_instance(*kernel, spec, {x});
      std::vector<Tensor> results(4);
      std::vector<std::thread> threads;
      for (size_t t = 0; t < results.size(); ++t)
        threads.emplace_back([&, t] {
          for (int repeat = 0; repeat < 5; ++repeat) results[t] = test::run_instance(*kernel, spec, {x});
        });
      for (std::thread& t : threads) t.join();
      for (const Tensor& r : results) EXPECT_TRUE(r.same_contents(serial));
    }
  }
}

// ---------------------------------------------------------------- through the executor

TEST(OpsPooling, CompiledGraphRunsEveryPoolingOp) {
  Graph g;
  Dim batch = g.add_symbol("N", 1, 4);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(8), Dim(16), Dim(16)}});
  Value* m = g.add("max_pool2d", {x}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
  Value* a = g.add("avg_pool2d", {m}, {{"kernel_size", Ints{2}}, {"ceil_mode", true}});
  Value* p = g.add("adaptive_avg_pool2d", {a}, {{"output_size", Ints{1}}});
  g.set_outputs({p, a});
  auto best = CompiledGraph::compile(g);
  auto slow = CompiledGraph::compile(g, {.kernel_policy = "reference"});
  std::mt19937 rng(8);
  Tensor input = test::random_tensor(DType::F32, {3, 8, 16, 16}, rng);
  std::vector<Tensor> got = best->run({input.view()});
  std::vector<Tensor> expected = slow->run({input.view()});
  ASSERT_EQ(got[0].sizes(), (Ints{3, 8, 1, 1}));
  ASSERT_EQ(got[1].sizes(), (Ints{3, 8, 4, 4}));
  for (size_t i = 0; i < 2; ++i)
    for (int64_t e = 0; e < got[i].numel(); ++e)
      EXPECT_NEAR(got[i].data<float>()[e], expected[i].data<float>()[e], 1e-6);
  if (avx2_available()) {
    EXPECT_EQ(best->describe_plan({{3, 8, 16, 16}}).find("[kernel reference]"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
