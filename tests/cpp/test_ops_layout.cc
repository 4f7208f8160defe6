// Layout ops (src/ops/layout.cc): type inference with symbolic dims and its errors, the
// reference kernels against hand-computed values, the row kernels against the reference, the
// casts of `to` (PyTorch's conversion rules, vector kernels bit for bit against the reference),
// and every op through the executor.
#include <bit>
#include <cmath>
#include <limits>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

// 0, 1, 2, ... of any dtype (wrapping, distinct low bytes): every element tells where it came from.
Tensor iota(DType dtype, const std::vector<int64_t>& sizes) {
  Tensor t = Tensor::empty(dtype, sizes);
  auto* bytes = static_cast<uint8_t*>(t.data());
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t v = static_cast<uint64_t>(i) * 2654435761u;
    std::memcpy(bytes + static_cast<size_t>(i) * size, &v, size);
  }
  return t;
}

template <typename T>
Tensor tensor_from(DType dtype, const std::vector<int64_t>& sizes, const std::vector<T>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  EXPECT_EQ(sizeof(T), dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}

// The one output of `op` on x through the reference kernel.
Tensor reference_of(const std::string& op, const Tensor& x, AttrMap attrs) {
  OneNode node(op, {type_of(x.dtype(), x.sizes())}, std::move(attrs));
  return test::run_kernel(*node.node, "reference", {x})[0];
}

std::vector<float> reference_values(const std::string& op, const Tensor& x, AttrMap attrs) {
  return test::values_of<float>(reference_of(op, x, std::move(attrs)));
}

// 1, 2, ..., n in f32.
Tensor counting(const std::vector<int64_t>& sizes) {
  Tensor t = Tensor::empty(DType::F32, sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i + 1);
  return t;
}

ErrorCode add_error(Graph& g, const std::string& op, Value* x, AttrMap attrs,
                    std::string* message) {
  return test::error_code_of([&] { g.add(op, {x}, std::move(attrs)); }, message);
}

#define EXPECT_SHAPE_ERROR(graph, op, x, attrs, fragment)                             \
  do {                                                                                \
    std::string message_;                                                             \
    EXPECT_EQ(add_error(graph, op, x, attrs, &message_), ErrorCode::ShapeInference);  \
    EXPECT_NE(message_.find(fragment), std::string::npos) << message_;                \
  } while (0)

using Ints = std::vector<int64_t>;

// ---------------------------------------------------------------- inference

TEST(OpsLayout, ExpandInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(1), Dim(4)}});
  EXPECT_EQ(g.add("expand", {x}, {{"size", Ints{-1, 3, -1}}})->type().shape,
            (Shape{batch, Dim(3), Dim(4)}));
  EXPECT_EQ(g.add("expand", {x}, {{"size", Ints{2, -1, 5, 4}}})->type().shape,
            (Shape{Dim(2), batch, Dim(5), Dim(4)}));
  // A symbolic dim expands to a size it may take (or may be 1 for).
  EXPECT_EQ(g.add("expand", {x}, {{"size", Ints{8, 1, 4}}})->type().shape,
            (Shape{Dim(8), Dim(1), Dim(4)}));
  EXPECT_SHAPE_ERROR(g, "expand", x, (AttrMap{{"size", Ints{-1, 3, 5}}}),
                     "the input's dim of size 4 can't expand to 5");
  EXPECT_SHAPE_ERROR(g, "expand", x, (AttrMap{{"size", Ints{3, 4}}}), "fewer dims");
  EXPECT_SHAPE_ERROR(g, "expand", x, (AttrMap{{"size", Ints{-1, 1, 4, 4}}}), "new leading dim");
  EXPECT_SHAPE_ERROR(g, "expand", x, (AttrMap{{"size", Ints{-1, -3, 4}}}), "is -3");
  Dim wide = g.add_symbol("W", 2, 8);
  Value* w = g.add_input("w", TensorType{DType::I64, {wide}});
  EXPECT_SHAPE_ERROR(g, "expand", w, (AttrMap{{"size", Ints{16}}}), "can be neither 1 nor 16");
}

