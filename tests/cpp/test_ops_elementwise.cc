// Elementwise ops: type inference (broadcasting, symbolic dims, PyTorch's type promotion), the
// reference kernels against hand-computed values, the AVX2 kernels against the reference
// kernels, and every op through the executor.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>
#include <numbers>
#include <optional>
#include <set>
#include <span>
#include <tuple>

#include "kernels/cpu/elementwise_avx2.h"
#include "ops/type_promotion.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A tensor of any dtype from values given as T.
template <typename T>
Tensor tensor_from(const std::vector<int64_t>& sizes, const std::vector<T>& values) {
  Tensor t = Tensor::empty(DTypeOf<T>::value, sizes);
  KILN_ASSERT(static_cast<int64_t>(values.size()) == t.numel());
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}

// Runs one kernel on a node whose inputs `constants` marks as graph constants (a kernel may
// specialize on them, as pow's AVX2 kernel does on its exponent).
Tensor run_with_constants(const Node& node, const std::string& kernel,
                          const std::vector<Tensor>& inputs, const std::vector<bool>& constants,
                          int threads = 1) {
  KernelSpec spec = test::spec_of(node, threads);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (constants[i]) spec.constant_inputs[i] = &inputs[i];
  const KernelDef& def = test::kernel_of(node.op(), kernel);
  KILN_ASSERT(def.unsupported_reason(spec).empty(), def.unsupported_reason(spec));
  std::unique_ptr<KernelInstance> instance = def.create(spec);
  std::vector<const void*> in;
  for (const Tensor& t : inputs) in.push_back(t.data());
  Tensor out = Tensor::empty(spec.outputs[0].dtype, spec.output_sizes(0));
  void* out_ptr = out.data();
  instance->run(in, std::span<void* const>(&out_ptr, 1), nullptr);
  return out;
}

AttrMap wrapped(std::vector<int64_t> inputs) { return {{"wrapped_numbers", std::move(inputs)}}; }

// The reference kernel's output for one node.
Tensor reference(const OneNode& node, const std::vector<Tensor>& inputs) {
  return test::run_kernel(*node.node, "reference", inputs)[0];
}

// ---------------------------------------------------------------- the ULP cases

// The largest ULP error each AVX2 f32 kernel may have against the reference kernel (which
// computes in double, so it is within half an ULP of the true value). docs/ops.md lists them.
struct UnaryCase {
  std::string op;
  AttrMap attrs;
  int64_t max_ulp;  // 0: bit for bit
  bool sweep;       // measured over all exponents (transcendental functions)
};
const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"relu", {}, 0, false},
      {"neg", {}, 0, false},
      {"abs", {}, 0, false},
      {"floor", {}, 0, false},
      {"ceil", {}, 0, false},
      {"trunc", {}, 0, false},
      {"round", {}, 0, false},
      {"reciprocal", {}, 0, false},
      {"sqrt", {}, 0, false},
      {"rsqrt", {}, 1, true},
      {"exp", {}, 1, true},
      {"log", {}, 1, true},
      {"erf", {}, 1, true},
      {"sigmoid", {}, 2, true},
      {"silu", {}, 2, true},
      {"tanh", {}, 2, true},
      {"gelu", {{"approximate", std::string("none")}}, 5, true},
      {"gelu", {{"approximate", std::string("tanh")}}, 3, true},
      {"expm1", {}, 1, true},
      {"log1p", {}, 2, true},
      {"log2", {}, 1, true},
      {"mish", {}, 5, true},
      {"elu", {}, 1, true},
      {"elu", {{"alpha", 1.6732632423543772}, {"scale", 1.0507009873554805}}, 2, true},
      {"softplus", {}, 2, true},
      {"softplus", {{"beta", 2.0}, {"threshold", 10.0}}, 2, true},
      // x * beta inexact: its rounding error is carried into the exponential (61 ULP without).
      {"softplus", {{"beta", 0.3}}, 4, true},
      {"sin", {}, 2, true},
      {"cos", {}, 2, true},
      {"hardswish", {}, 0, false},
      {"hardsigmoid", {}, 0, false},
      {"leaky_relu", {{"negative_slope", 0.2}}, 0, false},
      {"hardtanh", {{"min_val", -2.0}, {"max_val", 3.5}}, 0, false},
      {"clamp", {{"min", 0.0}}, 0, false},
      {"clamp", {{"min", -1.5}, {"max", 6.0}}, 0, false},
  };
  return cases;
}

std::string case_name(const UnaryCase& c) {
  std::string name = c.op;
  for (const auto& [key, value] : c.attrs) {
    name += " " + key + "=";
    if (auto s = std::get_if<std::string>(&value)) name += *s;
    else if (auto d = std::get_if<double>(&value)) name += std::to_string(*d);
  }
  return name;
}

bool avx2_available() {
  OneNode n("add", {type_of(DType::F32, {1}), type_of(DType::F32, {1})});
  return test::has_kernel("add", "avx2") && test::unsupported_reason(*n.node, "avx2").empty();
}

// ---------------------------------------------------------------- type promotion

