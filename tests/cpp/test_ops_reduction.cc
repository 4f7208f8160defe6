// Reduction ops: type inference (symbolic dims, PyTorch's dtype rules, bad dims), the reference
// kernels against hand-computed values (NaN, integers, empty reductions, dims that are not
// adjacent), the AVX2 kernels against the reference kernels within the bounds listed in
// docs/ops.md, and every op through the executor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "kernels/cpu/cpu_features.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;
using Sizes = std::vector<int64_t>;
using Ints = std::vector<int64_t>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename T>
Tensor typed(DType dtype, const Sizes& sizes, const std::vector<T>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  KILN_ASSERT(t.numel() == static_cast<int64_t>(values.size()));
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

Tensor abs_of(const Tensor& x) {
  Tensor out = Tensor::empty(DType::F32, x.sizes());
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = std::fabs(x.data<float>()[i]);
  return out;
}

// The outputs of one kernel of `op` on input x.
std::vector<Tensor> run(const std::string& op, const Tensor& x, const AttrMap& attrs = {},
                        const std::string& kernel = "reference", int threads = 1) {
  OneNode node(op, {TensorType{x.dtype(), make_shape(x.sizes())}}, attrs);
  return test::run_kernel(*node.node, kernel, {x}, threads);
}

TensorType output_type(const std::string& op, const TensorType& x, const AttrMap& attrs = {},
                       size_t i = 0) {
  OneNode node(op, {x}, attrs);
  return node.output_type(i);
}

std::string inference_error(const std::string& op, const TensorType& x, const AttrMap& attrs) {
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { OneNode node(op, {x}, attrs); }, &message),
            ErrorCode::ShapeInference);
  return message;
}

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "'" << (text) << "' lacks '" << (part) << "'"

void expect_floats(const Tensor& got, const Sizes& sizes, const std::vector<float>& expected) {
  ASSERT_EQ(got.dtype(), DType::F32);
  EXPECT_EQ(got.sizes(), sizes);
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(test::ulp_distance(got.data<float>()[i], expected[i]), 0)
        << "element " << i << ": " << got.data<float>()[i] << " vs " << expected[i];
}

template <typename T>
void expect_values(const Tensor& got, DType dtype, const Sizes& sizes,
                   const std::vector<T>& expected) {
  EXPECT_EQ(got.dtype(), dtype);
  EXPECT_EQ(got.sizes(), sizes);
  EXPECT_EQ(test::values_of<T>(got), expected);
}

AttrMap dims(const Ints& d, bool keepdim = false) {
  return {{"dim", d}, {"keepdim", keepdim}};
}
AttrMap one_dim(int64_t d) { return {{"dim", d}}; }

// ---------------------------------------------------------------- type inference

TEST(OpsReduction, InferenceKeepsSymbolicDims) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(4), Dim(8)}});
  auto type = [](DType d, Shape s) { return TensorType{d, std::move(s)}; };
  EXPECT_EQ(g.add("sum", {x}, dims({1}))->type(), type(DType::F32, {batch, Dim(8)}));
  EXPECT_EQ(g.add("mean", {x}, dims({1}, true))->type(), type(DType::F32, {batch, Dim(1), Dim(8)}));
  EXPECT_EQ(g.add("amax", {x}, dims({-1, 0}, true))->type(), type(DType::F32, {1, 4, 1}));
  EXPECT_EQ(g.add("var", {x}, dims({}))->type(), type(DType::F32, {}));
  EXPECT_EQ(g.add("argmax", {x}, dims({}, true))->type(), type(DType::I64, {1, 1, 1}));
  EXPECT_EQ(g.add("argmin", {x}, dims({2}))->type(), type(DType::I64, {batch, Dim(4)}));
  std::vector<Value*> max_dim = g.add_node("max_dim", {x}, {{"dim", int64_t{1}}});
  ASSERT_EQ(max_dim.size(), 2u);
  EXPECT_EQ(max_dim[0]->type(), type(DType::F32, {batch, Dim(8)}));
  EXPECT_EQ(max_dim[1]->type(), type(DType::I64, {batch, Dim(8)}));
  std::vector<Value*> topk = g.add_node("topk", {x}, {{"k", int64_t{3}}});
  ASSERT_EQ(topk.size(), 2u);
  EXPECT_EQ(topk[0]->type(), type(DType::F32, {batch, Dim(4), Dim(3)}));
  EXPECT_EQ(topk[1]->type(), type(DType::I64, {batch, Dim(4), Dim(3)}));
  // k up to the symbol's largest size is accepted here and checked again on concrete shapes.
  EXPECT_EQ(g.add_node("topk", {x}, {{"k", int64_t{20}}, {"dim", int64_t{0}}})[0]->type(),
            type(DType::F32, {20, 4, 8}));
  // k = -1 (a sort) keeps the symbolic dim.
  EXPECT_EQ(g.add_node("topk", {x}, {{"k", int64_t{-1}}, {"dim", int64_t{0}}})[1]->type(),
            type(DType::I64, {batch, Dim(4), Dim(8)}));
  EXPECT_EQ(g.add("log_softmax", {x}, one_dim(0))->type(), x->type());
  EXPECT_EQ(g.add("cumsum", {x}, one_dim(-2))->type(), x->type());
  EXPECT_EQ(g.add("logcumsumexp", {x}, one_dim(0))->type(), x->type());
  std::vector<Value*> cummax = g.add_node("cummax", {x}, one_dim(2));
  ASSERT_EQ(cummax.size(), 2u);
  EXPECT_EQ(cummax[0]->type(), x->type());
  EXPECT_EQ(cummax[1]->type(), type(DType::I64, {batch, Dim(4), Dim(8)}));
  EXPECT_EQ(g.add("std", {x}, {{"dim", Ints{1}}, {"correction", int64_t{0}}})->type(),
            type(DType::F32, {batch, Dim(8)}));
  g.set_outputs({g.add("logsumexp", {x}, dims({0}))});
  EXPECT_NO_THROW(verify(g));
}

TEST(OpsReduction, InferenceFollowsPyTorchDTypes) {
  for (DType d : {DType::I64, DType::I32, DType::I16, DType::I8, DType::U8, DType::Bool}) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    const TensorType x = type_of(d, {2, 3});
    EXPECT_EQ(output_type("sum", x).dtype, DType::I64);
    EXPECT_EQ(output_type("prod", x).dtype, DType::I64);
    EXPECT_EQ(output_type("cumsum", x, one_dim(0)).dtype, DType::I64);
    EXPECT_EQ(output_type("cumprod", x, one_dim(0)).dtype, DType::I64);
    EXPECT_EQ(output_type("cummin", x, one_dim(0)).dtype, d);
    EXPECT_EQ(output_type("cummax", x, one_dim(0), 1).dtype, DType::I64);
    EXPECT_EQ(output_type("amax", x).dtype, d);
    EXPECT_EQ(output_type("min", x).dtype, d);
    EXPECT_EQ(output_type("any", x).dtype, d == DType::U8 ? DType::U8 : DType::Bool);
    EXPECT_EQ(output_type("all", x).dtype, d == DType::U8 ? DType::U8 : DType::Bool);
    EXPECT_EQ(output_type("logsumexp", x).dtype, DType::F32);
    EXPECT_EQ(output_type("max_dim", x, {{"dim", int64_t{0}}}, 1).dtype, DType::I64);
    if (d != DType::Bool) {
      EXPECT_EQ(output_type("argmax", x).dtype, DType::I64);
      EXPECT_EQ(output_type("topk", x, {{"k", int64_t{1}}}).dtype, d);
    }
  }
  const TensorType x = type_of(DType::F64, {2, 3});
  for (const char* op : {"sum", "prod", "mean", "var", "std", "logsumexp", "amax"})
    EXPECT_EQ(output_type(op, x).dtype, DType::F64) << op;
  EXPECT_EQ(output_type("any", x).dtype, DType::Bool);
  EXPECT_EQ(output_type("log_softmax", x, one_dim(1)).dtype, DType::F64);
}

