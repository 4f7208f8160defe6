// Importing serialized ATen FX graphs (docs/frontend.md) through the converters.
#include <gtest/gtest.h>

#include "frontend/converter.h"
#include "kiln/kiln.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

// relu(x @ w + b) written as PyTorch serializes it: addmm(b, x, t(w)).
const char* kLinearRelu = R"({
  "name": "linear_relu",
  "symbols": [{"name": "s0", "min": 1, "max": 64}],
  "placeholders": [
    {"name": "w", "kind": "constant", "dtype": "f32", "shape": [3, 4]},
    {"name": "b", "kind": "constant", "dtype": "f32", "shape": [3]},
    {"name": "x", "kind": "input", "dtype": "f32", "shape": ["s0", 4]}],
  "nodes": [
    {"name": "t", "target": "aten.t.default", "args": {"self": {"ref": "w"}},
     "outputs": [{"dtype": "f32", "shape": [4, 3]}]},
    {"name": "addmm", "target": "aten.addmm.default",
     "args": {"self": {"ref": "b"}, "mat1": {"ref": "x"}, "mat2": {"ref": "t"}, "beta": 1, "alpha": 1},
     "outputs": [{"dtype": "f32", "shape": ["s0", 3]}]},
    {"name": "relu", "target": "aten.relu.default", "args": {"self": {"ref": "addmm"}},
     "outputs": [{"dtype": "f32", "shape": ["s0", 3]}]}],
  "outputs": [{"ref": "relu"}]
})";

ErrorCode code_of(const std::function<void()>& fn) { return test::error_code_of(fn); }

TEST(Frontend, ImportsAndRunsLinearRelu) {
  float w[12], b[3] = {0.5f, -1.f, 0.f}, x[8];
  for (int i = 0; i < 12; ++i) w[i] = static_cast<float>(i % 5) - 2.f;
  for (int i = 0; i < 8; ++i) x[i] = static_cast<float>(i) * 0.25f - 1.f;
  auto g = import_fx_graph(kLinearRelu,
                           {{"w", Tensor::copy_of(TensorView{w, DType::F32, {3, 4}})},
                            {"b", Tensor::copy_of(TensorView{b, DType::F32, {3}})}});
  ASSERT_EQ(g->inputs().size(), 1u);
  EXPECT_EQ(g->constants().size(), 2u);
  EXPECT_NO_THROW(verify(*g));
  auto out = CompiledGraph::compile(*g)->run({TensorView{x, DType::F32, {2, 4}}});
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      float expected = b[c];
      for (int k = 0; k < 4; ++k) expected += x[r * 4 + k] * w[c * 4 + k];
      EXPECT_FLOAT_EQ(out[0].data<float>()[r * 3 + c], std::max(expected, 0.f));
    }
}

TEST(Frontend, SupportVerdictsNameTheReason) {
  std::string json = kLinearRelu;
  json.replace(json.find("aten.relu.default"), 17, "aten.special_bessel_j0.default");
  auto verdicts = fx_node_support(json);
  EXPECT_EQ(verdicts.at("t"), "");
  EXPECT_EQ(verdicts.at("addmm"), "");
  EXPECT_NE(verdicts.at("relu").find("no converter for aten.special_bessel_j0.default"),
            std::string::npos);
  EXPECT_EQ(code_of([&] { import_fx_graph(json, {}); }), ErrorCode::InvalidArgument);  // no w
}

TEST(Frontend, UnsupportedArgumentIsE50001) {
  std::string json = kLinearRelu;
  // addmm takes any alpha but 0 (PyTorch skips the product then; src/frontend/aten/aten_linear.cc).
  json.replace(json.find("\"alpha\": 1"), 10, "\"alpha\": 0");
  auto verdicts = fx_node_support(json);
  EXPECT_NE(verdicts.at("addmm").find("alpha"), std::string::npos);
}

TEST(Frontend, TypeDisagreementWithPyTorchIsCaught) {
  std::string json = kLinearRelu;
  json.replace(json.find("\"shape\": [4, 3]"), 15, "\"shape\": [4, 2]");
  float w[12] = {}, b[3] = {};
  EXPECT_EQ(code_of([&] {
              import_fx_graph(json,
                              {{"w", Tensor::copy_of(TensorView{w, DType::F32, {3, 4}})},
                               {"b", Tensor::copy_of(TensorView{b, DType::F32, {3}})}});
            }),
            ErrorCode::InvalidGraph);
}