TEST(OpsLayout, SqueezeAndUnsqueezeInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Dim seq = g.add_symbol("S", 2, 64);
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(1), seq, Dim(1), Dim(5)}});
  EXPECT_EQ(g.add("squeeze", {x})->type().shape, (Shape{seq, Dim(5)}));
  EXPECT_EQ(g.add("squeeze", {x}, {{"dim", Ints{-2}}})->type().shape,
            (Shape{Dim(1), seq, Dim(5)}));
  // Listed dims that aren't 1 stay, as in PyTorch; so does S, which is never 1.
  EXPECT_EQ(g.add("squeeze", {x}, {{"dim", Ints{1, 3}}})->type().shape, x->type().shape);
  EXPECT_SHAPE_ERROR(g, "squeeze", x, (AttrMap{{"dim", Ints{0, -4}}}), "twice");
  EXPECT_SHAPE_ERROR(g, "squeeze", x, (AttrMap{{"dim", Ints{4}}}), "out of range for rank 4");
  // B may be 1 or not: the output's rank would depend on the run.
  Value* b = g.add_input("b", TensorType{DType::F32, {batch, Dim(1)}});
  EXPECT_SHAPE_ERROR(g, "squeeze", b, AttrMap{}, "may or may not be 1");
  EXPECT_EQ(g.add("squeeze", {b}, {{"dim", Ints{1}}})->type().shape, (Shape{batch}));
  Value* s = g.add_input("s", type_of(DType::I8, {}));
  EXPECT_EQ(g.add("squeeze", {s}, {{"dim", Ints{0}}})->type(), s->type());

  EXPECT_EQ(g.add("unsqueeze", {x}, {{"dim", int64_t{0}}})->type().shape,
            (Shape{Dim(1), Dim(1), seq, Dim(1), Dim(5)}));
  EXPECT_EQ(g.add("unsqueeze", {x}, {{"dim", int64_t{-1}}})->type().shape,
            (Shape{Dim(1), seq, Dim(1), Dim(5), Dim(1)}));
  EXPECT_EQ(g.add("unsqueeze", {s}, {{"dim", int64_t{0}}})->type(), type_of(DType::I8, {1}));
  EXPECT_SHAPE_ERROR(g, "unsqueeze", x, (AttrMap{{"dim", int64_t{5}}}), "use [-5, 4]");
}

TEST(OpsLayout, FlattenMakesDerivedSymbols) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Dim seq = g.add_symbol("S", 1, 128);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, seq, Dim(8), Dim(2)}});
  Value* all = g.add("flatten", {x});
  ASSERT_EQ(all->type().rank(), 1u);
  const Symbol& product = g.symbols()[all->type().shape[0].symbol()];
  EXPECT_EQ(product.name, "B*S*16");
  EXPECT_EQ(product.min, 16);
  EXPECT_EQ(product.max, 32 * 128 * 16);
  // One symbol times a factor is the symbol reshape would derive ("B*8").
  Value* head = g.add("flatten", {x}, {{"start_dim", int64_t{0}}, {"end_dim", int64_t{-3}}});
  EXPECT_EQ(g.symbols()[head->type().shape[0].symbol()].name, "B*S");
  Value* tail = g.add("flatten", {x}, {{"start_dim", int64_t{2}}});
  EXPECT_EQ(tail->type().shape, (Shape{batch, seq, Dim(16)}));
  Value* same = g.add("flatten", {x}, {{"start_dim", int64_t{1}}, {"end_dim", int64_t{1}}});
  EXPECT_EQ(same->type().shape, x->type().shape);
  Value* y = g.add_input("y", TensorType{DType::F32, {batch, Dim(8)}});
  Value* b8 = g.add("flatten", {y});
  EXPECT_EQ(g.symbols()[b8->type().shape[0].symbol()].name, "B*8");
  Value* zero = g.add_input("z", TensorType{DType::F32, {batch, Dim(0)}});
  EXPECT_EQ(g.add("flatten", {zero})->type().shape, (Shape{Dim(0)}));
  Value* scalar = g.add_input("s", type_of(DType::U8, {}));
  EXPECT_EQ(g.add("flatten", {scalar})->type(), type_of(DType::U8, {1}));
  g.set_outputs({all, head});
  EXPECT_NO_THROW(verify(g));
  EXPECT_SHAPE_ERROR(g, "flatten", x, (AttrMap{{"start_dim", int64_t{2}}, {"end_dim", int64_t{1}}}),
                     "comes after end_dim");
  EXPECT_SHAPE_ERROR(g, "flatten", x, (AttrMap{{"start_dim", int64_t{4}}}), "start_dim 4");
}

TEST(OpsLayout, PadInference) {
  Graph g;
  Dim seq = g.add_symbol("S", 3, 64);
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(2), seq, Dim(5)}});
  auto pad = [](Ints p, std::string mode = "constant") {
    return AttrMap{{"pad", std::move(p)}, {"mode", std::move(mode)}};
  };
  Value* padded = g.add("pad", {x}, pad({1, 2, 0, 3}));
  ASSERT_FALSE(padded->type().shape[1].is_static());
  const Symbol& s3 = g.symbols()[padded->type().shape[1].symbol()];
  EXPECT_EQ(s3.name, "S+3");
  EXPECT_EQ(s3.min, 6);
  EXPECT_EQ(s3.max, 67);
  EXPECT_EQ(padded->type().shape[2], Dim(8));
  EXPECT_EQ(g.add("pad", {x}, pad({-1, -2}))->type().shape, (Shape{Dim(2), seq, Dim(2)}));
  EXPECT_EQ(g.add("pad", {x}, pad({0, 0, -1, -1}))->type().shape[1].is_static(), false);
  EXPECT_EQ(g.add("pad", {x}, pad({4, 4, 2, 2}, "reflect"))->type().shape[2], Dim(13));
  EXPECT_EQ(g.add("pad", {x}, pad({9, 9}, "replicate"))->type().shape[2], Dim(23));
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({1}), "pairs");
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({0, 0, 0, 0, 0, 0, 1, 1}), "pads 4 dims of a rank-3");
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({-3, -3}), "crops more than the dim holds");
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({0, 0, -2, -2}), "crops more");  // S may be 3
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({5, 0}, "reflect"), "smaller than the dim");
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({0, 0, 3, 0}, "reflect"), "smaller than the dim");
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({-1, 0}, "replicate"), "can't be negative");
  EXPECT_SHAPE_ERROR(g, "pad", x, pad({1, 1}, "circular"), "mode \"circular\"");
  Value* bytes = g.add_input("bytes", type_of(DType::U8, {4}));
  EXPECT_SHAPE_ERROR(g, "pad", bytes, (AttrMap{{"pad", Ints{1, 1}}, {"value", 300.0}}),
                     "300 is outside the range of u8");
  Value* empty = g.add_input("empty", type_of(DType::F32, {0}));
  EXPECT_SHAPE_ERROR(g, "pad", empty, pad({1, 0}, "replicate"), "non-empty");
  EXPECT_EQ(g.add("pad", {empty}, pad({1, 2}))->type().shape, (Shape{Dim(3)}));
}

