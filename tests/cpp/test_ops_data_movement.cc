// reshape and permute: type inference (with symbolic dims), the reference kernels against
// hand-computed values, and the blocked permute kernel against the reference.
#include <algorithm>
#include <numeric>

#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

AttrMap shape_attr(std::vector<int64_t> shape) { return {{"shape", std::move(shape)}}; }
AttrMap dims_attr(std::vector<int64_t> dims) { return {{"dims", std::move(dims)}}; }

// 0, 1, 2, ... of any dtype (wrapping for the narrow ones): every element tells where it came from.
Tensor iota(DType dtype, const std::vector<int64_t>& sizes) {
  Tensor t = Tensor::empty(dtype, sizes);
  auto* bytes = static_cast<uint8_t*>(t.data());
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t v = static_cast<uint64_t>(i) * 2654435761u;  // distinct low bytes too
    std::memcpy(bytes + static_cast<size_t>(i) * size, &v, size);
  }
  return t;
}

// ---------------------------------------------------------------- reshape

TEST(OpsDataMovement, ReshapeStaticShapes) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {2, 3, 4}));
  EXPECT_EQ(g.add("reshape", {x}, shape_attr({-1, 4}))->type(), type_of(DType::F32, {6, 4}));
  EXPECT_EQ(g.add("reshape", {x}, shape_attr({4, 1, 6}))->type(), type_of(DType::F32, {4, 1, 6}));
  EXPECT_EQ(g.add("reshape", {x}, shape_attr({24, -1}))->type(), type_of(DType::F32, {24, 1}));
  Value* z = g.add_input("z", type_of(DType::I64, {0, 3}));
  EXPECT_EQ(g.add("reshape", {z}, shape_attr({3, -1}))->type(), type_of(DType::I64, {3, 0}));

  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({5, 5})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("24 elements"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({-1, -1})); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({-1, 5})); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({-2, -12})); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {z}, shape_attr({-1, 0})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("ambiguous"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}); }), ErrorCode::ShapeInference);
}

TEST(OpsDataMovement, ReshapeFoldsOneSymbolIntoMinusOne) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(3), Dim(4)}});
  // [B, 3, 4] -> [-1, 4]: a derived symbol B*3 in [3, 96].
  Value* flat = g.add("reshape", {x}, shape_attr({-1, 4}));
  ASSERT_FALSE(flat->type().shape[0].is_static());
  const Symbol& derived = g.symbols()[flat->type().shape[0].symbol()];
  EXPECT_EQ(derived.name, "B*3");
  EXPECT_EQ(derived.min, 3);
  EXPECT_EQ(derived.max, 96);
  EXPECT_EQ(flat->type().shape[1], Dim(4));
  // [B, 3, 4] -> [-1, 2, 6]: -1 is B itself.
  EXPECT_EQ(g.add("reshape", {x}, shape_attr({-1, 2, 6}))->type().shape,
            (Shape{batch, Dim(2), Dim(6)}));
  // [B, 3, 4] -> [3, -1, 4]: -1 anywhere.
  EXPECT_EQ(g.add("reshape", {x}, shape_attr({3, -1, 4}))->type().shape,
            (Shape{Dim(3), batch, Dim(4)}));
  // Flatten, then unflatten: [B*3, 4] -> [-1, 3, 4] is B again; [B*3, 4] -> [-1, 2] is B*6.
  Value* back = g.add("reshape", {flat}, shape_attr({-1, 3, 4}));
  EXPECT_EQ(back->type().shape, (Shape{batch, Dim(3), Dim(4)}));
  Value* pairs = g.add("reshape", {flat}, shape_attr({-1, 2}));
  EXPECT_EQ(g.symbols()[pairs->type().shape[0].symbol()].name, "B*6");
  EXPECT_EQ(g.symbols()[pairs->type().shape[0].symbol()].max, 192);
  g.set_outputs({flat, back, pairs});
  EXPECT_NO_THROW(verify(g));

  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({-1, 24})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("not a whole multiple"), std::string::npos) << message;
  const int64_t huge = int64_t{1} << 30;  // the target's product overflows int64
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({-1, huge, huge, huge})); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {x}, shape_attr({12, 4})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("put -1"), std::string::npos) << message;
  Dim seq = g.add_symbol("S", 1, 128);
  Value* y = g.add_input("y", TensorType{DType::F32, {batch, seq, Dim(8)}});
  EXPECT_EQ(test::error_code_of([&] { g.add("reshape", {y}, shape_attr({-1, 8})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("several dynamic dims"), std::string::npos) << message;
}

TEST(OpsDataMovement, ReshapeCopiesTheBytes) {
  OneNode node("reshape", {type_of(DType::I64, {2, 3})}, shape_attr({3, -1}));
  Tensor x = iota(DType::I64, {2, 3});
  Tensor y = test::run_kernel(*node.node, "reference", {x})[0];
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(test::values_of<int64_t>(y), test::values_of<int64_t>(x));
  OneNode empty("reshape", {type_of(DType::F32, {0, 4})}, shape_attr({4, 0}));
  Tensor nothing = Tensor::empty(DType::F32, {0, 4});
  EXPECT_EQ(test::run_kernel(*empty.node, "reference", {nothing})[0].numel(), 0);
}

// ---------------------------------------------------------------- permute

TEST(OpsDataMovement, PermuteInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(3), Dim(5)}});
  EXPECT_EQ(g.add("permute", {x}, dims_attr({2, 0, 1}))->type().shape,
            (Shape{Dim(5), batch, Dim(3)}));
  EXPECT_EQ(g.add("permute", {x}, dims_attr({0, -1, -2}))->type().shape,
            (Shape{batch, Dim(5), Dim(3)}));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("permute", {x}, dims_attr({0, 1, 1})); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("twice"), std::string::npos) << message;
  EXPECT_EQ(test::error_code_of([&] { g.add("permute", {x}, dims_attr({0, 1})); }),
            ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("permute", {x}, dims_attr({0, 1, 3})); }),
            ErrorCode::ShapeInference);
  Value* s = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(g.add("permute", {s}, dims_attr({}))->type(), s->type());
}

