// conv2d: type inference (symbolic dims included), the reference kernel on hand-computed values,
// and the oneDNN kernel against the reference on random inputs (error bound in kernel_harness.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "kernel_harness.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_features.h"

namespace kiln {
namespace {

using test::abs_of;
using test::create_and_run;
using test::error_message;
using test::run_instance;
using test::spec_with_constants;
using test::tensor_of;
using test::values_as_double;

TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::F32, make_shape(sizes)}; }

struct ConvCase {
  std::vector<int64_t> x, w;
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;

  AttrMap attrs() const {
    return {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
  }
  std::string name() const {
    std::ostringstream out;
    out << "x" << shape_string(x) << " w" << shape_string(w) << " stride" << shape_string(stride)
        << " padding" << shape_string(padding) << " dilation" << shape_string(dilation)
        << " groups " << groups;
    return out.str();
  }
};

// A graph holding one conv2d node; w (and bias) are constants when asked, as weights are.
struct ConvGraph {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> inputs;

  ConvGraph(const ConvCase& c, bool bias, const std::string& activation, bool w_constant,
            std::mt19937& rng, DType dtype = DType::F32) {
    inputs = {test::random_tensor(dtype, c.x, rng, -1, 1),
              test::random_tensor(dtype, c.w, rng, -1, 1)};
    std::vector<Value*> operands{graph.add_input("x", TensorType{dtype, make_shape(c.x)})};
    operands.push_back(w_constant ? graph.add_constant("w", inputs[1])
                                  : graph.add_input("w", TensorType{dtype, make_shape(c.w)}));
    if (bias) {
      inputs.push_back(test::random_tensor(dtype, {c.w[0]}, rng, -1, 1));
      operands.push_back(w_constant
                             ? graph.add_constant("bias", inputs[2])
                             : graph.add_input("bias", TensorType{dtype, make_shape({c.w[0]})}));
    }
    AttrMap attrs = c.attrs();
    attrs["fused_activation"] = activation;
    graph.add("conv2d", operands, attrs);
    node = graph.nodes().at(0);
  }
};

std::vector<Tensor> abs_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(abs_of(t));
  return out;
}

// Every epilogue (none, bias, bias + relu, relu), with w a constant (prepacked) and an input.
void check_onednn_against_reference(const ConvCase& c) {
  struct Variant {
    bool bias;
    const char* activation;
    bool w_constant;
  };
  const Variant variants[] = {{false, "none", true},
                              {true, "none", true},
                              {true, "relu", true},
                              {false, "relu", false},
                              {true, "relu", false}};
  std::mt19937 rng(static_cast<uint32_t>(c.x[1] * 131 + c.w[2] * 7 + c.groups));
  for (const Variant& v : variants) {
    const std::string what = c.name() + (v.bias ? " bias" : "") + " " + v.activation +
                             (v.w_constant ? " (w constant)" : "");
    SCOPED_TRACE(what);
    ConvGraph g(c, v.bias, v.activation, v.w_constant, rng);
    KernelSpec spec = spec_with_constants(*g.node);
    ASSERT_EQ(test::kernel_of("conv2d", "onednn").unsupported_reason(spec), "");
    Tensor expected = create_and_run("conv2d", "reference", spec, g.inputs);
    // relu(s) moves no closer to or further from relu(t) than s from t, and the reference on
    // |inputs| (all terms non-negative) is the magnitude sum itself.
    Tensor magnitude = create_and_run("conv2d", "reference", spec, abs_all(g.inputs));
    const int64_t terms = c.w[1] * c.w[2] * c.w[3] + (v.bias ? 1 : 0);
    Tensor got = create_and_run("conv2d", "onednn", spec, g.inputs);
    test::expect_within_dot_bound(got, expected, magnitude, terms, "onednn " + what);
  }
}

