// Creation ops (src/ops/creation.cc): arange with PyTorch's element count and arithmetic, full /
// zeros / ones and their _like forms, inference errors, and runs through the executor.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/float16.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;
using Ints = std::vector<int64_t>;

AttrMap arange_attrs(double start, double end, double step, const std::string& dtype) {
  return {{"start", start}, {"end", end}, {"step", step}, {"dtype", dtype}};
}

Tensor run_arange(double start, double end, double step, const std::string& dtype,
                  int threads = 1) {
  OneNode node("arange", {}, arange_attrs(start, end, step, dtype));
  return test::run_kernel(*node.node, "reference", {}, threads)[0];
}

std::string arange_error(double start, double end, double step, const std::string& dtype) {
  std::string message;
  EXPECT_EQ(test::error_code_of(
                [&] {
                  Graph g;
                  g.add("arange", {}, arange_attrs(start, end, step, dtype));
                },
                &message),
            ErrorCode::ShapeInference);
  return message;
}

#define EXPECT_MENTIONS(message, fragment) \
  EXPECT_NE((message).find(fragment), std::string::npos) << (message)

TEST(OpsCreation, ArangeCountsLikePyTorch) {
  EXPECT_EQ(test::values_of<float>(run_arange(0, 5, 1, "f32")),
            (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(test::values_of<int64_t>(run_arange(10, 0, -3, "i64")), (Ints{10, 7, 4, 1}));
  EXPECT_EQ(test::values_of<int64_t>(run_arange(-2, 3, 2, "i64")), (Ints{-2, 0, 2}));
  // ceil((end - start) / step) in double: (2.2 - 1) / 0.4 is 3.0000000000000004, so 2.2 is in.
  Tensor quirk = run_arange(1, 2.2, 0.4, "f32");
  EXPECT_EQ(test::values_of<float>(quirk), (std::vector<float>{1.0f, 1.4f, 1.8f, 2.2f}));
  EXPECT_EQ(test::values_of<double>(run_arange(1, 2, 0.3, "f64")),
            (std::vector<double>{1, 1 + 0.3, 1 + 0.3 * 2, 1 + 0.3 * 3}));
  // For i64 the bounds are truncated first and the count is exact; for the other integer dtypes
  // the count comes from the bounds as given, the values from the truncated ones.
  EXPECT_EQ(test::values_of<int64_t>(run_arange(0, 2.5, 1, "i64")), (Ints{0, 1}));
  EXPECT_EQ(test::values_of<int32_t>(run_arange(0, 2.5, 1, "i32")),
            (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(test::values_of<int64_t>(run_arange(0.5, 3, 1, "i64")), (Ints{0, 1, 2}));
  EXPECT_EQ(test::values_of<int64_t>(run_arange(0, 7, 2.9, "i64")), (Ints{0, 2, 4, 6}));
  // Integer dtypes wrap, as PyTorch's int64 arithmetic cast down.
  EXPECT_EQ(test::values_of<uint8_t>(run_arange(250, 260, 3, "u8")),
            (std::vector<uint8_t>{250, 253, 0, 3}));
  // f16 and bf16 compute in f32: float(start) + float(step) * i, rounded once.
  Tensor half = run_arange(0, 1, 0.1, "f16");
  ASSERT_EQ(half.numel(), 10);
  for (int64_t i = 0; i < 10; ++i)
    EXPECT_EQ(half.data<cpu::Float16>()[i].bits,
              cpu::to_float16(0.1f * static_cast<float>(i)).bits) << i;
  Tensor brain = run_arange(-1, 1, 0.5, "bf16");
  EXPECT_EQ(brain.data<cpu::BFloat16>()[1].bits, 0xBF00);  // -0.5
  EXPECT_EQ(run_arange(3, 3, 1, "f32").numel(), 0);
  EXPECT_EQ(run_arange(3, 3, -1, "i8").numel(), 0);
}

TEST(OpsCreation, ArangeRejectsWhatPyTorchRejects) {
  EXPECT_MENTIONS(arange_error(0, 5, 0, "f32"), "the step must be nonzero");
  EXPECT_MENTIONS(arange_error(0, 5, 0.5, "i64"), "nonzero after truncation");
  EXPECT_MENTIONS(arange_error(0, 5, -1, "f32"), "sign points away from end");
  EXPECT_MENTIONS(arange_error(5, 0, 1, "i32"), "sign points away from end");
  EXPECT_MENTIONS(arange_error(0, std::numeric_limits<double>::infinity(), 1, "f64"), "finite");
  EXPECT_MENTIONS(arange_error(0, std::numeric_limits<double>::quiet_NaN(), 1, "f64"), "finite");
  EXPECT_MENTIONS(arange_error(0, 1e30, 1, "i64"), "outside the range of i64");
  EXPECT_MENTIONS(arange_error(0, 1e300, 1e-300, "f64"), "too many");
  EXPECT_MENTIONS(arange_error(0, 4, 1, "bool"), "no bool tensors");
  EXPECT_MENTIONS(arange_error(0, 4, 1, "int"), "\"int\", not a dtype");
  EXPECT_EQ(test::error_code_of([] {
              Graph g;
              g.add("arange", {});
            }),
            ErrorCode::ShapeInference);  // end is required
}

TEST(OpsCreation, ArangeInferenceAndLargeRuns) {
  Graph g;
  Value* r = g.add("arange", {}, {{"end", 10}});
  EXPECT_EQ(r->type(), type_of(DType::F32, {10}));
  // A million elements over two threads: each element computed from its own index.
  Tensor big = run_arange(-3, 1e6 - 3, 1, "i32", 2);
  ASSERT_EQ(big.numel(), 1000000);
  for (int64_t i = 0; i < big.numel(); i += 99991) EXPECT_EQ(big.data<int32_t>()[i], i - 3);
  EXPECT_EQ(big.data<int32_t>()[999999], 999996);
  Tensor steps = run_arange(0, 1e6 * 0.25, 0.25, "f32", 2);
  ASSERT_EQ(steps.numel(), 1000000);
  EXPECT_EQ(steps.data<float>()[777777], 777777 * 0.25f);
}

TEST(OpsCreation, FullZerosOnesForEveryDtype) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const std::string name(dtype_name(dtype));
    OneNode zeros("zeros", {}, {{"size", Ints{2, 3}}, {"dtype", name}});
    EXPECT_EQ(zeros.output_type(), type_of(dtype, {2, 3}));
    Tensor z = test::run_kernel(*zeros.node, "reference", {})[0];
    EXPECT_TRUE(z.same_contents(Tensor::zeros(dtype, {2, 3})));
    OneNode ones("ones", {}, {{"size", Ints{3}}, {"dtype", name}});
    Tensor o = test::run_kernel(*ones.node, "reference", {})[0];
    // One, in each dtype's bytes.
    uint64_t one = 0;
    switch (dtype) {
      case DType::F32: one = 0x3F800000; break;
      case DType::F64: one = 0x3FF0000000000000; break;
      case DType::F16: one = 0x3C00; break;
      case DType::BF16: one = 0x3F80; break;
      default: one = 1;
    }
    for (int64_t i = 0; i < 3; ++i) {
      uint64_t got = 0;
      std::memcpy(&got, static_cast<std::byte*>(o.data()) + i * dtype_size(dtype),
                  dtype_size(dtype));
      EXPECT_EQ(got, one);
    }
  }
  OneNode full("full", {},
               {{"size", Ints{2, 2}}, {"fill_value", -2.75}, {"dtype", std::string("i16")}});
  EXPECT_EQ(test::values_of<int16_t>(test::run_kernel(*full.node, "reference", {})[0]),
            (std::vector<int16_t>{-2, -2, -2, -2}));
  OneNode nan("full", {}, {{"size", Ints{1}}, {"fill_value", std::nan("")}});
  EXPECT_TRUE(std::isnan(test::run_kernel(*nan.node, "reference", {})[0].data<float>()[0]));
  OneNode flag("full", {},
               {{"size", Ints{}}, {"fill_value", -0.5}, {"dtype", std::string("bool")}});
  EXPECT_EQ(flag.output_type(), type_of(DType::Bool, {}));
  EXPECT_TRUE(test::run_kernel(*flag.node, "reference", {})[0].data<bool>()[0]);
  // A million elements over two threads.
  OneNode big("full", {}, {{"size", Ints{1000, 1001}}, {"fill_value", 7.5}});
  Tensor b = test::run_kernel(*big.node, "reference", {}, 2)[0];
  EXPECT_EQ(std::count(b.data<float>(), b.data<float>() + b.numel(), 7.5f), b.numel());
  OneNode empty("zeros", {}, {{"size", Ints{4, 0}}});
  EXPECT_EQ(test::run_kernel(*empty.node, "reference", {})[0].numel(), 0);
}

TEST(OpsCreation, FillValuesMustFitTheDtype) {
  auto full_error = [](double value, const std::string& dtype) {
    std::string message;
    EXPECT_EQ(test::error_code_of(
                  [&] {
                    Graph g;
                    g.add("full", {}, {{"size", Ints{2}}, {"fill_value", value}, {"dtype", dtype}});
                  },
                  &message),
              ErrorCode::ShapeInference);
    return message;
  };
  EXPECT_MENTIONS(full_error(300, "u8"), "300 is outside the range of u8 [0, 255]");
  EXPECT_MENTIONS(full_error(-1, "u8"), "outside the range of u8");
  EXPECT_MENTIONS(full_error(128, "i8"), "outside the range of i8");
  EXPECT_MENTIONS(full_error(70000, "f16"), "outside the range of f16");
  EXPECT_MENTIONS(full_error(1e39, "f32"), "outside the range of f32");
  EXPECT_MENTIONS(full_error(std::nan(""), "i32"), "outside the range of i32");
  EXPECT_MENTIONS(full_error(std::numeric_limits<double>::infinity(), "i64"), "outside the range");
  // Floating dtypes take NaN and inf; bool takes anything.
  Graph g;
  auto full = [](double value, const std::string& dtype) {
    return AttrMap{{"size", Ints{2}}, {"fill_value", value}, {"dtype", dtype}};
  };
  EXPECT_NO_THROW(g.add("full", {}, full(-INFINITY, "f16")));
  EXPECT_NO_THROW(g.add("full", {}, full(1e300, "bool")));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("zeros", {}, {{"size", Ints{2, -1}}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_MENTIONS(message, "size [2, -1] has a negative dim");
  EXPECT_EQ(test::error_code_of([&] { g.add("full", {}, {{"size", Ints{2}}}); }),
            ErrorCode::ShapeInference);  // fill_value is required
}

TEST(OpsCreation, LikeOpsKeepSymbolicShapesAndTakeADtype) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 8);
  Value* x = g.add_input("x", TensorType{DType::F16, {batch, Dim(3)}});
  EXPECT_EQ(g.add("zeros_like", {x})->type(), x->type());
  EXPECT_EQ(g.add("ones_like", {x}, {{"dtype", std::string("i64")}})->type(),
            (TensorType{DType::I64, {batch, Dim(3)}}));
  Value* full = g.add("full_like", {x}, {{"fill_value", 0.5}});
  EXPECT_EQ(full->type(), x->type());
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("full_like", {x}, {{"fill_value", 1e5}}); }, &message),
            ErrorCode::ShapeInference);
  EXPECT_MENTIONS(message, "outside the range of f16");
  EXPECT_EQ(test::error_code_of([&] { g.add("zeros_like", {x}, {{"dtype", std::string("half")}}); },
                                &message),
            ErrorCode::ShapeInference);
  EXPECT_MENTIONS(message, "(or \"\" for the input's)");

  // Through the executor, at two batch sizes, with arange and full (no inputs) alongside.
  Value* ones = g.add("ones_like", {x}, {{"dtype", std::string("f32")}});
  Value* steps = g.add("arange", {},
                       {{"start", 2}, {"end", 8}, {"step", 2}, {"dtype", std::string("i64")}});
  Value* sevens = g.add("full", {},
                        {{"size", Ints{2}}, {"fill_value", 7}, {"dtype", std::string("u8")}});
  Value* zeros = g.add("zeros", {}, {{"size", Ints{1}}});
  Value* ones_i8 = g.add("ones", {}, {{"size", Ints{2}}, {"dtype", std::string("i8")}});
  Value* nothing = g.add("zeros_like", {x}, {{"dtype", std::string("bool")}});
  g.set_outputs({full, ones, steps, sevens, zeros, ones_i8, nothing});
  verify(g);
  auto compiled = CompiledGraph::compile(g);
  for (int64_t b : {1, 5}) {
    Tensor input = Tensor::zeros(DType::F16, {b, 3});
    std::vector<Tensor> out = compiled->run({input.view()});
    ASSERT_EQ(out.size(), 7u);
    EXPECT_EQ(out[0].sizes(), (Ints{b, 3}));
    for (int64_t i = 0; i < out[0].numel(); ++i)
      EXPECT_EQ(out[0].data<cpu::Float16>()[i].bits, 0x3800);
    EXPECT_EQ(test::values_of<float>(out[1]), std::vector<float>(static_cast<size_t>(b * 3), 1.0f));
    EXPECT_EQ(test::values_of<int64_t>(out[2]), (Ints{2, 4, 6}));
    EXPECT_EQ(test::values_of<uint8_t>(out[3]), (std::vector<uint8_t>{7, 7}));
    EXPECT_EQ(test::values_of<float>(out[4]), (std::vector<float>{0}));
    EXPECT_EQ(test::values_of<int8_t>(out[5]), (std::vector<int8_t>{1, 1}));
    EXPECT_EQ(out[6].dtype(), DType::Bool);
    EXPECT_EQ(test::values_of<bool>(out[6]), std::vector<bool>(static_cast<size_t>(b * 3), false));
  }
}

