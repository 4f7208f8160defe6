// upsample_nearest2d and upsample_bilinear2d: type inference (symbolic dims included), the
// reference kernels against values from PyTorch 2.13 (whose index arithmetic they reproduce bit
// for bit), and the table kernels against the reference kernels.
#include <cmath>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;
using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

TensorType f32(const Ints& sizes) { return type_of(DType::F32, sizes); }

// A [1, 1, 1, n] row of values.
Tensor row(const std::vector<float>& values) {
  return test::tensor_of({1, 1, 1, static_cast<int64_t>(values.size())}, values);
}

std::vector<float> run(const std::string& op, const std::string& kernel, const Tensor& x, AttrMap attrs) {
  OneNode node(op, {type_of(x.dtype(), x.sizes())}, std::move(attrs));
  return test::values_of<float>(test::run_kernel(*node.node, kernel, {x})[0]);
}

// ---------------------------------------------------------------- type inference

TEST(OpsUpsample, InfersOutputShapes) {
  auto shape = [](const std::string& op, Ints x, AttrMap attrs) {
    return OneNode(op, {f32(x)}, std::move(attrs)).output_type().shape;
  };
  EXPECT_EQ(shape("upsample_nearest2d", {2, 3, 5, 7}, {{"output_size", Ints{10, 3}}}), make_shape({2, 3, 10, 3}));
  EXPECT_EQ(shape("upsample_nearest2d", {2, 3, 5, 7}, {{"scale_factors", Floats{2, 1.5}}}), make_shape({2, 3, 10, 10}));
  // Both: output_size sizes the output, the factors enter the index arithmetic only.
  EXPECT_EQ(shape("upsample_bilinear2d", {1, 1, 5, 7}, {{"output_size", Ints{4, 4}}, {"scale_factors", Floats{0.9, 0.6}}}),
            make_shape({1, 1, 4, 4}));
  EXPECT_EQ(shape("upsample_bilinear2d", {1, 1, 5, 7}, {{"scale_factors", Floats{0.5, 0.3}}, {"align_corners", true}}),
            make_shape({1, 1, 2, 2}));
}

TEST(OpsUpsample, InfersSymbolicSpatialDims) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 8), h = g.add_symbol("H", 3, 40), w = g.add_symbol("W", 3, 40);
  Value* x = g.add_input("x", TensorType{DType::F32, {n, Dim(4), h, w}});
  Value* up = g.add("upsample_nearest2d", {x}, {{"scale_factors", Floats{2, 1.5}}});
  const Shape& s = up->type().shape;
  EXPECT_EQ(s[0], n);
  EXPECT_EQ(g.symbols()[s[2].symbol()].name, "H*2");
  EXPECT_EQ(g.symbols()[s[2].symbol()].min, 6);
  EXPECT_EQ(g.symbols()[s[2].symbol()].max, 80);
  EXPECT_EQ(g.symbols()[s[3].symbol()].name, "floor(W*1.5)");
  EXPECT_EQ(g.symbols()[s[3].symbol()].min, 4);
  // The same factor gives the same symbol (bilinear or nearest); a factor of 1 keeps the symbol.
  Value* again = g.add("upsample_bilinear2d", {x}, {{"scale_factors", Floats{2, 1}}});
  EXPECT_EQ(again->type().shape[2], s[2]);
  EXPECT_EQ(again->type().shape[3], w);
  // A fixed output size is static.
  EXPECT_EQ(g.add("upsample_bilinear2d", {x}, {{"output_size", Ints{7, 9}}})->type().shape,
            (Shape{n, Dim(4), Dim(7), Dim(9)}));
}