// bf16 x and w (fold_bf16_casts_into_conv's form), an f32 bias, an f32 or a bf16 result, in each
// layout, with the whole epilogue: oneDNN against the reference. An f32 result is within the
// dot-product bound; a bf16 one is that f32 value rounded once, so the two roundings may differ
// by one bf16 step (at most 2^-7 of the value) on top.
TEST(OpsConv, Bf16OperandKernelsMatchReference) {
  struct Bf16Case {
    ConvCase conv;
    bool residual;
  };
  const Bf16Case cases[] = {
      {{.x = {1, 16, 9, 9}, .w = {32, 16, 3, 3}, .padding = {1, 1}}, true},
      {{.x = {2, 32, 7, 7}, .w = {16, 32, 1, 1}}, false},
      {{.x = {1, 16, 8, 8}, .w = {16, 1, 3, 3}, .stride = {2, 2}, .padding = {1, 1}, .groups = 16},
       true},
      {{.x = {1, 3, 17, 17}, .w = {16, 3, 7, 7}, .stride = {2, 2}, .padding = {3, 3}}, false}};
  std::mt19937 rng(23);
  for (const Bf16Case& c : cases)
    for (DType result : {DType::F32, DType::BF16})
      for (Layout layout : {Layout::Plain, Layout::NHWC, Layout::NChw16c}) {
        const std::string what = c.conv.name() + " -> " + std::string(dtype_name(result)) + " " +
                                 layout_name(layout) + (c.residual ? " + residual" : "");
        SCOPED_TRACE(what);
        // x in y's layout where its channels allow, as the format stage leaves it.
        const Layout x_layout =
            layout_problem(make_shape(c.conv.x), layout).empty() ? layout : Layout::Plain;
        Graph g;
        std::vector<Value*> operands{
            g.add_input("x", TensorType{DType::BF16, make_shape(c.conv.x), x_layout}),
            g.add_input("w", TensorType{DType::BF16, make_shape(c.conv.w)}),
            g.add_input("bias", f32({c.conv.w[0]}))};
        std::vector<Tensor> inputs{test::random_tensor(DType::BF16, c.conv.x, rng, -1, 1),
                                   test::random_tensor(DType::BF16, c.conv.w, rng, -1, 1),
                                   test::random_tensor(DType::F32, {c.conv.w[0]}, rng, -1, 1)};
        AttrMap attrs = c.conv.attrs();
        attrs["fused_activation"] = std::string("relu");
        attrs["layout"] = std::string(layout_name(layout));
        attrs["dtype"] = std::string(dtype_name(result));
        if (c.residual) {
          const std::vector<int64_t> y_sizes =
              static_sizes(g.add_uncast("conv2d", operands, attrs)->type().shape);
          operands.push_back(g.add_input("r", TensorType{result, make_shape(y_sizes), layout}));
          inputs.push_back(test::random_tensor(result, y_sizes, rng, -1, 1));
          attrs["residual"] = true;
        }
        Node* conv = g.add_uncast("conv2d", operands, attrs)->producer();
        ASSERT_EQ(conv->output()->type().dtype, result);
        KernelSpec spec = spec_with_constants(*conv);
        // The reference on |inputs| with relu is the magnitude sum (every term non-negative).
        const std::vector<double> magnitude =
            values_as_double(create_and_run("conv2d", "reference", spec, abs_all(inputs)));
        const int64_t terms = c.conv.w[1] * c.conv.w[2] * c.conv.w[3] + 2 + (c.residual ? 1 : 0);
        test::expect_bf16_kernel_close("conv2d", "onednn", spec, inputs, [&](size_t i) {
          return static_cast<double>(terms) * std::ldexp(magnitude[i], -24);
        });
      }
}