// max_pool2d_with_indices: the values-only op where nothing reads the indices, the op computing
// both where something does.
TEST(Frontend, UnreadOutputsPickTheCheaperOp) {
  auto op_of = [](const std::string& outputs) {
    const std::string json = R"({"name": "pool", "symbols": [],
      "placeholders": [{"name": "x", "kind": "input", "dtype": "f32", "shape": [1, 2, 4, 4]}],
      "nodes": [{"name": "mp", "target": "aten.max_pool2d_with_indices.default",
                 "args": {"self": {"ref": "x"}, "kernel_size": [2], "stride": [2],
                          "padding": [0], "dilation": [1], "ceil_mode": false},
                 "outputs": [{"dtype": "f32", "shape": [1, 2, 2, 2]},
                             {"dtype": "i64", "shape": [1, 2, 2, 2]}]}],
      "outputs": [)" + outputs + "]}";
    auto g = import_fx_graph(json, {});
    std::string ops;
    for (const Node* n : g->nodes()) ops += n->op();
    return ops;
  };
  EXPECT_EQ(op_of(R"({"ref": "mp", "index": 0})"), "max_pool2d");
  EXPECT_EQ(op_of(R"({"ref": "mp", "index": 1})"), "max_pool2d_with_indices");
  EXPECT_EQ(op_of(R"({"ref": "mp", "index": 0}, {"ref": "mp", "index": 1})"),
            "max_pool2d_with_indices");
}

// A size handed to an op as a number ({"sym": ...}) is computed by the graph for each run's
// shapes: dim_size of the input having the symbol as a dim, then the integer ops.
TEST(Frontend, SizesPassedAsNumbersAreComputedPerRun) {
  const char* json = R"json({"name": "sizes", "symbols": [{"name": "s0", "min": 1, "max": 64}],
    "placeholders": [{"name": "x", "kind": "input", "dtype": "f32", "shape": ["s0"]}],
    "nodes": [{"name": "add", "target": "aten.add.Tensor",
               "args": {"self": {"ref": "x"}, "other": {"sym": "Mod(((s0 - 1)//2)**2, 5)"},
                        "alpha": 1},
               "outputs": [{"dtype": "f32", "shape": ["s0"]}]}],
    "outputs": [{"ref": "add"}]})json";
  EXPECT_EQ(fx_node_support(json).at("add"), "");
  auto compiled = CompiledGraph::compile(*import_fx_graph(json, {}));
  for (int64_t n : {1, 4, 7, 12}) {
    std::vector<float> x(static_cast<size_t>(n), 0.5f);
    const float size = static_cast<float>(((n - 1) / 2) * ((n - 1) / 2) % 5);
    auto out = compiled->run({TensorView{x.data(), DType::F32, {n}}});
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[0].data<float>()[i], 0.5f + size) << n;
  }
  // A symbol no tensor input has as a dim can't be computed (backend.py keeps such nodes in
  // PyTorch).
  std::string unbound = json;
  const std::string dynamic_input = R"("shape": ["s0"]}])";
  unbound.replace(unbound.find(dynamic_input), dynamic_input.size(), R"("shape": [3]}])");
  EXPECT_EQ(code_of([&] { import_fx_graph(unbound, {}); }), ErrorCode::UnsupportedOperator);
}

TEST(Frontend, MalformedJsonIsE10020) {
  EXPECT_EQ(code_of([] { import_fx_graph("{not json", {}); }), ErrorCode::BadModelFile);
  EXPECT_EQ(code_of([] { import_fx_graph(R"({"placeholders": 3})", {}); }),
            ErrorCode::BadModelFile);
  EXPECT_EQ(code_of([] { fx_node_support(R"({"nodes": [{"name": 1}]})"); }),
            ErrorCode::BadModelFile);
  EXPECT_EQ(code_of([] {
              import_fx_graph(R"({"placeholders": [], "nodes": [], "outputs": [{"ref": "nope"}]})",
                              {});
            }),
            ErrorCode::BadModelFile);
}

}  // namespace
}  // namespace kiln