TEST(OpsUpsample, ShapeInferenceFailuresNameTheProblem) {
  Graph g;
  Value* x = g.add_input("x", f32({1, 2, 5, 5}));
  auto fails = [&](const std::string& op, Value* input, AttrMap attrs, const std::string& reason) {
    std::string msg = test::error_message([&] { g.add(op, {input}, attrs); }, ErrorCode::ShapeInference);
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  };
  fails("upsample_nearest2d", x, {}, "give output_size or scale_factors");
  fails("upsample_nearest2d", x, {{"output_size", Ints{3}}}, "output_size must be empty or two positive ints");
  fails("upsample_nearest2d", x, {{"output_size", Ints{0, 3}}}, "output_size must be empty or two positive ints");
  fails("upsample_bilinear2d", x, {{"scale_factors", Floats{2}}}, "scale_factors must be empty or two floats");
  fails("upsample_bilinear2d", x, {{"scale_factors", Floats{2, -1}}}, "scale_factors must be positive and finite");
  fails("upsample_bilinear2d", x, {{"scale_factors", Floats{0.1, 1}}},
        "scale factor 0.10000000000000001 gives 0 output rows from 5");
  fails("upsample_bilinear2d", g.add_input("r3", f32({2, 5, 5})), {{"output_size", Ints{3, 3}}}, "x must be 4-D");
  fails("upsample_bilinear2d", g.add_input("e", f32({1, 2, 0, 5})), {{"output_size", Ints{3, 3}}},
        "x's dims other than the batch must not be empty");
  fails("upsample_bilinear2d", g.add_input("u8", type_of(DType::U8, {1, 2, 5, 5})), {{"output_size", Ints{3, 3}}},
        "upsample_bilinear2d takes f32, f64, not u8");
  fails("upsample_nearest2d", g.add_input("i32", type_of(DType::I32, {1, 2, 5, 5})), {{"output_size", Ints{3, 3}}},
        "upsample_nearest2d takes f32, f64, f16, bf16, u8, not i32");
}

// ---------------------------------------------------------------- reference kernels

TEST(OpsUpsample, ReferenceNearestMatchesPyTorch) {
  const Tensor x = row({0, 1, 2, 3, 4});
  auto width = [](Ints size) { return AttrMap{{"output_size", Ints{1, size[0]}}}; };
  EXPECT_EQ(run("upsample_nearest2d", "reference", x, width({3})), (std::vector<float>{0, 1, 3}));
  EXPECT_EQ(run("upsample_nearest2d", "reference", x, width({12})),
            (std::vector<float>{0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4}));
  // Factors enter the arithmetic: scale 1 / 1.7 rather than 5 / 8.
  EXPECT_EQ(run("upsample_nearest2d", "reference", x, {{"scale_factors", Floats{1, 1.7}}}),
            (std::vector<float>{0, 0, 1, 1, 2, 2, 3, 4}));
  // PyTorch's special cases: twice the size halves the index whatever the factor (4 * (1 / 2.1)
  // would floor to 1), and an unchanged size copies whatever the factor.
  const Tensor x3 = row({0, 1, 2});
  EXPECT_EQ(run("upsample_nearest2d", "reference", x3, {{"output_size", Ints{1, 6}}, {"scale_factors", Floats{1, 2.1}}}),
            (std::vector<float>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(run("upsample_nearest2d", "reference", x3, {{"output_size", Ints{1, 3}}, {"scale_factors", Floats{1, 1.3}}}),
            (std::vector<float>{0, 1, 2}));
  // The index is computed in float: 37 * (6 / 74) falls just short of 3 and floors to 2.
  std::vector<float> six(6);
  for (int i = 0; i < 6; ++i) six[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(run("upsample_nearest2d", "reference", row(six), width({74}))[37], 2);
  // A factor too small for f32 (its reciprocal is infinite) gives the last index, never one out
  // of range (PyTorch's own arithmetic is undefined there).
  EXPECT_EQ(run("upsample_nearest2d", "reference", x, {{"output_size", Ints{1, 3}}, {"scale_factors", Floats{1, 1e-40}}}),
            (std::vector<float>{4, 4, 4}));
  EXPECT_EQ(run("upsample_nearest2d", "table", x, {{"output_size", Ints{1, 3}}, {"scale_factors", Floats{1, 1e-40}}}),
            (std::vector<float>{4, 4, 4}));
  // u8 and f64 take the same indices.
  Tensor bytes = Tensor::empty(DType::U8, {1, 1, 1, 5});
  for (uint8_t i = 0; i < 5; ++i) bytes.data<uint8_t>()[i] = static_cast<uint8_t>(i * 50);
  OneNode u8("upsample_nearest2d", {type_of(DType::U8, {1, 1, 1, 5})}, width({3}));
  EXPECT_EQ(test::values_of<uint8_t>(test::run_kernel(*u8.node, "reference", {bytes})[0]),
            (std::vector<uint8_t>{0, 50, 150}));
  OneNode f64("upsample_nearest2d", {type_of(DType::F64, {1, 1, 1, 6})}, width({74}));
  EXPECT_EQ(test::values_of<double>(test::run_kernel(
                *f64.node, "reference", {test::tensor_of(DType::F64, {1, 1, 1, 6}, {0, 1, 2, 3, 4, 5})})[0])[37],
            2);
}

TEST(OpsUpsample, ReferenceBilinearMatchesPyTorch) {
  const Tensor x = test::tensor_of({1, 1, 2, 2}, {1, 2, 3, 4});
  const std::vector<float> corners3 = {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4};
  EXPECT_EQ(run("upsample_bilinear2d", "reference", x, {{"output_size", Ints{3, 3}}}), corners3);
  EXPECT_EQ(run("upsample_bilinear2d", "reference", x, {{"output_size", Ints{3, 3}}, {"align_corners", true}}), corners3);
  EXPECT_EQ(run("upsample_bilinear2d", "reference", x, {{"output_size", Ints{4, 4}}}),
            (std::vector<float>{1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f,
                                3.75f, 4}));
  // A single output: the first element with align_corners, the centre without.
  EXPECT_EQ(run("upsample_bilinear2d", "reference", x, {{"output_size", Ints{1, 1}}, {"align_corners", true}}),
            (std::vector<float>{1}));
  EXPECT_EQ(run("upsample_bilinear2d", "reference", x, {{"output_size", Ints{1, 1}}}), (std::vector<float>{2.5f}));
  // Downsampling 5 -> 2 along W: positions 0.75 and 3.25, or the two ends with align_corners.
  const Tensor r = row({0, 10, 20, 30, 40});
  EXPECT_EQ(run("upsample_bilinear2d", "reference", r, {{"output_size", Ints{1, 2}}}), (std::vector<float>{7.5f, 32.5f}));
  EXPECT_EQ(run("upsample_bilinear2d", "reference", r, {{"output_size", Ints{1, 2}}, {"align_corners", true}}),
            (std::vector<float>{0, 40}));
  // The weights are PyTorch's to the bit: 2 -> 5 puts output 1 at 0.4 * 1.5 - 0.5 computed with
  // one rounding (an FMA), giving weight 0.100000009 where two roundings give 0.100000024.
  for (const char* kernel : {"reference", "table"}) {
    EXPECT_EQ(run("upsample_bilinear2d", kernel, row({0, 1024}), {{"output_size", Ints{1, 5}}}),
              (std::vector<float>{0, 102.40000915527344f, 512, 921.6000366210938f, 1024}))
        << kernel;
  }
  for (const char* kernel : {"reference", "table"}) {
    EXPECT_EQ(run("upsample_bilinear2d", kernel, r, {{"output_size", Ints{1, 3}}, {"scale_factors", Floats{1, 1e-40}}}),
              (std::vector<float>{40, 40, 40}))
        << kernel;
  }
  // With a factor: scale 1 / 1.7 over [0, 10, ..., 40] (PyTorch: 0, 3.8235297, 9.705883, ...).
  const std::vector<float> expected = {0, 3.8235297203f, 9.7058830261f, 15.5882358551f,
                                       21.4705886841f, 27.3529434204f, 33.2352943420f, 39.1176490784f};
  const std::vector<float> got = run("upsample_bilinear2d", "reference", r, {{"scale_factors", Floats{1, 1.7}}});
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(test::ulp_distance(got[i], expected[i]), 2) << i;
}

// ---------------------------------------------------------------- table kernels

struct ResizeCase {
  Ints x;
  AttrMap attrs;
};

const std::vector<ResizeCase>& cases() {
  static const std::vector<ResizeCase> c = {
      {{1, 1, 1, 1}, {{"output_size", Ints{3, 7}}}},
      {{2, 3, 7, 17}, {{"scale_factors", Floats{2, 2}}}},
      {{1, 17, 3, 7}, {{"output_size", Ints{17, 5}}}},
      {{1, 2, 9, 13}, {{"scale_factors", Floats{0.7, 1.3}}}},
      {{1, 2, 9, 13}, {{"output_size", Ints{4, 30}}, {"scale_factors", Floats{0.45, 2.3}}}},
      {{1, 4, 181, 181}, {{"scale_factors", Floats{2, 2}}}},  // about 1e6 outputs... and 4x more
      {{0, 3, 4, 4}, {{"output_size", Ints{8, 8}}}},
  };
  return c;
}

TEST(OpsUpsample, TableNearestMatchesReferenceExactly) {
  std::mt19937 rng(31);
  for (DType dtype : {DType::F32, DType::F64, DType::U8}) {
    for (const ResizeCase& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_string(c.x));
      OneNode node("upsample_nearest2d", {type_of(dtype, c.x)}, c.attrs);
      Tensor x = Tensor::empty(dtype, c.x);
      for (size_t i = 0; i < x.nbytes(); ++i) static_cast<uint8_t*>(x.data())[i] = static_cast<uint8_t>(rng());
      Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
      EXPECT_TRUE(test::run_kernel(*node.node, "table", {x}, 1)[0].same_contents(expected));
      EXPECT_TRUE(test::run_kernel(*node.node, "table", {x}, 2)[0].same_contents(expected));
    }
  }
}

// The table kernel interpolates in f32 as PyTorch does: within the rounding bound of a 4-term dot
// product of the reference (which works in double); f64 within a few units of 2^-53.
TEST(OpsUpsample, TableBilinearMatchesReference) {
  std::mt19937 rng(32);
  for (const ResizeCase& c : cases()) {
    for (bool align_corners : {false, true}) {
      for (bool extremes : {false, true}) {
        SCOPED_TRACE(shape_string(c.x) + (align_corners ? " align_corners" : "") + (extremes ? " extremes" : ""));
        AttrMap attrs = c.attrs;
        attrs["align_corners"] = align_corners;
        if (align_corners) attrs.erase("scale_factors");
        if (!attrs.count("output_size") && !attrs.count("scale_factors")) continue;
        OneNode node("upsample_bilinear2d", {f32(c.x)}, attrs);
        Tensor x = test::random_tensor(DType::F32, c.x, rng);
        if (extremes) test::sprinkle_extremes(x, rng);
        const KernelSpec spec = test::spec_with_constants(*node.node, 2);
        Tensor expected = test::create_and_run("upsample_bilinear2d", "reference", spec, {x});
        Tensor magnitude = test::create_and_run("upsample_bilinear2d", "reference", spec, {test::abs_of(x)});
        Tensor got = test::create_and_run("upsample_bilinear2d", "table", spec, {x});
        if (!extremes) {
          test::expect_within_dot_bound(got, expected, magnitude, 4, "table");
          continue;
        }
        // With infinities a weight of 0 times inf is NaN in both; a blend of values near the f32
        // maximum may round past it in f32 (as in PyTorch); elsewhere the bound holds.
        for (int64_t i = 0; i < got.numel(); ++i) {
          const float g = got.data<float>()[i], e = expected.data<float>()[i];
          if (std::isnan(e) || std::isinf(e)) {
            EXPECT_EQ(std::isnan(g), std::isnan(e)) << i;
            continue;
          }
          if (std::isinf(g) && magnitude.data<float>()[i] >= 0.99f * std::numeric_limits<float>::max()) continue;
          EXPECT_LE(std::fabs(double{g} - double{e}),
                    6 * std::ldexp(1.0, -24) * magnitude.data<float>()[i] + 4 * std::numeric_limits<float>::min())
              << "element " << i << ": " << g << " vs " << e;
        }
      }
    }
  }
  OneNode f64("upsample_bilinear2d", {type_of(DType::F64, {1, 2, 9, 13})}, {{"output_size", Ints{20, 7}}});
  Tensor x = test::random_tensor(DType::F64, {1, 2, 9, 13}, rng);
  Tensor expected = test::run_kernel(*f64.node, "reference", {x})[0];
  Tensor got = test::run_kernel(*f64.node, "table", {x})[0];
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<double>()[i], expected.data<double>()[i], 1e-14) << i;
}

// ---------------------------------------------------------------- through the executor

TEST(OpsUpsample, CompiledGraphRunsBothOps) {
  Graph g;
  Dim batch = g.add_symbol("N", 1, 4);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(3), Dim(5), Dim(6)}});
  Value* nearest = g.add("upsample_nearest2d", {x}, {{"scale_factors", Floats{2, 2}}});
  Value* bilinear = g.add("upsample_bilinear2d", {nearest}, {{"output_size", Ints{7, 9}}, {"align_corners", true}});
  g.set_outputs({bilinear, nearest});
  auto best = CompiledGraph::compile(g);
  auto slow = CompiledGraph::compile(g, {.kernel_policy = "reference"});
  EXPECT_NE(best->describe_plan({{2, 3, 5, 6}}).find("[kernel table]"), std::string::npos);
  std::mt19937 rng(33);
  Tensor input = test::random_tensor(DType::F32, {2, 3, 5, 6}, rng);
  std::vector<Tensor> got = best->run({input.view()});
  std::vector<Tensor> expected = slow->run({input.view()});
  ASSERT_EQ(got[0].sizes(), (Ints{2, 3, 7, 9}));
  ASSERT_EQ(got[1].sizes(), (Ints{2, 3, 10, 12}));
  EXPECT_TRUE(got[1].same_contents(expected[1]));
  for (int64_t i = 0; i < got[0].numel(); ++i)
    EXPECT_NEAR(got[0].data<float>()[i], expected[0].data<float>()[i], 1e-5) << i;
}

}  // namespace
}  // namespace kiln