TEST(OpsElementwise, PromoteTypesMatchesTorch) {
  // torch.promote_types(row, column), columns in the order of the rows.
  const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"f32", {"f32", "f32", "f32", "f64", "f32", "f32", "f32", "f32", "f32", "f32"}},
      {"f16", {"f32", "f16", "f32", "f64", "f16", "f16", "f16", "f16", "f16", "f16"}},
      {"bf16", {"f32", "f32", "bf16", "f64", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16"}},
      {"f64", {"f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64"}},
      {"i64", {"f32", "f16", "bf16", "f64", "i64", "i64", "i64", "i64", "i64", "i64"}},
      {"i32", {"f32", "f16", "bf16", "f64", "i64", "i32", "i32", "i32", "i32", "i32"}},
      {"i16", {"f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i16", "i16", "i16"}},
      {"i8", {"f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "i16", "i8"}},
      {"u8", {"f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i16", "u8", "u8"}},
      {"bool", {"f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool"}},
  };
  for (const auto& [row, results] : table)
    for (size_t j = 0; j < table.size(); ++j)
      EXPECT_EQ(dtype_name(promote_types(*parse_dtype(row), *parse_dtype(table[j].first))),
                results[j])
          << row << " with " << table[j].first;
}

TEST(OpsElementwise, ResultTypeMatchesTorchForRanksAndWrappedNumbers) {
  // {dtype, rank, wrapped number}: the expected results are torch.result_type's.
  struct Case {
    PromotionOperand a, b;
    DType expected;
  };
  const Case cases[] = {
      {{DType::I32, 1, false}, {DType::F64, 0, true}, DType::F32},
      {{DType::I32, 1, false}, {DType::I64, 0, true}, DType::I32},
      {{DType::U8, 1, false}, {DType::I64, 0, true}, DType::U8},
      {{DType::Bool, 1, false}, {DType::I64, 0, true}, DType::I64},
      {{DType::Bool, 1, false}, {DType::F64, 0, true}, DType::F32},
      {{DType::Bool, 1, false}, {DType::Bool, 0, true}, DType::Bool},
      {{DType::F16, 1, false}, {DType::F64, 0, true}, DType::F16},
      {{DType::F16, 1, false}, {DType::F64, 0, false}, DType::F16},
      {{DType::I32, 1, false}, {DType::I64, 0, false}, DType::I32},
      {{DType::I32, 1, false}, {DType::F64, 0, false}, DType::F64},
      {{DType::I32, 0, false}, {DType::F16, 0, false}, DType::F16},
      {{DType::I32, 0, false}, {DType::F64, 0, true}, DType::F32},
      {{DType::U8, 1, false}, {DType::I8, 0, false}, DType::U8},
      {{DType::Bool, 1, false}, {DType::I8, 0, false}, DType::I8},
      {{DType::I64, 0, true}, {DType::F64, 0, true}, DType::F32},
      {{DType::I64, 0, true}, {DType::I64, 0, true}, DType::I64},
      {{DType::Bool, 0, false}, {DType::I64, 0, true}, DType::I64},
      {{DType::F64, 0, false}, {DType::F32, 1, false}, DType::F32},
      {{DType::I8, 0, false}, {DType::U8, 1, false}, DType::U8},
      {{DType::BF16, 1, false}, {DType::F16, 0, false}, DType::BF16},
  };
  for (const Case& c : cases) {
    const PromotionOperand ops[] = {c.a, c.b};
    EXPECT_EQ(result_type(ops), c.expected)
        << dtype_name(c.a.dtype) << " rank " << c.a.rank << (c.a.wrapped_number ? " wrapped" : "")
        << " with " << dtype_name(c.b.dtype) << " rank " << c.b.rank
        << (c.b.wrapped_number ? " wrapped" : "");
  }
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
  Value* c = g.add_input("c", type_of(DType::Bool, {5, 1, 1, 1}));
  EXPECT_EQ(g.add("where", {c, a, b})->type(), type_of(DType::F32, {5, 2, 3, 4}));
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
  Value* c = g.add_input("c", type_of(DType::Bool, {5}));
  EXPECT_EQ(test::error_code_of([&] { g.add("where", {c, a, a}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("[5]"), std::string::npos) << message;
}

// Output dtypes as PyTorch computes them.
TEST(OpsElementwise, OutputDTypesFollowPyTorch) {
  struct Case {
    std::string op;
    std::vector<DType> inputs;
    DType expected;
    AttrMap attrs = {};
  };
  const Case cases[] = {
      {"add", {DType::I32, DType::F32}, DType::F32},
      {"mul", {DType::U8, DType::I8}, DType::I16},
      {"add", {DType::Bool, DType::Bool}, DType::Bool},
      {"sub", {DType::F16, DType::BF16}, DType::F32},
      {"div", {DType::I32, DType::I32}, DType::F32},
      {"div", {DType::I32, DType::I64}, DType::I64, {{"rounding_mode", std::string("floor")}}},
      {"div", {DType::U8, DType::U8}, DType::U8, {{"rounding_mode", std::string("trunc")}}},
      {"pow", {DType::I32, DType::F32}, DType::F32},
      {"remainder", {DType::I8, DType::I8}, DType::I8},
      {"maximum", {DType::Bool, DType::Bool}, DType::Bool},
      {"eq", {DType::F32, DType::I64}, DType::Bool},
      {"lt", {DType::Bool, DType::F16}, DType::Bool},
      {"logical_xor", {DType::F32, DType::I32}, DType::Bool},
      {"exp", {DType::I64}, DType::F32},
      {"log", {DType::Bool}, DType::F32},
      {"sigmoid", {DType::F16}, DType::F16},
      {"reciprocal", {DType::U8}, DType::F32},
      {"abs", {DType::I8}, DType::I8},
      {"sign", {DType::Bool}, DType::Bool},
      {"floor", {DType::I32}, DType::I32},
      {"clamp", {DType::U8}, DType::U8},
      {"hardtanh", {DType::I64}, DType::I64},
      {"silu", {DType::BF16}, DType::BF16},
      {"isnan", {DType::I32}, DType::Bool},
      {"logical_not", {DType::F64}, DType::Bool},
      {"where", {DType::Bool, DType::I32, DType::F64}, DType::F64},
      {"where", {DType::U8, DType::I8, DType::U8}, DType::I16},
  };
  for (const Case& c : cases) {
    std::vector<TensorType> types;
    for (DType d : c.inputs) types.push_back(type_of(d, {3}));
    OneNode node(c.op, types, c.attrs);
    EXPECT_EQ(dtype_name(node.output_type().dtype), dtype_name(c.expected)) << c.op;
  }
}

TEST(OpsElementwise, WrappedNumbersPromoteByCategoryOnly) {
  Graph g;
  Value* i = g.add_input("i", type_of(DType::I32, {4}));
  Value* h = g.add_input("h", type_of(DType::F16, {4}));
  Value* b = g.add_input("b", type_of(DType::Bool, {4}));
  Value* half = g.add_constant("half", tensor_from<double>({}, {0.5}));
  Value* two = g.add_constant("two", tensor_from<int64_t>({}, {2}));
  // A Python float makes an int tensor f32 (not f64); a rank-0 f64 tensor makes it f64.
  EXPECT_EQ(g.add("mul", {i, half}, wrapped({1}))->type().dtype, DType::F32);
  EXPECT_EQ(g.add("mul", {i, half})->type().dtype, DType::F64);
  // Neither widens an f16 tensor.
  EXPECT_EQ(g.add("add", {h, half}, wrapped({1}))->type().dtype, DType::F16);
  EXPECT_EQ(g.add("add", {half, h}, wrapped({0}))->type().dtype, DType::F16);
  // A Python int keeps i32; against bool it is i64, as torch's bool_tensor + 2.
  EXPECT_EQ(g.add("sub", {i, two}, wrapped({1}))->type().dtype, DType::I32);
  EXPECT_EQ(g.add("add", {b, two}, wrapped({1}))->type().dtype, DType::I64);
  EXPECT_EQ(g.add("where", {b, i, half}, wrapped({2}))->type().dtype, DType::F32);
  EXPECT_EQ(g.add("pow", {half, i}, wrapped({0}))->type().dtype, DType::F32);
}

TEST(OpsElementwise, BadWrappedNumbersAreE40002) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {4}));
  Value* c = g.add_input("c", type_of(DType::Bool, {4}));
  Value* s = g.add_constant("s", tensor_from<double>({}, {0.5}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("add", {x, s}, wrapped({2})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("input 2"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("add", {x, s}, wrapped({0})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("where", {c, x, s}, wrapped({0})); }),
            ErrorCode::ShapeInference);
}

TEST(OpsElementwise, UnsupportedDTypesAndAttributesAreE40002) {
  Graph g;
  Value* i = g.add_input("i", type_of(DType::I32, {2}));
  Value* u = g.add_input("u", type_of(DType::U8, {2}));
  Value* b = g.add_input("b", type_of(DType::Bool, {2}));
  Value* f = g.add_input("f", type_of(DType::F32, {2}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("silu", {i}); }, &message), ErrorCode::ShapeInference);
  EXPECT_NE(message.find("silu takes floating dtypes, not i32"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("sub", {b, b}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("not bool"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("relu", {b}); }), ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("where", {f, f, f}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("condition must be bool"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("gelu", {f}, {{"approximate", std::string("erf")}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("\"none\", \"tanh\""), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("div", {f, f}, {{"rounding_mode", std::string("round")}}); },
                &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("\"none\", \"trunc\", \"floor\""), std::string::npos) << message;
  // Bounds must fit an integer dtype, as PyTorch's Scalar conversion.
  EXPECT_EQ(test::error_code_of([&] { g.add("clamp", {u}, {{"max", 300.0}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("300 is outside the range of u8"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("clamp", {i}, {{"min", double(kNaN)}}); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("round", {i}, {{"decimals", int64_t{2}}}); }),
            ErrorCode::ShapeInference);
  // alpha must be an integer for integers (PyTorch's rule), 0 or 1 for bool.
  EXPECT_EQ(test::error_code_of([&] { g.add("add", {i, i}, {{"alpha", 2.5}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("alpha"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("add", {b, b}, {{"alpha", 2.0}}); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(g.add("gelu", {f})->producer()->attr_string("approximate"), "none");
  EXPECT_EQ(g.add("div", {i, i})->producer()->attr_string("rounding_mode"), "none");
}

TEST(OpsElementwise, SymbolicDimsPropagate) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(8)}});
  Value* bias = g.add_input("bias", type_of(DType::F32, {8}));
  Value* col = g.add_input("col", TensorType{DType::F32, {batch, Dim(1)}});
  Value* y = g.add("gelu", {g.add("add", {x, bias})}, {{"approximate", std::string("tanh")}});
  Value* z = g.add("mul", {y, col});
  Value* mask = g.add("gt", {z, bias});
  Value* w = g.add("where", {mask, z, g.add("silu", {col})});
  g.set_outputs({w});
  EXPECT_EQ(y->type().shape, (Shape{batch, Dim(8)}));
  EXPECT_EQ(z->type().shape, (Shape{batch, Dim(8)}));
  EXPECT_EQ(mask->type(), (TensorType{DType::Bool, {batch, Dim(8)}}));
  EXPECT_EQ(w->type().shape, (Shape{batch, Dim(8)}));
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
      test::values_of<float>(reference(node, {x}));
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
  expect_unary_reference("abs", {}, {-2, 3, -0.0f, -kInf}, {2, 3, 0, kInf});
  expect_unary_reference("sign", {}, {-2, 3, -0.0f, kNaN, -kInf}, {-1, 1, 0, 0, -1});
  expect_unary_reference("exp", {}, {0, 1, -1, 88.8f, -104, kNaN},
                         {1, 2.71828175f, 0.36787945f, kInf, 0, kNaN});
  expect_unary_reference("expm1", {}, {1e-10f, 1, -kInf}, {1e-10f, 1.71828187f, -1});
  expect_unary_reference("log", {}, {1, 2, 0, -1, kInf, 1e-45f},
                         {0, 0.693147182f, -kInf, kNaN, kInf, -103.278931f});
  expect_unary_reference("log1p", {}, {1e-10f, 1, -1}, {1e-10f, 0.693147182f, -kInf});
  expect_unary_reference("log2", {}, {8, 3, 0}, {3, 1.58496249f, -kInf});
  expect_unary_reference("sin", {}, {1, -0.0f, kInf}, {0.841470957f, -0.0f, kNaN});
  expect_unary_reference("cos", {}, {1, 0}, {0.540302277f, 1});
  expect_unary_reference("tan", {}, {1, -0.0f, kInf}, {1.55740774f, -0.0f, kNaN});
  expect_unary_reference("asin", {}, {0.5f, 2, -1}, {0.52359879f, kNaN, -1.57079637f});
  expect_unary_reference("acos", {}, {0.5f, 1, -1}, {1.04719758f, 0, 3.14159274f});
  expect_unary_reference("atan", {}, {1, kInf, -0.0f}, {0.785398185f, 1.57079637f, -0.0f});
  expect_unary_reference("sinh", {}, {1, 100, -0.0f}, {1.17520118f, kInf, -0.0f});
  expect_unary_reference("cosh", {}, {1, 0, -kInf}, {1.54308069f, 1, kInf});
  expect_unary_reference("asinh", {}, {1, -kInf, -0.0f}, {0.881373584f, -kInf, -0.0f});
  expect_unary_reference("acosh", {}, {2, 0.5f, 1}, {1.31695795f, kNaN, 0});
  expect_unary_reference("atanh", {}, {0.5f, 1, 2}, {0.549306154f, kInf, kNaN});
  expect_unary_reference("exp2", {}, {3, 0.5f, -kInf, 128}, {8, 1.41421354f, 0, kInf});
  expect_unary_reference("log10", {}, {1000, 2, 0, -1}, {3, 0.30103001f, -kInf, kNaN});
  expect_unary_reference("reciprocal", {}, {4, -0.0f, 3}, {0.25f, -kInf, 0.333333343f});
  expect_unary_reference("sigmoid", {}, {0, 2, -2, -100, kInf, -kInf},
                         {0.5f, 0.880797088f, 0.119202919f, 3.78350585e-44f, 1, 0});
  expect_unary_reference("tanh", {}, {0.5f, -1, 20, -0.0f},
                         {0.462117165f, -0.761594176f, 1, -0.0f});
  expect_unary_reference("erf", {}, {0.5f, -1, 4, -0.0f, -kInf},
                         {0.520499885f, -0.842700779f, 1, -0.0f, -1});
  expect_unary_reference("gelu", {}, {1, -1, 2, -5, 0, kInf, -kInf},
                         {0.841344774f, -0.158655256f, 1.95449972f, -1.43325781e-06f, 0, kInf,
                          kNaN});
  expect_unary_reference("gelu", {{"approximate", std::string("tanh")}}, {1, -1, -5},
                         {0.841192007f, -0.158808008f, -2.29179619e-07f});
  expect_unary_reference("silu", {}, {1, -1, -100, kInf, -kInf},
                         {0.731058598f, -0.268941432f, -3.72044742e-42f, kInf, kNaN});
  expect_unary_reference("mish", {}, {1, -1, 30}, {0.865098417f, -0.30340147f, 30});
  expect_unary_reference("hardswish", {}, {1, -3, 4, -1, kNaN},
                         {0.666666687f, -0.0f, 4, -0.333333343f, kNaN});
  expect_unary_reference("hardsigmoid", {}, {1, -4, 4, kNaN}, {0.666666687f, 0, 1, kNaN});
  expect_unary_reference("leaky_relu", {}, {2, -2, -0.0f, kNaN}, {2, -0.0199999996f, -0.0f, kNaN});
  expect_unary_reference("leaky_relu", {{"negative_slope", 0.2}}, {-1}, {-0.200000003f});
  expect_unary_reference("elu", {}, {2, -1, -kInf}, {2, -0.632120550f, -1});
  expect_unary_reference("elu", {{"alpha", 2.0}, {"scale", 3.0}, {"input_scale", 0.5}}, {2, -1},
                         {6, -2.36081600f});
  expect_unary_reference("softplus", {}, {0, 30, -20}, {0.693147182f, 30, 2.06115369e-09f});
  expect_unary_reference("softplus", {{"beta", 2.0}, {"threshold", 4.0}}, {1, 3},
                         {1.06346405f, 3});
  expect_unary_reference("hardtanh", {}, {-2, 0.5f, 2, -0.0f, kNaN}, {-1, 0.5f, 1, -0.0f, kNaN});
  expect_unary_reference("clamp", {{"min", 0.0}}, {-2, 5, -0.0f, kNaN}, {0, 5, -0.0f, kNaN});
  expect_unary_reference("clamp", {{"min", 2.0}, {"max", 1.0}}, {0, 5}, {1, 1});
  expect_unary_reference("clamp", {{"max", double(kNaN)}}, {0}, {kNaN});
  expect_unary_reference("floor", {}, {-0.5f, 2.5f, -0.0f}, {-1, 2, -0.0f});
  expect_unary_reference("ceil", {}, {-0.5f, 2.5f}, {-0.0f, 3});
  expect_unary_reference("trunc", {}, {-1.5f, 2.5f}, {-1, 2});
  expect_unary_reference("round", {}, {0.5f, 1.5f, 2.5f, -0.5f, -2.6f, 8388609},
                         {0, 2, 2, -0.0f, -3, 8388609});
  expect_unary_reference("round", {{"decimals", int64_t{2}}}, {1.2345f, -0.125f},
                         {1.23000002f, -0.119999997f});
  expect_unary_reference("round", {{"decimals", int64_t{-2}}}, {1250, 1351}, {1200, 1400});
  expect_unary_reference("sqrt", {}, {4, 2, -1, kInf}, {2, 1.41421354f, kNaN, kInf});
  expect_unary_reference("rsqrt", {}, {4, 2, 0, -0.0f}, {0.5f, 0.707106769f, kInf, -kInf});
}

TEST(OpsElementwise, ReferencePredicatesGiveBool) {
  OneNode isnan("isnan", {type_of(DType::F32, {4})});
  OneNode isinf("isinf", {type_of(DType::F32, {4})});
  OneNode lnot("logical_not", {type_of(DType::F32, {4})});
  const Tensor x = test::tensor_of({4}, {kNaN, kInf, -kInf, 0});
  EXPECT_EQ(test::values_of<bool>(reference(isnan, {x})),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(test::values_of<bool>(reference(isinf, {x})),
            (std::vector<bool>{false, true, true, false}));
  // NaN is true, as in PyTorch.
  EXPECT_EQ(test::values_of<bool>(reference(lnot, {x})),
            (std::vector<bool>{false, false, false, true}));
  OneNode int_isnan("isnan", {type_of(DType::I32, {2})});
  EXPECT_EQ(test::values_of<bool>(reference(int_isnan, {tensor_from<int32_t>({2}, {1, 0})})),
            (std::vector<bool>{false, false}));
}

// Binary op on two f32 tensors of the same shape, reference kernel.
std::vector<float> binary_reference(const std::string& op, const std::vector<float>& a,
                                    const std::vector<float>& b, AttrMap attrs = {}) {
  const int64_t n = static_cast<int64_t>(a.size());
  OneNode node(op, {type_of(DType::F32, {n}), type_of(DType::F32, {n})}, std::move(attrs));
  return test::values_of<float>(test::run_kernel(
      *node.node, "reference", {test::tensor_of({n}, a), test::tensor_of({n}, b)})[0]);
}

void expect_same_floats(const std::vector<float>& got, const std::vector<float>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(test::same_values(test::tensor_of({1}, {got[i]}),
                                  test::tensor_of({1}, {expected[i]})))
        << "element " << i << ": " << got[i] << " vs " << expected[i];
}

TEST(OpsElementwise, ReferenceBinaryMatchesHandComputedValues) {
  // Expected values: Python's / PyTorch's float semantics, worked by hand.
  const AttrMap floor{{"rounding_mode", std::string("floor")}};
  const AttrMap trunc{{"rounding_mode", std::string("trunc")}};
  expect_same_floats(
      binary_reference("div", {7, -7, -0.0f, 1, 5, -1}, {2, 2, 3, -kInf, 0, 0}, floor),
                     {3, -4, -0.0f, -1, kInf, -kInf});
  expect_same_floats(binary_reference("div", {7, -7, 1e10f}, {2, 2, 3}, trunc),
                     {3, -3, 3.33333325e9f});
  expect_same_floats(
      binary_reference("remainder", {-1, 1, -0.0f, 5, kInf, 7}, {kInf, -kInf, 2, 0, 2, -3}),
                     {kInf, -kInf, -0.0f, kNaN, kNaN, -2});
  expect_same_floats(binary_reference("fmod", {-7, 7, 5.5f}, {3, -3, 0}), {-1, 1, kNaN});
  expect_same_floats(binary_reference("atan2", {1, -1, 0, -0.0f}, {1, 1, -1, -1}),
                     {0.785398163f, -0.785398163f, 3.14159274f, -3.14159274f});
  expect_same_floats(binary_reference("hypot", {3, kInf, kNaN}, {4, kNaN, kInf}), {5, kInf, kInf});
  // Equal infinities give themselves; otherwise max + log1p(exp(-|a - b|)).
  expect_same_floats(binary_reference("logaddexp", {kInf, -kInf, 0, 1}, {kInf, -kInf, 0, kNaN}),
                     {kInf, -kInf, 0.693147181f, kNaN});
  expect_same_floats(binary_reference("copysign", {1, 2, -3}, {-0.0f, 3, 1}), {-1, 2, 3});
  expect_same_floats(
      binary_reference("pow", {2, -2, 4, -kInf, kNaN, 1}, {10, 3, -0.5f, 0.5f, 0, kNaN}),
                     {1024, -8, 0.5f, kInf, 1, 1});
  // alpha scales b and the sum rounds once (a fused multiply-add, as PyTorch's): with
  // b = 1 + 2^-23 and alpha = 1 - 2^-23, alpha * b = 1 - 2^-46, which alone would round to 1.
  const double alpha = 1 - std::ldexp(1.0, -23);
  const float b_fma = 1 + std::ldexp(1.0f, -23);
  expect_same_floats(binary_reference("add", {-1, 2}, {b_fma, 3}, {{"alpha", alpha}}),
                     {-std::ldexp(1.0f, -46), static_cast<float>(2 + alpha * 3)});
  expect_same_floats(binary_reference("sub", {1, 2}, {b_fma, 3}, {{"alpha", alpha}}),
                     {std::ldexp(1.0f, -46), static_cast<float>(2 - alpha * 3)});
  expect_same_floats(binary_reference("maximum", {1, kNaN, 2, -0.0f, 0}, {2, 1, kNaN, 0, -0.0f}),
                     {2, kNaN, kNaN, -0.0f, 0});
  expect_same_floats(binary_reference("minimum", {1, kNaN, 2, -0.0f}, {2, 1, kNaN, 0}),
                     {1, kNaN, kNaN, -0.0f});

  // pow with a Python-number exponent follows PyTorch's pow(Tensor, Scalar): 0.5 is sqrt, so
  // -inf gives NaN and -0 gives -0 (std::pow gives +inf and +0).
  OneNode scalar_pow("pow", {type_of(DType::F32, {3}), type_of(DType::F64, {})}, wrapped({1}));
  EXPECT_TRUE(test::same_values(
      reference(scalar_pow,
                {test::tensor_of({3}, {-kInf, -0.0f, 9}), tensor_from<double>({}, {0.5})}),
      test::tensor_of({3}, {kNaN, -0.0f, 3})));

  const std::vector<float> a = {1, 2, kNaN, 3}, b = {1, 3, kNaN, 2};
  const std::pair<const char*, std::vector<bool>> comparisons[] = {
      {"eq", {true, false, false, false}}, {"ne", {false, true, true, true}},
      {"lt", {false, true, false, false}}, {"le", {true, true, false, false}},
      {"gt", {false, false, false, true}}, {"ge", {true, false, false, true}}};
  for (const auto& [op, expected] : comparisons) {
    OneNode node(op, {type_of(DType::F32, {4}), type_of(DType::F32, {4})});
    EXPECT_EQ(test::values_of<bool>(
                  reference(node, {test::tensor_of({4}, a), test::tensor_of({4}, b)})),
              expected)
        << op;
  }
  const std::pair<const char*, std::vector<bool>> logical[] = {
      {"logical_and", {false, false, false, true}},
      {"logical_or", {false, true, true, true}},
      {"logical_xor", {false, true, true, false}}};
  for (const auto& [op, expected] : logical) {
    OneNode node(op, {type_of(DType::F32, {4}), type_of(DType::I32, {4})});
    const Tensor x = test::tensor_of({4}, {0, 0, kNaN, -2});
    const Tensor y = tensor_from<int32_t>({4}, {0, 5, 0, 1});
    EXPECT_EQ(test::values_of<bool>(reference(node, {x, y})), expected) << op;
  }
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

  // where([2, 1], [3], scalar): every input broadcast.
  OneNode where("where", {type_of(DType::Bool, {2, 1}), type_of(DType::F32, {3}),
                          type_of(DType::F32, {})});
  out = test::run_kernel(*where.node, "reference",
                         {tensor_from<bool>({2, 1}, {true, false}), test::tensor_of({3}, {1, 2, 3}),
                          test::tensor_of({}, {-1})});
  EXPECT_EQ(test::values_of<float>(out[0]), (std::vector<float>{1, 2, 3, -1, -1, -1}));
}

TEST(OpsElementwise, ReferenceIntegerArithmeticWrapsAround) {
  OneNode add("add", {type_of(DType::I32, {3}), type_of(DType::I32, {1})});
  EXPECT_EQ(test::values_of<int32_t>(reference(add, {tensor_from<int32_t>({3}, {INT32_MAX, -5, 7}),
                                                      tensor_from<int32_t>({1}, {1})})),
            (std::vector<int32_t>{INT32_MIN, -4, 8}));

  OneNode scaled("sub", {type_of(DType::I32, {2}), type_of(DType::I32, {2})}, {{"alpha", 3.0}});
  EXPECT_EQ(test::values_of<int32_t>(reference(scaled, {tensor_from<int32_t>({2}, {10, INT32_MIN}),
                                                         tensor_from<int32_t>({2}, {2, 1})})),
            (std::vector<int32_t>{4, INT32_MAX - 2}));

  OneNode mul("mul", {type_of(DType::I64, {2}), type_of(DType::I64, {2})});
  const Tensor c = tensor_from<int64_t>({2}, {INT64_MAX, -3});
  EXPECT_EQ(test::values_of<int64_t>(reference(mul, {c, c})),
            (std::vector<int64_t>{1, 9}));

  OneNode neg("neg", {type_of(DType::I64, {2})});
  EXPECT_EQ(test::values_of<int64_t>(reference(neg, {tensor_from<int64_t>({2}, {INT64_MIN, -3})})),
            (std::vector<int64_t>{INT64_MIN, 3}));

  OneNode u8("add", {type_of(DType::U8, {2}), type_of(DType::U8, {2})});
  EXPECT_EQ(test::values_of<uint8_t>(reference(
                u8, {tensor_from<uint8_t>({2}, {250, 1}), tensor_from<uint8_t>({2}, {10, 2})})),
            (std::vector<uint8_t>{4, 3}));
  OneNode abs("abs", {type_of(DType::I8, {3})});
  EXPECT_EQ(test::values_of<int8_t>(reference(abs, {tensor_from<int8_t>({3}, {-128, -5, 5})})),
            (std::vector<int8_t>{-128, 5, 5}));
}

TEST(OpsElementwise, ReferenceIntegerDivisionFollowsPyTorch) {
  const Tensor a = tensor_from<int32_t>({6}, {7, -7, 7, -7, INT32_MIN, 0});
  const Tensor b = tensor_from<int32_t>({6}, {2, 2, -2, -2, -1, 3});
  auto run = [&](const std::string& op, AttrMap attrs = {}) {
    OneNode node(op, {type_of(DType::I32, {6}), type_of(DType::I32, {6})}, std::move(attrs));
    return test::values_of<int32_t>(test::run_kernel(*node.node, "reference", {a, b})[0]);
  };
  // MIN / -1 wraps to MIN (PyTorch's own kernel traps there).
  EXPECT_EQ(run("div", {{"rounding_mode", std::string("trunc")}}),
            (std::vector<int32_t>{3, -3, -3, 3, INT32_MIN, 0}));
  EXPECT_EQ(run("div", {{"rounding_mode", std::string("floor")}}),
            (std::vector<int32_t>{3, -4, -4, 3, INT32_MIN, 0}));
  EXPECT_EQ(run("fmod"), (std::vector<int32_t>{1, -1, 1, -1, 0, 0}));
  EXPECT_EQ(run("remainder"), (std::vector<int32_t>{1, 1, -1, -1, 0, 0}));

  OneNode pow("pow", {type_of(DType::I32, {5}), type_of(DType::I32, {5})});
  EXPECT_EQ(test::values_of<int32_t>(reference(pow, {tensor_from<int32_t>({5}, {2, -1, 1, 0, 3}),
                 tensor_from<int32_t>({5}, {-1, -3, -5, 0, 40})})),
            (std::vector<int32_t>{0, -1, 1, 1, 689956897}));
}

// Bitwise ops on integers and bools, and shifts with PyTorch's results for counts below 0 or past
// the width (C++ leaves those undefined): 0 to the left, the sign fill to the right.
TEST(OpsElementwise, ReferenceBitwiseOpsFollowPyTorch) {
  auto binary = [](const std::string& op, DType dtype, const Tensor& a, const Tensor& b) {
    OneNode node(op, {type_of(dtype, a.sizes()), type_of(dtype, b.sizes())});
    return test::run_kernel(*node.node, "reference", {a, b})[0];
  };
  const Tensor a32 = tensor_from<int32_t>({3}, {12, -1, 0x0F0F});
  const Tensor b32 = tensor_from<int32_t>({3}, {10, 5, 0x00FF});
  EXPECT_EQ(test::values_of<int32_t>(binary("bitwise_and", DType::I32, a32, b32)),
            (std::vector<int32_t>{8, 5, 0x000F}));
  EXPECT_EQ(test::values_of<int32_t>(binary("bitwise_or", DType::I32, a32, b32)),
            (std::vector<int32_t>{14, -1, 0x0FFF}));
  EXPECT_EQ(test::values_of<int32_t>(binary("bitwise_xor", DType::I32, a32, b32)),
            (std::vector<int32_t>{6, -6, 0x0FF0}));
  const Tensor t = tensor_from<bool>({4}, {true, true, false, false});
  const Tensor u = tensor_from<bool>({4}, {true, false, true, false});
  EXPECT_EQ(test::values_of<bool>(binary("bitwise_xor", DType::Bool, t, u)),
            (std::vector<bool>{false, true, true, false}));

  OneNode not_i64("bitwise_not", {type_of(DType::I64, {3})});
  EXPECT_EQ(test::values_of<int64_t>(reference(not_i64, {tensor_from<int64_t>({3}, {0, -1, 5})})),
            (std::vector<int64_t>{-1, 0, -6}));
  OneNode not_u8("bitwise_not", {type_of(DType::U8, {2})});
  EXPECT_EQ(test::values_of<uint8_t>(reference(not_u8, {tensor_from<uint8_t>({2}, {0, 255})})),
            (std::vector<uint8_t>{255, 0}));
  OneNode not_bool("bitwise_not", {type_of(DType::Bool, {2})});
  EXPECT_EQ(test::values_of<bool>(reference(not_bool, {tensor_from<bool>({2}, {true, false})})),
            (std::vector<bool>{false, true}));

  EXPECT_EQ(test::values_of<int64_t>(binary("bitwise_left_shift", DType::I64,
                                            tensor_from<int64_t>({5}, {1, 1, 1, -1, 3}),
                                            tensor_from<int64_t>({5}, {0, 63, 64, 1, -1}))),
            (std::vector<int64_t>{1, INT64_MIN, 0, -2, 0}));
  EXPECT_EQ(test::values_of<int64_t>(binary("bitwise_right_shift", DType::I64,
                                            tensor_from<int64_t>({5}, {-8, -8, 8, 8, -1}),
                                            tensor_from<int64_t>({5}, {1, 64, 63, 70, -2}))),
            (std::vector<int64_t>{-4, -1, 0, 0, -1}));
  EXPECT_EQ(test::values_of<uint8_t>(binary("bitwise_left_shift", DType::U8,
                                            tensor_from<uint8_t>({2}, {200, 1}),
                                            tensor_from<uint8_t>({2}, {1, 8}))),
            (std::vector<uint8_t>{144, 0}));
  EXPECT_EQ(test::values_of<uint8_t>(binary("bitwise_right_shift", DType::U8,
                                            tensor_from<uint8_t>({2}, {200, 200}),
                                            tensor_from<uint8_t>({2}, {8, 3}))),
            (std::vector<uint8_t>{0, 25}));

  // Floats take no bitwise op, bools no shift (PyTorch: "not implemented for 'Float'").
  Graph g;
  Value* f = g.add_input("f", type_of(DType::F32, {2}));
  Value* flag = g.add_input("flag", type_of(DType::Bool, {2}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("bitwise_and", {f, f}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("bitwise_and takes integer, bool dtypes, not f32"), std::string::npos)
      << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("bitwise_left_shift", {flag, flag}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("takes integer dtypes, not bool"), std::string::npos) << message;
}

// erfc, erfinv, lgamma and digamma are evaluated in double and rounded once; at their poles and
// edges they give PyTorch's values. nextafter steps on f32's own grid; gcd wraps as PyTorch's.
TEST(OpsElementwise, ReferenceSpecialFunctionsFollowPyTorch) {
  auto unary = [](const std::string& op, const std::vector<float>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    OneNode node(op, {type_of(DType::F32, {n})});
    return test::values_of<float>(reference(node, {tensor_from<float>({n}, x)}));
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto expect_floats = [](const std::vector<float>& got, const std::vector<float>& expected) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(expected[i])) EXPECT_TRUE(std::isnan(got[i])) << i;
      else EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(expected[i]))
          << i << ": " << got[i] << " vs " << expected[i];
    }
  };
  expect_floats(unary("erfc", {0, 10, -inf, inf, nan}),
                {1, static_cast<float>(std::erfc(10.0)), 2, 0, nan});
  // erfinv(erf(v)) returns v where erf is exact enough to invert: 0.5 and 2 (the tail, Newton
  // on erfc).
  expect_floats(unary("erfinv", {1, -1, 1.5f, -0.0f, static_cast<float>(std::erf(0.5)), nan}),
                {inf, -inf, nan, -0.0f, 0.5f, nan});
  EXPECT_NEAR(unary("erfinv", {static_cast<float>(std::erf(2.0))})[0], 2.0f, 2e-6f);
  expect_floats(unary("lgamma", {1, 2, 3, 0, -1, -inf, inf, nan}),
                {0, 0, static_cast<float>(std::log(2.0)), inf, inf, inf, inf, nan});
  // psi(1) = -Euler's gamma, psi(1/2) = -gamma - 2 ln 2, psi(-1/2) = psi(1/2) + 2 (reflection).
  constexpr double kEuler = 0.57721566490153286;
  expect_floats(unary("digamma", {1, 0.5f, -0.5f, 0.0f, -0.0f, -2, -inf, inf, nan}),
                {static_cast<float>(-kEuler), static_cast<float>(-kEuler - 2 * std::log(2.0)),
                 static_cast<float>(-kEuler - 2 * std::log(2.0) + 2), -inf, inf, nan, nan, inf,
                 nan});

  OneNode next("nextafter", {type_of(DType::F32, {3}), type_of(DType::F32, {3})});
  const Tensor from = tensor_from<float>({3}, {1, 1, 0}), to = tensor_from<float>({3}, {2, 1, -1});
  expect_floats(test::values_of<float>(reference(next, {from, to})),
                {std::nextafter(1.0f, 2.0f), 1, -std::numeric_limits<float>::denorm_min()});
  OneNode gcd("gcd", {type_of(DType::I64, {4}), type_of(DType::I64, {4})});
  EXPECT_EQ(test::values_of<int64_t>(reference(
                gcd, {tensor_from<int64_t>({4}, {12, -12, INT64_MIN, INT64_MIN}),
                      tensor_from<int64_t>({4}, {18, 0, 0, 6})})),
            (std::vector<int64_t>{6, 12, INT64_MIN, -2}));

  // fma rounds once: 0.1f * 10 - 1 is the product's rounding error, which mul then sub lose.
  const TensorType one = type_of(DType::F32, {1});
  OneNode fma("fma", {one, one, one});
  expect_floats(test::values_of<float>(reference(fma, {tensor_from<float>({1}, {0.1f}),
                                                       tensor_from<float>({1}, {10}),
                                                       tensor_from<float>({1}, {-1})})),
                {std::fma(0.1f, 10.0f, -1.0f)});
  EXPECT_NE(std::fma(0.1f, 10.0f, -1.0f), 0.0f);

  // f16 and bf16 would step on f32's grid (fma round twice): refused, with what to do.
  Graph g;
  Value* h = g.add_input("h", type_of(DType::F16, {2}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("nextafter", {h, h}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("nextafter takes f32 and f64, not f16"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("fma", {h, h, h}); }), ErrorCode::ShapeInference);
}

TEST(OpsElementwise, IntegerDivisionByZeroIsE40002NamingTheNode) {
  Graph g;
  Value* a = g.add_input("a", type_of(DType::I64, {3}));
  Value* b = g.add_input("b", type_of(DType::I32, {3}));
  g.set_outputs({g.add("remainder", {a, b}, {}, "rem")});
  auto compiled = CompiledGraph::compile(g);
  int64_t x[3] = {1, 2, 3};
  int32_t ok[3] = {1, 2, 3}, zero[3] = {1, 0, 3};
  EXPECT_NO_THROW(compiled->run({TensorView{x, DType::I64, {3}}, TensorView{ok, DType::I32, {3}}}));
  std::string message;
  EXPECT_EQ(test::error_code_of(
                [&] {
                  compiled->run(
                      {TensorView{x, DType::I64, {3}}, TensorView{zero, DType::I32, {3}}});
                },
                &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("'rem'"), std::string::npos) << message;
  EXPECT_NE(message.find("division by zero"), std::string::npos) << message;
  // A float division by zero is IEEE's.
  OneNode f("remainder", {type_of(DType::F32, {1}), type_of(DType::F32, {1})});
  EXPECT_TRUE(std::isnan(
      reference(f, {test::tensor_of({1}, {1}), test::tensor_of({1}, {0})}).data<float>()[0]));
}

TEST(OpsElementwise, ReferenceMixedDTypesConvertToThePromotedDType) {
  // i32 + f32 computes in f32.
  OneNode add("add", {type_of(DType::I32, {3}), type_of(DType::F32, {3})});
  EXPECT_EQ(test::values_of<float>(reference(add, {tensor_from<int32_t>({3}, {1, 16777217, -2}),
                                                    test::tensor_of({3}, {0.5f, 0, 1})})),
            (std::vector<float>{1.5f, 16777216, -1}));
  // u8 * i8 computes in i16.
  OneNode mul("mul", {type_of(DType::U8, {2}), type_of(DType::I8, {2})});
  EXPECT_EQ(test::values_of<int16_t>(reference(
                mul, {tensor_from<uint8_t>({2}, {200, 3}), tensor_from<int8_t>({2}, {-100, 4})})),
            (std::vector<int16_t>{-20000, 12}));
  // A Python float scales an int tensor in f32; -1 compared with a u8 tensor is 255, as
  // torch's uint8_tensor < -1.
  OneNode scale("mul", {type_of(DType::I32, {2}), type_of(DType::F64, {})}, wrapped({1}));
  EXPECT_EQ(test::values_of<float>(reference(
                scale, {tensor_from<int32_t>({2}, {3, -1}), tensor_from<double>({}, {0.1})})),
            (std::vector<float>{3 * 0.1f, -0.1f}));
  OneNode lt("lt", {type_of(DType::U8, {2}), type_of(DType::I64, {})}, wrapped({1}));
  EXPECT_EQ(test::values_of<bool>(reference(
                lt, {tensor_from<uint8_t>({2}, {3, 255}), tensor_from<int64_t>({}, {-1})})),
            (std::vector<bool>{true, false}));
  // bool + bool is or, bool * bool is and.
  const Tensor p = tensor_from<bool>({3}, {true, true, false});
  const Tensor q = tensor_from<bool>({3}, {true, false, false});
  OneNode bor("add", {type_of(DType::Bool, {3}), type_of(DType::Bool, {3})});
  OneNode band("mul", {type_of(DType::Bool, {3}), type_of(DType::Bool, {3})});
  EXPECT_EQ(test::values_of<bool>(reference(bor, {p, q})),
            (std::vector<bool>{true, true, false}));
  EXPECT_EQ(test::values_of<bool>(reference(band, {p, q})),
            (std::vector<bool>{true, false, false}));
  // f16 computes in f32 and rounds to f16: 1 + 2^-11 is a tie that goes to even.
  OneNode half("add", {type_of(DType::F16, {1}), type_of(DType::F16, {1})});
  Tensor h1 = Tensor::empty(DType::F16, {1}), h2 = Tensor::empty(DType::F16, {1});
  h1.data<uint16_t>()[0] = 0x3C00;  // 1
  h2.data<uint16_t>()[0] = 0x1000;  // 2^-11
  EXPECT_EQ(reference(half, {h1, h2}).data<uint16_t>()[0], 0x3C00);
  h1.data<uint16_t>()[0] = 0x3C01;  // 1 + 2^-10
  EXPECT_EQ(reference(half, {h1, h2}).data<uint16_t>()[0], 0x3C02);
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
  // Every dtype through one op of each rule.
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (const char* op : {"maximum", "eq", "logical_or", "isnan"}) {
      const bool binary = std::string(op) != "isnan";
      std::vector<TensorType> types(binary ? 2 : 1, type_of(dtype, {5}));
      OneNode node(op, types);
      std::vector<Tensor> inputs(types.size(), Tensor::zeros(dtype, {5}));
      EXPECT_NO_THROW(test::run_kernel(*node.node, "reference", inputs)) << op;
    }
  }
}

// The reference loops are compiled for AVX2 as well as for the portable build (the ctest entry
// elementwise_portable runs the Reference tests under KILN_MAX_CPU_ISA=portable): each element
// of a long array, through the loop's vector body, equals the same element alone, through its
// scalar code. Inputs are random bit patterns (NaNs, extremes and wrapping products included).
TEST(OpsElementwise, ReferenceLoopsGiveEachElementItsScalarResult) {
  const int64_t n = 263;  // several vector lengths of every dtype, and a remainder
  std::mt19937 rng(11);
  auto random_bits = [&](DType dtype) {
    Tensor t = Tensor::empty(dtype, {n});
    auto* bytes = static_cast<uint8_t*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i)
      bytes[i] = dtype == DType::Bool ? rng() & 1 : static_cast<uint8_t>(rng());
    return t;
  };
  auto element = [](const Tensor& t, int64_t i) {
    Tensor one = Tensor::empty(t.dtype(), {1});
    const size_t size = dtype_size(t.dtype());
    std::memcpy(one.data(), static_cast<const std::byte*>(t.data()) + i * size, size);
    return one;
  };
  const std::vector<std::pair<const char*, int>> ops = {
      {"neg", 1},     {"abs", 1},     {"sign", 1},        {"isnan", 1},       {"isinf", 1},
      {"relu", 1},    {"floor", 1},   {"logical_not", 1}, {"add", 2},         {"sub", 2},
      {"mul", 2},     {"maximum", 2}, {"minimum", 2},     {"eq", 2},          {"lt", 2},
      {"ge", 2},      {"logical_and", 2}, {"logical_xor", 2}, {"where", 3},
      {"bitwise_not", 1}, {"bitwise_and", 2}, {"bitwise_xor", 2}, {"bitwise_left_shift", 2},
      {"bitwise_right_shift", 2}, {"erfc", 1}, {"erfinv", 1}, {"lgamma", 1}, {"digamma", 1},
      {"nextafter", 2}, {"gcd", 2}};
  int checked = 0;
  for (DType dtype : {DType::Bool, DType::U8, DType::I8, DType::I16, DType::I32, DType::I64,
                      DType::F32, DType::F64}) {
    for (const auto& [op, arity] : ops) {
      SCOPED_TRACE(std::string(op) + " " + std::string(dtype_name(dtype)));
      std::vector<TensorType> types(arity, type_of(dtype, {n})), one_types(arity, type_of(dtype, {1}));
      if (arity == 3) types[0].dtype = one_types[0].dtype = DType::Bool;
      std::optional<OneNode> node, one;
      try {
        node.emplace(op, types);
        one.emplace(op, one_types);
      } catch (const Error&) {
        continue;  // the op doesn't take this dtype
      }
      std::vector<Tensor> inputs;
      for (const TensorType& t : types) inputs.push_back(random_bits(t.dtype));
      const Tensor whole = test::run_kernel(*node->node, "reference", inputs)[0];
      for (int64_t i = 0; i < n; ++i) {
        std::vector<Tensor> alone;
        for (const Tensor& t : inputs) alone.push_back(element(t, i));
        const Tensor got = test::run_kernel(*one->node, "reference", alone)[0];
        ASSERT_TRUE(test::same_values(element(whole, i), got)) << "element " << i;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(OpsElementwise, ReferenceF64KeepsDoublePrecision) {
  OneNode node("add", {type_of(DType::F64, {1}), type_of(DType::F64, {1})});
  EXPECT_EQ(reference(node, {tensor_from<double>({1}, {1.0}), tensor_from<double>({1}, {1e-15})})
                .data<double>()[0],
            1.0 + 1e-15);
  // A Python float against an f64 tensor keeps its double value.
  OneNode scale("mul", {type_of(DType::F64, {1}), type_of(DType::F64, {})}, wrapped({1}));
  EXPECT_EQ(reference(scale, {tensor_from<double>({1}, {3.0}), tensor_from<double>({}, {0.1})})
                .data<double>()[0],
            3.0 * 0.1);
}

// ---------------------------------------------------------------- AVX2 kernels

TEST(OpsElementwise, Avx2DeclinesWhatItCannotRun) {
  OneNode f64("exp", {type_of(DType::F64, {4})});
  OneNode f32("exp", {type_of(DType::F32, {4})});
  OneNode i64("add", {type_of(DType::I64, {4}), type_of(DType::I64, {4})});
  OneNode floor("div", {type_of(DType::F32, {4}), type_of(DType::F32, {4})},
                {{"rounding_mode", std::string("floor")}});
  OneNode pow("pow", {type_of(DType::F32, {4}), type_of(DType::F32, {4})});
  if (!test::has_kernel("exp", "avx2")) GTEST_SKIP() << "not an x86 build";
  EXPECT_NE(test::unsupported_reason(*f64.node, "avx2"), "");
  EXPECT_NE(test::unsupported_reason(*i64.node, "avx2"), "");
  if (!avx2_available()) {
    EXPECT_NE(test::unsupported_reason(*f32.node, "avx2").find("AVX2"), std::string::npos);
    return;
  }
  EXPECT_EQ(test::unsupported_reason(*f32.node, "avx2"), "");
  EXPECT_NE(test::unsupported_reason(*floor.node, "avx2"), "");
  EXPECT_NE(test::unsupported_reason(*pow.node, "avx2"), "");  // no constant exponent
  // i32 into exp computes in f32: the AVX2 kernel takes it, converting.
  OneNode int_exp("exp", {type_of(DType::I32, {4})});
  EXPECT_EQ(test::unsupported_reason(*int_exp.node, "avx2"), "");
}

void expect_matches_reference(const Node& node, const std::vector<Tensor>& inputs,
                              int64_t max_ulp) {
  Tensor expected = test::run_kernel(node, "reference", inputs)[0];
  for (int threads : {1, 2}) {
    Tensor got = test::run_kernel(node, "avx2", inputs, threads)[0];
    if (max_ulp == 0 || got.dtype() != DType::F32) {
      EXPECT_TRUE(test::same_values(got, expected)) << "threads " << threads;
    } else {
      int64_t where = 0;
      EXPECT_LE(test::max_ulp(got, expected, &where), max_ulp)
          << "at " << where << ": " << got.data<float>()[where] << " vs "
          << expected.data<float>()[where];
    }
  }
}

TEST(OpsElementwise, Avx2UnaryMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(7);
  for (const UnaryCase& c : unary_cases()) {
    for (int64_t n : {0, 1, 3, 7, 17, 100003}) {
      SCOPED_TRACE(case_name(c) + " n=" + std::to_string(n));
      OneNode node(c.op, {type_of(DType::F32, {n})}, c.attrs);
      Tensor x = test::random_tensor(DType::F32, {n}, rng, -12, 12);
      test::sprinkle_extremes(x, rng);
      expect_matches_reference(*node.node, {x}, c.max_ulp);
    }
  }
  // One op on a million elements: the chunks of two threads.
  OneNode node("silu", {type_of(DType::F32, {1 << 20})});
  Tensor x = test::random_tensor(DType::F32, {1 << 20}, rng, -12, 12);
  expect_matches_reference(*node.node, {x}, 3);
}

// Signed zeros in vectors that also take each op's slow paths (values beyond 3.74, 13 and 87
// send gelu, exp, sigmoid and silu past their fast paths): the sign of every zero result is the
// reference's (ULP distances don't see it).
TEST(OpsElementwise, Avx2KeepsTheSignOfZeroOnEveryPath) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  for (float wide : {1.0f, 5.0f, 20.0f, 100.0f}) {
    Tensor x = tensor_from<float>({8}, {-0.0f, 0.0f, wide, -wide, -0.0f, 1e-30f, -1e-30f, 0.0f});
    for (const UnaryCase& c : unary_cases()) {
      SCOPED_TRACE(case_name(c) + " wide=" + std::to_string(wide));
      OneNode node(c.op, {type_of(DType::F32, {8})}, c.attrs);
      const Tensor want = test::run_kernel(*node.node, "reference", {x})[0];
      const Tensor got = test::run_kernel(*node.node, "avx2", {x})[0];
      for (int64_t i = 0; i < 8; ++i) {
        if (want.data<float>()[i] == 0) {
          EXPECT_EQ(std::signbit(got.data<float>()[i]), std::signbit(want.data<float>()[i]))
              << "x = " << x.data<float>()[i];
        }
      }
    }
  }
}

// Every 1021st f32 bit pattern (4 million values: every exponent, subnormals, infs and NaNs),
// through the AVX2 kernel and the reference kernel; prints the largest ULP error of each
// transcendental op. Exact ops are covered by the random tests. (docs/ops.md also lists the
// errors of an exhaustive sweep over all 2^32 patterns.)
TEST(OpsElementwise, Avx2UlpErrorOverAllExponents) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  constexpr uint64_t kStride = 1021;
  const int64_t n = static_cast<int64_t>((uint64_t{1} << 32) / kStride);
  Tensor x = Tensor::empty(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.data<uint32_t>()[i] = static_cast<uint32_t>(static_cast<uint64_t>(i) * kStride);
  for (const UnaryCase& c : unary_cases()) {
    if (!c.sweep) continue;
    OneNode node(c.op, {type_of(DType::F32, {n})}, c.attrs);
    Tensor expected = test::run_kernel(*node.node, "reference", {x}, 2)[0];
    Tensor got = test::run_kernel(*node.node, "avx2", {x}, 2)[0];
    int64_t where = 0;
    int64_t worst = test::max_ulp(got, expected, &where);
    std::printf("[ ulp      ] %-24s max %lld ULP (x = %.9g)\n", case_name(c).c_str(),
                static_cast<long long>(worst), x.data<float>()[where]);
    EXPECT_LE(worst, c.max_ulp) << case_name(c) << " at x = " << x.data<float>()[where] << ": "
                                << got.data<float>()[where] << " vs "
                                << expected.data<float>()[where];
  }
}

// The transcendental kernels take a fast path for a vector whose lanes are all within a bound
// (gelu 3.74, 4, 8 and 13, exp, sigmoid and silu 87) and the full one otherwise, and their
// piecewise polynomials change pieces at breakpoints (erf at (k + 1/2) / 1.75, its small form
// ending at 1.5 / 1.75, up to the clamp at 4; gelu (none) at odd multiples of 1/4 within 3.74
// and, for vectors reaching beyond, at 0.5, 1, 2, 3, 5, 7 and 11; gelu (tanh) at multiples of
// 1/4): every border and
// breakpoint, just inside and just outside, both signs, and every extreme value, in each lane of
// a vector of values within the fast paths ([-1, 1]), of values mixing both sides of the bounds
// ([-6, 6]) and of values beyond them ([-20, 20]), matches the reference within the op's bound.
TEST(OpsElementwise, Avx2FastPathBordersAndBreakpoints) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::vector<float> borders = {3.74f, 3.92f, 4.0f, 8.0f, 13.0f, 87.0f};
  for (int k = 1; k < 16; ++k) borders.push_back(static_cast<float>(k) / 4);
  for (int k = 0; k < 7; ++k) borders.push_back((static_cast<float>(k) + 0.5f) / 1.75f);
  for (float b : {5.0f, 7.0f, 11.0f}) borders.push_back(b);
  std::vector<float> specials = test::extreme_floats();
  for (float border : borders)
    for (float b : {border, -border})
      specials.insert(specials.end(), {b, std::nextafter(b, 0.0f), std::nextafter(b, 2 * b)});
  std::mt19937 rng(11);
  std::vector<float> values;
  for (float spread : {1.0f, 6.0f, 20.0f}) {
    std::uniform_real_distribution<float> neighbour(-spread, spread);
    for (float special : specials)
      for (int lane = 0; lane < 8; ++lane)
        for (int i = 0; i < 8; ++i) values.push_back(i == lane ? special : neighbour(rng));
  }
  Tensor x = Tensor::empty(DType::F32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), x.data<float>());
  for (const UnaryCase& c : unary_cases()) {
    if (!c.sweep) continue;
    SCOPED_TRACE(case_name(c));
    OneNode node(c.op, {type_of(DType::F32, {x.numel()})}, c.attrs);
    expect_matches_reference(*node.node, {x}, c.max_ulp);
  }
}

// The piecewise polynomials over every 251st f32 of their range, both signs: erf on [0.01, 4]
// (below, the every-1021st sweep covers its first piece; 1 ULP, its bound everywhere), gelu's
// fast paths on [-3.74, 3.74] (Phi(-|x|), erf form) and [-3.6, 3.6] (sigmoid(-2u(|x|)), tanh
// form), and the erf form's wide path on [-13, 13] (exp(-x^2/2) S(|x|)): beyond 3.74 alone, and
// within 3.74 with every 8th value 13 so that each vector takes it: at most 3 ULP (gelu), what
// exhaustive sweeps of those ranges measured (every f32).
TEST(OpsElementwise, Avx2PiecewisePolynomialUlp) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  struct Range {
    std::string op, approximate;
    float low, high;
    int64_t max_ulp;
    float companion = 0;  // when nonzero, every 8th value (one lane of each vector)
  };
  for (const Range& r : {Range{"erf", "", 0.01f, 4.0f, 1}, Range{"gelu", "none", 0.0f, 3.74f, 3},
                         Range{"gelu", "tanh", 0.0f, 3.6f, 3},
                         Range{"gelu", "none", 3.74f, 13.0f, 3},
                         Range{"gelu", "none", 0.0f, 3.74f, 3, 13.0f}}) {
    SCOPED_TRACE(r.op + " " + r.approximate + " " + std::to_string(r.low) + " " +
                 std::to_string(r.companion));
    std::vector<float> values;
    for (uint32_t u = std::bit_cast<uint32_t>(r.low); u <= std::bit_cast<uint32_t>(r.high);
         u += 251) {
      for (float sign : {1.0f, -1.0f}) {
        if (r.companion != 0 && values.size() % 8 == 7) values.push_back(r.companion);
        values.push_back(sign * std::bit_cast<float>(u));
      }
    }
    values.push_back(r.high);
    values.push_back(-r.high);
    Tensor x = Tensor::empty(DType::F32, {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), x.data<float>());
    const AttrMap attrs =
        r.approximate.empty() ? AttrMap{} : AttrMap{{"approximate", r.approximate}};
    OneNode node(r.op, {type_of(DType::F32, {x.numel()})}, attrs);
    expect_matches_reference(*node.node, {x}, r.max_ulp);
  }
}

using Sizes = std::vector<int64_t>;
const std::vector<std::pair<Sizes, Sizes>>& broadcast_patterns() {
  static const std::vector<std::pair<Sizes, Sizes>> patterns = {
      {{1}, {1}}, {{3}, {3}}, {{7}, {7}}, {{17}, {17}}, {{1 << 20}, {1 << 20}},  // same shape
      {{17}, {}}, {{}, {1000003}}, {{1}, {33}},                                   // scalar
      {{5, 17}, {17}}, {{3}, {4, 3}}, {{1024, 1000}, {1000}},                     // row vector
      {{5, 17}, {5, 1}}, {{7, 1}, {1, 9}}, {{2, 3, 5, 7}, {1, 3, 1, 1}},          // general
      {{4, 1, 3}, {1, 5, 1}}, {{2, 3, 4}, {2, 1, 4}}, {{0, 3}, {3}}, {{2, 0}, {1}},
  };
  return patterns;
}

TEST(OpsElementwise, Avx2BinaryMatchesReferenceOnEveryBroadcastPattern) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(11);
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum", "fmod", "remainder",
                         "eq", "ne", "lt", "le", "gt", "ge"}) {
    for (const auto& [a_sizes, b_sizes] : broadcast_patterns()) {
      // The large patterns once: the loops are shared.
      if (num_elements(a_sizes) + num_elements(b_sizes) > 100000 && std::string(op) != "add" &&
          std::string(op) != "lt")
        continue;
      SCOPED_TRACE(std::string(op) + " " + shape_string(a_sizes) + " " + shape_string(b_sizes));
      OneNode node(op, {type_of(DType::F32, a_sizes), type_of(DType::F32, b_sizes)});
      Tensor a = test::random_tensor(DType::F32, a_sizes, rng);
      Tensor b = test::random_tensor(DType::F32, b_sizes, rng);
      test::sprinkle_extremes(a, rng);
      test::sprinkle_extremes(b, rng);
      // Equal values, so that comparisons and ties see them.
      for (int64_t i = 0; i < std::min(a.numel(), b.numel()); i += 5)
        b.data<float>()[i] = a.data<float>()[i];
      expect_matches_reference(*node.node, {a, b}, 0);
    }
  }
  // add and sub with alpha: one fused multiply-add.
  for (const char* op : {"add", "sub"}) {
    for (const auto& [a_sizes, b_sizes] : broadcast_patterns()) {
      if (num_elements(a_sizes) + num_elements(b_sizes) > 100000) continue;
      SCOPED_TRACE(std::string(op) + " alpha " + shape_string(a_sizes) + " " +
                   shape_string(b_sizes));
      OneNode node(op, {type_of(DType::F32, a_sizes), type_of(DType::F32, b_sizes)},
                   {{"alpha", 0.3}});
      Tensor a = test::random_tensor(DType::F32, a_sizes, rng);
      Tensor b = test::random_tensor(DType::F32, b_sizes, rng);
      test::sprinkle_extremes(a, rng);
      expect_matches_reference(*node.node, {a, b}, 0);
    }
  }
}

// add, sub, mul, div, maximum and minimum of bf16 tensors run one pass that widens, computes
// and rounds each vector: the f32 kernel's result on the widened operands, rounded to bf16, on
// every broadcast pattern and at every tail length. A Python number beside a bf16 tensor keeps
// its f32 value (the f32 path), as in PyTorch.
TEST(OpsElementwise, Avx2Bf16BinaryIsTheF32KernelRounded) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(13);
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum"}) {
    for (const auto& [a_sizes, b_sizes] : broadcast_patterns()) {
      if (num_elements(a_sizes) + num_elements(b_sizes) > 100000 && std::string(op) != "add")
        continue;
      SCOPED_TRACE(std::string(op) + " " + shape_string(a_sizes) + " " + shape_string(b_sizes));
      auto [a, a32] = test::random_bf16_and_widened(a_sizes, rng);
      auto [b, b32] = test::random_bf16_and_widened(b_sizes, rng);
      for (int64_t i = 0; i < std::min(a.numel(), b.numel()); i += 5) {
        b.data<cpu::BFloat16>()[i] = a.data<cpu::BFloat16>()[i];
        b32.data<float>()[i] = a32.data<float>()[i];
      }
      OneNode node(op, {type_of(DType::BF16, a_sizes), type_of(DType::BF16, b_sizes)});
      OneNode wide(op, {type_of(DType::F32, a_sizes), type_of(DType::F32, b_sizes)});
      const Tensor f32 = test::run_kernel(*wide.node, "avx2", {a32, b32})[0];
      for (int threads : {1, 2})
        EXPECT_TRUE(
            test::is_rounded_to_bf16(test::run_kernel(*node.node, "avx2", {a, b}, threads)[0], f32))
            << "threads " << threads;
    }
  }
  // The loop itself at every tail length and step.
  auto [a, a32] = test::random_bf16_and_widened({40}, rng);
  auto [b, b32] = test::random_bf16_and_widened({40}, rng);
  for (int64_t n = 0; n <= 40; ++n)
    for (const auto& [a_step, b_step] : {std::pair<int64_t, int64_t>{1, 1}, {1, 0}, {0, 1}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " steps " + std::to_string(a_step) + "," +
                   std::to_string(b_step));
      Tensor got = Tensor::empty(DType::BF16, {n + 1}), f32 = Tensor::empty(DType::F32, {n + 1});
      got.data<cpu::BFloat16>()[n] = cpu::BFloat16{0x1234};
      cpu::avx2::mul(a.data<cpu::BFloat16>(), a_step, b.data<cpu::BFloat16>(), b_step,
                     got.data<cpu::BFloat16>(), n);
      cpu::avx2::mul(a32.data<float>(), a_step, b32.data<float>(), b_step, f32.data<float>(), n);
      f32.data<float>()[n] = cpu::to_float(cpu::BFloat16{0x1234});
      EXPECT_TRUE(test::is_rounded_to_bf16(got, f32));
    }
  // bf16 x * 0.1 (a Python float, f64): 0.1 as f32, not as bf16 (0.10009765625).
  OneNode scaled("mul", {type_of(DType::BF16, {37}), type_of(DType::F64, {})}, wrapped({1}));
  const Tensor tenth = tensor_from<double>({}, {0.1});
  auto [x, x32] = test::random_bf16_and_widened({37}, rng);
  const Tensor got = test::run_kernel(*scaled.node, "avx2", {x, tenth})[0];
  Tensor f32 = Tensor::empty(DType::F32, {37});
  for (int64_t i = 0; i < 37; ++i) f32.data<float>()[i] = x32.data<float>()[i] * 0.1f;
  EXPECT_TRUE(test::is_rounded_to_bf16(got, f32));
}

// fmod and remainder are exact (the reference's std::fmod): quotients a / b just below, at and
// just above integers up to 2^25 (the double division rounding up to an integer, and the scalar
// path past 2^24), divisors from subnormal to 1e30 of both signs, and zeros of both signs.
TEST(OpsElementwise, Avx2FmodAndRemainderAreExact) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(23);
  const int64_t n = 20000;
  Tensor a = Tensor::empty(DType::F32, {n}), b = Tensor::empty(DType::F32, {n});
  std::uniform_real_distribution<float> unit(1, 2);
  for (int64_t i = 0; i < n; ++i) {
    const float divisor = (rng() % 2 ? 1 : -1) * unit(rng) *
                          std::ldexp(1.0f, static_cast<int>(rng() % 240) - 140);
    const float quotient = static_cast<float>(rng() % (1u << (1 + rng() % 25)));
    float dividend = (rng() % 2 ? 1 : -1) * quotient * divisor;
    for (uint32_t steps = rng() % 3; steps > 0; --steps)  // just off the multiple
      dividend = std::nextafter(dividend, rng() % 2 ? kInf : -kInf);
    if (rng() % 50 == 0) dividend = rng() % 2 ? 0.0f : -0.0f;
    a.data<float>()[i] = dividend;
    b.data<float>()[i] = divisor;
  }
  for (const char* op : {"fmod", "remainder"}) {
    SCOPED_TRACE(op);
    OneNode node(op, {type_of(DType::F32, {n}), type_of(DType::F32, {n})});
    expect_matches_reference(*node.node, {a, b}, 0);
  }
}

// Outputs past the streaming threshold (lowered here to 64 bytes) are written with streaming
// stores from their first 64-byte aligned element on, their inputs prefetched ahead: the same
// bits as the cached stores, at every alignment of the output, for unary (8 and 16 lanes),
// binary (broadcast too) and where loops.
#ifdef KILN_X86
TEST(OpsElementwise, Avx2StreamingStoresGiveTheSameBits) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(13);
  const int64_t default_threshold = cpu::avx2::streaming_store_min_bytes();
  for (int64_t n : {int64_t{15}, int64_t{16}, int64_t{17}, int64_t{100003}}) {
    Tensor a = test::random_tensor(DType::F32, {n}, rng, -100, 100);
    Tensor b = test::random_tensor(DType::F32, {n}, rng, -100, 100);
    test::sprinkle_extremes(a, rng);
    std::vector<uint8_t> cond(static_cast<size_t>(n));
    for (uint8_t& v : cond) v = rng() % 2;
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    const auto* c = reinterpret_cast<const bool*>(cond.data());
    std::vector<std::pair<const char*, std::function<void(float*)>>> loops = {
        {"relu", [&](float* out) { cpu::avx2::relu(x, out, n); }},
        {"exp", [&](float* out) { cpu::avx2::exp(x, out, n); }},
        {"gelu (tanh)", [&](float* out) { cpu::avx2::gelu_tanh(x, out, n); }},
        {"add", [&](float* out) { cpu::avx2::add(x, 1, y, 1, out, n); }},
        {"div", [&](float* out) { cpu::avx2::div(x, 1, y, 1, out, n); }},
        {"mul, a broadcast", [&](float* out) { cpu::avx2::mul(x, 0, y, 1, out, n); }},
        {"where", [&](float* out) { cpu::avx2::where(c, 1, x, 1, y, 0, out, n); }},
    };
    if (cpu::has_avx512f())
      for (const auto& [name, fn] : std::vector<std::pair<const char*, cpu::UnaryArrayFn>>{
               {"exp, 16 lanes", cpu::avx512::exp}, {"sigmoid, 16 lanes", cpu::avx512::sigmoid},
               {"tanh, 16 lanes", cpu::avx512::tanh}, {"erf, 16 lanes", cpu::avx512::erf},
               {"gelu (erf), 16 lanes", cpu::avx512::gelu_erf},
               {"gelu (tanh), 16 lanes", cpu::avx512::gelu_tanh},
               {"silu, 16 lanes", cpu::avx512::silu}})
        loops.emplace_back(name, [&, fn = fn](float* out) { fn(x, out, n); });
    for (const auto& [name, loop] : loops)
      for (int64_t offset = 0; offset < 8; ++offset) {
        SCOPED_TRACE(std::string(name) + " n=" + std::to_string(n) + " output offset " +
                     std::to_string(offset));
        std::vector<float> cached(static_cast<size_t>(n + 8)), streamed(cached.size());
        loop(cached.data() + offset);
        cpu::avx2::set_streaming_store_min_bytes(64);
        loop(streamed.data() + offset);
        cpu::avx2::set_streaming_store_min_bytes(default_threshold);
        EXPECT_EQ(std::memcmp(cached.data(), streamed.data(), cached.size() * sizeof(float)), 0);
      }
  }
}
#endif

#ifdef KILN_X86
// A thread writing its chunk of a row broadcast row by row streams by the size of the chunk
// (StreamingRegion), not of the row: with the threshold between the two, the rows stream, and
// the results are the reference's, on one thread and two.
TEST(OpsElementwise, Avx2RowBroadcastStreamsByTheThreadsChunk) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  const int64_t default_threshold = cpu::avx2::streaming_store_min_bytes();
  cpu::avx2::set_streaming_store_min_bytes(64 * 1024);
  EXPECT_FALSE(cpu::avx2::streams_output(4000));
  {
    cpu::avx2::StreamingRegion chunk(128 * 1024);
    EXPECT_TRUE(cpu::avx2::streams_output(4000));
    {
      cpu::avx2::StreamingRegion small(1024);
      EXPECT_FALSE(cpu::avx2::streams_output(4000));
    }
    EXPECT_TRUE(cpu::avx2::streams_output(4000));
  }
  EXPECT_FALSE(cpu::avx2::streams_output(4000));
  std::mt19937 rng(19);
  for (const auto& [a_sizes, b_sizes] : std::vector<std::pair<Sizes, Sizes>>{
           {{64, 1000}, {1000}}, {{64, 1024}, {1024}}, {{3, 64, 17}, {64, 1}}}) {
    SCOPED_TRACE(shape_string(a_sizes) + " + " + shape_string(b_sizes));
    OneNode node("add", {type_of(DType::F32, a_sizes), type_of(DType::F32, b_sizes)});
    Tensor a = test::random_tensor(DType::F32, a_sizes, rng);
    Tensor b = test::random_tensor(DType::F32, b_sizes, rng);
    expect_matches_reference(*node.node, {a, b}, 0);
  }
  cpu::avx2::set_streaming_store_min_bytes(default_threshold);
}
#endif

#ifdef KILN_X86
// The 16-lane transcendental kernels give the 8-lane kernels' bits: on every 1021st f32 bit
// pattern (every exponent, subnormals, infs, NaNs: any NaN matches any), on vectors of values
// within [-1, 1] with one lane, or one lane in each half, from every range the fast paths bound
// (3.6, 3.74, 17, 43.5, 80, 87, 2^20, ...), and at every tail length; for gelu (both forms) only
// the vectors reaching beyond 7, as its 16-lane fast paths round differently (GeluFastPathsUlp
// below).
TEST(OpsElementwise, Avx512TranscendentalsGiveTheAvx2Bits) {
  if (!cpu::has_avx512f()) GTEST_SKIP() << "no AVX-512";
  std::vector<float> values;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 1021)
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> within(-1, 1);
  for (float far : {3.55f, 3.65f, 3.7f, 3.8f, 4.1f, 8.5f, 13.5f, 16.9f, -17.1f, -18.5f, 43.4f,
                    43.6f, 79.9f, 80.1f, 86.9f, 87.1f, 150.0f, 1048575.0f, -1048577.0f, -1e30f,
                    INFINITY, NAN})
    for (int lane = 0; lane < 16; ++lane) {
      for (int i = 0; i < 16; ++i) values.push_back(i == lane ? far : within(rng));
      // One in each half: the 16-lane middle paths of gelu.
      for (int i = 0; i < 16; ++i)
        values.push_back(i == lane % 8 || i == 8 + (lane + 3) % 8 ? far : within(rng));
    }
  const Tensor x = tensor_from<float>({static_cast<int64_t>(values.size())}, values);
  using Fn = void (*)(const float*, float*, int64_t);
  struct Pair {
    const char* name;
    Fn eight, sixteen;
    float own_path_bound;  // the 16-lane function's own fast path: vectors all within it
  };
  const std::vector<Pair> functions = {
      {"exp", cpu::avx2::exp, cpu::avx512::exp, 0},
      {"sigmoid", cpu::avx2::sigmoid, cpu::avx512::sigmoid, 0},
      {"silu", cpu::avx2::silu, cpu::avx512::silu, 0},
      {"tanh", cpu::avx2::tanh, cpu::avx512::tanh, 0},
      {"erf", cpu::avx2::erf, cpu::avx512::erf, 0},
      {"gelu_erf", cpu::avx2::gelu_erf, cpu::avx512::gelu_erf, 7.0f},
      {"gelu_tanh", cpu::avx2::gelu_tanh, cpu::avx512::gelu_tanh, 7.0f},
      {"mish", cpu::avx2::mish, cpu::avx512::mish, 0},
      {"log", cpu::avx2::log, cpu::avx512::log, 0},
      {"log1p", cpu::avx2::log1p, cpu::avx512::log1p, 0},
      {"log2", cpu::avx2::log2, cpu::avx512::log2, 0},
      {"expm1", cpu::avx2::expm1, cpu::avx512::expm1, 0},
      {"sin", cpu::avx2::sin, cpu::avx512::sin, 0},
      {"cos", cpu::avx2::cos, cpu::avx512::cos, 0},
      {"elu",
       [](const float* in, float* out, int64_t n) { cpu::avx2::elu(in, out, n, 1, 1, 1); },
       [](const float* in, float* out, int64_t n) { cpu::avx512::elu(in, out, n, 1, 1, 1); }, 0},
      {"elu, scaled",
       [](const float* in, float* out, int64_t n) { cpu::avx2::elu(in, out, n, 1.05f, 0.5f, 1.7f); },
       [](const float* in, float* out, int64_t n) {
         cpu::avx512::elu(in, out, n, 1.05f, 0.5f, 1.7f);
       },
       0},
      {"softplus",
       [](const float* in, float* out, int64_t n) { cpu::avx2::softplus(in, out, n, 1, 20); },
       [](const float* in, float* out, int64_t n) { cpu::avx512::softplus(in, out, n, 1, 20); },
       0},
      {"softplus, beta 0.3",
       [](const float* in, float* out, int64_t n) { cpu::avx2::softplus(in, out, n, 0.3f, 20); },
       [](const float* in, float* out, int64_t n) { cpu::avx512::softplus(in, out, n, 0.3f, 20); },
       0},
  };
  // The last n elements of x (mixed vectors), through both functions; a sentinel past the end.
  // Counts the elements compared. The outputs are 64-byte aligned: a large output is written
  // with streaming stores after a head that aligns it, which would shift the functions' vectors
  // against the 16-element groups below (as it did where the caches make 16 MiB outputs stream).
  auto compare = [&](const Pair& f, int64_t n) {
    const float* in = x.data<float>() + x.numel() - n;
    Tensor eight_out = Tensor::empty(DType::F32, {n + 1});
    Tensor sixteen_out = Tensor::empty(DType::F32, {n + 1});
    float* eight = eight_out.data<float>();
    float* sixteen = sixteen_out.data<float>();
    std::fill(eight, eight + n + 1, 7.0f);
    std::fill(sixteen, sixteen + n + 1, 7.0f);
    f.eight(in, eight, n);
    f.sixteen(in, sixteen, n);
    int64_t compared = 0;
    for (int64_t start = 0; start < n; start += 16) {
      const int64_t end = std::min(n, start + 16);
      const bool own_path = f.own_path_bound > 0 && std::all_of(in + start, in + end, [&](float v) {
                              return std::fabs(v) <= f.own_path_bound;
                            });
      if (own_path) continue;
      for (int64_t i = start; i < end; ++i, ++compared) {
        const float a = eight[i], b = sixteen[i];
        EXPECT_TRUE(std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
                    (std::isnan(a) && std::isnan(b)))
            << "x = " << in[i] << ": " << a << " vs " << b << " (n=" << n << ")";
      }
    }
    EXPECT_EQ(eight[n], 7.0f);
    EXPECT_EQ(sixteen[n], 7.0f);
    return compared;
  };
  for (const Pair& f : functions) {
    SCOPED_TRACE(f.name);
    EXPECT_GT(compare(f, x.numel()), x.numel() / 4);
    for (int64_t n = 0; n <= 33; ++n) compare(f, 16 * 16 + n);
  }
}

// The fast paths of gelu (both forms) over every 251st f32 of [0, 7], both signs, and at each
// 16-lane piece's borders, just inside and outside: the 8-lane functions (vectors within 3.74
// and 4 take their 8-piece fast paths, the others their wide ones) within 3 ULP, the 16-lane
// ones (32 pieces, vectors within 7) within 2 (erf form) and 3 (tanh form, 4 values of the
// 2.2 billion), what sweeps of every f32 in [-7, 7] measured.
TEST(OpsElementwise, GeluFastPathsUlp) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::vector<float> values;
  for (uint32_t u = 0; u <= std::bit_cast<uint32_t>(7.0f); u += 251) {
    values.push_back(std::bit_cast<float>(u));
    values.push_back(-std::bit_cast<float>(u));
  }
  // The pieces' borders: z (z + 1) = (k + 1/2) 56 / 31.4 (erf form) and
  // 2u(z) = (k + 1/2) 2u(7) / 31.4 (tanh form), solved by bisection.
  const auto two_u = [](double z) {
    return 2 * std::sqrt(2 / std::numbers::pi) * (z + 0.044715 * z * z * z);
  };
  const auto erf_variable = [](double z) { return z * (z + 1); };
  for (const auto& [variable, scale] :
       {std::pair<std::function<double(double)>, double>{erf_variable, 56 / 31.4},
        {two_u, two_u(7) / 31.4}})
    for (int k = 0; k < 32; ++k) {
      double low = 0, high = 8;
      for (int i = 0; i < 60; ++i)
        ((variable((low + high) / 2) < (k + 0.5) * scale) ? low : high) = (low + high) / 2;
      const auto border = static_cast<float>(low);
      if (border > 7) continue;
      for (float b : {border, std::nextafter(border, 0.0f), std::nextafter(border, 8.0f)})
        values.insert(values.end(), {b, -b});
    }
  const Tensor x = tensor_from<float>({static_cast<int64_t>(values.size())}, values);
  struct Form {
    const char* name;
    const char* approximate;
    cpu::UnaryArrayFn fn;
    int64_t max_ulp;
  };
  std::vector<Form> forms = {{"8 lanes", "none", cpu::avx2::gelu_erf, 3},
                             {"8 lanes", "tanh", cpu::avx2::gelu_tanh, 3}};
  if (cpu::has_avx512f()) {
    forms.push_back({"16 lanes", "none", cpu::avx512::gelu_erf, 2});
    forms.push_back({"16 lanes", "tanh", cpu::avx512::gelu_tanh, 3});
  }
  for (const auto& [name, approximate, fn, max_ulp] : forms) {
    SCOPED_TRACE(std::string(name) + " " + approximate);
    OneNode node("gelu", {type_of(DType::F32, {x.numel()})},
                 {{"approximate", std::string(approximate)}});
    const Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
    Tensor got = Tensor::empty(DType::F32, {x.numel()});
    fn(x.data<float>(), got.data<float>(), x.numel());
    int64_t where = 0;
    EXPECT_LE(test::max_ulp(got, expected, &where), max_ulp)
        << "at x = " << x.data<float>()[where] << ": " << got.data<float>()[where] << " vs "
        << expected.data<float>()[where];
  }
}
#endif

TEST(OpsElementwise, Avx2WhereMatchesReferenceOnEveryBroadcastPattern) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(5);
  const std::vector<std::tuple<Sizes, Sizes, Sizes>> patterns = {
      {{1}, {1}, {1}},      {{3}, {3}, {3}},        {{17}, {17}, {17}},   {{100003}, {100003}, {}},
      {{}, {9}, {9}},       {{7, 1}, {1, 9}, {9}},  {{4, 5}, {4, 1}, {4, 1}}, {{0, 2}, {2}, {}},
      {{2, 3, 5}, {3, 1}, {5}},
  };
  for (const auto& [c_sizes, a_sizes, b_sizes] : patterns) {
    SCOPED_TRACE(shape_string(c_sizes) + " " + shape_string(a_sizes) + " " + shape_string(b_sizes));
    OneNode node("where", {type_of(DType::Bool, c_sizes), type_of(DType::F32, a_sizes),
                           type_of(DType::F32, b_sizes)});
    Tensor c = Tensor::empty(DType::Bool, c_sizes);
    for (int64_t i = 0; i < c.numel(); ++i) c.data<bool>()[i] = rng() % 2;
    Tensor a = test::random_tensor(DType::F32, a_sizes, rng);
    Tensor b = test::random_tensor(DType::F32, b_sizes, rng);
    test::sprinkle_extremes(a, rng);
    expect_matches_reference(*node.node, {c, a, b}, 0);
  }
}

TEST(OpsElementwise, Avx2ConvertsMixedDTypesLikeTheReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(13);
  for (int64_t n : {1, 17, 5000}) {
    SCOPED_TRACE(n);
    // An i32 tensor plus an f32 tensor, and an i32 tensor times a Python float.
    Tensor i = test::random_tensor(DType::I32, {n}, rng, -1000, 1000);
    Tensor f = test::random_tensor(DType::F32, {n}, rng);
    OneNode add("add", {type_of(DType::I32, {n}), type_of(DType::F32, {n})});
    expect_matches_reference(*add.node, {i, f}, 0);
    OneNode scale("mul", {type_of(DType::I32, {n}), type_of(DType::F64, {})}, wrapped({1}));
    expect_matches_reference(*scale.node, {i, tensor_from<double>({}, {0.1})}, 0);
    // exp of an integer tensor computes in f32; f16 inputs compute in f32 and round back.
    OneNode exp("exp", {type_of(DType::I32, {n})});
    expect_matches_reference(*exp.node, {test::random_tensor(DType::I32, {n}, rng, -20, 20)}, 1);
    Tensor h = Tensor::empty(DType::F16, {n});
    for (int64_t k = 0; k < n; ++k) h.data<uint16_t>()[k] = static_cast<uint16_t>(rng());
    OneNode hardswish("hardswish", {type_of(DType::F16, {n})});
    expect_matches_reference(*hardswish.node, {h}, 0);
    OneNode cmp("gt", {type_of(DType::F16, {n}), type_of(DType::I64, {})}, wrapped({1}));
    expect_matches_reference(*cmp.node, {h, tensor_from<int64_t>({}, {0})}, 0);
  }
}

TEST(OpsElementwise, Avx2PowWithConstantExponentsMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(17);
  for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0}) {
    for (int64_t n : {0, 1, 7, 17, 100003}) {
      SCOPED_TRACE("pow " + std::to_string(e) + " n=" + std::to_string(n));
      OneNode node("pow", {type_of(DType::F32, {n}), type_of(DType::F64, {})}, wrapped({1}));
      Tensor x = test::random_tensor(DType::F32, {n}, rng, -100, 100);
      test::sprinkle_extremes(x, rng);
      const std::vector<Tensor> inputs = {x, tensor_from<double>({}, {e})};
      Tensor expected = run_with_constants(*node.node, "reference", inputs, {false, true});
      Tensor got = run_with_constants(*node.node, "avx2", inputs, {false, true}, 2);
      EXPECT_TRUE(test::same_values(got, expected));
    }
  }
  // Other exponents, and exponents that are tensors, stay with the reference kernel.
  OneNode node("pow", {type_of(DType::F32, {4}), type_of(DType::F64, {})}, wrapped({1}));
  const std::vector<Tensor> inputs = {Tensor::zeros(DType::F32, {4}),
                                      tensor_from<double>({}, {1.5})};
  KernelSpec spec = test::spec_of(*node.node, 1);
  spec.constant_inputs[1] = &inputs[1];
  EXPECT_NE(test::kernel_of("pow", "avx2").unsupported_reason(spec), "");
}