TEST(OpsReduction, InferenceRejectsBadDimsAndDTypes) {
  const TensorType x = type_of(DType::F32, {2, 3, 4});
  EXPECT_MENTIONS(inference_error("sum", x, dims({3})),
                  "dim 3 is out of range for rank 3; use [-3, 2]");
  EXPECT_MENTIONS(inference_error("sum", x, dims({0, -3})), "dim 0 appears twice in dim [0, -3]");
  EXPECT_MENTIONS(inference_error("argmax", x, dims({0, 1})), "must hold at most one dim");
  EXPECT_MENTIONS(inference_error("log_softmax", x, one_dim(-4)), "use [-3, 2]");
  EXPECT_MENTIONS(inference_error("mean", type_of(DType::I32, {2}), {}),
                  "mean takes f32, bf16, f64, not i32; insert a cast");
  for (const char* op : {"var", "std"})
    EXPECT_MENTIONS(inference_error(op, type_of(DType::I64, {2}), {}), "insert a cast");
  EXPECT_MENTIONS(inference_error("log_softmax", type_of(DType::I64, {2}), one_dim(0)),
                  "insert a cast");
  EXPECT_MENTIONS(inference_error("logcumsumexp", type_of(DType::I64, {2}), one_dim(0)),
                  "not i64; insert a cast");
  EXPECT_MENTIONS(inference_error("cummax", x, one_dim(3)), "use [-3, 2]");
  EXPECT_MENTIONS(inference_error("argmax", type_of(DType::Bool, {2}), {}), "not bool");
  EXPECT_MENTIONS(inference_error("topk", type_of(DType::Bool, {2}), {{"k", int64_t{1}}}),
                  "not bool");
  // sum builds f16 in f32 (test_low_precision.cc); prod, which doesn't, refuses it.
  EXPECT_MENTIONS(inference_error("prod", type_of(DType::F16, {2}), {}), "not f16");
  EXPECT_MENTIONS(inference_error("prod", type_of(DType::BF16, {2}), {}), "not bf16");
  // The shapes are in the message.
  EXPECT_MENTIONS(inference_error("amax", type_of(DType::F32, {0, 3}), dims({0})),
                  "(f32[0, 3]): it reduces dim 0 of size 0");
  EXPECT_MENTIONS(inference_error("argmin", type_of(DType::F32, {0, 3}), {}), "of size 0");
  EXPECT_EQ(output_type("amax", type_of(DType::F32, {0, 3}), dims({1})), type_of(DType::F32, {0}));
  EXPECT_MENTIONS(inference_error("topk", x, {{"k", int64_t{5}}}),
                  "k is 5; it must be in [0, 4] (the size of dim 2)");
  EXPECT_MENTIONS(inference_error("topk", x, {{"k", int64_t{-2}}}), "k is -2");
  EXPECT_EQ(test::error_code_of([&] { OneNode node("max_dim", {x}); }), ErrorCode::ShapeInference);

  Graph g;
  Value* b = g.add_input("b", TensorType{DType::F32, {g.add_symbol("B", 1, 32)}});
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add_node("topk", {b}, {{"k", int64_t{33}}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_MENTIONS(message, "it must be in [0, 32]");

  // A rank-0 input takes dim 0 or -1, as in PyTorch.
  const TensorType scalar = type_of(DType::F32, {});
  EXPECT_EQ(output_type("sum", scalar, dims({0})), scalar);
  EXPECT_EQ(output_type("argmax", scalar, dims({-1}, true)), type_of(DType::I64, {}));
  EXPECT_EQ(output_type("topk", scalar, {{"k", int64_t{1}}}), scalar);
  EXPECT_MENTIONS(inference_error("sum", scalar, dims({1})), "use [-1, 0]");
  EXPECT_MENTIONS(inference_error("topk", scalar, {{"k", int64_t{2}}}), "takes k = 1");
}

// ---------------------------------------------------------------- reference kernels

TEST(OpsReduction, ReferenceReductionsMatchHandComputedValues) {
  const Tensor x = test::tensor_of({2, 3}, {1, 2, 3, 4, 5, -6});
  expect_floats(run("sum", x, dims({0}))[0], {3}, {5, 7, -3});
  expect_floats(run("sum", x, dims({1}, true))[0], {2, 1}, {6, 3});
  expect_floats(run("sum", x)[0], {}, {9});
  expect_floats(run("mean", x, dims({1}))[0], {2}, {2, 1});
  expect_floats(run("prod", x, dims({1}))[0], {2}, {6, -120});
  expect_floats(run("amax", x, dims({1}))[0], {2}, {3, 5});
  expect_floats(run("max", x)[0], {}, {5});
  expect_floats(run("amin", x, dims({0}))[0], {3}, {1, 2, -6});
  expect_floats(run("min", x, dims({-1}))[0], {2}, {1, -6});
  // Row 1: mean 1, squared deviations 9 + 16 + 49 = 74.
  expect_floats(run("var", x, dims({1}))[0], {2}, {1, 37});
  expect_floats(run("std", x, {{"dim", Ints{1}}, {"correction", 0.0}})[0], {2},
                {0.816496611f, 4.96655464f});
  expect_floats(run("logsumexp", x, dims({1}))[0], {2}, {3.40760589f, 5.31327391f});
  expect_values<int64_t>(run("argmax", x, dims({1}))[0], DType::I64, {2}, {2, 1});
  expect_values<int64_t>(run("argmax", x)[0], DType::I64, {}, {4});
  expect_values<int64_t>(run("argmin", x, dims({0}, true))[0], DType::I64, {1, 3}, {0, 0, 1});
  std::vector<Tensor> max_dim = run("max_dim", x, {{"dim", int64_t{0}}});
  expect_floats(max_dim[0], {3}, {4, 5, 3});
  expect_values<int64_t>(max_dim[1], DType::I64, {3}, {1, 1, 0});
  std::vector<Tensor> min_dim = run("min_dim", x, {{"dim", int64_t{1}}, {"keepdim", true}});
  expect_floats(min_dim[0], {2, 1}, {1, -6});
  expect_values<int64_t>(min_dim[1], DType::I64, {2, 1}, {0, 2});

  const Tensor flags = test::tensor_of({2, 3}, {0, 0.5f, 0, 1, -1, 2});
  expect_values<bool>(run("any", flags, dims({0}))[0], DType::Bool, {3}, {true, true, true});
  expect_values<bool>(run("all", flags, dims({1}))[0], DType::Bool, {2}, {false, true});
  // Ties keep the first index.
  const Tensor ties = test::tensor_of({4}, {2, 7, 7, 2});
  expect_values<int64_t>(run("argmax", ties)[0], DType::I64, {}, {1});
  expect_values<int64_t>(run("argmin", ties)[0], DType::I64, {}, {0});
}

// A naive sum over dims 0 and 2 of [2, 3, 4, 5] and over dims 1 and 3, which are not one block:
// the reference walks them by index arithmetic.
TEST(OpsReduction, ReferenceWalksDimsThatAreNotAdjacent) {
  Tensor x = Tensor::empty(DType::I32, {2, 3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(i * i % 97);
  auto at = [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    return x.data<int32_t>()[((a * 3 + b) * 4 + c) * 5 + d];
  };
  std::vector<int64_t> over_0_2, over_1_3;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t d = 0; d < 5; ++d) {
      int64_t s = 0;
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t c = 0; c < 4; ++c) s += at(a, b, c, d);
      over_0_2.push_back(s);
    }
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 4; ++c) {
      int64_t s = 0;
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t d = 0; d < 5; ++d) s += at(a, b, c, d);
      over_1_3.push_back(s);
    }
  expect_values(run("sum", x, dims({0, 2}))[0], DType::I64, {3, 5}, over_0_2);
  expect_values(run("sum", x, dims({-1, 1}, true))[0], DType::I64, {2, 1, 4, 1}, over_1_3);
  // The flattened index of argmax counts the reduced dims in row-major order.
  const Tensor y = test::tensor_of({2, 3, 2}, {0, 9, 1, 1, 1, 1, 8, 1, 1, 1, 1, 7});
  expect_values<int64_t>(run("argmax", y, dims({1}))[0], DType::I64, {2, 2}, {1, 0, 0, 2});
  expect_floats(run("amax", y, dims({0, 2}))[0], {3}, {9, 1, 7});
  // Size-1 dims between reduced dims don't split them.
  const Tensor z = test::tensor_of({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  expect_floats(run("sum", z, dims({0, 2}))[0], {1}, {21});
}

TEST(OpsReduction, ReferencePropagatesNaNAsPyTorch) {
  const Tensor x = test::tensor_of({4}, {1, kNaN, 3, kNaN});
  expect_floats(run("amax", x)[0], {}, {kNaN});
  expect_floats(run("amin", x)[0], {}, {kNaN});
  expect_floats(run("sum", x)[0], {}, {kNaN});
  expect_values<int64_t>(run("argmax", x)[0], DType::I64, {}, {1});
  expect_values<int64_t>(run("argmin", x)[0], DType::I64, {}, {1});
  std::vector<Tensor> max_dim = run("max_dim", x, {{"dim", int64_t{0}}});
  expect_floats(max_dim[0], {}, {kNaN});
  expect_values<int64_t>(max_dim[1], DType::I64, {}, {1});
  // Equal zeros: the first one stays (bit for bit).
  EXPECT_TRUE(std::signbit(run("amax", test::tensor_of({2}, {-0.0f, 0.0f}))[0].data<float>()[0]));
  EXPECT_FALSE(std::signbit(run("amax", test::tensor_of({2}, {0.0f, -0.0f}))[0].data<float>()[0]));
  expect_floats(run("var", test::tensor_of({2}, {kInf, 1}))[0], {}, {kNaN});
  expect_floats(run("logsumexp", test::tensor_of({2}, {-kInf, -kInf}))[0], {}, {-kInf});
  expect_floats(run("logsumexp", test::tensor_of({2}, {kInf, -kInf}))[0], {}, {kInf});
  expect_floats(run("logsumexp", test::tensor_of({2}, {kNaN, 1}))[0], {}, {kNaN});
  expect_floats(run("log_softmax", test::tensor_of({2}, {kInf, 1}), one_dim(0))[0], {2},
                {kNaN, kNaN});
  expect_floats(run("log_softmax", test::tensor_of({2}, {-kInf, -kInf}), one_dim(0))[0], {2},
                {kNaN, kNaN});
  expect_values<bool>(run("any", test::tensor_of({2}, {kNaN, 0}))[0], DType::Bool, {}, {true});
  expect_values<bool>(run("any", test::tensor_of({2}, {0.0f, -0.0f}))[0], DType::Bool, {}, {false});
  expect_floats(run("cumsum", test::tensor_of({3}, {1, kNaN, 2}), one_dim(0))[0], {3},
                {1, kNaN, kNaN});
}

TEST(OpsReduction, ReferenceIntegersWrapAndPromote) {
  const int64_t big = int64_t{1} << 62;
  expect_values<int64_t>(run("sum", typed<int64_t>(DType::I64, {2}, {big, big}))[0], DType::I64,
                         {}, {std::numeric_limits<int64_t>::min()});
  expect_values<int64_t>(run("sum", typed<bool>(DType::Bool, {3}, {true, true, false}))[0],
                         DType::I64, {}, {2});
  const Tensor bytes = typed<uint8_t>(DType::U8, {3}, {200, 100, 7});
  expect_values<int64_t>(run("sum", bytes)[0], DType::I64, {}, {307});
  expect_values<int64_t>(run("prod", bytes)[0], DType::I64, {}, {140000});
  expect_values<uint8_t>(run("amax", bytes)[0], DType::U8, {}, {200});
  expect_values<int64_t>(run("argmin", bytes)[0], DType::I64, {}, {2});
  expect_values<uint8_t>(run("any", bytes)[0], DType::U8, {}, {1});
  expect_values<int64_t>(
      run("cumsum", typed<int8_t>(DType::I8, {3}, {100, 100, -128}), one_dim(0))[0], DType::I64,
      {3}, {100, 200, 72});
  expect_values<int32_t>(run("amin", typed<int32_t>(DType::I32, {2, 2}, {5, -9, 3, 4}),
                             dims({1}))[0],
                         DType::I32, {2}, {-9, 3});
  const Tensor lse = run("logsumexp", typed<int32_t>(DType::I32, {2}, {0, 0}))[0];
  expect_floats(lse, {}, {0.693147182f});
  std::vector<Tensor> bool_max = run("max_dim", typed<bool>(DType::Bool, {3}, {false, true, true}),
                                     {{"dim", int64_t{0}}});
  expect_values<bool>(bool_max[0], DType::Bool, {}, {true});
  expect_values<int64_t>(bool_max[1], DType::I64, {}, {1});
  expect_values<bool>(run("all", typed<bool>(DType::Bool, {2}, {true, false}))[0], DType::Bool, {},
                      {false});
  std::vector<Tensor> top = run("topk", typed<int16_t>(DType::I16, {4}, {3, -2, 9, 3}),
                                {{"k", int64_t{2}}});
  expect_values<int16_t>(top[0], DType::I16, {2}, {9, 3});
  expect_values<int64_t>(top[1], DType::I64, {2}, {2, 0});
}

TEST(OpsReduction, ReferenceVarianceTakesCorrection) {
  const Tensor two = test::tensor_of({2}, {1, 2});
  expect_floats(run("var", two, {{"correction", 0.0}})[0], {}, {0.25f});
  expect_floats(run("var", two, {{"correction", int64_t{2}}})[0], {}, {kInf});
  expect_floats(run("std", two, {{"correction", 0.0}})[0], {}, {0.5f});
  expect_floats(run("var", test::tensor_of({3}, {1, 2, 3}), {{"correction", 0.5}})[0], {}, {0.8f});
  expect_floats(run("var", test::tensor_of({1}, {3}))[0], {}, {kNaN});
}

TEST(OpsReduction, ReferenceEmptyReductionsGiveIdentities) {
  const Tensor x = Tensor::empty(DType::F32, {0, 3});
  expect_floats(run("sum", x, dims({0}))[0], {3}, {0, 0, 0});
  expect_floats(run("prod", x, dims({0}))[0], {3}, {1, 1, 1});
  expect_floats(run("mean", x, dims({0}))[0], {3}, {kNaN, kNaN, kNaN});
  expect_floats(run("var", x, dims({0}))[0], {3}, {kNaN, kNaN, kNaN});
  expect_floats(run("logsumexp", x, dims({0}))[0], {3}, {-kInf, -kInf, -kInf});
  expect_values<bool>(run("any", x, dims({0}))[0], DType::Bool, {3}, {false, false, false});
  expect_values<bool>(run("all", x, dims({0}))[0], DType::Bool, {3}, {true, true, true});
  expect_floats(run("amax", x, dims({1}))[0], {0}, {});
  expect_floats(run("cumsum", x, one_dim(0))[0], {0, 3}, {});
  for (const char* op : {"cumprod", "logcumsumexp", "cummax", "cummin"})
    expect_floats(run(op, x, one_dim(0))[0], {0, 3}, {});
  std::vector<Tensor> none = run("topk", test::tensor_of({2, 3}, {1, 2, 3, 4, 5, 6}),
                                 {{"k", int64_t{0}}});
  expect_floats(none[0], {2, 0}, {});
  expect_values<int64_t>(none[1], DType::I64, {2, 0}, {});
}

TEST(OpsReduction, ReferenceOpsAlongOneDim) {
  const Tensor x = test::tensor_of({2, 2}, {1, 2, 3, 4});
  expect_floats(run("cumsum", x, one_dim(0))[0], {2, 2}, {1, 2, 4, 6});
  expect_floats(run("cumsum", x, one_dim(-1))[0], {2, 2}, {1, 3, 3, 7});
  expect_floats(run("cumprod", x, one_dim(0))[0], {2, 2}, {1, 2, 3, 8});
  expect_floats(run("cumprod", x, one_dim(1))[0], {2, 2}, {1, 2, 3, 12});
  expect_values<int64_t>(
      run("cumprod", typed<int8_t>(DType::I8, {3}, {-128, 2, 100}), one_dim(0))[0], DType::I64,
      {3}, {-128, -256, -25600});
  // log(e + e^2) = 2 + log1p(1/e); log(e + e^2 + e^3) = 3 + log1p(1/e + 1/e^2).
  expect_floats(run("logcumsumexp", test::tensor_of({3}, {1, 2, 3}), one_dim(0))[0], {3},
                {1, 2.31326169f, 3.40760596f});
  // Equal infinities stay themselves; -inf is the empty sum; a NaN stays.
  expect_floats(run("logcumsumexp", test::tensor_of({4}, {-kInf, -kInf, kInf, kInf}),
                    one_dim(0))[0],
                {4}, {-kInf, -kInf, kInf, kInf});
  expect_floats(run("logcumsumexp", test::tensor_of({3}, {1, kNaN, 5}), one_dim(0))[0], {3},
                {1, kNaN, kNaN});
  // cummax and cummin: a tie moves the index to the later element; a NaN stays once seen, its
  // index moving to each later NaN.
  std::vector<Tensor> cummax =
      run("cummax", test::tensor_of({6}, {2, 1, 2, kNaN, 9, kNaN}), one_dim(0));
  expect_floats(cummax[0], {6}, {2, 2, 2, kNaN, kNaN, kNaN});
  expect_values<int64_t>(cummax[1], DType::I64, {6}, {0, 0, 2, 3, 3, 5});
  std::vector<Tensor> cummin = run("cummin", x, one_dim(0));
  expect_floats(cummin[0], {2, 2}, {1, 2, 1, 2});
  expect_values<int64_t>(cummin[1], DType::I64, {2, 2}, {0, 0, 0, 0});
  cummin = run("cummin", typed<bool>(DType::Bool, {3}, {true, false, false}), one_dim(0));
  expect_values<bool>(cummin[0], DType::Bool, {3}, {true, false, false});
  expect_values<int64_t>(cummin[1], DType::I64, {3}, {0, 1, 2});
  // log_softmax = x - logsumexp: -log(1 + e) and -log(1 + 1/e) down each column.
  expect_floats(run("log_softmax", x, one_dim(0))[0], {2, 2},
                {-2.12692809f, -2.12692809f, -0.126928017f, -0.126928017f});
  expect_floats(run("log_softmax", test::tensor_of({}, {5}), one_dim(0))[0], {}, {0});

  auto topk = [](const Tensor& t, AttrMap attrs) { return run("topk", t, attrs); };
  const Tensor ties = test::tensor_of({4}, {1, 3, 3, 1});
  std::vector<Tensor> top = topk(ties, {{"k", int64_t{3}}});
  expect_floats(top[0], {3}, {3, 3, 1});
  expect_values<int64_t>(top[1], DType::I64, {3}, {1, 2, 0});
  top = topk(ties, {{"k", int64_t{2}}, {"largest", false}, {"sorted", false}});
  expect_floats(top[0], {2}, {1, 1});
  expect_values<int64_t>(top[1], DType::I64, {2}, {0, 3});
  // NaN ranks above every number, for the largest and the smallest alike.
  const Tensor nan = test::tensor_of({3}, {1, kNaN, 3});
  top = topk(nan, {{"k", int64_t{2}}});
  expect_floats(top[0], {2}, {kNaN, 3});
  expect_values<int64_t>(top[1], DType::I64, {2}, {1, 2});
  top = topk(nan, {{"k", int64_t{2}}, {"largest", false}});
  expect_floats(top[0], {2}, {1, 3});
  expect_values<int64_t>(top[1], DType::I64, {2}, {0, 2});
  top = topk(test::tensor_of({2, 2}, {1, kNaN, kNaN, 2}), {{"k", int64_t{1}}, {"dim", int64_t{0}}});
  expect_floats(top[0], {1, 2}, {kNaN, kNaN});
  expect_values<int64_t>(top[1], DType::I64, {1, 2}, {1, 0});
  // k = -1 (sort): every element, in order, ties by lower index.
  top = topk(ties, {{"k", int64_t{-1}}, {"largest", false}});
  expect_floats(top[0], {4}, {1, 1, 3, 3});
  expect_values<int64_t>(top[1], DType::I64, {4}, {0, 3, 1, 2});
}

// ---------------------------------------------------------------- AVX2 kernels

bool avx2_available() {
  OneNode n("sum", {type_of(DType::F32, {8})});
  return test::has_kernel("sum", "avx2") && test::unsupported_reason(*n.node, "avx2").empty();
}

// docs/ops.md: an element of an f32 sum of n terms passes through at most T(n) roundings.
double rounding_depth(int64_t n) {
  return std::ceil(std::log2(static_cast<double>(std::max<int64_t>(n, 1)))) + 10;
}

double ulp_of(float r) {
  const float a = std::fabs(r);
  return static_cast<double>(std::nextafter(a, kInf)) - a;
}

// Elements folded into each output: the reduced count, or the dim's size for log_softmax.
int64_t folded_count(const std::string& op, const AttrMap& attrs, const Tensor& x,
                     const Tensor& out) {
  if (op == "log_softmax") {
    const int64_t rank = static_cast<int64_t>(x.sizes().size());
    const int64_t d = std::get<int64_t>(attrs.at("dim"));
    return rank == 0 ? 1 : x.sizes()[static_cast<size_t>(d < 0 ? d + rank : d)];
  }
  return out.numel() == 0 ? 0 : x.numel() / out.numel();
}

// An AVX2 result against the reference's within the op's bound (docs/ops.md).
void expect_within_bound(const std::string& op, const AttrMap& attrs, const Tensor& x,
                         const Tensor& got, const Tensor& expected) {
  ASSERT_EQ(got.sizes(), expected.sizes());
  const double u = std::ldexp(1.0, -24);
  const double depth = rounding_depth(folded_count(op, attrs, x, expected));
  Tensor magnitude;
  if (op == "sum" || op == "mean") magnitude = run(op, abs_of(x), attrs)[0];
  const int64_t n = got.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float g = got.data<float>()[i], r = expected.data<float>()[i];
    // Streamed only on failure (formatting every element would dominate the test's time).
    auto where = [&] {
      std::ostringstream out;
      out << op << " element " << i << ": " << g << " vs the reference's " << r;
      return out.str();
    };
    if (!std::isfinite(r) || !std::isfinite(g)) {
      ASSERT_EQ(test::ulp_distance(g, r), 0) << where();
      continue;
    }
    if (op == "sum" || op == "mean") {
      const double extra = op == "sum" ? 2 : 3;
      ASSERT_LE(std::fabs(double(g) - r), (depth + extra) * u * magnitude.data<float>()[i])
          << where();
    } else if (op == "var" || op == "std" || op == "prod") {
      ASSERT_LE(test::ulp_distance(g, r), 1) << where();
    } else if (op == "logsumexp" || op == "log_softmax") {
      ASSERT_LE(std::fabs(double(g) - r), ulp_of(r) + (depth + 3) * u) << where();
    } else {
      ASSERT_EQ(test::ulp_distance(g, r), 0) << where();
    }
  }
}

// Runs the AVX2 kernel (and log_softmax's AVX-512 one, where it takes x) on 1 and 2 threads
// (bit for bit the same) against the reference.
void expect_avx2_matches_reference(const std::string& op, const AttrMap& attrs, const Tensor& x) {
  OneNode node(op, {type_of(DType::F32, x.sizes())}, attrs);
  ASSERT_EQ(test::unsupported_reason(*node.node, "avx2"), "");
  const Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
  for (const std::string kernel : {"avx2", "avx512"}) {
    if (!test::has_kernel(op, kernel) || !test::unsupported_reason(*node.node, kernel).empty())
      continue;
    SCOPED_TRACE(kernel);
    const Tensor serial = test::run_kernel(*node.node, kernel, {x}, 1)[0];
    expect_within_bound(op, attrs, x, serial, expected);
    EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, kernel, {x}, 2)[0], serial));
  }
}

