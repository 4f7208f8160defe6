// softmax and layer_norm: type inference, the reference kernels against hand-computed values,
// and the AVX2 and AVX-512 kernels against the reference kernels.
#include <bit>
#include <cmath>

#include "kernels/cpu/cpu_features.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Largest ULP errors of the vectorized kernels against the reference (listed in docs/ops.md).
constexpr int64_t kSoftmaxMaxUlp = 2;
constexpr int64_t kLayerNormMaxUlp = 1;

bool avx2_available() {
  OneNode n("softmax", {type_of(DType::F32, {2})});
  return test::has_kernel("softmax", "avx2") && test::unsupported_reason(*n.node, "avx2").empty();
}

// The vectorized layer norm kernels this CPU runs.
std::vector<std::string> layer_norm_kernels() {
  OneNode n("layer_norm", {type_of(DType::F32, {2})});
  std::vector<std::string> kernels;
  for (const char* kernel : {"avx2", "avx512"})
    if (test::has_kernel("layer_norm", kernel) &&
        test::unsupported_reason(*n.node, kernel).empty())
      kernels.push_back(kernel);
  return kernels;
}

void expect_floats(const Tensor& got, const std::vector<float>& expected, int64_t max_ulp = 0) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_LE(test::ulp_distance(got.data<float>()[i], expected[i]), max_ulp)
        << "element " << i << ": " << got.data<float>()[i] << " vs " << expected[i];
}

// ---------------------------------------------------------------- type inference

TEST(OpsNormalization, SoftmaxInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(4), Dim(8)}});
  EXPECT_EQ(g.add("softmax", {x}, {{"axis", int64_t{-2}}})->type(), x->type());
  EXPECT_EQ(g.add("softmax", {x}, {{"axis", int64_t{0}}})->type(), x->type());
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("softmax", {x}, {{"axis", int64_t{3}}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("use [-3, 2]"), std::string::npos) << message;
  Value* i = g.add_input("i", type_of(DType::I64, {4}));
  EXPECT_EQ(test::error_code_of([&] { g.add("softmax", {i}); }), ErrorCode::ShapeInference);
  // A 0-d x is one line of one element (PyTorch's softmax(x, 0) of a 0-d x), axis 0 or -1.
  Value* scalar = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(g.add("softmax", {scalar})->type(), scalar->type());
  EXPECT_EQ(g.add("softmax", {scalar}, {{"axis", int64_t{0}}})->type(), scalar->type());
  EXPECT_EQ(test::error_code_of([&] { g.add("softmax", {scalar}, {{"axis", int64_t{1}}}); }),
            ErrorCode::ShapeInference);
}