// The residual is added after the bias, as the unfused ops add it: in every layout, bit for bit
// (y + r in f32) whether y has a buffer of its own or overwrites r's, as the memory plan gives it
// where r dies at the convolution (conv_onednn.cc).
TEST(OpsConv, ResidualIsAddedAfterTheBiasInPlaceOrNot) {
  std::mt19937 rng(5);
  for (Layout layout : {Layout::Plain, Layout::NHWC, Layout::NChw16c})
    for (int64_t k : {1, 3}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + " " + std::to_string(k) + "x" +
                   std::to_string(k));
      const std::vector<int64_t> xs{1, 32, 14, 14}, ws{64, 32, k, k}, ys{1, 64, 14, 14};
      Graph g;
      Value* x = g.add_input("x", TensorType{DType::F32, make_shape(xs), layout});
      Value* w = g.add_input("w", f32(ws));
      Value* b = g.add_input("b", f32({64}));
      Value* r = g.add_input("r", TensorType{DType::F32, make_shape(ys), layout});
      AttrMap attrs{{"layout", std::string(layout_name(layout))},
                    {"padding", std::vector<int64_t>{k / 2, k / 2}}};
      const KernelSpec plain_conv =
          spec_with_constants(*g.add_uncast("conv2d", {x, w, b}, attrs)->producer());
      attrs["fused_activation"] = std::string("relu");
      attrs["residual"] = true;
      const KernelSpec with = spec_with_constants(*g.add_uncast("conv2d", {x, w, b, r}, attrs)
                                                       ->producer());
      std::vector<Tensor> in{test::random_tensor(DType::F32, xs, rng, -1, 1),
                             test::random_tensor(DType::F32, ws, rng, -1, 1),
                             test::random_tensor(DType::F32, {64}, rng, -1, 1),
                             test::random_tensor(DType::F32, ys, rng, -1, 1)};
      // relu(conv + bias + r), with conv + bias from the same kernel without the residual.
      const Tensor y = create_and_run("conv2d", "onednn", plain_conv, {in[0], in[1], in[2]});
      Tensor want = Tensor::empty(DType::F32, ys);
      for (int64_t i = 0; i < y.numel(); ++i) {
        const float s = y.data<float>()[i] + in[3].data<float>()[i];
        want.data<float>()[i] = s > 0 ? s : 0.0f;
      }
      EXPECT_TRUE(test::same_values(create_and_run("conv2d", "onednn", with, in), want))
          << "y apart from r";
      // In place: y is r's buffer.
      auto kernel = test::kernel_of("conv2d", "onednn").create(with);
      Tensor scratch = Tensor::empty(DType::U8, {static_cast<int64_t>(kernel->scratch_bytes())});
      Tensor y_in_r = Tensor::copy_of(in[3].view());
      const void* inputs[] = {in[0].data(), in[1].data(), in[2].data(), y_in_r.data()};
      void* outputs[] = {y_in_r.data()};
      kernel->run(inputs, outputs, scratch.data());
      EXPECT_TRUE(test::same_values(y_in_r, want)) << "y in r's buffer";
    }
}

// ---------------------------------------------------------------- Winograd

// A conv2d of `c` in nChw16c with constant weights and bias, as the format stage leaves
// ResNet's 3x3 convolutions, and its inputs.
struct BlockedConv {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> inputs;

  BlockedConv(const ConvCase& c, const std::string& activation, std::mt19937& rng) {
    const Tensor w = test::random_tensor(DType::F32, c.w, rng, -1, 1);
    const Tensor bias = test::random_tensor(DType::F32, {c.w[0]}, rng, -1, 1);
    inputs = {test::random_tensor(DType::F32, c.x, rng, -1, 1), w, bias};
    AttrMap attrs = c.attrs();
    attrs["fused_activation"] = activation;
    attrs["layout"] = std::string("nChw16c");
    node = graph
               .add("conv2d",
                    {graph.add_input("x", TensorType{DType::F32, make_shape(c.x),
                                                     Layout::NChw16c}),
                     graph.add_constant("w", w), graph.add_constant("bias", bias)},
                    attrs)
               ->producer();
  }
};

// oneDNN's Winograd kernels (F(2x2, 3x3) at small batches, F(4x4, 3x3) at larger ones) against
// the reference, within the dot-product bound of the direct kernels: their transforms add
// roundings of their own, but on these inputs, as on ResNet-50's shapes (docs/ops.md), their
// error stays within it.
TEST(OpsConv, WinogradMatchesReferenceWithinTheDotBound) {
  if (!cpu::onednn_has_winograd()) GTEST_SKIP() << "oneDNN has no Winograd kernels on this CPU";
  const ConvCase cases[] = {
      {.x = {1, 16, 9, 9}, .w = {16, 16, 3, 3}, .padding = {1, 1}},
      {.x = {1, 64, 14, 14}, .w = {64, 64, 3, 3}, .padding = {1, 1}},
      {.x = {2, 32, 13, 11}, .w = {48, 32, 3, 3}, .padding = {1, 1}},
      {.x = {8, 32, 12, 12}, .w = {32, 32, 3, 3}, .padding = {1, 1}},
      {.x = {1, 16, 10, 11}, .w = {32, 16, 3, 3}},
      {.x = {1, 16, 1, 1}, .w = {16, 16, 3, 3}, .padding = {1, 1}},
      {.x = {3, 48, 7, 17}, .w = {16, 48, 3, 3}, .padding = {1, 1}}};
  std::mt19937 rng(31);
  for (const ConvCase& c : cases)
    for (const char* activation : {"none", "relu"}) {
      SCOPED_TRACE(c.name() + " " + activation);
      BlockedConv conv(c, activation, rng);
      const KernelSpec spec = spec_with_constants(*conv.node);
      ASSERT_EQ(test::kernel_of("conv2d", "onednn_winograd").unsupported_reason(spec), "");
      const Tensor expected = create_and_run("conv2d", "reference", spec, conv.inputs);
      const Tensor magnitude = create_and_run("conv2d", "reference", spec, abs_all(conv.inputs));
      const Tensor got = create_and_run("conv2d", "onednn_winograd", spec, conv.inputs);
      test::expect_within_dot_bound(got, expected, magnitude, c.w[1] * 9 + 1, "winograd");
    }
}