TEST(OpsLayout, RollFlipRepeatTriangleAndToInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::BF16, {batch, Dim(3)}});
  EXPECT_EQ(g.add("roll", {x}, {{"shifts", Ints{2}}})->type(), x->type());
  EXPECT_EQ(g.add("roll", {x}, {{"shifts", Ints{1, 1}}, {"dims", Ints{1, -1}}})->type(), x->type());
  EXPECT_SHAPE_ERROR(g, "roll", x, (AttrMap{{"shifts", Ints{1, 2}}}), "must hold one shift");
  EXPECT_SHAPE_ERROR(g, "roll", x, (AttrMap{{"shifts", Ints{1}}, {"dims", Ints{0, 1}}}),
                     "differ in length");
  EXPECT_SHAPE_ERROR(g, "roll", x, (AttrMap{{"shifts", Ints{1}}, {"dims", Ints{2}}}),
                     "out of range");

  EXPECT_EQ(g.add("flip", {x}, {{"dims", Ints{0, 1}}})->type(), x->type());
  EXPECT_SHAPE_ERROR(g, "flip", x, (AttrMap{{"dims", Ints{1, -1}}}), "twice");

  Value* tiled = g.add("repeat", {x}, {{"repeats", Ints{4, 2, 3}}});
  EXPECT_EQ(tiled->type().shape[0], Dim(4));
  EXPECT_EQ(g.symbols()[tiled->type().shape[1].symbol()].name, "B*2");
  EXPECT_EQ(tiled->type().shape[2], Dim(9));
  EXPECT_EQ(g.add("repeat", {x}, {{"repeats", Ints{1, 1}}})->type(), x->type());
  EXPECT_EQ(g.add("repeat", {x}, {{"repeats", Ints{0, 1}}})->type().shape,
            (Shape{Dim(0), Dim(3)}));
  EXPECT_SHAPE_ERROR(g, "repeat", x, (AttrMap{{"repeats", Ints{2}}}), "fewer entries");
  EXPECT_SHAPE_ERROR(g, "repeat", x, (AttrMap{{"repeats", Ints{1, -1}}}), "negative count -1");

  EXPECT_EQ(g.add("tril", {x}, {{"diagonal", int64_t{-1}}})->type(), x->type());
  Value* v = g.add_input("v", type_of(DType::F32, {3}));
  EXPECT_SHAPE_ERROR(g, "triu", v, AttrMap{}, "rank >= 2");

  EXPECT_EQ(g.add("to", {x}, {{"dtype", std::string("i64")}})->type(),
            (TensorType{DType::I64, {batch, Dim(3)}}));
  EXPECT_SHAPE_ERROR(g, "to", x, (AttrMap{{"dtype", std::string("float")}}),
                     "\"float\", not a dtype");
  EXPECT_EQ(test::error_code_of([&] { g.add("to", {x}); }), ErrorCode::ShapeInference);
  EXPECT_EQ(g.add("copy", {x})->type(), x->type());
}

// ---------------------------------------------------------------- reference values