TEST(OpsNormalization, LayerNormInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Dim seq = g.add_symbol("S", 1, 512);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, seq, Dim(8)}});
  Value* w = g.add_input("w", type_of(DType::F32, {8}));
  Value* b = g.add_input("b", type_of(DType::F32, {8}));
  EXPECT_EQ(g.add("layer_norm", {x})->type(), x->type());
  EXPECT_EQ(g.add("layer_norm", {x, w})->type(), x->type());
  Value* y = g.add("layer_norm", {x, w, b}, {{"eps", 1e-12}});
  EXPECT_EQ(y->type(), x->type());
  EXPECT_EQ(y->producer()->attr_float("eps"), 1e-12);
  // Over [S, 8]: a weight [S, 8] with the symbol unifies.
  Value* w2 = g.add_input("w2", TensorType{DType::F32, {seq, Dim(8)}});
  Value* z = g.add("layer_norm", {x, w2}, {{"normalized_ndim", int64_t{2}}});
  EXPECT_EQ(z->type(), x->type());
  g.set_outputs({y, z});
  EXPECT_NO_THROW(verify(g));

  std::string message;
  Value* w4 = g.add_input("w4", type_of(DType::F32, {4}));
  EXPECT_EQ(test::error_code_of([&] { g.add("layer_norm", {x, w4}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("8 vs 4"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("layer_norm", {x, w2}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("normalized dims [8]"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("layer_norm", {x}, {{"normalized_ndim", int64_t{4}}}); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("layer_norm", {x, w, b, b}); }),
            ErrorCode::ShapeInference);
  Value* w64 = g.add_input("w64", type_of(DType::F64, {8}));
  EXPECT_EQ(test::error_code_of([&] { g.add("layer_norm", {x, w64}); }), ErrorCode::ShapeInference);
}

// ---------------------------------------------------------------- reference kernels

TEST(OpsNormalization, ReferenceSoftmaxMatchesHandComputedValues) {
  // Expected values: the exact results rounded to f32 (mpmath at 50 digits).
  OneNode rows("softmax", {type_of(DType::F32, {4, 3})});
  Tensor x = test::tensor_of({4, 3}, {1, 2, 3, 1000, 1000, -kInf, 0, kNaN, 1, -kInf, -kInf, 5});
  Tensor y = test::run_kernel(*rows.node, "reference", {x})[0];
  expect_floats(y, {0.0900305733f, 0.244728476f, 0.665240943f, 0.5f, 0.5f, 0, kNaN, kNaN, kNaN,
                    0, 0, 1});

  OneNode columns("softmax", {type_of(DType::F32, {2, 2})}, {{"axis", int64_t{0}}});
  y = test::run_kernel(*columns.node, "reference", {test::tensor_of({2, 2}, {0, 3, 1, 3})})[0];
  expect_floats(y, {0.268941432f, 0.5f, 0.731058598f, 0.5f});

  // 0-d: 1, or NaN from a NaN or an infinity (inf - inf), in every kernel.
  OneNode scalar("softmax", {type_of(DType::F32, {})});
  for (const std::string kernel : {"reference", "avx2"}) {
    if (!test::has_kernel("softmax", kernel) ||
        !test::unsupported_reason(*scalar.node, kernel).empty())
      continue;
    for (float v : {-3.5f, 0.0f, kNaN, kInf}) {
      const float got = test::values_of<float>(
          test::run_kernel(*scalar.node, kernel, {test::tensor_of({}, {v})})[0])[0];
      if (std::isfinite(v)) EXPECT_EQ(got, 1.0f) << kernel;
      else EXPECT_TRUE(std::isnan(got)) << kernel << " " << v;
    }
  }
}

TEST(OpsNormalization, ReferenceLayerNormMatchesHandComputedValues) {
  Tensor x = test::tensor_of({2, 4}, {1, 2, 3, 4, -5, -5, -5, -5});
  Tensor w = test::tensor_of({4}, {1, 2, 3, 4});
  Tensor b = test::tensor_of({4}, {0.5f, 0, 0, -1});
  const AttrMap no_eps = {{"eps", 0.0}};

  OneNode plain("layer_norm", {type_of(DType::F32, {2, 4})}, no_eps);
  // (x - 2.5) / sqrt(1.25); a constant row is 0 / sqrt(eps) with eps = 1e-5 below.
  const float a = 1.34164083f, c = 0.44721359f;
  expect_floats(test::run_kernel(*plain.node, "reference", {x})[0],
                {-a, -c, c, a, kNaN, kNaN, kNaN, kNaN});
  OneNode affine("layer_norm", {type_of(DType::F32, {2, 4}), type_of(DType::F32, {4}),
                                type_of(DType::F32, {4})});
  Tensor y = test::run_kernel(*affine.node, "reference", {x, w, b})[0];
  // With eps = 1e-5: rstd = 1 / sqrt(1.25001).
  expect_floats(y, {-0.841635406f, -0.894423604f, 1.34163547f, 4.36654186f, 0.5f, 0, 0, -1});
  OneNode weight_only("layer_norm", {type_of(DType::F32, {1, 4}), type_of(DType::F32, {4})},
                      no_eps);
  expect_floats(test::run_kernel(*weight_only.node, "reference",
                                 {test::tensor_of({1, 4}, {1, 2, 3, 4}), w})[0],
                {-1.34164083f, -0.89442718f, 1.34164083f, 5.36656332f});
  // Over the last two dims: one row of 4.
  OneNode two_dims("layer_norm", {type_of(DType::F32, {1, 2, 2})},
                   {{"eps", 0.0}, {"normalized_ndim", int64_t{2}}});
  expect_floats(test::run_kernel(*two_dims.node, "reference",
                                 {test::tensor_of({1, 2, 2}, {1, 2, 3, 4})})[0],
                {-a, -c, c, a});
}

// A negative eps, as PyTorch takes it: rows whose variance it leaves positive normalize, the
// others are NaN (the square root of a negative number), in every kernel.
TEST(OpsNormalization, LayerNormTakesNegativeEps) {
  Tensor x = test::tensor_of({2, 4}, {1, 2, 3, 4, -5, -5, -5, -5});
  OneNode node("layer_norm", {type_of(DType::F32, {2, 4})}, {{"eps", -0.25}});
  std::vector<std::string> kernels = layer_norm_kernels();
  kernels.push_back("reference");
  for (const std::string& kernel : kernels) {
    SCOPED_TRACE(kernel);
    // var = 1.25, so rstd = 1 / sqrt(1.25 - 0.25) = 1.
    expect_floats(test::run_kernel(*node.node, kernel, {x})[0],
                  {-1.5f, -0.5f, 0.5f, 1.5f, kNaN, kNaN, kNaN, kNaN});
  }
}

TEST(OpsNormalization, ReferenceKernelsRunF64) {
  OneNode node("softmax", {type_of(DType::F64, {2})});
  Tensor x = Tensor::empty(DType::F64, {2});
  x.data<double>()[0] = 0;
  x.data<double>()[1] = std::log(3.0);
  Tensor y = test::run_kernel(*node.node, "reference", {x})[0];
  EXPECT_NEAR(y.data<double>()[0], 0.25, 1e-16);
  EXPECT_NEAR(y.data<double>()[1], 0.75, 1e-16);
}

// ---------------------------------------------------------------- AVX2 kernels

TEST(OpsNormalization, Avx2DeclinesF64) {
  if (!test::has_kernel("softmax", "avx2")) GTEST_SKIP() << "not an x86 build";
  OneNode softmax("softmax", {type_of(DType::F64, {4})});
  OneNode layer_norm("layer_norm", {type_of(DType::F64, {4})});
  EXPECT_NE(test::unsupported_reason(*softmax.node, "avx2"), "");
  EXPECT_NE(test::unsupported_reason(*layer_norm.node, "avx2"), "");
}

void expect_matches_reference(const OneNode& node, const std::vector<Tensor>& inputs,
                              int64_t max_ulp, const std::string& kernel = "avx2") {
  SCOPED_TRACE(kernel);
  Tensor expected = test::run_kernel(*node.node, "reference", inputs)[0];
  Tensor serial = test::run_kernel(*node.node, kernel, inputs, 1)[0];
  int64_t where = 0;
  EXPECT_LE(test::max_ulp(serial, expected, &where), max_ulp)
      << "element " << where << ": " << serial.data<float>()[where] << " vs "
      << expected.data<float>()[where];
  EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, kernel, inputs, 2)[0], serial));
}