// The plans of a dynamic graph's shapes each create a Winograd kernel for the same weights, and
// oneDNN picks the transformed weights' format per batch (here 4 and 8 one, 3, 6 and 7 another,
// 1 and 2 each their own). Kernels of one format share one transformed copy, as direct kernels
// share blocked weights; before, every shape transformed and held its own (ResNet-50 under a
// dynamic batch grew by 140 MB a batch size).
TEST(OpsConv, WinogradKernelsOfShapesWithOneTransformShareItsWeights) {
  if (!cpu::onednn_has_winograd()) GTEST_SKIP() << "oneDNN has no Winograd kernels on this CPU";
  std::mt19937 rng(5);
  BlockedConv conv({.x = {2, 64, 14, 14}, .w = {64, 64, 3, 3}, .padding = {1, 1}}, "relu", rng);
  PreparedConstants prepared;
  KernelSpec spec = spec_with_constants(*conv.node);
  spec.prepared = &prepared;
  auto with_batch = [&](int64_t batch) {
    KernelSpec s = spec;
    s.inputs[0].shape[0] = s.outputs[0].shape[0] = Dim(batch);
    return s;
  };
  const KernelDef& winograd = test::kernel_of("conv2d", "onednn_winograd");
  auto four = winograd.create(with_batch(4));
  const size_t bytes = prepared.held_bytes();
  EXPECT_GT(bytes, conv.inputs[1].nbytes());  // 6x6 tiles of each 3x3 filter
  auto eight = winograd.create(with_batch(8));
  EXPECT_EQ(prepared.held_bytes(), bytes);
  EXPECT_EQ(prepared.entries(), 1u);
  auto one = winograd.create(with_batch(1));
  EXPECT_EQ(prepared.entries(), 2u);
}

// What the Winograd kernel doesn't take, each with its reason; the direct kernel runs those.
TEST(OpsConv, WinogradTakesDense3x3Stride1F32ConvolutionsInNChw16cOnly) {
  std::mt19937 rng(2);
  const KernelDef& winograd = test::kernel_of("conv2d", "onednn_winograd");
  auto reason = [&](const ConvCase& c, const std::string& activation = "relu") {
    BlockedConv conv(c, activation, rng);
    return winograd.unsupported_reason(spec_with_constants(*conv.node));
  };
  const ConvCase dense{.x = {1, 16, 8, 8}, .w = {16, 16, 3, 3}, .padding = {1, 1}};
  EXPECT_NE(reason({.x = {1, 16, 8, 8}, .w = {16, 16, 3, 3}, .stride = {2, 2}}), "");
  EXPECT_NE(reason({.x = {1, 16, 8, 8}, .w = {16, 16, 1, 1}}), "");
  EXPECT_NE(reason({.x = {1, 16, 8, 8}, .w = {16, 16, 3, 3}, .dilation = {2, 2}}), "");
  EXPECT_NE(reason({.x = {1, 16, 8, 8}, .w = {16, 1, 3, 3}, .padding = {1, 1}, .groups = 16}),
            "");
  EXPECT_NE(reason(dense, "gelu_erf"), "");
  EXPECT_EQ(reason({.x = {0, 16, 8, 8}, .w = {16, 16, 3, 3}, .padding = {1, 1}}),
            "zero-size tensor");
  // x and w graph inputs, plain layouts: the direct kernel's.
  ConvGraph plain(dense, true, "relu", /*w_constant=*/false, rng);
  EXPECT_NE(winograd.unsupported_reason(spec_with_constants(*plain.node)), "");
  // The detection the other Winograd tests skip by must agree with oneDNN asked for this shape,
  // and oneDNN 2.6.3 has Winograd kernels on every AVX-512 CPU (unless ONEDNN_MAX_CPU_ISA caps
  // it): a broken detection can't skip them there.
  ASSERT_EQ(cpu::onednn_has_winograd(), reason(dense).empty()) << reason(dense);
  if (cpu::has_avx512f() && !std::getenv("ONEDNN_MAX_CPU_ISA")) {
    ASSERT_TRUE(cpu::onednn_has_winograd());
  }
  if (!cpu::onednn_has_winograd()) return;
  EXPECT_EQ(reason(dense, "none"), "");
  // Where it doesn't run, creating it is a coded error, never a crash.
  ConvGraph direct_only(dense, true, "relu", /*w_constant=*/false, rng);
  EXPECT_EQ(test::error_code_of([&] {
              winograd.create(spec_with_constants(*direct_only.node));
            }),
            ErrorCode::UnsupportedOperator);
}