// full, zeros and ones of symbolic sizes (ones(B, S + 1) traced with B and S dynamic): each
// run fills the sizes its inputs bind.
TEST(OpsCreation, FillOpsTakeSymbolicSizes) {
  auto g = parse_graph(R"(graph @g {
    sym B in [1, 8]
    sym S in [1, 64]
    input %x : f32[B, S]
    %m = full() {fill_value = 2.0, size = [-1, -1], sym_size = ["B", "S+1"]}
    %z = zeros() {size = [3, -1], sym_size = ["", "S*2"]}
    output %m, %z, %x
  })");
  EXPECT_EQ(shape_string(g->find_value("m")->type().shape, &g->symbols()), "[B, S+1]");
  EXPECT_EQ(shape_string(g->find_value("z")->type().shape, &g->symbols()), "[3, S*2]");
  auto compiled = CompiledGraph::compile(*g);
  for (int64_t s : {1, 6}) {
    Tensor x = Tensor::zeros(DType::F32, {2, s});
    std::vector<Tensor> out = compiled->run({x.view()});
    EXPECT_EQ(out[0].sizes(), (Ints{2, s + 1}));
    EXPECT_EQ(test::values_of<float>(out[0]), std::vector<float>(size_t(2 * (s + 1)), 2.0f));
    EXPECT_EQ(out[1].sizes(), (Ints{3, 2 * s}));
  }
  EXPECT_EQ(test::error_code_of([] {
              parse_graph(R"(graph @g {
                sym S in [1, 64]
                input %x : f32[S]
                %m = ones() {size = [-1, 2], sym_size = ["S"]}
                output %m, %x
              })");
            }),
            ErrorCode::ShapeInference);
}

TEST(OpsCreation, GraphsWithCreationOpsRoundTripThroughText) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 8);
  Value* x = g.add_input("x", TensorType{DType::BF16, {batch, Dim(3)}});
  Value* steps = g.add("arange", {}, {{"start", -1.5}, {"end", 2}, {"step", 0.5}});
  Value* like = g.add("full_like", {x}, {{"fill_value", -0.25}, {"dtype", std::string("f64")}});
  Value* ones = g.add("ones", {}, {{"size", Ints{}}, {"dtype", std::string("bool")}});
  g.set_outputs({steps, like, ones});
  const std::string text = print_graph(g);
  std::unique_ptr<Graph> parsed = parse_graph(text);
  EXPECT_NO_THROW(verify(*parsed));
  EXPECT_EQ(print_graph(*parsed), text);
}

}  // namespace
}  // namespace kiln