// The vectorized softmax kernels this CPU runs on node (avx512 takes rows only).
std::vector<std::string> softmax_kernels(const Node& node) {
  std::vector<std::string> kernels;
  for (const char* kernel : {"avx2", "avx512"})
    if (test::has_kernel("softmax", kernel) && test::unsupported_reason(node, kernel).empty())
      kernels.push_back(kernel);
  return kernels;
}

TEST(OpsNormalization, VectorizedSoftmaxMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(5);
  using Sizes = std::vector<int64_t>;
  const std::vector<std::pair<Sizes, int64_t>> cases = {
      {{1}, -1},        {{3}, -1},        {{5, 7}, -1},     {{17, 17}, 1},  {{2, 1 << 20}, -1},
      {{1 << 20}, 0},   {{300, 768}, -1}, {{4, 17, 3}, 1},  {{3, 7, 9}, -2}, {{2, 5, 17}, 0},
      {{6, 1000}, 0},   {{0, 5}, -1},     {{5, 0}, 0},      {{2, 3, 1}, 1},
      // Columns in blocks of 32: 1 to 4 vectors, the last full or partial.
      {{9, 32}, 0},     {{6, 45}, 0},     {{3, 7, 24}, 1},  {{2, 40, 70}, 1}, {{5, 31}, 0},
  };
  for (const auto& [sizes, axis] : cases) {
    for (bool extremes : {false, true}) {
      SCOPED_TRACE(shape_string(sizes) + " axis " + std::to_string(axis) +
                   (extremes ? " with extremes" : ""));
      OneNode node("softmax", {type_of(DType::F32, sizes)}, {{"axis", axis}});
      Tensor x = test::random_tensor(DType::F32, sizes, rng, -60, 60);
      if (extremes) test::sprinkle_extremes(x, rng);
      for (const std::string& kernel : softmax_kernels(*node.node))
        expect_matches_reference(node, {x}, kSoftmaxMaxUlp, kernel);
    }
  }
}

