// searchsorted: hand-computed insertion points on both sides of equal elements, NaN values and
// NaN in the line (PyTorch's bisection, step by step), one line for every value or a line per leading index,
// i32 results, half floats, the shapes inference refuses, and a compiled graph with a symbolic
// count of values.
#include <gtest/gtest.h>

#include <limits>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::error_message;
using test::type_of;
using Ints = std::vector<int64_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> search(const Tensor& sorted, const Tensor& values, bool right,
                            bool out_int32 = false) {
  test::OneNode one("searchsorted", {type_of(sorted.dtype(), sorted.sizes()),
                                     type_of(values.dtype(), values.sizes())},
                    {{"right", right}, {"out_int32", out_int32}});
  EXPECT_EQ(one.output_type().dtype, out_int32 ? DType::I32 : DType::I64);
  EXPECT_EQ(one.output_type().shape, make_shape(values.sizes()));
  const Tensor got = test::run_kernel(*one.node, "reference", {sorted, values})[0];
  std::vector<int64_t> out;
  for (int64_t i = 0; i < got.numel(); ++i)
    out.push_back(out_int32 ? got.data<int32_t>()[i] : got.data<int64_t>()[i]);
  return out;
}

TEST(OpsSearchsorted, FindsInsertionPointsOnEitherSideOfEqualElements) {
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor line = test::tensor_of(dtype, {6}, {1, 3, 3, 3, 5, kInf});
    const Tensor values = test::tensor_of(dtype, {2, 4}, {0, 1, 2, 3, 4, 5, kInf, kNaN});
    // A NaN value is past every element on either side (no comparison with it holds).
    EXPECT_EQ(search(line, values, false), (Ints{0, 0, 1, 1, 4, 4, 5, 6}));
    EXPECT_EQ(search(line, values, true), (Ints{0, 1, 1, 4, 4, 5, 6, 6}));
    EXPECT_EQ(search(line, values, true, true), (Ints{0, 1, 1, 4, 4, 5, 6, 6}));
  }
  // A NaN met in the line sends the bisection past it (no comparison with it holds): bisecting
  // [1, 2, NaN, NaN] meets the NaN at index 2 first, so every value lands at the end.
  const Tensor with_nan = test::tensor_of(DType::F32, {4}, {1, 2, kNaN, kNaN});
  EXPECT_EQ(search(with_nan, test::tensor_of(DType::F32, {3}, {1.5, 9, kNaN}), false),
            (Ints{4, 4, 4}));
  // [1, 2, 3, NaN]: the first midpoint (index 2) is a number, so 1.5 lands at 1.
  EXPECT_EQ(search(test::tensor_of(DType::F32, {4}, {1, 2, 3, kNaN}),
                   test::tensor_of(DType::F32, {1}, {1.5}), false),
            (Ints{1}));
  // A rank-0 value; an empty line; no values.
  EXPECT_EQ(search(test::tensor_of(DType::F32, {3}, {1, 2, 3}),
                   test::tensor_of(DType::F32, {}, {2.5}), false),
            (Ints{2}));
  EXPECT_EQ(search(test::tensor_of(DType::F32, {0}, {}), test::tensor_of(DType::F32, {2}, {1, 2}),
                   true),
            (Ints{0, 0}));
  EXPECT_EQ(search(test::tensor_of(DType::F32, {2}, {1, 2}), test::tensor_of(DType::F32, {0}, {}),
                   false),
            (Ints{}));
}

TEST(OpsSearchsorted, EachLeadingIndexSearchesItsOwnLine) {
  const Tensor lines = test::tensor_of(DType::F32, {2, 3}, {0, 10, 20, 100, 200, 300});
  const Tensor values = test::tensor_of(DType::F32, {2, 2}, {15, 150, 15, 150});
  EXPECT_EQ(search(lines, values, false), (Ints{2, 3, 0, 1}));
}

TEST(OpsSearchsorted, TakesIntegersAndHalfFloats) {
  Tensor line = Tensor::empty(DType::I32, {4});
  Tensor values = Tensor::empty(DType::I32, {3});
  for (int i = 0; i < 4; ++i) line.data<int32_t>()[i] = (i - 1) * 100;  // -100, 0, 100, 200
  for (int i = 0; i < 3; ++i) values.data<int32_t>()[i] = i * 100 - 50;  // -50, 50, 150
  EXPECT_EQ(search(line, values, false), (Ints{1, 2, 3}));
  Tensor half_line = Tensor::empty(DType::BF16, {3});
  Tensor half_values = Tensor::empty(DType::BF16, {2});
  for (int i = 0; i < 3; ++i) half_line.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(-1.0f + i);
  half_values.data<cpu::BFloat16>()[0] = cpu::to_bfloat16(0);
  half_values.data<cpu::BFloat16>()[1] = cpu::to_bfloat16(-2);
  EXPECT_EQ(search(half_line, half_values, true), (Ints{2, 0}));
}

TEST(OpsSearchsorted, RefusesWhatPyTorchRefuses) {
  auto refused = [](const TensorType& sorted, const TensorType& values) {
    return error_message([&] { test::OneNode("searchsorted", {sorted, values}); },
                         ErrorCode::ShapeInference);
  };
  std::string message = refused(type_of(DType::F32, {3}), type_of(DType::F64, {2}));
  EXPECT_NE(message.find("sorted is f32 and values f64; cast both to one dtype"),
            std::string::npos)
      << message;
  message = refused(type_of(DType::Bool, {3}), type_of(DType::Bool, {2}));
  EXPECT_NE(message.find("not bool"), std::string::npos) << message;
  message = refused(type_of(DType::F32, {}), type_of(DType::F32, {2}));
  EXPECT_NE(message.find("rank-0"), std::string::npos) << message;
  message = refused(type_of(DType::F32, {2, 5}), type_of(DType::F32, {3, 4}));
  EXPECT_NE(message.find("sorted [2, 5] holds several lines, so values [3, 4] must have the same "
                         "dims but the last"),
            std::string::npos)
      << message;
  EXPECT_NE(refused(type_of(DType::F32, {2, 5}), type_of(DType::F32, {2})).find("same dims"),
            std::string::npos);
}

TEST(OpsSearchsorted, CompiledGraphTakesASymbolicCountOfValues) {
  Graph g;
  const Dim count = g.add_symbol("N", 1, 64);
  Value* values = g.add_input("values", TensorType{DType::F32, {count}});
  Value* edges = g.add_constant("edges", test::tensor_of(DType::F32, {3}, {-1, 0, 1}));
  g.set_outputs({g.add("searchsorted", {edges, values}, {{"right", true}})});
  auto compiled = CompiledGraph::compile(g);
  for (int64_t n : {1, 5}) {
    std::vector<double> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(-1.5 + 0.5 * static_cast<double>(i));
    const Tensor got = compiled->run({test::tensor_of(DType::F32, {n}, v).view()})[0];
    ASSERT_EQ(got.sizes(), (Ints{n}));
    const Ints expected{0, 1, 1, 2, 2};  // -1.5, -1, -0.5, 0, 0.5
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got.data<int64_t>()[i], expected[i]) << i;
  }
}

}  // namespace
}  // namespace kiln