// NaN, infinities, zeros, subnormals and magnitudes whose sums stay finite in f32 (a sum that
// overflows f32 is inf where the f64 reference may not be; docs/ops.md).
const std::vector<float>& sum_extremes(bool finite_only) {
  static const std::vector<float> finite = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, -3e-39f,
                                            1.17549435e-38f, 1e10f, -1e10f, 88.7f, -104.5f};
  static const std::vector<float> all = [] {
    std::vector<float> v = finite;
    v.insert(v.end(), {kNaN, kInf, -kInf});
    return v;
  }();
  return finite_only ? finite : all;
}

std::string list_of(const Ints& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

void sprinkle(Tensor& t, const std::vector<float>& values, std::mt19937& rng) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if (rng() % 8 == 0) t.data<float>()[i] = values[rng() % values.size()];
}

struct ReductionCase {
  Sizes sizes;
  Ints dims;
};

// Rows (the last dims), columns (a block with dims after it: strips of 1 to 4 vectors, the last
// one full or masked), about a million elements (one row or one strip, whose passes are split
// over the threads), zero sizes.
const std::vector<ReductionCase>& reduction_cases() {
  static const std::vector<ReductionCase> cases = {
      {{1}, {}},          {{3}, {}},           {{7}, {0}},          {{17}, {-1}},
      {{5, 17}, {1}},     {{300, 33}, {-1}},   {{2, 3, 40}, {1, 2}}, {{1 << 20}, {}},
      {{17, 7}, {0}},     {{4, 17, 3}, {1}},   {{2, 5, 37}, {1}},   {{3, 9, 8, 2}, {1, 2}},
      {{131072, 8}, {0}}, {{6, 1, 5}, {0, 1}}, {{40, 64}, {0}},     {{3, 500, 21}, {1}},
      {{9, 13}, {0}},     {{0, 5}, {1}},       {{5, 0}, {0}},       {{5, 0}, {1}},
  };
  return cases;
}