// The avx512 softmax gives the avx2 kernel's bits (any NaN matching any): rows of every length
// around its 16- and 32-element steps, values spread so that some of x - max fall below -87
// (exp's slow path, half by half), infinities and NaNs, rows of -inf alone.
TEST(OpsNormalization, Avx512SoftmaxGivesTheAvx2Bits) {
  const OneNode probe("softmax", {type_of(DType::F32, {2})});
  // has_avx512f() heeds KILN_MAX_CPU_ISA; where it holds, the kernel must take rows.
  if (!avx2_available() || !cpu::has_avx512f()) GTEST_SKIP() << "no AVX-512 (or capped below)";
  ASSERT_EQ(test::unsupported_reason(*probe.node, "avx512"), "");
  std::mt19937 rng(21);
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 47, 48, 63, 100, 768, 3075}) {
    for (int variant = 0; variant < 4; ++variant) {
      SCOPED_TRACE("n " + std::to_string(n) + " variant " + std::to_string(variant));
      const int64_t rows = 5;
      OneNode node("softmax", {type_of(DType::F32, {rows, n})});
      Tensor x = test::random_tensor(DType::F32, {rows, n}, rng, variant == 1 ? -200 : -8,
                                     variant == 1 ? 60 : 8);
      float* v = x.data<float>();
      if (variant == 2) test::sprinkle_extremes(x, rng);
      if (variant == 3) {
        std::fill(v, v + n, -kInf);         // a row attending nothing
        v[n + n / 2] = kInf;                 // an infinity among numbers
        v[2 * n + n - 1] = kNaN;             // a NaN in a row's tail
        v[3 * n] = -kInf;                    // one -inf among numbers
      }
      const Tensor a = test::run_kernel(*node.node, "avx2", {x}, 2)[0];
      const Tensor b = test::run_kernel(*node.node, "avx512", {x}, 2)[0];
      for (int64_t i = 0; i < rows * n; ++i) {
        const float p = a.data<float>()[i], q = b.data<float>()[i];
        ASSERT_TRUE(std::bit_cast<uint32_t>(p) == std::bit_cast<uint32_t>(q) ||
                    (std::isnan(p) && std::isnan(q)))
            << "element " << i << " (x = " << v[i] << "): " << p << " vs " << q;
      }
    }
  }
}

