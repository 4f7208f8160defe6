// Elementwise ops: type inference (broadcasting, symbolic dims, dtype rules), the reference
// kernels against hand-computed values, and the AVX2 kernels against the reference kernels.
#include <cmath>
#include <cstdio>

#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The largest ULP error each AVX2 f32 kernel may have against the reference kernel (which
// computes in double, so it is within half an ULP of the true value). docs/ops.md lists them.
struct UnaryCase {
  std::string op;
  AttrMap attrs;
  int64_t max_ulp;  // 0: bit for bit
};
const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"relu", {}, 0},
      {"neg", {}, 0},
      {"sqrt", {}, 0},
      {"rsqrt", {}, 1},
      {"exp", {}, 1},
      {"sigmoid", {}, 2},
      {"tanh", {}, 1},
      {"gelu", {{"approximate", std::string("none")}}, 4},
      {"gelu", {{"approximate", std::string("tanh")}}, 3},
  };
  return cases;
}

std::string case_name(const UnaryCase& c) {
  auto it = c.attrs.find("approximate");
  return it == c.attrs.end() ? c.op : c.op + "(" + std::get<std::string>(it->second) + ")";
}

bool avx2_available() {
  OneNode n("add", {type_of(DType::F32, {1}), type_of(DType::F32, {1})});
  return test::has_kernel("add", "avx2") && test::unsupported_reason(*n.node, "avx2").empty();
}

// ---------------------------------------------------------------- type inference

TEST(OpsElementwise, BroadcastingShapes) {
  Graph g;
  Value* a = g.add_input("a", type_of(DType::F32, {2, 1, 4}));
  Value* b = g.add_input("b", type_of(DType::F32, {3, 1}));
  EXPECT_EQ(g.add("add", {a, b})->type(), type_of(DType::F32, {2, 3, 4}));
  Value* s = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(g.add("mul", {s, a})->type(), type_of(DType::F32, {2, 1, 4}));
  Value* z = g.add_input("z", type_of(DType::F32, {0, 4}));
  EXPECT_EQ(g.add("sub", {z, g.add_input("r", type_of(DType::F32, {4}))})->type(),
            type_of(DType::F32, {0, 4}));
}

TEST(OpsElementwise, IncompatibleShapesAreE40002WithTheShapes) {
  Graph g;
  Value* a = g.add_input("a", type_of(DType::F32, {2, 3}));
  Value* b = g.add_input("b", type_of(DType::F32, {4, 3}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("add", {a, b}, {}, "sum"); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("[2, 3]"), std::string::npos) << message;
  EXPECT_NE(message.find("[4, 3]"), std::string::npos) << message;
  EXPECT_NE(message.find("sum"), std::string::npos) << message;
}

TEST(OpsElementwise, MixedDTypesAreE40002AskingForACast) {
  Graph g;
  Value* a = g.add_input("a", type_of(DType::F32, {2}));
  Value* b = g.add_input("b", type_of(DType::I64, {2}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("mul", {a, b}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("f32 and i64"), std::string::npos) << message;
  EXPECT_NE(message.find("cast"), std::string::npos) << message;
}

TEST(OpsElementwise, UnsupportedDTypesAndAttributesAreE40002) {
  Graph g;
  Value* i = g.add_input("i", type_of(DType::I32, {2}));
  Value* h = g.add_input("h", type_of(DType::F16, {2}));
  Value* f = g.add_input("f", type_of(DType::F32, {2}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("div", {i, i}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("takes f32, f64"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("exp", {i}); }), ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("add", {h, h}); }), ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("gelu", {f}, {{"approximate", std::string("erf")}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("\"none\", \"tanh\""), std::string::npos) << message;
  // Integers take the ops defined on them.
  EXPECT_EQ(g.add("relu", {g.add("add", {i, i})})->type(), type_of(DType::I32, {2}));
  EXPECT_EQ(g.add("gelu", {f})->producer()->attr_string("approximate"), "none");
}

TEST(OpsElementwise, SymbolicDimsPropagate) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(8)}});
  Value* bias = g.add_input("bias", type_of(DType::F32, {8}));
  Value* col = g.add_input("col", TensorType{DType::F32, {batch, Dim(1)}});
  Value* y = g.add("gelu", {g.add("add", {x, bias})}, {{"approximate", std::string("tanh")}});
  Value* z = g.add("mul", {y, col});
  g.set_outputs({z});
  EXPECT_EQ(y->type().shape, (Shape{batch, Dim(8)}));
  EXPECT_EQ(z->type().shape, (Shape{batch, Dim(8)}));
  // A symbol against 1 broadcasts to the symbol; against a static size it takes that size.
  Value* row = g.add_input("row", type_of(DType::F32, {1, 5}));
  EXPECT_EQ(g.add("sub", {col, row})->type().shape, (Shape{batch, Dim(5)}));
  EXPECT_NO_THROW(verify(g));
}

