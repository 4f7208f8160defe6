// CompileOptions::release_prepacked_constants: a graph whose plans are all made at compile drops
// the constants the compile made (batch norms folded into weights) once every kernel reading
// them holds a prepacked copy; it keeps what runs read, what the caller gave, and everything
// of a graph that may plan again.
#include <gtest/gtest.h>

#include <random>

#include "kiln/kiln.h"
#include "kiln/model.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

// conv2d → batch_norm → relu, then a second convolution: stage fuse folds each normalization
// into its convolution's weights (two new constants, "w1_bn" and its bias).
// A batch of 0 is symbolic, in [1, 4].
std::unique_ptr<Graph> conv_bn_block(int64_t batch_size, uint32_t seed) {
  std::mt19937 rng(seed);
  auto g = std::make_unique<Graph>("conv_bn");
  const Dim batch = batch_size > 0 ? Dim(batch_size) : g->add_symbol("B", 1, 4);
  Value* x = g->add_input("x", TensorType{DType::F32, {batch, Dim(8), Dim(12), Dim(12)}});
  auto constant = [&](const std::string& name, std::vector<int64_t> sizes, double lo, double hi) {
    return g->add_constant(name, test::random_tensor(DType::F32, sizes, rng, lo, hi));
  };
  Value* conv = g->add("conv2d", {x, constant("w1", {16, 8, 3, 3}, -0.3, 0.3)},
                       {{"padding", std::vector<int64_t>{1, 1}}}, "conv1");
  Value* bn = g->add("batch_norm",
                     {conv, constant("gamma", {16}, 0.5, 1.5), constant("beta", {16}, -0.5, 0.5),
                      constant("mean", {16}, -0.5, 0.5), constant("var", {16}, 0.5, 1.5)},
                     {}, "bn1");
  g->set_outputs({g->add("conv2d", {g->add("relu", {bn}), constant("w2", {4, 16, 1, 1}, -0.3, 0.3)},
                         {}, "conv2")});
  return g;
}

Tensor run_one(const CompiledGraph& compiled, const Tensor& x) {
  return compiled.run({x.view()}).at(0);
}

const Value* folded_weights(const Graph& optimized) {
  for (const Value* c : optimized.constants())
    if (c->name() == "w1_bn") return c;
  return nullptr;
}

TEST(ConstantRelease, FoldedWeightsGoOnceTheirKernelPrepackedThem) {
  auto g = conv_bn_block(2, 1);
  std::mt19937 rng(2);
  const Tensor x = test::random_tensor(DType::F32, {2, 8, 12, 12}, rng, -1, 1);
  auto reference = CompiledGraph::compile(*g, {.optimization_level = 0});
  auto compiled = CompiledGraph::compile(*g);
  const Value* folded = folded_weights(compiled->graph());
  ASSERT_NE(folded, nullptr) << print_graph(compiled->graph());
  EXPECT_FALSE(folded->constant().defined());
  // The type stays: the graph still verifies, prints and describes its plan.
  EXPECT_EQ(folded->constant().sizes(), (std::vector<int64_t>{16, 8, 3, 3}));
  verify(compiled->graph());
  EXPECT_NE(print_graph(compiled->graph()).find("bytes released after prepacking"),
            std::string::npos);
  const MemoryStats stats = compiled->memory_stats({{2, 8, 12, 12}});
  EXPECT_EQ(stats.released_constant_bytes, 16u * 8 * 3 * 3 * sizeof(float));
  EXPECT_GE(stats.prepacked_bytes, stats.released_constant_bytes);
  EXPECT_TRUE(test::same_values(run_one(*compiled, x), run_one(*compiled, x)));
  const Tensor expected = run_one(*reference, x), got = run_one(*compiled, x);
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-4) << "at " << i;
  // The caller's weights are untouched: w2 is read in place, and its graph is still whole.
  for (const Value* c : g->constants()) EXPECT_TRUE(c->constant().defined()) << c->name();
}

TEST(ConstantRelease, SavingNeedsTheConstantsKept) {
  auto g = conv_bn_block(1, 3);
  auto released = CompiledGraph::compile(*g);
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { serialize_model(*released); }, &message),
            ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("release_prepacked_constants = false"), std::string::npos) << message;
  auto kept = CompiledGraph::compile(*g, {.release_prepacked_constants = false});
  EXPECT_EQ(kept->memory_stats({{1, 8, 12, 12}}).released_constant_bytes, 0u);
  ASSERT_NE(folded_weights(kept->graph()), nullptr);
  EXPECT_TRUE(folded_weights(kept->graph())->constant().defined());
  EXPECT_FALSE(serialize_model(*kept).empty());
}