// A bf16 softmax (what fold_bf16_casts_into_widening_kernels makes) is each kernel's f32 result
// on the widened input rounded to bf16, over the last axis (rows) and another (columns).
TEST(OpsNormalization, Bf16SoftmaxIsTheF32OneBetweenCasts) {
  std::mt19937 rng(23);
  using Sizes = std::vector<int64_t>;
  const std::vector<std::pair<Sizes, int64_t>> cases = {
      {{1}, -1}, {{3, 7}, -1}, {{4, 100}, -1}, {{2, 3075}, -1}, {{17, 5}, 0}, {{3, 9, 20}, 1},
      {{5, 45}, 0}, {{0, 8}, -1}};
  for (const auto& [sizes, axis] : cases) {
    for (bool extremes : {false, true}) {
      SCOPED_TRACE(shape_string(sizes) + " axis " + std::to_string(axis) +
                   (extremes ? " with extremes" : ""));
      const AttrMap attrs{{"axis", axis}};
      Tensor x32 = test::random_tensor(DType::F32, sizes, rng, -8, 8);
      if (extremes) test::sprinkle_extremes(x32, rng);
      Tensor x = Tensor::empty(DType::BF16, sizes), wide = Tensor::empty(DType::F32, sizes);
      for (int64_t i = 0; i < x.numel(); ++i) {
        x.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(x32.data<float>()[i]);
        wide.data<float>()[i] = cpu::to_float(x.data<cpu::BFloat16>()[i]);
      }
      Graph g;
      const Node& node =
          *g.add_uncast("softmax", {g.add_input("x", type_of(DType::BF16, sizes))}, attrs)
               ->producer();
      ASSERT_EQ(node.output()->type().dtype, DType::BF16);
      OneNode f32_node("softmax", {type_of(DType::F32, sizes)}, attrs);
      std::vector<std::string> kernels = softmax_kernels(*f32_node.node);
      kernels.push_back("reference");
      for (const std::string& kernel : kernels) {
        SCOPED_TRACE(kernel);
        ASSERT_TRUE(test::unsupported_reason(node, kernel).empty());
        for (int threads : {1, 2}) {
          EXPECT_TRUE(test::is_rounded_to_bf16(test::run_kernel(node, kernel, {x}, threads)[0],
                                               test::run_kernel(*f32_node.node, kernel, {wide})[0]));
        }
      }
    }
  }
}