// NaN and inf in x: the Winograd kernel never loses a NaN the reference gives (without an
// activation), and outputs whose tiles hold none stay finite and within the bound.
TEST(OpsConv, WinogradKeepsEveryNaNTheReferenceGives) {
  if (!cpu::onednn_has_winograd()) GTEST_SKIP() << "oneDNN has no Winograd kernels on this CPU";
  std::mt19937 rng(3);
  for (int64_t batch : {1, 8}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const ConvCase c{.x = {batch, 16, 12, 12}, .w = {16, 16, 3, 3}, .padding = {1, 1}};
    BlockedConv conv(c, "none", rng);
    float* x = conv.inputs[0].data<float>();
    x[5 * 144 + 6 * 12 + 6] = std::numeric_limits<float>::quiet_NaN();
    x[9 * 144 + 1 * 12 + 2] = std::numeric_limits<float>::infinity();
    const KernelSpec spec = spec_with_constants(*conv.node);
    const Tensor expected = create_and_run("conv2d", "reference", spec, conv.inputs);
    const Tensor got = create_and_run("conv2d", "onednn_winograd", spec, conv.inputs);
    int64_t finite_both = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float g = got.data<float>()[i], r = expected.data<float>()[i];
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(g)) << "element " << i;
      }
      if (std::isfinite(g) && std::isfinite(r)) ++finite_both;
    }
    // Only the outputs of tiles whose inputs hold one of the two values may be non-finite: at
    // most four 4x4 tiles (F(4x4, 3x3)) around each, in every output channel.
    EXPECT_GE(finite_both, got.numel() - 2 * 64 * 16);
  }
}

// ---------------------------------------------------------------- reference, by hand

Tensor reference_conv(const ConvCase& c, const std::vector<Tensor>& inputs,
                      const std::string& activation = "none", DType dtype = DType::F32) {
  Graph g;
  std::vector<Value*> operands{g.add_input("x", TensorType{dtype, make_shape(c.x)}),
                               g.add_input("w", TensorType{dtype, make_shape(c.w)})};
  if (inputs.size() == 3)
    operands.push_back(g.add_input("b", TensorType{dtype, make_shape({c.w[0]})}));
  AttrMap attrs = c.attrs();
  attrs["fused_activation"] = activation;
  g.add("conv2d", operands, attrs);
  return create_and_run("conv2d", "reference", spec_with_constants(*g.nodes()[0]), inputs);
}