std::string case_name(const std::string& op, const Sizes& sizes, const std::string& axes,
                      int variant) {
  static const char* variants[] = {"", " with finite extremes", " with extremes",
                                   " with extremes up to FLT_MAX"};
  return op + " over " + shape_string(sizes) + " dims " + axes + variants[variant];
}

// Random values in [-4, 4), then: 1, finite extremes; 2, NaN and infinities too (for sums); 3,
// every value of test::extreme_floats (FLT_MAX included: not for sums).
Tensor case_input(const Sizes& sizes, int variant, std::mt19937& rng) {
  Tensor x = test::random_tensor(DType::F32, sizes, rng, -4, 4);
  if (variant == 1 || variant == 2) sprinkle(x, sum_extremes(variant == 1), rng);
  if (variant == 3) test::sprinkle_extremes(x, rng);
  return x;
}

bool is_sum(const std::string& op) { return op == "sum" || op == "mean"; }

TEST(OpsReduction, Avx2ReductionsMatchReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(7);
  for (const ReductionCase& c : reduction_cases()) {
    std::vector<bool> reduced(c.sizes.size(), c.dims.empty());
    for (int64_t d : c.dims)
      reduced[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(c.sizes.size()) : d)] = true;
    bool empty_reduction = false;
    for (size_t d = 0; d < c.sizes.size(); ++d) empty_reduction |= reduced[d] && c.sizes[d] == 0;
    const bool large = num_elements(c.sizes) > 100000;
    for (int variant = 0; variant < 4; ++variant) {
      if (large && variant == 1) continue;  // keeps the test fast; small cases cover it
      const Tensor x = case_input(c.sizes, variant, rng);
      for (std::string op : {"sum", "mean", "amax", "amin", "var", "std", "logsumexp"}) {
        if ((variant == 2 && !is_sum(op)) || (variant == 3 && is_sum(op))) continue;
        if (empty_reduction && (op == "amax" || op == "amin")) continue;  // undefined
        // Large inputs once per recipe: mean, amin and std run sum's, amax's and var's.
        if (large && (op == "mean" || op == "amin" || op == "std")) continue;
        SCOPED_TRACE(case_name(op, c.sizes, list_of(c.dims), variant));
        expect_avx2_matches_reference(op, dims(c.dims), x);
      }
    }
  }
}