TEST(OpsLayout, ReferenceKernelsMatchHandComputedValues) {
  Tensor column = counting({3, 1});
  EXPECT_EQ(reference_values("expand", column, {{"size", Ints{2, -1, 2}}}),
            (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));

  Tensor square = counting({2, 2});
  EXPECT_EQ(reference_values("repeat", square, {{"repeats", Ints{2, 1, 3}}}),
            (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                                1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));

  Tensor six = counting({2, 3});  // [[1, 2, 3], [4, 5, 6]]
  EXPECT_EQ(reference_values("flip", six, {{"dims", Ints{1}}}),
            (std::vector<float>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(reference_values("flip", six, {{"dims", Ints{0, -1}}}),
            (std::vector<float>{6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(reference_values("roll", six, {{"shifts", Ints{1}}}),
            (std::vector<float>{6, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reference_values("roll", six, {{"shifts", Ints{1}}, {"dims", Ints{1}}}),
            (std::vector<float>{3, 1, 2, 6, 4, 5}));
  // torch.roll(x, (1, -1), (0, 1)); a shift past the size wraps (-4 is -1 for 3 columns).
  EXPECT_EQ(reference_values("roll", six, {{"shifts", Ints{1, -4}}, {"dims", Ints{0, 1}}}),
            (std::vector<float>{5, 6, 4, 2, 3, 1}));
  EXPECT_EQ(reference_values("roll", six, {{"shifts", Ints{1, 1}}, {"dims", Ints{1, 1}}}),
            (std::vector<float>{2, 3, 1, 5, 6, 4}));

  Tensor row = counting({1, 3});
  EXPECT_EQ(reference_values("pad", row, {{"pad", Ints{2, 1}}, {"value", 9.0}}),
            (std::vector<float>{9, 9, 1, 2, 3, 9}));
  EXPECT_EQ(reference_values("pad", row, {{"pad", Ints{2, 2}}, {"mode", std::string("reflect")}}),
            (std::vector<float>{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(
      reference_values("pad", row, {{"pad", Ints{2, 1}}, {"mode", std::string("replicate")}}),
      (std::vector<float>{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(reference_values("pad", counting({4}), {{"pad", Ints{-1, 1}}}),
            (std::vector<float>{2, 3, 4, 0}));
  EXPECT_EQ(reference_values("pad", square, {{"pad", Ints{1, 0, 0, 1}}}),
            (std::vector<float>{0, 1, 2, 0, 3, 4, 0, 0, 0}));
  EXPECT_EQ(reference_values("pad", counting({3, 3}),
                             {{"pad", Ints{1, 1, 1, 1}}, {"mode", std::string("reflect")}}),
            (std::vector<float>{5, 4, 5, 6, 5, 2, 1, 2, 3, 2, 5, 4, 5, 6, 5,
                                8, 7, 8, 9, 8, 5, 4, 5, 6, 5}));
  EXPECT_EQ(reference_values("pad", Tensor::empty(DType::F32, {0}), {{"pad", Ints{1, 1}}}),
            (std::vector<float>{0, 0}));

  Tensor nine = counting({3, 3});
  EXPECT_EQ(reference_values("tril", nine, {}), (std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(reference_values("tril", nine, {{"diagonal", int64_t{-1}}}),
            (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_EQ(reference_values("triu", nine, {}), (std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(reference_values("triu", nine, {{"diagonal", int64_t{1}}}),
            (std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(reference_values("tril", counting({2, 4}), {{"diagonal", int64_t{1}}}),
            (std::vector<float>{1, 2, 0, 0, 5, 6, 7, 0}));

  // The shape-only ops keep the bytes.
  Tensor x = iota(DType::I16, {2, 1, 3});
  for (auto [op, attrs] : std::vector<std::pair<std::string, AttrMap>>{
           {"squeeze", {}}, {"unsqueeze", {{"dim", int64_t{1}}}}, {"flatten", {}}, {"copy", {}}}) {
    Tensor y = reference_of(op, x, attrs);
    EXPECT_EQ(test::values_of<int16_t>(y), test::values_of<int16_t>(x)) << op;
  }
  EXPECT_EQ(reference_of("squeeze", x, {}).sizes(), (Ints{2, 3}));
  EXPECT_EQ(reference_of("unsqueeze", x, {{"dim", int64_t{1}}}).sizes(), (Ints{2, 1, 1, 3}));
  EXPECT_EQ(reference_of("flatten", x, {}).sizes(), (Ints{6}));
}

TEST(OpsLayout, PadFillsEveryDtypeWithTheConvertedValue) {
  auto pad = [](Ints p, double value) { return AttrMap{{"pad", std::move(p)}, {"value", value}}; };
  Tensor bytes = tensor_from<uint8_t>(DType::U8, {2}, {7, 8});
  EXPECT_EQ(test::values_of<uint8_t>(reference_of("pad", bytes, pad({1, 0}, 254.7))),
            (std::vector<uint8_t>{254, 7, 8}));
  Tensor flags = tensor_from<bool>(DType::Bool, {1}, {false});
  EXPECT_EQ(test::values_of<bool>(reference_of("pad", flags, pad({0, 1}, 0.5))),
            (std::vector<bool>{false, true}));
  Tensor half = tensor_from<uint16_t>(DType::F16, {1}, {0x3C00});
  EXPECT_EQ(test::values_of<uint16_t>(reference_of("pad", half, pad({1, 0}, -2.0))),
            (std::vector<uint16_t>{0xC000, 0x3C00}));
  Tensor wide = tensor_from<int64_t>(DType::I64, {1}, {5});
  EXPECT_EQ(test::values_of<int64_t>(reference_of("pad", wide, pad({0, 1}, -3.7))),
            (std::vector<int64_t>{5, -3}));
}

// ---------------------------------------------------------------- rows against reference

struct LayoutCase {
  std::string op;
  std::vector<int64_t> sizes;
  AttrMap attrs;
};

void expect_rows_match_reference(const LayoutCase& c, DType dtype) {
  SCOPED_TRACE(c.op + " " + std::string(dtype_name(dtype)) + " " + shape_string(c.sizes));
  OneNode node(c.op, {type_of(dtype, c.sizes)}, c.attrs);
  Tensor x = iota(dtype, c.sizes);
  Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
  for (int threads : {1, 2})
    EXPECT_TRUE(test::run_kernel(*node.node, "rows", {x}, threads)[0].same_contents(expected));
}

TEST(OpsLayout, RowKernelsMatchReference) {
  const std::string reflect = "reflect", replicate = "replicate";
  std::vector<LayoutCase> cases;
  for (int64_t n : {1, 3, 7, 17}) {
    cases.push_back({"expand", {n, 1}, {{"size", Ints{2, n, 5}}}});
    cases.push_back({"expand", {1, n}, {{"size", Ints{3, -1}}}});
    cases.push_back({"repeat", {n, 2}, {{"repeats", Ints{2, 3, 2}}}});
    cases.push_back({"repeat", {1, n}, {{"repeats", Ints{3, 1}}}});
    cases.push_back({"flip", {2, n, 3}, {{"dims", Ints{1}}}});
    cases.push_back({"flip", {2, n, 3}, {{"dims", Ints{0, 1, 2}}}});
    cases.push_back({"flip", {3, n}, {{"dims", Ints{-1}}}});
    cases.push_back({"roll", {n, 4}, {{"shifts", Ints{5}}}});
    cases.push_back({"roll", {2, n, 4}, {{"shifts", Ints{-2, 1}}, {"dims", Ints{1, 2}}}});
    cases.push_back({"pad", {2, n, 3}, {{"pad", Ints{1, 2, 2, 0}}, {"value", 1.0}}});
    cases.push_back({"pad", {2, n, 3}, {{"pad", Ints{0, 0, -1, 1}}}});
    cases.push_back({"pad", {2, n, 3}, {{"pad", Ints{0, 0, 0, 0, 1, 1}}}});
    cases.push_back({"pad", {2, n, 3}, {{"pad", Ints{2, 1, n - 1, 0}}, {"mode", reflect}}});
    cases.push_back({"pad", {2, n, 3}, {{"pad", Ints{2, 1, 3, 4}}, {"mode", replicate}}});
    cases.push_back({"tril", {2, n, 5}, {{"diagonal", int64_t{1}}}});
    cases.push_back({"triu", {2, n, 5}, {{"diagonal", int64_t{-2}}}});
    cases.push_back({"triu", {5, n}, {{"diagonal", int64_t{9}}}});
  }
  // Zero-size tensors, 0-d tensors.
  cases.push_back({"expand", {0, 1}, {{"size", Ints{0, 4}}}});
  cases.push_back({"repeat", {2, 3}, {{"repeats", Ints{0, 1}}}});
  cases.push_back({"roll", {0, 3}, {{"shifts", Ints{1}}, {"dims", Ints{0}}}});
  cases.push_back({"pad", {2, 0}, {{"pad", Ints{1, 2}}}});
  cases.push_back({"tril", {0, 3, 3}, {}});
  cases.push_back({"expand", {}, {{"size", Ints{3, 2}}}});
  cases.push_back({"flip", {}, {{"dims", Ints{0}}}});
  cases.push_back({"roll", {}, {{"shifts", Ints{3}}}});
  for (const LayoutCase& c : cases)
    for (DType dtype : {DType::F32, DType::I64, DType::F16, DType::U8})
      expect_rows_match_reference(c, dtype);
}

TEST(OpsLayout, RowKernelsMatchReferenceOnLargeTensors) {
  const std::vector<LayoutCase> cases = {
      {"expand", {1, 1000, 1}, {{"size", Ints{4, -1, 250}}}},
      {"repeat", {250, 1000}, {{"repeats", Ints{2, 2}}}},
      {"flip", {1000, 1000}, {{"dims", Ints{0, 1}}}},
      {"roll", {1000003}, {{"shifts", Ints{-77}}}},
      {"pad", {1, 64, 120, 120}, {{"pad", Ints{3, 3, 3, 3}}, {"mode", std::string("reflect")}}},
      {"pad", {8, 256, 500}, {{"pad", Ints{0, 12}}}},
      {"tril", {4, 500, 500}, {}},
  };
  for (const LayoutCase& c : cases) expect_rows_match_reference(c, DType::F32);
}

// ---------------------------------------------------------------- casts

template <typename To, typename From>
std::vector<To> cast_values(DType from, DType to, const std::vector<From>& values) {
  Tensor x = tensor_from<From>(from, {static_cast<int64_t>(values.size())}, values);
  return test::values_of<To>(reference_of("to", x, {{"dtype", std::string(dtype_name(to))}}));
}

TEST(OpsLayout, CastsFollowPyTorchOnX86) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Float to integer truncates toward zero; NaN, inf and out-of-range give the x86 "integer
  // indefinite" (what torch.tensor([nan]).long() gives).
  EXPECT_EQ((cast_values<int32_t, float>(DType::F32, DType::I32,
                                         {1.9f, -1.9f, 0.5f, -0.5f, 2.5e9f, nan, inf, -inf})),
            (std::vector<int32_t>{1, -1, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN}));
  EXPECT_EQ((cast_values<int64_t, float>(DType::F32, DType::I64, {-7.99f, 1e10f, nan, 1e19f})),
            (std::vector<int64_t>{-7, 10000000000, INT64_MIN, INT64_MIN}));
  EXPECT_EQ((cast_values<int64_t, double>(DType::F64, DType::I64,
                                           {-0.999999, 9.007199254740993e15})),
            (std::vector<int64_t>{0, 9007199254740992}));
  // To u8 through i64, then wrapping (c10's static_cast_with_inter_type).
  EXPECT_EQ((cast_values<uint8_t, float>(DType::F32, DType::U8,
                                         {-1.0f, 256.0f, 300.5f, -3.7f, 255.9f, nan})),
            (std::vector<uint8_t>{255, 0, 44, 253, 255, 0}));
  EXPECT_EQ((cast_values<int8_t, float>(DType::F32, DType::I8, {127.9f, -128.5f, -0.9f})),
            (std::vector<int8_t>{127, -128, 0}));
  EXPECT_EQ((cast_values<int16_t, double>(DType::F64, DType::I16, {-32768.7, 32767.2})),
            (std::vector<int16_t>{-32768, 32767}));
  // To bool is != 0; NaN is true.
  EXPECT_EQ((cast_values<bool, float>(DType::F32, DType::Bool, {0.0f, -0.0f, 1e-45f, nan, -inf})),
            (std::vector<bool>{false, false, true, true, true}));
  EXPECT_EQ((cast_values<bool, int8_t>(DType::I8, DType::Bool, {0, -1, 2})),
            (std::vector<bool>{false, true, true}));
  EXPECT_EQ((cast_values<float, bool>(DType::Bool, DType::F32, {true, false})),
            (std::vector<float>{1.0f, 0.0f}));
  // Integers wrap; large integers round to nearest even.
  EXPECT_EQ((cast_values<int8_t, int64_t>(DType::I64, DType::I8, {300, -129, 128})),
            (std::vector<int8_t>{44, 127, -128}));
  EXPECT_EQ((cast_values<int8_t, uint8_t>(DType::U8, DType::I8, {200, 127})),
            (std::vector<int8_t>{-56, 127}));
  EXPECT_EQ((cast_values<float, int64_t>(DType::I64, DType::F32, {16777217, 16777219, -33554435})),
            (std::vector<float>{16777216.0f, 16777220.0f, -33554436.0f}));
  EXPECT_EQ((cast_values<float, double>(DType::F64, DType::F32, {1e39, -1e-46, 0.1})),
            (std::vector<float>{inf, -0.0f, 0.1f}));
}

TEST(OpsLayout, CastsToAndFrom16BitFloatsRoundToNearestEven) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // f16: the largest finite, the overflow threshold (a tie, rounded to even = inf), subnormals
  // and the tie below the smallest one.
  EXPECT_EQ((cast_values<uint16_t, float>(
                DType::F32, DType::F16,
                {65504.0f, 65519.0f, 65520.0f, -1e6f, std::ldexp(1.0f, -24),
                 std::ldexp(3.0f, -26), std::ldexp(1.0f, -25), 1e-8f, -0.0f,
                 1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11),
                 std::ldexp(1023.0f, -24), std::ldexp(2047.0f, -25)})),
            (std::vector<uint16_t>{0x7BFF, 0x7BFF, 0x7C00, 0xFC00, 0x0001, 0x0001, 0x0000, 0x0000,
                                   0x8000, 0x3C00, 0x3C02, 0x03FF, 0x0400}));
  // f64 -> f16 rounds twice, through f32, as PyTorch: 1 + 2^-11 + 2^-30 becomes the f32 tie
  // 1 + 2^-11, which rounds to 1, though it is nearer 1 + 2^-10.
  EXPECT_EQ((cast_values<uint16_t, double>(DType::F64, DType::F16,
                                           {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30)})),
            (std::vector<uint16_t>{0x3C00}));
  // bf16: ties to even, NaN to 0x7FC0, overflow to inf.
  EXPECT_EQ((cast_values<uint16_t, float>(
                DType::F32, DType::BF16,
                {1.0f + std::ldexp(1.0f, -8), 1.0f + std::ldexp(3.0f, -8), nan, -nan,
                 std::numeric_limits<float>::max(), std::ldexp(1.0f, -134)})),
            (std::vector<uint16_t>{0x3F80, 0x3F82, 0x7FC0, 0x7FC0, 0x7F80, 0x0000}));
  // From 16-bit floats: exact to f32; to integers through f32.
  EXPECT_EQ((cast_values<float, uint16_t>(DType::F16, DType::F32, {0x0001, 0xFBFF, 0x3555})),
            (std::vector<float>{std::ldexp(1.0f, -24), -65504.0f, 0.333251953125f}));
  EXPECT_EQ((cast_values<int64_t, uint16_t>(DType::F16, DType::I64, {0x7E00, 0x7C00, 0xC0E0})),
            (std::vector<int64_t>{INT64_MIN, INT64_MIN, -2}));
  EXPECT_EQ((cast_values<uint16_t, uint16_t>(DType::BF16, DType::F16, {0x3F80, 0x4780, 0x477F})),
            (std::vector<uint16_t>{0x3C00, 0x7C00, 0x7BF8}));
  EXPECT_EQ((cast_values<uint16_t, int32_t>(DType::I32, DType::F16, {65519, 65520, -3})),
            (std::vector<uint16_t>{0x7BFF, 0x7C00, 0xC200}));
}

TEST(OpsLayout, CastsBetweenEveryPairOfDtypesAgreeOnSmallIntegers) {
  // Small whole numbers convert exactly between every pair of dtypes, so casting f64 -> a -> b
  // must give what f64 -> b gives: all 100 instantiations of the reference run.
  Tensor wide = Tensor::empty(DType::F64, {8});
  const std::vector<double> values = {0, 1, 2, 3, 100, 0, 7, 1};
  std::memcpy(wide.data(), values.data(), wide.nbytes());
  auto cast = [](const Tensor& x, DType to) {
    return reference_of("to", x, {{"dtype", std::string(dtype_name(to))}});
  };
  // Through bool, only zero and nonzero survive.
  const Tensor flags = cast(cast(wide, DType::Bool), DType::F64);
  for (DType from : kAllDTypes) {
    const Tensor& source = from == DType::Bool ? flags : wide;
    Tensor x = cast(source, from);
    for (DType to : kAllDTypes) {
      Tensor expected = cast(source, to);
      EXPECT_TRUE(cast(x, to).same_contents(expected))
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

// Runs the `to` node's vector and reference kernels on x; expects the same bytes.
void expect_vector_cast_matches_reference(const Tensor& x, DType to) {
  OneNode node("to", {type_of(x.dtype(), x.sizes())}, {{"dtype", std::string(dtype_name(to))}});
  if (!test::unsupported_reason(*node.node, "vector").empty())
    GTEST_SKIP() << test::unsupported_reason(*node.node, "vector");
  Tensor expected = test::run_kernel(*node.node, "reference", {x})[0];
  for (int threads : {1, 2}) {
    Tensor got = test::run_kernel(*node.node, "vector", {x}, threads)[0];
    ASSERT_EQ(got.nbytes(), expected.nbytes());
    for (int64_t i = 0; i < got.numel(); ++i) {
      uint32_t g = 0, e = 0;
      std::memcpy(&g, static_cast<std::byte*>(got.data()) + i * dtype_size(to), dtype_size(to));
      std::memcpy(&e, static_cast<std::byte*>(expected.data()) + i * dtype_size(to),
                  dtype_size(to));
      ASSERT_EQ(g, e) << dtype_name(x.dtype()) << " -> " << dtype_name(to) << ", element " << i;
    }
  }
}

// The bf16 row conversions of both widths (the `to` kernel runs only the CPU's widest) against
// the scalar ones on `bits` as f32 and on every bf16 pattern, at every offset of a vector.
void expect_bf16_rows_match_scalar(const std::vector<uint32_t>& bits) {
#ifdef KILN_X86
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * sizeof(float));
  std::vector<cpu::BFloat16> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i].bits = static_cast<uint16_t>(i);
  auto check = [&](auto narrow, auto widen, int64_t start) {
    const int64_t n = static_cast<int64_t>(x.size()) - start;
    std::vector<cpu::BFloat16> narrowed(static_cast<size_t>(n));
    narrow(x.data() + start, narrowed.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(narrowed[i].bits, cpu::to_bfloat16(x[start + i]).bits) << "f32 " << start + i;
    std::vector<float> widened(65536 - start);
    widen(all.data() + start, widened.data(), 65536 - start);
    for (int64_t i = 0; i < 65536 - start; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(
                                                        cpu::to_float(all[start + i])));
  };
  for (int64_t start : {0, 5}) {
    if (cpu::has_avx2_fma()) check(cpu::avx2::narrow_to_bf16_row, cpu::avx2::widen_bf16_row, start);
    if (cpu::has_avx512f())
      check(cpu::avx512::narrow_to_bf16_row, cpu::avx512::widen_bf16_row, start);
  }
#endif
}

TEST(OpsLayout, VectorCastsMatchReferenceBitForBit) {
  // Every f16 / bf16 bit pattern (NaNs, infinities, subnormals included).
  for (DType half : {DType::F16, DType::BF16}) {
    Tensor x = Tensor::empty(half, {65536});
    for (uint32_t i = 0; i < 65536; ++i)
      static_cast<uint16_t*>(x.data())[i] = static_cast<uint16_t>(i);
    expect_vector_cast_matches_reference(x, DType::F32);
  }
  // Every 4099th f32 bit pattern (all exponents, both signs), plus each f16 rounding boundary:
  // the values halfway between adjacent f16 values and their f32 neighbours.
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float lo = cpu::to_float(cpu::Float16{static_cast<uint16_t>(h)});
    const float hi = cpu::to_float(cpu::Float16{static_cast<uint16_t>(h + 1)});
    const uint32_t mid = std::bit_cast<uint32_t>(static_cast<float>((double{lo} + hi) / 2));
    for (uint32_t m : {mid - 1, mid, mid + 1}) {
      bits.push_back(m);
      bits.push_back(m | 0x80000000u);
    }
  }
  Tensor f32 = Tensor::empty(DType::F32, {static_cast<int64_t>(bits.size())});
  std::memcpy(f32.data(), bits.data(), f32.nbytes());
  expect_vector_cast_matches_reference(f32, DType::F16);
  expect_vector_cast_matches_reference(f32, DType::BF16);
  expect_bf16_rows_match_scalar(bits);
  // Tails of every length.
  for (int64_t n : {0, 1, 3, 7, 17, 31}) {
    Tensor small = Tensor::empty(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) small.data<float>()[i] = 0.1f * static_cast<float>(i) - 0.7f;
    expect_vector_cast_matches_reference(small, DType::F16);
    expect_vector_cast_matches_reference(small, DType::BF16);
  }
  OneNode other("to", {type_of(DType::F32, {4})}, {{"dtype", std::string("i32")}});
  EXPECT_NE(test::unsupported_reason(*other.node, "vector").find("only f32 <-> f16"),
            std::string::npos);
}

// ---------------------------------------------------------------- through the executor

TEST(OpsLayout, EveryOpRunsThroughTheExecutor) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {2, 1, 3, 4}));
  const std::vector<std::pair<std::string, AttrMap>> nodes = {
      {"expand", {{"size", Ints{2, 5, 3, 4}}}},
      {"squeeze", {}},
      {"unsqueeze", {{"dim", int64_t{2}}}},
      {"flatten", {{"start_dim", int64_t{1}}}},
      {"pad", {{"pad", Ints{1, 2, 0, 1}}, {"value", -1.0}}},
      {"pad", {{"pad", Ints{2, 1, 1, 1}}, {"mode", std::string("reflect")}}},
      {"pad", {{"pad", Ints{2, 1}}, {"mode", std::string("replicate")}}},
      {"roll", {{"shifts", Ints{3}}}},
      {"roll", {{"shifts", Ints{1, -1}}, {"dims", Ints{0, 3}}}},
      {"flip", {{"dims", Ints{0, 2}}}},
      {"repeat", {{"repeats", Ints{2, 1, 3, 1, 2}}}},
      {"tril", {{"diagonal", int64_t{1}}}},
      {"triu", {}},
      {"copy", {}},
      {"to", {{"dtype", std::string("bf16")}}},
      {"to", {{"dtype", std::string("i32")}}},
  };
  std::vector<Value*> outputs;
  for (const auto& [op, attrs] : nodes) outputs.push_back(g.add(op, {x}, attrs));
  g.set_outputs(outputs);
  verify(g);
  auto best = CompiledGraph::compile(g);
  CompileOptions reference_policy;
  reference_policy.kernel_policy = "reference";
  auto reference = CompiledGraph::compile(g, reference_policy);
  std::mt19937 rng(3);
  Tensor input = test::random_tensor(DType::F32, {2, 1, 3, 4}, rng);
  std::vector<Tensor> got = best->run({input.view()});
  std::vector<Tensor> expected = reference->run({input.view()});
  ASSERT_EQ(got.size(), nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_EQ(got[i].sizes(), static_sizes(outputs[i]->type().shape)) << nodes[i].first;
    EXPECT_TRUE(test::same_values(got[i], expected[i])) << nodes[i].first;
  }
  std::unique_ptr<Graph> parsed = parse_graph(print_graph(g));  // every op prints and parses back
  EXPECT_NO_THROW(verify(*parsed));
  EXPECT_EQ(print_graph(*parsed), print_graph(g));
  // Spot checks against the input itself.
  EXPECT_EQ(test::values_of<float>(got[13]), test::values_of<float>(input));        // copy
  EXPECT_EQ(got[7].data<float>()[3], input.data<float>()[0]);                      // roll by 3
  EXPECT_EQ(got[15].data<int32_t>()[5], static_cast<int32_t>(input.data<float>()[5]));  // to i32
}

TEST(OpsLayout, DynamicShapesRunThroughTheExecutor) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 16);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(3)}});
  Value* flat = g.add("flatten", {x});  // [B*3]
  Value* padded = g.add("pad", {flat}, {{"pad", Ints{1, 1}}, {"value", 5.0}});  // [B*3+2]
  Value* wide = g.add("expand", {g.add("unsqueeze", {x}, {{"dim", int64_t{1}}})},
                      {{"size", Ints{-1, 2, -1}}});  // [B, 2, 3]
  Value* tiled = g.add("repeat", {x}, {{"repeats", Ints{2, 1}}});  // [B*2, 3]
  g.set_outputs({padded, wide, tiled});
  verify(g);
  auto compiled = CompiledGraph::compile(g);
  for (int64_t b : {1, 4}) {
    Tensor input = counting({b, 3});
    std::vector<Tensor> out = compiled->run({input.view()});
    std::vector<float> expected_pad = {5};
    for (int64_t i = 0; i < b * 3; ++i) expected_pad.push_back(static_cast<float>(i + 1));
    expected_pad.push_back(5);
    EXPECT_EQ(test::values_of<float>(out[0]), expected_pad);
    EXPECT_EQ(out[1].sizes(), (Ints{b, 2, 3}));
    EXPECT_EQ(out[1].data<float>()[3], 1.0f);
    EXPECT_EQ(out[2].sizes(), (Ints{2 * b, 3}));
    EXPECT_EQ(out[2].data<float>()[3 * b], 1.0f);
  }
}

}  // namespace
}  // namespace kiln