TEST(OpsNormalization, VectorizedLayerNormMatchesReference) {
  if (layer_norm_kernels().empty()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(9);
  using Sizes = std::vector<int64_t>;
  const std::vector<std::pair<Sizes, int64_t>> cases = {
      {{1}, 1},        {{3, 3}, 1},     {{2, 7}, 1},   {{5, 17}, 1}, {{1, 1 << 20}, 1},
      {{128, 768}, 1}, {{4, 3, 5}, 2},  {{0, 8}, 1},   {{3, 0}, 1},  {{6, 33}, 1},
  };
  for (const auto& [sizes, ndim] : cases) {
    const Sizes normalized(sizes.end() - ndim, sizes.end());
    for (int params = 0; params <= 2; ++params) {
      for (bool extremes : {false, true}) {
        SCOPED_TRACE(shape_string(sizes) + " with " + std::to_string(params) + " params" +
                     (extremes ? " and extremes" : ""));
        std::vector<TensorType> types = {type_of(DType::F32, sizes)};
        Tensor x = test::random_tensor(DType::F32, sizes, rng, -3, 5);
        if (extremes) test::sprinkle_extremes(x, rng);
        std::vector<Tensor> inputs = {x};
        for (int p = 0; p < params; ++p) {
          types.push_back(type_of(DType::F32, normalized));
          inputs.push_back(test::random_tensor(DType::F32, normalized, rng, -2, 2));
        }
        OneNode node("layer_norm", types, {{"normalized_ndim", ndim}});
        for (const std::string& kernel : layer_norm_kernels())
          expect_matches_reference(node, inputs, kLayerNormMaxUlp, kernel);
      }
    }
  }
}

// A bf16 layer or RMS norm (what fold_bf16_casts_into_widening_kernels makes) is each kernel's
// f32 result on the widened inputs rounded to bf16: the bits of the casts it replaces, NaNs and
// all.
TEST(OpsNormalization, Bf16NormsAreTheF32OnesBetweenCasts) {
  std::mt19937 rng(17);
  using Sizes = std::vector<int64_t>;
  auto widened = [](const Tensor& t) {
    Tensor wide = Tensor::empty(DType::F32, t.sizes());
    for (int64_t i = 0; i < t.numel(); ++i)
      wide.data<float>()[i] = cpu::to_float(t.data<cpu::BFloat16>()[i]);
    return wide;
  };
  for (const auto& [op, max_params] : {std::pair<std::string, int>{"layer_norm", 2},
                                       std::pair<std::string, int>{"rms_norm", 1}}) {
    for (const Sizes& sizes : {Sizes{1}, Sizes{3, 7}, Sizes{2, 17}, Sizes{4, 768}, Sizes{0, 8}}) {
      const Sizes normalized{sizes.back()};
      for (int params = 0; params <= max_params; ++params) {
        for (bool extremes : {false, true}) {
          SCOPED_TRACE(op + " of " + shape_string(sizes) + " with " + std::to_string(params) +
                       " params" + (extremes ? " and extremes" : ""));
          Tensor x32 = test::random_tensor(DType::F32, sizes, rng, -3, 5);
          if (extremes) test::sprinkle_extremes(x32, rng);
          Tensor x = Tensor::empty(DType::BF16, sizes);
          for (int64_t i = 0; i < x.numel(); ++i)
            x.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(x32.data<float>()[i]);
          std::vector<Tensor> narrow = {x}, wide = {widened(x)};
          std::vector<TensorType> narrow_types = {type_of(DType::BF16, sizes)},
                                  wide_types = {type_of(DType::F32, sizes)};
          for (int p = 0; p < params; ++p) {
            narrow.push_back(test::random_tensor(DType::BF16, normalized, rng, -2, 2));
            wide.push_back(widened(narrow.back()));
            narrow_types.push_back(type_of(DType::BF16, normalized));
            wide_types.push_back(type_of(DType::F32, normalized));
          }
          // Uncast, as the pass adds it (the builder would put the casts around it).
          Graph bf16_graph;
          std::vector<Value*> bf16_inputs;
          for (size_t i = 0; i < narrow_types.size(); ++i)
            bf16_inputs.push_back(bf16_graph.add_input("in" + std::to_string(i), narrow_types[i]));
          const Node& bf16_node = *bf16_graph.add_uncast(op, bf16_inputs, {})->producer();
          OneNode f32_node(op, wide_types);
          std::vector<std::string> kernels = {"reference"};
          for (const char* kernel : {"avx2", "avx512"})
            if (test::has_kernel(op, kernel) &&
                test::unsupported_reason(*f32_node.node, kernel).empty())
              kernels.push_back(kernel);
          for (const std::string& kernel : kernels) {
            SCOPED_TRACE(kernel);
            const Tensor got = test::run_kernel(bf16_node, kernel, narrow)[0];
            const Tensor f32 = test::run_kernel(*f32_node.node, kernel, wide)[0];
            ASSERT_TRUE(test::is_rounded_to_bf16(got, f32));
          }
        }
      }
    }
  }
}

// A row whose mean is large against its spread: the result depends on x - mean being exact.
TEST(OpsNormalization, VectorizedLayerNormKeepsSmallSpreadAroundLargeMean) {
  if (layer_norm_kernels().empty()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(13);
  Tensor x = test::random_tensor(DType::F32, {16, 100}, rng, 1000, 1000.01);
  OneNode node("layer_norm", {type_of(DType::F32, {16, 100})});
  for (const std::string& kernel : layer_norm_kernels())
    expect_matches_reference(node, {x}, kLayerNormMaxUlp, kernel);
}

// Rows whose first element lies far from the rest (1 to 1e6 standard deviations of the others):
// the AVX-512 kernel's one-pass moments, shifted by that element, take a second pass where the
// shift would cost more than 8 bits.
TEST(OpsNormalization, VectorizedLayerNormOutlierFirstElement) {
  if (layer_norm_kernels().empty()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(21);
  for (int64_t n : {771, 70001}) {
    for (float outlier : {1.0f, 17.0f, 1e4f, 1e6f}) {
      SCOPED_TRACE(std::to_string(n) + " elements, outlier at " + std::to_string(outlier));
      const int64_t rows = 2;
      Tensor x = test::random_tensor(DType::F32, {rows, n}, rng, -1.7f, 1.7f);  // std about 1
      for (int64_t r = 0; r < rows; ++r) x.data<float>()[r * n] = (r % 2 ? -outlier : outlier);
      OneNode node("layer_norm", {type_of(DType::F32, {rows, n})});
      for (const std::string& kernel : layer_norm_kernels())
        expect_matches_reference(node, {x}, kLayerNormMaxUlp, kernel);
    }
  }
}

}  // namespace
}  // namespace kiln