// prod multiplies in f64 along the sums' tree, the reference serially: within one f32 ULP
// (docs/ops.md), on factors near 1 (a million of them stay inside f64's range, so the order
// can't overflow or underflow a partial product) and, on the smaller cases, zeros of both signs,
// infinities, NaN and subnormals.
TEST(OpsReduction, Avx2ProdIsWithinAnUlpOfTheReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(37);
  const std::vector<float> specials = {0.0f, -0.0f, kInf, -kInf, kNaN, 1e-40f, -3.0f, 0.5f};
  for (const ReductionCase& c : reduction_cases()) {
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 1 && num_elements(c.sizes) > 100000) continue;
      Tensor x = test::random_tensor(DType::F32, c.sizes, rng, -4, 4);
      for (int64_t i = 0; i < x.numel(); ++i) {
        float& v = x.data<float>()[i];
        v = 1 + v / 64;
        if (variant == 1 && rng() % 64 == 0) v = specials[rng() % specials.size()];
      }
      SCOPED_TRACE(case_name("prod", c.sizes, list_of(c.dims), variant == 1 ? 2 : 0));
      expect_avx2_matches_reference("prod", dims(c.dims), x);
    }
  }
  // Integers keep the reference's wrapping products.
  OneNode ints("prod", {type_of(DType::I64, {4})});
  EXPECT_NE(test::unsupported_reason(*ints.node, "avx2"), "");
}

// Rows of at most 256 elements go through the AVX2 kernel 8 at a time: each row's result
// (f32 and bf16, every recipe, log_softmax's whole row too; NaN, infinities and subnormals among
// the f32 inputs) is its bits when reduced alone (any NaN for a NaN), for
// row counts that leave 0 to 7 rows after the last batch, on 1 and 2 threads; 257-element rows
// take the row path and check the comparison itself.
TEST(OpsReduction, Avx2BatchedShortRowsAreEachRowAlone) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(41);
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const int64_t n : {1, 5, 8, 33, 256, 257}) {
      for (const int64_t rows : {8, 21, 16 + 7}) {
        Tensor x = test::random_tensor(DType::F32, {rows, n}, rng, -4, 4);
        sprinkle(x, sum_extremes(false), rng);
        if (dtype == DType::BF16) x = test::random_bf16_and_widened({rows, n}, rng).first;
        const size_t element = dtype == DType::F32 ? 4 : 2;
        for (const std::string op : {"sum", "mean", "prod", "amax", "amin", "var", "std",
                                     "logsumexp", "log_softmax"}) {
          if (dtype == DType::BF16 && op == "prod") continue;  // no bf16 prod kernel
          SCOPED_TRACE(op + " over " + shape_string(Sizes{rows, n}) + " " +
                       std::string(dtype_name(dtype)));
          const bool line = op == "log_softmax";
          const AttrMap attrs = line ? AttrMap{{"dim", int64_t{1}}} : dims({1});
          Graph g;  // add_uncast: bf16 nodes as fold_bf16_casts_into_widening_kernels leaves them
          const Node& all =
              *g.add_uncast(op, {g.add_input("x", type_of(dtype, {rows, n}))}, attrs)->producer();
          const Node& one =
              *g.add_uncast(op, {g.add_input("row", type_of(dtype, {1, n}))}, attrs)->producer();
          ASSERT_EQ(test::unsupported_reason(all, "avx2"), "");
          const int64_t per_row = line ? n : 1;
          for (int threads : {1, 2}) {
            const Tensor got = test::run_kernel(all, "avx2", {x}, threads)[0];
            for (int64_t r = 0; r < rows; ++r) {
              Tensor row = Tensor::empty(dtype, {1, n});
              std::memcpy(row.data(), static_cast<const char*>(x.data()) + r * n * element,
                          n * element);
              const Tensor alone = test::run_kernel(one, "avx2", {row})[0];
              Tensor from_batch = Tensor::empty(dtype, alone.sizes());
              std::memcpy(from_batch.data(),
                          static_cast<const char*>(got.data()) + r * per_row * element,
                          per_row * element);
              EXPECT_TRUE(test::same_values(alone, from_batch))
                  << "row " << r << ", " << threads << " thread(s)";
            }
          }
        }
      }
    }
  }
}

// bf16 reductions (fold_bf16_casts_into_widening_kernels' form of an f32 reduction between casts:
// a CNN's global pooling as a mean, a sum, a maximum, a variance, log_softmax): each kernel gives
// its f32 result on the widened input, rounded, the casts' bits. The shapes take the vector
// kernel's rows (with tails and split over the threads) and its strips of columns (full, and
// with a partial last vector).
TEST(OpsReduction, Bf16ReductionsAreTheF32OnesBetweenCasts) {
  std::mt19937 rng(13);
  const std::vector<std::pair<Sizes, Ints>> cases = {
      {{2, 19, 7, 7}, {-1, -2}}, {{3, 1001}, {1}},      {{5, 4, 3}, {0, 2}},
      {{17}, {}},                {{3, 50, 37}, {1}},    {{2, 9, 16}, {1}},
      {{1, 200003}, {}},         {{4, 3, 5}, {1}}};
  int avx2_runs = 0;
  for (const std::string op : {"mean", "sum", "amax", "amin", "max", "min", "var", "std",
                               "logsumexp", "log_softmax"}) {
    for (const auto& [sizes, dims] : cases) {
      const bool line = op == "log_softmax";
      if (line && dims.size() != 1) continue;
      SCOPED_TRACE(op + " of " + shape_string(sizes) + " over " + list_of(dims));
      const auto [x, wide] = test::random_bf16_and_widened(sizes, rng);
      const AttrMap attrs = line ? AttrMap{{"dim", dims[0]}}
                                 : AttrMap{{"dim", dims}, {"keepdim", true}};
      Graph g;
      const Node& node =
          *g.add_uncast(op, {g.add_input("x", type_of(DType::BF16, sizes))}, attrs)->producer();
      ASSERT_EQ(node.output()->type().dtype, DType::BF16);
      const Node& f32_node =
          *g.add(op, {g.add_input("w", type_of(DType::F32, sizes))}, attrs)->producer();
      for (const std::string kernel : {"avx512", "avx2", "reference"}) {
        if (!test::has_kernel(op, kernel) || !test::unsupported_reason(node, kernel).empty())
          continue;
        SCOPED_TRACE(kernel);
        avx2_runs += kernel == "avx2";
        for (int threads : {1, 2}) {
          EXPECT_TRUE(test::is_rounded_to_bf16(test::run_kernel(node, kernel, {x}, threads)[0],
                                               test::run_kernel(f32_node, kernel, {wide})[0]));
        }
      }
    }
  }
  // All but the non-adjacent dims, each op.
  if (avx2_available()) {
    EXPECT_EQ(avx2_runs, 9 * 7 + 4);
  }
}