// ---------------------------------------------------------------- reference kernels

void expect_unary_reference(const std::string& op, AttrMap attrs, const std::vector<float>& in,
                            const std::vector<float>& expected) {
  SCOPED_TRACE(op);
  const int64_t n = static_cast<int64_t>(in.size());
  OneNode node(op, {type_of(DType::F32, {n})}, std::move(attrs));
  Tensor x = test::tensor_of({n}, in);
  std::vector<float> out =
      test::values_of<float>(test::run_kernel(*node.node, "reference", {x})[0]);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << "x = " << in[i];
    } else {
      EXPECT_EQ(out[i], expected[i]) << "x = " << in[i];
      EXPECT_EQ(std::signbit(out[i]), std::signbit(expected[i])) << "x = " << in[i];
    }
  }
}

TEST(OpsElementwise, ReferenceUnaryMatchesHandComputedValues) {
  // Expected values: the exact results rounded to f32 (mpmath at 50 digits).
  expect_unary_reference("relu", {}, {-2, 3, -0.0f, kNaN, -kInf}, {0, 3, -0.0f, kNaN, 0});
  expect_unary_reference("neg", {}, {-2, 3, 0, kInf}, {2, -3, -0.0f, -kInf});
  expect_unary_reference("exp", {}, {0, 1, -1, 88.8f, -104, kNaN},
                         {1, 2.71828175f, 0.36787945f, kInf, 0, kNaN});
  expect_unary_reference("sigmoid", {}, {0, 2, -2, -100, kInf, -kInf},
                         {0.5f, 0.880797088f, 0.119202919f, 3.78350585e-44f, 1, 0});
  expect_unary_reference("tanh", {}, {0.5f, -1, 20, -0.0f},
                         {0.462117165f, -0.761594176f, 1, -0.0f});
  expect_unary_reference("gelu", {}, {1, -1, 2, -5, 0, kInf, -kInf},
                         {0.841344774f, -0.158655256f, 1.95449972f, -1.43325781e-06f, 0, kInf,
                          kNaN});
  expect_unary_reference("gelu", {{"approximate", std::string("tanh")}}, {1, -1, -5},
                         {0.841192007f, -0.158808008f, -2.29179619e-07f});
  expect_unary_reference("sqrt", {}, {4, 2, -1, kInf}, {2, 1.41421354f, kNaN, kInf});
  expect_unary_reference("rsqrt", {}, {4, 2, 0, -0.0f}, {0.5f, 0.707106769f, kInf, -kInf});
}