// A graph with symbolic dims plans at each new shape: its kernels then need the data again.
TEST(ConstantRelease, DynamicGraphsKeepEverything) {
  auto g = conv_bn_block(0, 4);
  auto compiled = CompiledGraph::compile(*g);
  std::mt19937 rng(5);
  for (int64_t batch : {1, 3}) {
    const Tensor x = test::random_tensor(DType::F32, {batch, 8, 12, 12}, rng, -1, 1);
    EXPECT_EQ(run_one(*compiled, x).sizes()[0], batch);
  }
  EXPECT_TRUE(folded_weights(compiled->graph())->constant().defined());
  EXPECT_EQ(compiled->memory_stats({{1, 8, 12, 12}}).released_constant_bytes, 0u);
}

// Gears make every plan at compile: the folded weights go after the last gear's kernels.
TEST(ConstantRelease, GearsReleaseAfterTheirLastPlan) {
  auto g = conv_bn_block(0, 6);
  CompileOptions options;
  options.gears = {{{1, 8, 12, 12}}, {{4, 8, 12, 12}}};
  auto compiled = CompiledGraph::compile(*g, options);
  auto reference = CompiledGraph::compile(*g, {.optimization_level = 0});
  EXPECT_FALSE(folded_weights(compiled->graph())->constant().defined());
  std::mt19937 rng(7);
  for (int64_t batch : {1, 4}) {
    const Tensor x = test::random_tensor(DType::F32, {batch, 8, 12, 12}, rng, -1, 1);
    const Tensor expected = run_one(*reference, x), got = run_one(*compiled, x);
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-4) << "at " << i;
  }
}

// A GEMM's weights the compile computed (constant folding of w * 2) go too, once oneDNN's GEMM
// (small M on every CPU) prepacked them; its kernel runs with their data pointer null.
TEST(ConstantRelease, FoldedGemmWeightsGoToo) {
  std::mt19937 rng(9);
  Graph g("scaled_linear");
  Value* x = g.add_input("x", TensorType{DType::F32, make_shape({4, 64})});
  Value* w = g.add_constant("w", test::random_tensor(DType::F32, {64, 96}, rng, -1, 1));
  Value* two = g.add_constant("two", test::tensor_of({1}, {2}));
  g.set_outputs({g.add("matmul", {x, g.add("mul", {w, two})})});
  auto compiled = CompiledGraph::compile(g);
  auto reference = CompiledGraph::compile(g, {.optimization_level = 0});
  EXPECT_EQ(compiled->memory_stats({{4, 64}}).released_constant_bytes, 64u * 96 * sizeof(float));
  const Tensor in = test::random_tensor(DType::F32, {4, 64}, rng, -1, 1);
  const Tensor expected = run_one(*reference, in), got = run_one(*compiled, in);
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-4) << "at " << i;
}

// Constants the compile made that a kernel reads at run time (an elementwise add of a folded
// product), or that are graph outputs, stay.
TEST(ConstantRelease, ConstantsReadAtRunTimeStay) {
  Graph g("folded_sum");
  Value* x = g.add_input("x", TensorType{DType::F32, make_shape({4})});
  Value* a = g.add_constant("a", test::tensor_of({4}, {1, 2, 3, 4}));
  Value* b = g.add_constant("b", test::tensor_of({4}, {0.5f, 0.5f, 2, 2}));
  Value* product = g.add("mul", {a, b});
  g.set_outputs({g.add("add", {x, product}), g.add("neg", {product})});
  auto compiled = CompiledGraph::compile(g);
  EXPECT_EQ(compiled->memory_stats({{4}}).released_constant_bytes, 0u);
  for (const Value* c : compiled->graph().constants()) EXPECT_TRUE(c->constant().defined());
  const float xs[4] = {1, 1, 1, 1};
  auto out = compiled->run({TensorView{const_cast<float*>(xs), DType::F32, {4}}});
  EXPECT_EQ(test::values_of<float>(out[0]), (std::vector<float>{1.5f, 2, 7, 9}));
  EXPECT_EQ(test::values_of<float>(out[1]), (std::vector<float>{-0.5f, -1, -6, -8}));
}

}  // namespace
}  // namespace kiln