TEST(OpsConv, ReferenceMatchesHandComputedValues) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // x = [[1 2 3] [4 5 6] [7 8 9]], w = [[1 0] [0 1]]: y[i, j] = x[i, j] + x[i+1, j+1].
    Tensor x = tensor_of(dtype, {1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    Tensor w = tensor_of(dtype, {1, 1, 2, 2}, {1, 0, 0, 1});
    ConvCase c{{1, 1, 3, 3}, {1, 1, 2, 2}};
    EXPECT_EQ(values_as_double(reference_conv(c, {x, w}, "none", dtype)),
              (std::vector<double>{6, 8, 12, 14}));
    // Bias -10, then relu.
    Tensor b = tensor_of(dtype, {1}, {-10});
    EXPECT_EQ(values_as_double(reference_conv(c, {x, w, b}, "relu", dtype)),
              (std::vector<double>{0, 0, 2, 4}));
    // Padding 1 on every side, stride 2: windows at rows/cols -1 and 1 of x.
    //   y[i, j] = x[2i-1, 2j-1] + x[2i, 2j]: 0 + 1, 0 + 3, 0 + 7, 5 + 9.
    c.padding = {1, 1};
    c.stride = {2, 2};
    EXPECT_EQ(values_as_double(reference_conv(c, {x, w}, "none", dtype)),
              (std::vector<double>{1, 3, 7, 14}));
  }

  // Dilation 2 along W: y[j] = x[j] + x[j + 2].
  ConvCase dilated{{1, 1, 1, 5}, {1, 1, 1, 2}};
  dilated.dilation = {1, 2};
  EXPECT_EQ(values_as_double(reference_conv(dilated, {tensor_of({1, 1, 1, 5}, {1, 2, 3, 4, 5}),
                                                      tensor_of({1, 1, 1, 2}, {1, 1})})),
            (std::vector<double>{4, 6, 8}));

  // Asymmetric padding: 2 on the left only. Padded x = [0 0 1 2 3].
  ConvCase left{{1, 1, 1, 3}, {1, 1, 1, 2}};
  left.padding = {0, 2, 0, 0};
  EXPECT_EQ(values_as_double(reference_conv(
                left, {tensor_of({1, 1, 1, 3}, {1, 2, 3}), tensor_of({1, 1, 1, 2}, {1, 1})})),
            (std::vector<double>{0, 1, 3, 5}));

  // Two groups: each output channel sees its own input channel.
  ConvCase grouped{{1, 2, 1, 1}, {2, 1, 1, 1}};
  grouped.groups = 2;
  EXPECT_EQ(values_as_double(reference_conv(
                grouped, {tensor_of({1, 2, 1, 1}, {2, 3}), tensor_of({2, 1, 1, 1}, {10, 100})})),
            (std::vector<double>{20, 300}));
}

TEST(OpsConv, ReferenceHandlesZeroSizeTensors) {
  // No input channels: the output is the bias alone (then relu).
  ConvCase no_channels{{1, 0, 3, 3}, {2, 0, 2, 2}};
  EXPECT_EQ(values_as_double(
                reference_conv(no_channels,
                               {Tensor::empty(DType::F32, {1, 0, 3, 3}),
                                Tensor::empty(DType::F32, {2, 0, 2, 2}), tensor_of({2}, {-1, 2})},
                               "relu")),
            (std::vector<double>{0, 0, 0, 0, 2, 2, 2, 2}));
  // An empty batch gives an empty output; oneDNN leaves zero-size tensors to the reference.
  Graph g;
  g.add("conv2d", {g.add_input("x", f32({0, 3, 5, 5})), g.add_input("w", f32({4, 3, 3, 3}))});
  KernelSpec spec = spec_with_constants(*g.nodes()[0]);
  EXPECT_EQ(test::kernel_of("conv2d", "onednn").unsupported_reason(spec), "zero-size tensor");
  Tensor out = create_and_run(
      "conv2d", "reference", spec,
      {Tensor::empty(DType::F32, {0, 3, 5, 5}), Tensor::empty(DType::F32, {4, 3, 3, 3})});
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{0, 4, 3, 3}));
}

// ---------------------------------------------------------------- oneDNN vs reference

TEST(OpsConv, OneDnnMatchesReferenceOnStridesAndPadding) {
  check_onednn_against_reference({{2, 8, 11, 13}, {16, 8, 3, 3}, {1, 1}, {1, 1}});
  check_onednn_against_reference({{1, 5, 17, 17}, {7, 5, 3, 3}, {2, 2}, {1, 1}});
  check_onednn_against_reference({{1, 5, 16, 15}, {6, 5, 3, 3}, {2, 1}, {0, 0}});
  check_onednn_against_reference({{1, 4, 9, 10}, {5, 4, 3, 3}, {1, 1}, {0, 1, 2, 1}});
  check_onednn_against_reference({{2, 3, 8, 9}, {4, 3, 2, 3}, {2, 2}, {1, 0, 0, 2}});
}

TEST(OpsConv, OneDnnMatchesReferenceOnDilation) {
  check_onednn_against_reference({{1, 6, 13, 12}, {5, 6, 3, 3}, {1, 1}, {2, 2}, {2, 2}});
  check_onednn_against_reference({{2, 3, 15, 11}, {4, 3, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 3}});
}