TEST(OpsElementwise, ReferenceBinaryBroadcastsAsNumPy) {
  // [2, 1] op [3]: out[i][j] = a[i] op b[j].
  OneNode node("sub", {type_of(DType::F32, {2, 1}), type_of(DType::F32, {3})});
  auto out = test::run_kernel(*node.node, "reference",
                              {test::tensor_of({2, 1}, {10, 20}), test::tensor_of({3}, {1, 2, 3})});
  EXPECT_EQ(out[0].sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(test::values_of<float>(out[0]), (std::vector<float>{9, 8, 7, 19, 18, 17}));

  OneNode div("div", {type_of(DType::F32, {2, 2}), type_of(DType::F32, {})});
  out = test::run_kernel(*div.node, "reference",
                         {test::tensor_of({2, 2}, {1, -3, 0, 5}), test::tensor_of({}, {0})});
  std::vector<float> q = test::values_of<float>(out[0]);
  EXPECT_EQ(q[0], kInf);
  EXPECT_EQ(q[1], -kInf);
  EXPECT_TRUE(std::isnan(q[2]));
  EXPECT_EQ(q[3], kInf);
}

TEST(OpsElementwise, ReferenceIntegerArithmeticWrapsAround) {
  OneNode add("add", {type_of(DType::I32, {3}), type_of(DType::I32, {1})});
  Tensor a = Tensor::empty(DType::I32, {3}), b = Tensor::empty(DType::I32, {1});
  const int32_t a_values[] = {INT32_MAX, -5, 7};
  std::memcpy(a.data(), a_values, sizeof a_values);
  b.data<int32_t>()[0] = 1;
  EXPECT_EQ(test::values_of<int32_t>(test::run_kernel(*add.node, "reference", {a, b})[0]),
            (std::vector<int32_t>{INT32_MIN, -4, 8}));

  OneNode mul("mul", {type_of(DType::I64, {2}), type_of(DType::I64, {2})});
  Tensor c = Tensor::empty(DType::I64, {2});
  c.data<int64_t>()[0] = INT64_MAX;
  c.data<int64_t>()[1] = -3;
  EXPECT_EQ(test::values_of<int64_t>(test::run_kernel(*mul.node, "reference", {c, c})[0]),
            (std::vector<int64_t>{1, 9}));

  OneNode neg("neg", {type_of(DType::I64, {2})});
  c.data<int64_t>()[0] = INT64_MIN;
  EXPECT_EQ(test::values_of<int64_t>(test::run_kernel(*neg.node, "reference", {c})[0]),
            (std::vector<int64_t>{INT64_MIN, 3}));
}

TEST(OpsElementwise, ReferenceF64KeepsDoublePrecision) {
  OneNode node("add", {type_of(DType::F64, {1}), type_of(DType::F64, {1})});
  Tensor a = Tensor::empty(DType::F64, {1}), b = Tensor::empty(DType::F64, {1});
  a.data<double>()[0] = 1.0;
  b.data<double>()[0] = 1e-15;
  EXPECT_EQ(test::run_kernel(*node.node, "reference", {a, b})[0].data<double>()[0], 1.0 + 1e-15);
}

// ---------------------------------------------------------------- AVX2 kernels

TEST(OpsElementwise, Avx2DeclinesWhatItCannotRun) {
  OneNode f64("exp", {type_of(DType::F64, {4})});
  OneNode f32("exp", {type_of(DType::F32, {4})});
  if (!test::has_kernel("exp", "avx2")) GTEST_SKIP() << "not an x86 build";
  EXPECT_NE(test::unsupported_reason(*f64.node, "avx2"), "");
  if (avx2_available()) EXPECT_EQ(test::unsupported_reason(*f32.node, "avx2"), "");
  else EXPECT_NE(test::unsupported_reason(*f32.node, "avx2").find("AVX2"), std::string::npos);
}

TEST(OpsElementwise, Avx2UnaryMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(7);
  for (const UnaryCase& c : unary_cases()) {
    for (int64_t n : {0, 1, 3, 7, 17, 1 << 20}) {
      SCOPED_TRACE(case_name(c) + " n=" + std::to_string(n));
      OneNode node(c.op, {type_of(DType::F32, {n})}, c.attrs);
      Tensor x = test::random_tensor(DType::F32, {n}, rng, -12, 12);
      test::sprinkle_extremes(x, rng);
      Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
      for (int threads : {1, 2}) {
        Tensor got = test::run_kernel(*node.node, "avx2", {x}, threads)[0];
        if (c.max_ulp == 0) {
          EXPECT_TRUE(test::same_values(got, expected));
        } else {
          int64_t where = 0;
          EXPECT_LE(test::max_ulp(got, expected, &where), c.max_ulp)
              << "x = " << x.data<float>()[where] << ": " << got.data<float>()[where] << " vs "
              << expected.data<float>()[where];
        }
      }
    }
  }
}

// Every 251st f32 bit pattern (17 million values: every exponent, subnormals, infs and NaNs),
// through the AVX2 kernel and the reference kernel; prints the largest ULP error of each op.
TEST(OpsElementwise, Avx2UlpErrorOverAllExponents) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  constexpr uint64_t kStride = 251;
  const int64_t n = static_cast<int64_t>((uint64_t{1} << 32) / kStride);
  Tensor x = Tensor::empty(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.data<uint32_t>()[i] = static_cast<uint32_t>(static_cast<uint64_t>(i) * kStride);
  for (const UnaryCase& c : unary_cases()) {
    OneNode node(c.op, {type_of(DType::F32, {n})}, c.attrs);
    Tensor expected = test::run_kernel(*node.node, "reference", {x}, 2)[0];
    Tensor got = test::run_kernel(*node.node, "avx2", {x}, 2)[0];
    int64_t where = 0;
    int64_t worst = test::max_ulp(got, expected, &where);
    std::printf("[ ulp      ] %-12s max %lld ULP (x = %.9g)\n", case_name(c).c_str(),
                static_cast<long long>(worst), x.data<float>()[where]);
    EXPECT_LE(worst, c.max_ulp) << case_name(c) << " at x = " << x.data<float>()[where] << ": "
                                << got.data<float>()[where] << " vs "
                                << expected.data<float>()[where];
  }
}

TEST(OpsElementwise, Avx2BinaryMatchesReferenceOnEveryBroadcastPattern) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  using Sizes = std::vector<int64_t>;
  const std::vector<std::pair<Sizes, Sizes>> patterns = {
      {{1}, {1}}, {{3}, {3}}, {{7}, {7}}, {{17}, {17}}, {{1 << 20}, {1 << 20}},  // same shape
      {{17}, {}}, {{}, {1000003}}, {{1}, {33}},                                   // scalar
      {{5, 17}, {17}}, {{3}, {4, 3}}, {{1024, 1000}, {1000}},                     // row vector
      {{5, 17}, {5, 1}}, {{7, 1}, {1, 9}}, {{2, 3, 5, 7}, {1, 3, 1, 1}},          // general
      {{4, 1, 3}, {1, 5, 1}}, {{2, 3, 4}, {2, 1, 4}}, {{0, 3}, {3}}, {{2, 0}, {1}},
  };
  std::mt19937 rng(11);
  for (const char* op : {"add", "sub", "mul", "div"}) {
    for (const auto& [a_sizes, b_sizes] : patterns) {
      SCOPED_TRACE(std::string(op) + " " + shape_string(a_sizes) + " " + shape_string(b_sizes));
      OneNode node(op, {type_of(DType::F32, a_sizes), type_of(DType::F32, b_sizes)});
      Tensor a = test::random_tensor(DType::F32, a_sizes, rng);
      Tensor b = test::random_tensor(DType::F32, b_sizes, rng);
      test::sprinkle_extremes(a, rng);
      test::sprinkle_extremes(b, rng);
      Tensor expected = test::run_kernel(*node.node, "reference", {a, b})[0];
      for (int threads : {1, 2})
        EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, "avx2", {a, b}, threads)[0],
                                      expected));
    }
  }
}

TEST(OpsElementwise, ReferenceKernelsRunEveryDType) {
  std::mt19937 rng(3);
  for (DType dtype : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    OneNode node("mul", {type_of(dtype, {3, 1}), type_of(dtype, {1, 4})});
    Tensor a = test::random_tensor(dtype, {3, 1}, rng, -100, 100);
    Tensor b = test::random_tensor(dtype, {1, 4}, rng, -100, 100);
    Tensor out = test::run_kernel(*node.node, "reference", {a, b}, 2)[0];
    auto at = [](const Tensor& t, int64_t i) -> double {
      switch (t.dtype()) {
        case DType::F32: return t.data<float>()[i];
        case DType::F64: return t.data<double>()[i];
        case DType::I32: return t.data<int32_t>()[i];
        default: return static_cast<double>(t.data<int64_t>()[i]);
      }
    };
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double expected = at(a, i) * at(b, j);
        if (dtype == DType::F32) expected = static_cast<float>(expected);
        EXPECT_EQ(at(out, i * 4 + j), expected);
      }
  }
}

}  // namespace
}  // namespace kiln