// ---------------------------------------------------------------- the executor

// Every op through CompiledGraph (best kernels) against the reference policy, on inputs with
// broadcasting and mixed dtypes.
TEST(OpsElementwise, EveryOpRunsThroughTheExecutor) {
  struct Case {
    std::string op;
    std::vector<TensorType> inputs;
    AttrMap attrs = {};
  };
  const TensorType f = type_of(DType::F32, {3, 33}), row = type_of(DType::F32, {33});
  const TensorType i = type_of(DType::I32, {3, 33}), col = type_of(DType::I64, {3, 1});
  const TensorType c = type_of(DType::Bool, {3, 33});
  std::vector<Case> cases;
  for (const char* op : {"relu", "neg", "abs", "sign", "exp", "expm1", "log", "log1p", "log2",
                         "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf",
                         "gelu", "silu", "mish", "hardswish", "hardsigmoid", "leaky_relu", "elu",
                         "softplus", "hardtanh", "clamp", "floor", "ceil", "trunc", "round",
                         "isnan", "isinf", "logical_not", "tan", "asin", "acos", "atan", "sinh",
                         "cosh", "asinh", "acosh", "atanh", "exp2", "log10", "erfc", "erfinv",
                         "lgamma", "digamma"})
    cases.push_back({op, {f}});
  cases.push_back({"nextafter", {f, row}});
  for (const char* op : {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod",
                         "remainder", "atan2", "hypot", "logaddexp", "copysign", "eq", "ne", "lt",
                         "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}) {
    cases.push_back({op, {f, row}});
    cases.push_back({op, {i, f}});
  }
  for (const char* op : {"add", "mul", "maximum", "eq", "pow", "bitwise_and", "bitwise_or",
                         "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "gcd"})
    cases.push_back({op, {i, col}});
  cases.push_back({"bitwise_not", {i}});
  cases.push_back({"div", {f, row}, {{"rounding_mode", std::string("floor")}}});
  cases.push_back({"div", {f, i}, {{"rounding_mode", std::string("trunc")}}});
  cases.push_back({"where", {c, f, row}});
  cases.push_back({"fma", {f, row, f}});
  cases.push_back({"where", {c, i, col}});

  std::set<std::string> covered;
  std::mt19937 rng(19);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.op);
    Graph g;
    std::vector<Value*> in;
    std::vector<Tensor> data;
    for (size_t n = 0; n < k.inputs.size(); ++n) {
      in.push_back(g.add_input("in" + std::to_string(n), k.inputs[n]));
      const std::vector<int64_t> sizes = static_sizes(k.inputs[n].shape);
      if (k.inputs[n].dtype == DType::Bool) {
        data.push_back(Tensor::empty(DType::Bool, sizes));
        for (int64_t e = 0; e < data.back().numel(); ++e) data.back().data<bool>()[e] = rng() % 2;
      } else {
        // Positive integers: remainder and floor division take no zero divisor.
        const bool integer = !is_floating(k.inputs[n].dtype);
        data.push_back(test::random_tensor(k.inputs[n].dtype, sizes, rng, integer ? 1 : -3, 4));
      }
    }
    g.set_outputs({g.add(k.op, in, k.attrs)});
    std::vector<TensorView> views;
    for (const Tensor& t : data) views.push_back(t.view());
    Tensor best = CompiledGraph::compile(g)->run(views)[0];
    Tensor reference = CompiledGraph::compile(g, {.kernel_policy = "reference"})->run(views)[0];
    EXPECT_EQ(best.dtype(), g.outputs()[0]->type().dtype);
    EXPECT_EQ(best.sizes(), static_sizes(g.outputs()[0]->type().shape));
    if (best.dtype() == DType::F32) {
      int64_t tolerance = 1;  // the unary cases' bound for the op (exact ops: 0)
      for (const UnaryCase& c : unary_cases())
        if (c.op == k.op) tolerance = std::max(tolerance, c.max_ulp);
      EXPECT_LE(test::max_ulp(best, reference), tolerance);
    } else {
      EXPECT_TRUE(test::same_values(best, reference));
    }
    covered.insert(k.op);
  }
  // Every elementwise op of the registry is covered.
  for (const std::string& op : covered) EXPECT_NE(OpRegistry::instance().find(op), nullptr);
  EXPECT_EQ(covered.size(), 81u);
}

}  // namespace
}  // namespace kiln