TEST(OpsConv, OneDnnMatchesReferenceOnGroups) {
  // Depthwise, at stride 1 and 2; depthwise with 2 outputs per channel; 2 groups.
  check_onednn_against_reference({{2, 8, 10, 9}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8});
  check_onednn_against_reference({{1, 16, 9, 9}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 16});
  check_onednn_against_reference({{1, 4, 7, 8}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4});
  check_onednn_against_reference({{2, 6, 9, 7}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 2});
}

TEST(OpsConv, OneDnnMatchesReferenceOnKernelShapes) {
  check_onednn_against_reference({{2, 7, 5, 6}, {12, 7, 1, 1}});                   // 1x1
  check_onednn_against_reference({{1, 64, 7, 7}, {32, 64, 1, 1}, {2, 2}});         // 1x1 stride 2
  check_onednn_against_reference({{1, 3, 29, 31}, {8, 3, 7, 7}, {2, 2}, {3, 3}});  // the stem
  check_onednn_against_reference({{1, 3, 1, 9}, {2, 3, 1, 3}});                    // a single row
  check_onednn_against_reference({{3, 1, 1, 1}, {1, 1, 1, 1}});                    // 1x1x1
  check_onednn_against_reference({{1, 17, 3, 3}, {3, 17, 3, 3}});                  // kernel = input
}

// Four threads running one kernel instance five times each give the serial run's bits.
void expect_concurrent_runs_match_serial(const std::string& kernel_name, const KernelSpec& spec,
                                         const std::vector<Tensor>& inputs) {
  SCOPED_TRACE(kernel_name);
  auto kernel = test::kernel_of("conv2d", kernel_name).create(spec);
  Tensor serial = run_instance(*kernel, spec, inputs);
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 5; ++repeat) results[t] = run_instance(*kernel, spec, inputs);
    });
  for (std::thread& t : threads) t.join();
  for (const Tensor& r : results) EXPECT_TRUE(r.same_contents(serial));
}

TEST(OpsConv, ConcurrentRunsOfOneInstanceMatchSerial) {
  std::mt19937 rng(5);
  ConvCase c{{2, 16, 14, 14}, {24, 16, 3, 3}, {1, 1}, {1, 1}};
  for (bool w_constant : {false, true}) {
    SCOPED_TRACE(w_constant ? "w constant" : "w an input");
    ConvGraph g(c, true, "relu", w_constant, rng);
    for (const char* name : {"onednn", "reference"})
      expect_concurrent_runs_match_serial(name, spec_with_constants(*g.node), g.inputs);
  }
  if (!cpu::onednn_has_winograd()) return;
  BlockedConv blocked({.x = {2, 16, 14, 14}, .w = {32, 16, 3, 3}, .padding = {1, 1}}, "relu", rng);
  expect_concurrent_runs_match_serial("onednn_winograd", spec_with_constants(*blocked.node),
                                      blocked.inputs);
}

// ---------------------------------------------------------------- type inference

TEST(OpsConv, InfersOutputShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({2, 6, 17, 20}));
  auto conv = [&](std::vector<int64_t> w, AttrMap attrs) {
    return g.add("conv2d", {x, g.add_input("w", f32(w))}, std::move(attrs))->type().shape;
  };
  EXPECT_EQ(conv({8, 6, 3, 3}, {}), make_shape({2, 8, 15, 18}));
  EXPECT_EQ(conv({8, 6, 3, 3}, {{"padding", std::vector<int64_t>{1, 1}}}),
            make_shape({2, 8, 17, 20}));
  EXPECT_EQ(conv({8, 6, 3, 3}, {{"stride", std::vector<int64_t>{2, 3}},
                                {"padding", std::vector<int64_t>{0, 1, 1, 2}}}),
            make_shape({2, 8, 8, 7}));  // (17+1-3)/2+1 = 8, (20+3-3)/3+1 = 7
  EXPECT_EQ(conv({8, 6, 3, 3}, {{"dilation", std::vector<int64_t>{2, 4}}}),
            make_shape({2, 8, 13, 12}));
  EXPECT_EQ(conv({6, 1, 5, 5}, {{"groups", int64_t{6}}}), make_shape({2, 6, 13, 16}));
}