TEST(OpsReduction, VectorizedLogSoftmaxMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(11);
  const std::vector<std::pair<Sizes, int64_t>> cases = {
      {{1}, 0},         {{3}, 0},        {{5, 17}, 1},     {{300, 33}, -1}, {{1 << 20}, 0},
      {{17, 7}, 0},     {{4, 17, 3}, 1}, {{2, 5, 37}, 1},  {{131072, 8}, 0}, {{3, 500, 21}, 1},
      {{0, 5}, 1},      {{5, 0}, 1},     {{5, 0}, 0},      {{}, 0},
      // Columns in chunks of 512 with a partial last vector; one outer index split in two.
      {{2, 41, 1100}, 1}, {{1, 30, 1000}, 1},
  };
  for (const auto& [sizes, dim] : cases)
    for (int variant : {0, 3}) {
      SCOPED_TRACE(case_name("log_softmax", sizes, std::to_string(dim), variant));
      expect_avx2_matches_reference("log_softmax", one_dim(dim), case_input(sizes, variant, rng));
    }
  // Inputs spread far apart: x - max reaches the underflow of exp. Rows of every length around
  // the AVX-512 kernel's 16- and 32-element steps.
  for (int64_t n : {15, 16, 17, 31, 32, 33, 47, 3075})
    expect_avx2_matches_reference("log_softmax", one_dim(-1),
                                  test::random_tensor(DType::F32, {3, n}, rng, -120, 60));
  // Rows of near-equal values: sums of exp(x - max) up to 70001, so that log(sum) is large.
  for (const Sizes& sizes : {Sizes{20, 2000}, Sizes{3, 70001}})
    expect_avx2_matches_reference("log_softmax", one_dim(-1),
                                  test::random_tensor(DType::F32, sizes, rng, -0.01, 0));
  Tensor wide = test::random_tensor(DType::F32, {64, 100}, rng, -120, 60);
  expect_avx2_matches_reference("log_softmax", one_dim(1), wide);
  expect_avx2_matches_reference("logsumexp", dims({1}), wide);
}

// argmax, argmin, max_dim and min_dim: the AVX2 kernel gives the reference's indices and values
// exactly, over rows of every length around its 8-lane steps and over columns (blocks of up to
// 128, a partial last vector), with ties (the first wins, -0 and +0 alike), NaNs (the first
// wins), infinities and lines of one value.
TEST(OpsReduction, Avx2ArgExtremaAreTheReferences) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(29);
  int runs = 0;
  auto check = [&](const Tensor& x, int64_t dim, const std::string& what) {
    for (const std::string op : {"argmax", "argmin", "max_dim", "min_dim"}) {
      SCOPED_TRACE(op + " " + what + " dim " + std::to_string(dim));
      const bool values = op == "max_dim" || op == "min_dim";
      const AttrMap attrs = values ? AttrMap{{"dim", dim}} : dims({dim});
      OneNode node(op, {type_of(DType::F32, x.sizes())}, attrs);
      ASSERT_EQ(test::unsupported_reason(*node.node, "avx2"), "");
      const std::vector<Tensor> expected = test::run_kernel(*node.node, "reference", {x});
      for (int threads : {1, 2}) {
        const std::vector<Tensor> got = test::run_kernel(*node.node, "avx2", {x}, threads);
        EXPECT_TRUE(test::same_values(got.back(), expected.back()));
        if (values) {
          EXPECT_TRUE(test::same_values(got[0], expected[0]));
        }
        ++runs;
      }
    }
  };
  for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 100, 1000, 100003}) {
    for (int variant = 0; variant < 4; ++variant) {
      const int64_t rows = n > 1000 ? 4 : 9;  // variant 3 writes 4 rows
      Tensor x = test::random_tensor(DType::F32, {rows, n}, rng, -4, 4);
      float* v = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (variant == 1) v[i] = std::round(v[i]);  // many ties
        if (variant == 2 && rng() % 5 == 0) v[i] = std::vector<float>{kNaN, kInf, -kInf, 0.0f, -0.0f}[rng() % 5];
      }
      if (variant == 3) {  // a row of one value, a row of -inf, signed zeros, a late NaN
        std::fill(v, v + n, 2.5f);
        std::fill(v + n, v + 2 * n, -kInf);
        std::fill(v + 2 * n, v + 3 * n, 0.0f);
        v[2 * n + n / 2] = -0.0f;
        v[3 * n + n - 1] = kNaN;
      }
      const std::string what = "n " + std::to_string(n) + " variant " + std::to_string(variant);
      check(x, 1, what);  // rows
      check(x, 0, what);  // n columns, `rows` steps
      // Columns down n steps: a [2, n, width] view reduced over its middle dim.
      if (n <= 1000) {
        const int64_t width = std::vector<int64_t>{1, 7, 8, 9, 33, 129, 300}[rng() % 7];
        Tensor t = test::random_tensor(DType::F32, {2, n, width}, rng, -4, 4);
        for (int64_t i = 0; i < t.numel(); ++i) {
          float& e = t.data<float>()[i];
          if (variant == 1) e = std::round(e);
          if (variant >= 2 && rng() % 5 == 0) e = std::vector<float>{kNaN, kInf, -kInf, 0.0f, -0.0f}[rng() % 5];
        }
        check(t, 1, what + " width " + std::to_string(width));
      }
    }
  }
  EXPECT_EQ(runs, (13 * 2 + 12) * 4 * 4 * 2);
  // The flattened input is one row.
  OneNode flat("argmax", {type_of(DType::F32, {3, 5})});
  EXPECT_EQ(test::unsupported_reason(*flat.node, "avx2"), "");
  OneNode f64("argmin", {type_of(DType::F64, {4})});
  EXPECT_NE(test::unsupported_reason(*f64.node, "avx2"), "");
}

// any and all by bits: every dtype the op keeps (f16 and bf16 arrive as f32, exactly), rows and
// columns, early decisions and empty reductions, with -0, NaN and subnormals among the floats
// (which the sign mask must read as zero and nonzero).
TEST(OpsReduction, AnyAllBitsKernelIsTheReference) {
  std::mt19937 rng(31);
  int runs = 0;
  for (DType dtype : {DType::F32, DType::F64, DType::I64, DType::I32, DType::I16, DType::I8,
                      DType::U8, DType::Bool}) {
    for (const Sizes& sizes : {Sizes{7, 300}, Sizes{3, 513, 5}, Sizes{2, 0, 3}, Sizes{1, 1},
                               Sizes{600}, Sizes{4, 9, 70}}) {
      // Mostly zeros (so all is false and any depends on the few nonzeros), or no zeros.
      for (int density : {0, 1, 100}) {
        Tensor x = Tensor::zeros(dtype, sizes);
        const int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
        auto* raw = static_cast<uint8_t*>(x.data());
        for (int64_t i = 0; i < x.numel(); ++i) {
          if (static_cast<int>(rng() % 100) >= density) {
            // A zero, or -0 for floats (sign bit only).
            if (is_floating(dtype) && rng() % 2) raw[i * bytes + bytes - 1] = 0x80;
            continue;
          }
          // A nonzero value: random bits with a bit below the sign set (a NaN, an infinity or a
          // subnormal for floats), 1 for bool.
          for (int64_t b = 0; b < bytes; ++b) raw[i * bytes + b] = static_cast<uint8_t>(rng());
          raw[i * bytes] |= 1;
          if (dtype == DType::Bool) raw[i] = 1;
        }
        for (const char* op : {"any", "all"})
          for (const std::vector<int64_t>& dims : {std::vector<int64_t>{-1}, std::vector<int64_t>{0},
                                                   std::vector<int64_t>{}})
            for (int threads : {1, 2}) {
              if (dims.size() == 1 && dims[0] == 0 && sizes.size() < 2) continue;
              SCOPED_TRACE(std::string(op) + " " + std::string(dtype_name(dtype)) + " " +
                           shape_string(sizes) + " density " + std::to_string(density) + " dims " +
                           std::to_string(dims.size()) + " threads " + std::to_string(threads));
              const AttrMap attrs{{"dim", dims}};
              const Tensor expected = run(op, x, attrs)[0];
              const Tensor got = run(op, x, attrs, "bits", threads)[0];
              ASSERT_EQ(got.sizes(), expected.sizes());
              EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.nbytes()), 0);
              ++runs;
            }
      }
    }
  }
  EXPECT_GT(runs, 1000);
}