TEST(OpsDataMovement, ReferencePermuteMatchesHandComputedValues) {
  OneNode transpose("permute", {type_of(DType::F32, {2, 3})}, dims_attr({1, 0}));
  Tensor y = test::run_kernel(*transpose.node, "reference",
                              {test::tensor_of({2, 3}, {1, 2, 3, 4, 5, 6})})[0];
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(test::values_of<float>(y), (std::vector<float>{1, 4, 2, 5, 3, 6}));

  // [2, 2, 2] with dims [2, 0, 1]: y[k][i][j] = x[i][j][k].
  OneNode rotate("permute", {type_of(DType::F32, {2, 2, 2})}, dims_attr({2, 0, 1}));
  y = test::run_kernel(*rotate.node, "reference",
                       {test::tensor_of({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})})[0];
  EXPECT_EQ(test::values_of<float>(y), (std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7}));
}

void expect_blocked_matches_reference(DType dtype, const std::vector<int64_t>& sizes,
                                      const std::vector<int64_t>& dims) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_string(sizes) + " dims " +
               shape_string(dims));
  OneNode node("permute", {type_of(dtype, sizes)}, dims_attr(dims));
  Tensor x = iota(dtype, sizes);
  Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
  for (int threads : {1, 2})
    EXPECT_TRUE(test::run_kernel(*node.node, "blocked", {x}, threads)[0].same_contents(expected));
}

TEST(OpsDataMovement, BlockedPermuteMatchesReferenceOnEveryPermutation) {
  std::vector<int64_t> dims = {0, 1, 2, 3};
  do {
    for (DType dtype : {DType::F32, DType::I64, DType::U8, DType::BF16, DType::Bool})
      expect_blocked_matches_reference(dtype, {2, 3, 17, 5}, dims);
    expect_blocked_matches_reference(DType::F32, {3, 1, 7, 1}, dims);  // size-1 dims
    expect_blocked_matches_reference(DType::F32, {2, 0, 3, 4}, dims);  // zero-size
  } while (std::next_permutation(dims.begin(), dims.end()));
}

TEST(OpsDataMovement, BlockedPermuteMatchesReferenceOnModelShapes) {
  expect_blocked_matches_reference(DType::F32, {768, 3072}, {1, 0});         // weight transpose
  expect_blocked_matches_reference(DType::F32, {2, 128, 12, 64}, {0, 2, 1, 3});  // split heads
  expect_blocked_matches_reference(DType::F32, {2, 12, 128, 64}, {0, 1, 3, 2});  // K^T
  expect_blocked_matches_reference(DType::F32, {1, 64, 56, 56}, {0, 2, 3, 1});   // NCHW -> NHWC
  expect_blocked_matches_reference(DType::F32, {1000003}, {0});
  expect_blocked_matches_reference(DType::F64, {1, 1, 1}, {2, 0, 1});
  expect_blocked_matches_reference(DType::F32, {}, {});
}

}  // namespace
}  // namespace kiln