TEST(OpsConv, InfersSymbolicSpatialDims) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 8), h = g.add_symbol("H", 8, 64), w = g.add_symbol("W", 8, 64);
  Value* x = g.add_input("x", TensorType{DType::F32, {n, Dim(3), h, w}});
  Value* k = g.add_input("k", f32({4, 3, 3, 3}));
  // A "same" convolution keeps the symbols themselves.
  Value* same = g.add("conv2d", {x, k}, {{"padding", std::vector<int64_t>{1, 1}}});
  EXPECT_EQ(same->type().shape, (Shape{n, Dim(4), h, w}));
  // Stride 2: a derived symbol with the mapped range.
  Value* down =
      g.add("conv2d", {x, k},
            {{"padding", std::vector<int64_t>{1, 1}}, {"stride", std::vector<int64_t>{2, 2}}});
  const Dim oh = down->type().shape[2];
  ASSERT_FALSE(oh.is_static());
  const Symbol& s = g.symbols()[oh.symbol()];
  EXPECT_EQ(s.name, "(H-1)/2+1");
  EXPECT_EQ(s.min, 4);
  EXPECT_EQ(s.max, 32);
  // The same derivation on W is another symbol; on H again, the same one.
  EXPECT_NE(down->type().shape[3], oh);
  Value* again =
      g.add("conv2d", {x, k},
            {{"padding", std::vector<int64_t>{1, 1}}, {"stride", std::vector<int64_t>{2, 2}}});
  EXPECT_EQ(again->type().shape[2], oh);
  // Unpadded 3x3, stride 1: H-2.
  EXPECT_EQ(g.symbols()[g.add("conv2d", {x, k})->type().shape[2].symbol()].name, "H-2");
}

TEST(OpsConv, ShapeInferenceFailuresNameTheShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({1, 6, 8, 8}));
  auto fails = [&](std::vector<int64_t> w, AttrMap attrs, const std::string& reason,
                   std::vector<Value*> extra = {}) {
    Value* weights = g.add_input("w", f32(w));
    std::vector<Value*> operands{x, weights};
    operands.insert(operands.end(), extra.begin(), extra.end());
    std::string msg =
        error_message([&] { g.add("conv2d", operands, attrs); }, ErrorCode::ShapeInference);
    EXPECT_NE(msg.find("f32[1, 6, 8, 8], " + type_string(weights->type())), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  };
  fails({4, 5, 3, 3}, {}, "x has 6 channels but w takes 5 per group x 1 groups = 5");
  fails({4, 3, 3, 3}, {{"groups", int64_t{4}}}, "groups=4 must divide x's channels 6");
  fails({4, 2, 3, 3}, {{"groups", int64_t{3}}}, "groups=3 must divide w's output channels 4");
  fails({8, 1, 3, 3}, {{"groups", int64_t{2}}},
        "x has 6 channels but w takes 1 per group x 2 groups = 2");
  fails({4, 6, 3, 3}, {{"groups", int64_t{0}}}, "groups must be at least 1");
  fails({4, 6, 9, 3}, {},
        "the kernel spans 9 input rows (size 9, dilation 1) but the padded input has 8");
  fails({4, 6, 3, 3}, {{"dilation", std::vector<int64_t>{1, 4}}},
        "the kernel spans 9 input columns (size 3, dilation 4) but the padded input has 8");
  fails({4, 6, 3, 3}, {{"stride", std::vector<int64_t>{0, 1}}}, "stride must be two positive ints");
  fails({4, 6, 3, 3}, {{"padding", std::vector<int64_t>{1, 1, 1}}},
        "padding must be non-negative ints");
  fails({4, 6, 3, 3}, {{"padding", std::vector<int64_t>{-1, 0}}},
        "padding must be non-negative ints");
  fails({4, 6, 3, 3}, {{"fused_activation", std::string("gelu")}}, "fused_activation must be");
  fails({4, 6, 3, 3}, {}, "bias size and w's output channels differ: 5 vs 4",
        {g.add_input("b", f32({5}))});

  // A symbolic height whose whole range is too small for the kernel.
  Dim h = g.add_symbol("H", 1, 4);
  Value* small = g.add_input("small", TensorType{DType::F32, {Dim(1), Dim(6), h, Dim(8)}});
  std::string msg =
      error_message([&] { g.add("conv2d", {small, g.add_input("w5", f32({4, 6, 5, 3}))}); },
                    ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("the padded input has at most 4"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln
