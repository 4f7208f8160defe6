// rms_norm: type inference on symbolic dims, the reference kernel against hand-computed values
// (eps = None as each dtype's machine epsilon, NaN and inf as PyTorch's formula gives them), and
// the AVX2 kernel against the reference on odd and large sizes, extremes and empty tensors.
#include <cmath>

#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Largest ULP error of the AVX2 kernel against the reference (listed in docs/ops.md): both
// round the same double value once, and only the sum of squares' order differs.
constexpr int64_t kRmsNormMaxUlp = 1;

void expect_floats(const Tensor& got, const std::vector<float>& expected, int64_t max_ulp = 0) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_LE(test::ulp_distance(got.data<float>()[i], expected[i]), max_ulp)
        << "element " << i << ": " << got.data<float>()[i] << " vs " << expected[i];
}

TEST(OpsRmsNorm, Inference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Dim seq = g.add_symbol("S", 1, 512);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, seq, Dim(8)}});
  Value* w = g.add_input("w", type_of(DType::F32, {8}));
  Value* plain = g.add("rms_norm", {x});
  EXPECT_EQ(plain->type(), x->type());
  EXPECT_EQ(plain->producer()->attr_float("eps"), -1.0);  // PyTorch's None
  Value* y = g.add("rms_norm", {x, w}, {{"eps", 1e-6}});
  EXPECT_EQ(y->type(), x->type());
  // Over [S, 8]: a weight [S, 8] with the symbol unifies.
  Value* w2 = g.add_input("w2", TensorType{DType::F32, {seq, Dim(8)}});
  Value* z = g.add("rms_norm", {x, w2}, {{"normalized_ndim", int64_t{2}}});
  EXPECT_EQ(z->type(), x->type());
  g.set_outputs({plain, y, z});
  EXPECT_NO_THROW(verify(g));

  std::string message;
  Value* w4 = g.add_input("w4", type_of(DType::F32, {4}));
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {x, w4}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("8 vs 4"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {x, w2}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("normalized dims [8]"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("rms_norm", {x}, {{"normalized_ndim", int64_t{4}}}); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("rms_norm", {x}, {{"normalized_ndim", int64_t{0}}}); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {x, w, w}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("at most a weight"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {x}, {{"eps", -0.5}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("eps must be non-negative"), std::string::npos) << message;
  Value* w64 = g.add_input("w64", type_of(DType::F64, {8}));
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {x, w64}); }), ErrorCode::ShapeInference);
  Value* i = g.add_input("i", type_of(DType::I64, {8}));
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {i}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("insert a cast"), std::string::npos) << message;
  Value* scalar = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(test::error_code_of([&] { g.add("rms_norm", {scalar}); }), ErrorCode::ShapeInference);
}

TEST(OpsRmsNorm, ReferenceMatchesHandComputedValues) {
  // Rows [3, 4] and [1, -1, ...]: mean squares 12.5 and 1; x / sqrt(12.5) exactly rounded.
  const AttrMap no_eps = {{"eps", 0.0}};
  OneNode plain("rms_norm", {type_of(DType::F32, {2, 2})}, no_eps);
  expect_floats(
      test::run_kernel(*plain.node, "reference", {test::tensor_of({2, 2}, {3, 4, 1, -1})})[0],
      {0.848528137f, 1.13137085f, 1, -1});
  OneNode weighted("rms_norm", {type_of(DType::F32, {1, 2}), type_of(DType::F32, {2})}, no_eps);
  expect_floats(
      test::run_kernel(*weighted.node, "reference",
                       {test::tensor_of({1, 2}, {3, 4}), test::tensor_of({2}, {2, -0.5f})})[0],
      {1.69705627f, -0.565685425f});
  // Over the last two dims: one row of 4, mean square (1 + 4 + 9 + 16) / 4 = 7.5.
  OneNode two_dims("rms_norm", {type_of(DType::F32, {1, 2, 2})},
                   {{"eps", 0.0}, {"normalized_ndim", int64_t{2}}});
  expect_floats(test::run_kernel(*two_dims.node, "reference",
                                 {test::tensor_of({1, 2, 2}, {1, 2, 3, 4})})[0],
                {0.365148372f, 0.730296743f, 1.09544512f, 1.46059349f});
  // An inf makes the row's root inf: inf * 0 is NaN, finite values give 0 (PyTorch's
  // x * rsqrt(inf)); a NaN spreads over its row; an all-zero row is 0 / sqrt(eps) = 0.
  OneNode extremes("rms_norm", {type_of(DType::F32, {3, 3})});
  expect_floats(
      test::run_kernel(*extremes.node, "reference",
                       {test::tensor_of({3, 3}, {1, kInf, -2, kNaN, 1, 2, 0, 0, -0.0f})})[0],
      {0, kNaN, -0.0f, kNaN, kNaN, kNaN, 0, 0, -0.0f});
}