// The scan kernels keep the reference's arithmetic (each line's accumulator in f64, or in
// wrapping 64-bit integers, written at every element) and change only the order of the lines:
// the same bits. f32 rows of magnitudes 1e-10 to 1e10 (so that each rounding to f32 matters),
// NaN and infinities, 1 to 17 rows (8 at a time, then one by one) of every length around the
// 8-column blocks; columns of every dtype in blocks of 512 and a partial last one, for cumsum,
// cumprod (factors near 1, of either sign, so that products neither vanish nor overflow) and
// logcumsumexp.
TEST(OpsReduction, ScanKernelsAreTheReference) {
  std::mt19937 rng(31);
  auto spread = [&](Tensor t) {
    std::uniform_int_distribution<int> exponent(-10, 10);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data<float>()[i];
      v *= std::pow(10.0f, static_cast<float>(exponent(rng)));
      if (rng() % 400 == 0) v = std::vector<float>{kNaN, kInf, -kInf, -0.0f}[rng() % 4];
    }
    return t;
  };
  auto near_one = [&](DType dtype, const Sizes& sizes) {
    Tensor t = test::random_tensor(dtype, sizes, rng, 0.8, 1.25);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (rng() % 2) {
        if (dtype == DType::F32) t.data<float>()[i] *= -1;
        else t.data<double>()[i] *= -1;
      }
    return t;
  };
  int runs = 0;
  auto check = [&](const char* op, const Tensor& x, int64_t dim, const std::string& kernel) {
    SCOPED_TRACE(std::string(op) + " " + kernel + " " + std::string(dtype_name(x.dtype())) + " " +
                 list_of(x.sizes()) + " dim " + std::to_string(dim));
    OneNode node(op, {type_of(x.dtype(), x.sizes())}, one_dim(dim));
    ASSERT_EQ(test::unsupported_reason(*node.node, kernel), "");
    const Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
    for (int threads : {1, 2}) {
      EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, kernel, {x}, threads)[0],
                                    expected));
      ++runs;
    }
  };
  if (avx2_available()) {
    for (int64_t rows : {1, 7, 8, 9, 17})
      for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 100, 1001})
        check("cumsum", spread(test::random_tensor(DType::F32, {rows, n}, rng, -1, 1)), 1, "avx2");
    check("cumsum", spread(test::random_tensor(DType::F32, {16, 50257}, rng, -1, 1)), -1, "avx2");
    EXPECT_EQ(runs, (5 * 9 + 1) * 2);
    OneNode columns("cumsum", {type_of(DType::F32, {4, 3})}, one_dim(0));
    EXPECT_MENTIONS(test::unsupported_reason(*columns.node, "avx2"), "the columns kernel");
  }
  for (DType dtype : {DType::F32, DType::F64, DType::I32, DType::I64})
    for (const Sizes& sizes : std::vector<Sizes>{{5, 2}, {3, 100, 7}, {2, 9, 513}, {300, 1100}}) {
      const int64_t dim = 1 - static_cast<int64_t>(sizes.size() == 2);
      Tensor x = test::random_tensor(dtype, sizes, rng, -1e6, 1e6);
      if (dtype == DType::F32) x = spread(test::random_tensor(dtype, sizes, rng, -1, 1));
      check("cumsum", x, dim, "columns");
      if (is_floating(dtype)) {
        check("cumprod", near_one(dtype, sizes), dim, "columns");
        check("logcumsumexp", x, dim, "columns");
      } else {
        check("cumprod", test::random_tensor(dtype, sizes, rng, -3, 3), dim, "columns");
      }
    }
  // Narrow integers and bool give i64 results (integers wrap around as the reference's).
  Tensor bytes = Tensor::empty(DType::I8, {40, 600});
  Tensor flags = Tensor::empty(DType::Bool, {40, 600});
  for (int64_t i = 0; i < bytes.numel(); ++i) {
    bytes.data<int8_t>()[i] = static_cast<int8_t>(rng());
    flags.data<bool>()[i] = rng() % 2 == 0;
  }
  for (const char* op : {"cumsum", "cumprod"}) {
    check(op, bytes, 0, "columns");
    check(op, flags, 0, "columns");
  }
  check("logcumsumexp", test::random_tensor(DType::F32, {0, 7}, rng), 0, "columns");
  OneNode rows("cumprod", {type_of(DType::I64, {4, 3})}, one_dim(1));
  EXPECT_MENTIONS(test::unsupported_reason(*rows.node, "columns"), "the last dim");
}

// f16 and bf16 folds keep an f32 accumulator, as PyTorch's CPU kernels do, and round it at each
// element. bf16: 1 and then 1.5·2^-24 again and again; f32 rounds each partial sum up to the next
// multiple of 2^-23, so after 32769 steps it has passed 1 + 2^-8, which bf16 rounds up to
// 1 + 2^-7, where an f64 accumulator (1 + 0.75·32769·2^-23) still rounds to 1. f16 alike with
// 3·2^-24 and 2049 steps past 1 + 2^-11. Both kernels, rows and columns.
TEST(OpsReduction, HalfFloatFoldsAccumulateInF32) {
  auto check = [](DType dtype, auto to_half, float tiny, int64_t steps, float expected) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    using Half = decltype(to_half(0.0f));
    Tensor line = Tensor::empty(dtype, {steps + 1});
    line.data<Half>()[0] = to_half(1);
    for (int64_t i = 1; i <= steps; ++i) line.data<Half>()[i] = to_half(tiny);
    ASSERT_EQ(cpu::to_float(line.data<Half>()[1]), tiny);
    Tensor columns = Tensor::empty(dtype, {steps + 1, 2});
    for (int64_t i = 0; i < columns.numel(); ++i) columns.data<Half>()[i] = line.data<Half>()[i / 2];
    const Tensor sums = run("cumsum", line, one_dim(0))[0];
    const Tensor column_sums = run("cumsum", columns, one_dim(0), "columns")[0];
    ASSERT_EQ(sums.dtype(), dtype);
    EXPECT_EQ(cpu::to_float(sums.data<Half>()[steps - 1]), 1.0f);
    EXPECT_EQ(cpu::to_float(sums.data<Half>()[steps]), expected);
    EXPECT_EQ(cpu::to_float(column_sums.data<Half>()[2 * steps + 1]), expected);
    // The products and log-sum-exps take the same accumulator: 2 · 0.5 and log(e^2) exactly.
    const Tensor two = typed<Half>(dtype, {2}, {to_half(2), to_half(0.5f)});
    EXPECT_EQ(cpu::to_float(run("cumprod", two, one_dim(0))[0].data<Half>()[1]), 1.0f);
    EXPECT_EQ(cpu::to_float(run("logcumsumexp", two, one_dim(0))[0].data<Half>()[0]), 2.0f);
  };
  check(DType::BF16, cpu::to_bfloat16, 1.5f * std::ldexp(1.0f, -24), 32769, 1 + 1.0f / 128);
  check(DType::F16, cpu::to_float16, 3 * std::ldexp(1.0f, -24), 2049, 1 + 1.0f / 1024);
}

// topk's select kernel (gathering candidates for small k, a radix sort of rank keys for the rest) gives the
// reference's values and indices exactly: every dtype, k from 0 to the whole line (-1) on both
// sides of the selection's limit (k * 64 <= n), the largest and the smallest, the last dim and a
// strided one, with many ties, NaN, infinities and signed zeros, and lines already in or
// against rank order (every element then is a candidate).
TEST(OpsReduction, TopkSelectIsTheReference) {
  std::mt19937 rng(41);
  auto check = [&](const Tensor& x, int64_t k, bool largest, int64_t dim) {
    SCOPED_TRACE(std::string(dtype_name(x.dtype())) + " " + list_of(x.sizes()) + " k " +
                 std::to_string(k) + (largest ? " largest" : " smallest") + " dim " +
                 std::to_string(dim));
    const AttrMap attrs = {{"k", k}, {"largest", largest}, {"dim", dim}};
    OneNode node("topk", {type_of(x.dtype(), x.sizes())}, attrs);
    ASSERT_EQ(test::unsupported_reason(*node.node, "select"), "");
    const std::vector<Tensor> expected = test::run_kernel(*node.node, "reference", {x});
    const std::vector<Tensor> got = test::run_kernel(*node.node, "select", {x}, 2);
    EXPECT_TRUE(test::same_values(got[0], expected[0]));
    EXPECT_TRUE(test::same_values(got[1], expected[1]));
  };
  auto floats = [&](const Sizes& sizes, int variant) {
    Tensor x = test::random_tensor(DType::F32, sizes, rng, -4, 4);
    float* v = x.data<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
      if (variant == 1) v[i] = std::round(v[i]);  // many ties
      if (variant == 2 && rng() % 6 == 0)
        v[i] = std::vector<float>{kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f}[rng() % 6];
      if (variant == 3) v[i] = static_cast<float>(i % 1000);  // rising: each one is a candidate
      if (variant == 4) v[i] = -static_cast<float>(i % 1000);
    }
    return x;
  };
  for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 640, 1000, 50257})
    for (int variant = 0; variant < 5; ++variant) {
      const Tensor x = floats({3, n}, variant);
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{5}, n / 64, n / 64 + 1, n / 2, n, int64_t{-1}}) {
        if (k > n) continue;
        for (bool largest : {true, false}) check(x, k, largest, 1);
      }
    }
  // A strided line (dim 0), and the other dtypes (integer keys, narrow ones sorted in fewer passes).
  const Tensor columns = floats({700, 5}, 2);
  for (int64_t k : {3, 11, 700}) check(columns, k, true, 0);
  for (DType dtype : {DType::F64, DType::I64, DType::I32})
    for (int64_t k : {2, 40, -1})
      for (bool largest : {true, false})
        check(test::random_tensor(dtype, {4, 500}, rng, -50, 50), k, largest, 1);
  Tensor bytes = Tensor::empty(DType::I8, {2, 300});
  Tensor unsigned_bytes = Tensor::empty(DType::U8, {2, 300});
  for (int64_t i = 0; i < bytes.numel(); ++i) {
    bytes.data<int8_t>()[i] = static_cast<int8_t>(rng());
    unsigned_bytes.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  }
  for (int64_t k : {4, 300})
    for (bool largest : {true, false}) {
      check(bytes, k, largest, 1);
      check(unsigned_bytes, k, largest, 1);
    }
  check(test::tensor_of({}, {2.5f}), 1, true, 0);
}