// eps = -1 is PyTorch's None: 2^-23 for f32 and 2^-52 for f64, visible on rows near zero.
TEST(OpsRmsNorm, DefaultEpsIsTheDtypesMachineEpsilon) {
  OneNode f32("rms_norm", {type_of(DType::F32, {1, 1})});
  const float v = 1e-4f;
  expect_floats(test::run_kernel(*f32.node, "reference", {test::tensor_of({1, 1}, {v})})[0],
                {static_cast<float>(v * (1 / std::sqrt(double(v) * v + 0x1p-23)))});
  OneNode f64("rms_norm", {type_of(DType::F64, {1, 1})});
  Tensor x = Tensor::empty(DType::F64, {1, 1});
  x.data<double>()[0] = 1e-8;
  EXPECT_EQ(test::run_kernel(*f64.node, "reference", {x})[0].data<double>()[0],
            1e-8 * (1 / std::sqrt(1e-8 * 1e-8 + 0x1p-52)));
  // An explicit eps of 0 is kept, not replaced.
  OneNode zero("rms_norm", {type_of(DType::F32, {1, 1})}, {{"eps", 0.0}});
  expect_floats(test::run_kernel(*zero.node, "reference", {test::tensor_of({1, 1}, {v})})[0], {1});
}

bool avx2_available() {
  OneNode n("rms_norm", {type_of(DType::F32, {2})});
  return test::has_kernel("rms_norm", "avx2") &&
         test::unsupported_reason(*n.node, "avx2").empty();
}

TEST(OpsRmsNorm, Avx2DeclinesF64) {
  if (!test::has_kernel("rms_norm", "avx2")) GTEST_SKIP() << "not an x86 build";
  OneNode node("rms_norm", {type_of(DType::F64, {4})});
  EXPECT_NE(test::unsupported_reason(*node.node, "avx2"), "");
}

// Odd sizes (1, 3, 7, 17, about a million per row and in all), several dims normalized, empty
// tensors, with and without a weight, with NaN, ±inf, subnormals and magnitudes near f32's limits
// (whose squares only double holds); one thread and two give the same bits.
TEST(OpsRmsNorm, Avx2MatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(11);
  using Sizes = std::vector<int64_t>;
  const std::vector<std::pair<Sizes, int64_t>> cases = {
      {{1}, 1},           {{3}, 1},        {{7, 7}, 1},   {{5, 17}, 1}, {{17, 3}, 1},
      {{1, 1 << 20}, 1},  {{1 << 20, 1}, 1}, {{128, 768}, 1}, {{4, 3, 5}, 2}, {{2, 3, 7}, 3},
      {{0, 8}, 1},        {{3, 0}, 1},
  };
  for (const auto& [sizes, ndim] : cases) {
    const Sizes normalized(sizes.end() - ndim, sizes.end());
    for (bool weighted : {false, true}) {
      for (bool extremes : {false, true}) {
        SCOPED_TRACE(shape_string(sizes) + (weighted ? " weighted" : "") +
                     (extremes ? " with extremes" : ""));
        std::vector<TensorType> types = {type_of(DType::F32, sizes)};
        Tensor x = test::random_tensor(DType::F32, sizes, rng, -3, 5);
        if (extremes) test::sprinkle_extremes(x, rng);
        std::vector<Tensor> inputs = {x};
        if (weighted) {
          types.push_back(type_of(DType::F32, normalized));
          inputs.push_back(test::random_tensor(DType::F32, normalized, rng, -2, 2));
        }
        OneNode node("rms_norm", types, {{"normalized_ndim", ndim}, {"eps", 1e-6}});
        Tensor expected = test::run_kernel(*node.node, "reference", inputs)[0];
        Tensor serial = test::run_kernel(*node.node, "avx2", inputs, 1)[0];
        int64_t where = 0;
        EXPECT_LE(test::max_ulp(serial, expected, &where), kRmsNormMaxUlp)
            << "element " << where << ": " << serial.data<float>()[where] << " vs "
            << expected.data<float>()[where];
        EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, "avx2", inputs, 2)[0], serial));
      }
    }
  }
}

// The default eps reaches the AVX2 kernel as the reference's.
TEST(OpsRmsNorm, Avx2UsesTheDefaultEps) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(12);
  Tensor x = test::random_tensor(DType::F32, {9, 33}, rng, -1e-3, 1e-3);
  OneNode node("rms_norm", {type_of(DType::F32, {9, 33})});
  EXPECT_LE(test::max_ulp(test::run_kernel(*node.node, "avx2", {x})[0],
                          test::run_kernel(*node.node, "reference", {x})[0]),
            kRmsNormMaxUlp);
}

}  // namespace
}  // namespace kiln