TEST(OpsReduction, Avx2DeclinesWhatTheReferenceTakes) {
  if (!test::has_kernel("sum", "avx2")) GTEST_SKIP() << "not an x86 build";
  if (!cpu::has_avx2_fma()) GTEST_SKIP() << "no AVX2+FMA: that reason comes first";
  OneNode apart("sum", {type_of(DType::F32, {2, 3, 4})}, dims({0, 2}));
  EXPECT_MENTIONS(test::unsupported_reason(*apart.node, "avx2"),
                  "the reduced dims of [2, 3, 4] are not one block of adjacent dims");
  OneNode f64("mean", {type_of(DType::F64, {4})});
  EXPECT_NE(test::unsupported_reason(*f64.node, "avx2"), "");
  OneNode i32("amax", {type_of(DType::I32, {4})});
  EXPECT_NE(test::unsupported_reason(*i32.node, "avx2"), "");
  // Dims that stay one block after size-1 dims are dropped are taken.
  OneNode joined("sum", {type_of(DType::F32, {2, 1, 3, 4})}, dims({0, 2}));
  if (avx2_available()) {
    EXPECT_EQ(test::unsupported_reason(*joined.node, "avx2"), "");
  }
}

// The bound of docs/ops.md on a sum whose terms all have one sign (where it is relative to the
// result): a million copies of 0.1f, whose exact sum is 1e6 * 0.1f. A plain f32 loop is off by
// about 1%.
TEST(OpsReduction, Avx2SumOfAMillionStaysAccurate) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  const int64_t n = 1000000;
  Tensor x = Tensor::empty(DType::F32, {n});
  std::fill(x.data<float>(), x.data<float>() + n, 0.1f);
  const double exact = static_cast<double>(n) * 0.1f;
  for (int threads : {1, 2}) {
    const float sum = run("sum", x, {}, "avx2", threads)[0].data<float>()[0];
    EXPECT_LE(std::fabs(sum - exact) / exact, rounding_depth(n) * std::ldexp(1.0, -24)) << sum;
    const float mean = run("mean", x, {}, "avx2", threads)[0].data<float>()[0];
    EXPECT_LE(std::fabs(mean - 0.1f) / 0.1f, (rounding_depth(n) + 1) * std::ldexp(1.0, -24));
  }
  // Down the columns too: 2^17 steps of 8 lanes.
  const int64_t steps = int64_t{1} << 17;
  Tensor columns = Tensor::empty(DType::F32, {steps, 8});
  std::fill(columns.data<float>(), columns.data<float>() + 8 * steps, 0.1f);
  const double column_exact = static_cast<double>(steps) * 0.1f;
  for (float sum : test::values_of<float>(run("sum", columns, dims({0}), "avx2", 2)[0]))
    EXPECT_LE(std::fabs(sum - column_exact) / column_exact,
              rounding_depth(steps) * std::ldexp(1.0, -24))
        << sum;
}

// var is two-pass in f64: a small spread around a large mean loses nothing.
TEST(OpsReduction, Avx2VarianceKeepsSmallSpreadAroundLargeMean) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(13);
  Tensor x = test::random_tensor(DType::F32, {16, 1000}, rng, 1000, 1000.01);
  for (const char* op : {"var", "std"}) {
    expect_avx2_matches_reference(op, dims({1}), x);
    expect_avx2_matches_reference(op, dims({0}), x);
  }
}

// ---------------------------------------------------------------- through the executor

// Every op on a graph input with a symbolic batch, the best kernels against the reference
// policy (within the bounds above), on two batch sizes.
TEST(OpsReduction, EveryOpRunsThroughTheExecutor) {
  const std::vector<std::pair<std::string, AttrMap>> cases = {
      {"sum", dims({1})},
      {"mean", dims({-1}, true)},
      {"prod", dims({0})},
      {"amax", {}},
      {"amin", dims({1})},
      {"max", dims({2})},
      {"min", dims({0, 2})},
      {"argmax", dims({1})},
      {"argmin", {}},
      {"max_dim", {{"dim", int64_t{2}}}},
      {"min_dim", {{"dim", int64_t{0}}, {"keepdim", true}}},
      {"var", {{"dim", Ints{2}}, {"correction", 0.0}}},
      {"std", dims({1})},
      {"any", dims({1})},
      {"all", {}},
      {"logsumexp", dims({2})},
      {"log_softmax", one_dim(-1)},
      {"cumsum", one_dim(1)},
      {"cumprod", one_dim(2)},
      {"logcumsumexp", one_dim(0)},
      {"cummax", one_dim(1)},
      {"cummin", one_dim(2)},
      {"topk", {{"k", int64_t{3}}, {"dim", int64_t{2}}}},
  };
  std::mt19937 rng(17);
  for (const auto& [op, attrs] : cases) {
    SCOPED_TRACE(op);
    Graph g;
    Value* x = g.add_input("x", TensorType{DType::F32, {g.add_symbol("B", 1, 8), Dim(5), Dim(6)}});
    g.set_outputs(g.add_node(op, {x}, attrs));
    auto best = CompiledGraph::compile(g);
    CompileOptions reference_policy;
    reference_policy.kernel_policy = "reference";
    auto reference = CompiledGraph::compile(g, reference_policy);
    for (int64_t batch : {1, 3}) {
      Tensor input = test::random_tensor(DType::F32, {batch, 5, 6}, rng);
      if (op == "any" || op == "all") input.data<float>()[2] = 0;
      std::vector<Tensor> got = best->run({input.view()});
      std::vector<Tensor> expected = reference->run({input.view()});
      ASSERT_EQ(got.size(), expected.size());
      ASSERT_EQ(got[0].sizes(), expected[0].sizes());
      const std::vector<int64_t> want = best->output_sizes({{batch, 5, 6}})[0];
      EXPECT_EQ(got[0].sizes(), want);
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i].dtype() == DType::F32)
          expect_within_bound(op, attrs, input, got[i], expected[i]);
        else
          EXPECT_TRUE(test::same_values(got[i], expected[i]));
      }
    }
  }
}

// An empty dim reaching amax at run time is caught by inference on the concrete shapes.
TEST(OpsReduction, ExecutorRejectsEmptyExtremaAtRunTime) {
  Graph g;
  Value* x = g.add_input("x", TensorType{DType::F32, {g.add_symbol("N", 0, 8), Dim(3)}});
  g.set_outputs({g.add("amax", {x}, dims({0}), "peak")});
  auto compiled = CompiledGraph::compile(g);
  std::mt19937 rng(1);
  Tensor ok = test::random_tensor(DType::F32, {2, 3}, rng);
  EXPECT_EQ(compiled->run({ok.view()})[0].sizes(), (Sizes{3}));
  Tensor empty = Tensor::empty(DType::F32, {0, 3});
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { compiled->run({empty.view()}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_MENTIONS(message, "node 'peak' (amax)");
  EXPECT_MENTIONS(message, "reduces dim 0 of size 0");
}

}  // namespace
}  // namespace kiln
