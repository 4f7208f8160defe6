// The executor: plans, caller and Kiln-owned buffers, concurrency, symbolic shapes, bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "kiln/kiln.h"
#include "ops_test_util.h"
#include "runtime/exec_plan.h"

namespace kiln {
namespace {

TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::F32, make_shape(sizes)}; }

Tensor random_tensor(std::vector<int64_t> sizes, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

ErrorCode code_of(const std::function<void()>& fn) { return test::error_code_of(fn); }

// y = relu(x @ w + b) + x, with a static batch, or a symbolic one in [1, max_batch].
std::unique_ptr<Graph> mlp_block(int64_t batch, int64_t max_batch = 0) {
  auto g = std::make_unique<Graph>("mlp");
  Dim rows = max_batch > 0 ? g->add_symbol("B", 1, max_batch) : Dim(batch);
  Value* x = g->add_input("x", TensorType{DType::F32, {rows, Dim(16)}});
  Value* w = g->add_constant("w", random_tensor({16, 16}, 1));
  Value* b = g->add_constant("b", random_tensor({16}, 2));
  Value* h = g->add("relu", {g->add("add", {g->add("matmul", {x, w}), b})});
  g->set_outputs({g->add("add", {h, x})});
  return g;
}

void expect_near(const Tensor& a, const Tensor& b, float tol = 1e-5f) {
  ASSERT_EQ(a.sizes(), b.sizes());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "at " << i;
}

TEST(Runtime, MatchesHandComputedResult) {
  Graph g;
  Value* x = g.add_input("x", f32({4}));
  Value* y = g.add_input("y", f32({4}));
  g.set_outputs({g.add("relu", {g.add("add", {x, y})})});
  auto cg = CompiledGraph::compile(g);
  float xs[4] = {1, -2, 3, -4}, ys[4] = {0.5f, 1, -5, 2};
  auto out = cg->run({TensorView{xs, DType::F32, {4}}, TensorView{ys, DType::F32, {4}}});
  ASSERT_EQ(out.size(), 1u);
  const float expected[4] = {1.5f, 0, 0, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[0].data<float>()[i], expected[i]);
}

TEST(Runtime, BestKernelsMatchReferenceKernels) {
  auto g = mlp_block(5);
  Tensor x = random_tensor({5, 16}, 3);
  auto best = CompiledGraph::compile(*g)->run({x.view()});
  auto ref = CompiledGraph::compile(*g, {.kernel_policy = "reference"})->run({x.view()});
  expect_near(best[0], ref[0]);
}

TEST(Runtime, WritesIntoCallerBuffers) {
  auto g = mlp_block(3);
  auto cg = CompiledGraph::compile(*g);
  Tensor x = random_tensor({3, 16}, 4);
  Tensor out = Tensor::zeros(DType::F32, {3, 16});
  cg->run({x.view()}, {out.view()});
  expect_near(out, cg->run({x.view()})[0], 0.f);
}

TEST(Runtime, OutputsThatAreInputsConstantsOrRepeated) {
  Graph g;
  Value* x = g.add_input("x", f32({3}));
  Tensor c = random_tensor({3}, 5);
  Value* k = g.add_constant("k", c);
  Value* r = g.add("relu", {x});
  g.set_outputs({r, x, k, r});
  float xs[3] = {-1, 2, -3};
  auto out = CompiledGraph::compile(g)->run({TensorView{xs, DType::F32, {3}}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].data<float>()[1], 2.f);
  EXPECT_EQ(std::memcmp(out[1].data(), xs, sizeof xs), 0);
  EXPECT_TRUE(out[2].same_contents(c));
  EXPECT_TRUE(out[3].same_contents(out[0]));
  EXPECT_NE(out[3].data(), out[0].data());
}

TEST(Runtime, ConcurrentRunsMatchSerialRuns) {
  auto g = mlp_block(8);
  auto cg = CompiledGraph::compile(*g);
  std::vector<Tensor> inputs, expected;
  for (uint32_t i = 0; i < 8; ++i) {
    inputs.push_back(random_tensor({8, 16}, 100 + i));
    expected.push_back(cg->run({inputs.back().view()})[0]);
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep) {
        int i = (t + rep) % 8;
        if (!cg->run({inputs[i].view()})[0].same_contents(expected[i])) ++mismatches[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Runtime, ReusesMemoryAlongChains) {
  Graph g;
  Value* v = g.add_input("x", f32({1024}));
  for (int i = 0; i < 10; ++i) v = g.add("relu", {v});
  g.set_outputs({v});
  // At O1 the chain stays ten relus (O2 fuses it into one kernel).
  auto cg = CompiledGraph::compile(g, {.optimization_level = 1});
  std::string plan = cg->describe_plan({{1024}});
  // Nine 4 KiB intermediates, each relu overwriting its input in place: one 4 KiB buffer.
  EXPECT_NE(plan.find("arena 4096 bytes"), std::string::npos) << plan;
  EXPECT_NE(plan.find("[kernel "), std::string::npos);
}

TEST(Runtime, SymbolicBatchServesEveryShapeInRange) {
  auto dynamic = CompiledGraph::compile(*mlp_block(0, 8));
  for (int64_t batch : {1, 5, 8, 5}) {
    Tensor x = random_tensor({batch, 16}, static_cast<uint32_t>(batch));
    auto expected = CompiledGraph::compile(*mlp_block(batch))->run({x.view()});
    auto got = dynamic->run({x.view()});
    EXPECT_TRUE(got[0].same_contents(expected[0])) << "batch " << batch;
    EXPECT_EQ(dynamic->output_sizes({{batch, 16}}), (std::vector<std::vector<int64_t>>{{batch, 16}}));
  }
  Tensor big = random_tensor({9, 16}, 9);
  EXPECT_EQ(code_of([&] { dynamic->run({big.view()}); }), ErrorCode::DynamicShapeRange);
  EXPECT_EQ(code_of([&] { dynamic->output_sizes({{0, 16}}); }), ErrorCode::DynamicShapeRange);
}

TEST(Runtime, DimsSharingASymbolMustAgree) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 10);
  Value* a = g.add_input("a", TensorType{DType::F32, {n}});
  Value* b = g.add_input("b", TensorType{DType::F32, {n}});
  g.set_outputs({g.add("add", {a, b})});
  auto cg = CompiledGraph::compile(g);
  Tensor x3 = random_tensor({3}, 1), x4 = random_tensor({4}, 2);
  EXPECT_EQ(code_of([&] { cg->run({x3.view(), x4.view()}); }), ErrorCode::InputShape);
  EXPECT_EQ(cg->run({x4.view(), x4.view()})[0].sizes(), (std::vector<int64_t>{4}));
}

// The plans of two shapes share the kernel of a node whose sizes the shape leaves alone (an
// LLM decode step's projections), and make their own for nodes whose sizes differ.
TEST(Runtime, PlansShareTheKernelsOfNodesWhoseSizesAgree) {
  Graph g;
  Dim rows = g.add_symbol("B", 1, 8);
  Value* x = g.add_input("x", TensorType{DType::F32, {rows, Dim(16)}});
  Value* y = g.add_input("y", f32({4, 16}));
  Value* w = g.add_constant("w", random_tensor({16, 16}, 1));
  g.set_outputs({g.add("matmul", {x, w}), g.add("matmul", {y, w})});
  KernelCache cache;
  CompileOptions options;
  options.kernel_policy = "best";
  auto step_kernel = [](const ExecPlan& plan, const Value* out) {
    for (const PlanStep& step : plan.steps())
      if (step.node == out->producer()) return step.kernel.get();
    return static_cast<const KernelInstance*>(nullptr);
  };
  const Value* by_x = g.outputs()[0];
  const Value* by_y = g.outputs()[1];
  auto two = std::make_unique<ExecPlan>(g, std::vector<std::vector<int64_t>>{{2, 16}, {4, 16}},
                                        options, 1, nullptr, &cache);
  auto five = std::make_unique<ExecPlan>(g, std::vector<std::vector<int64_t>>{{5, 16}, {4, 16}},
                                         options, 1, nullptr, &cache);
  ASSERT_NE(step_kernel(*two, by_y), nullptr);
  EXPECT_EQ(step_kernel(*two, by_y), step_kernel(*five, by_y));
  EXPECT_NE(step_kernel(*two, by_x), step_kernel(*five, by_x));
  // A plan built after those are gone makes its kernels anew, and every plan computes the same.
  two.reset();
  five.reset();
  auto cg = CompiledGraph::compile(g, {.plan_cache_capacity = 1});
  Tensor y4 = random_tensor({4, 16}, 3);
  std::vector<Tensor> first;
  for (int64_t batch : {3, 6, 3}) {
    Tensor xb = random_tensor({batch, 16}, 4);
    auto got = cg->run({xb.view(), y4.view()});
    if (first.empty()) first = got;
    EXPECT_TRUE(got[1].same_contents(first[1])) << "batch " << batch;
  }
}

TEST(Runtime, PlanCacheIsBounded) {
  auto cg = CompiledGraph::compile(*mlp_block(0, 64), {.plan_cache_capacity = 2});
  // More shapes than the cache holds: evicted plans are rebuilt and still correct.
  for (int64_t batch : {1, 2, 3, 1, 2, 3}) {
    Tensor x = random_tensor({batch, 16}, 11);
    auto expected = CompiledGraph::compile(*mlp_block(batch))->run({x.view()});
    EXPECT_TRUE(cg->run({x.view()})[0].same_contents(expected[0]));
  }
}

TEST(Runtime, BadInputsGiveCodedErrors) {
  auto g = mlp_block(2);
  auto cg = CompiledGraph::compile(*g);
  Tensor x = random_tensor({2, 16}, 6);
  Tensor xi = Tensor::zeros(DType::I32, {2, 16});
  EXPECT_EQ(code_of([&] { cg->run({}); }), ErrorCode::InputCount);
  EXPECT_EQ(code_of([&] { cg->run({x.view(), x.view()}); }), ErrorCode::InputCount);
  EXPECT_EQ(code_of([&] { cg->run({xi.view()}); }), ErrorCode::InputDType);
  EXPECT_EQ(code_of([&] { cg->run({TensorView{x.data(), DType::F32, {32}}}); }),
            ErrorCode::InputShape);
  EXPECT_EQ(code_of([&] { cg->run({TensorView{x.data(), DType::F32, {2, 15}}}); }),
            ErrorCode::InputShape);
  EXPECT_EQ(code_of([&] { cg->run({TensorView{nullptr, DType::F32, {2, 16}}}); }),
            ErrorCode::InputBuffer);
  auto* misaligned = static_cast<std::byte*>(x.data()) + 1;
  EXPECT_EQ(code_of([&] { cg->run({TensorView{misaligned, DType::F32, {2, 16}}}); }),
            ErrorCode::InputBuffer);
  EXPECT_EQ(code_of([&] { cg->run({TensorView{x.data(), DType::F32, {2, 16}, {1, 2}}}); }),
            ErrorCode::InputBuffer);
  Tensor out = Tensor::zeros(DType::F32, {2, 16});
  EXPECT_EQ(code_of([&] { cg->run({x.view()}, {}); }), ErrorCode::InputCount);
  EXPECT_EQ(code_of([&] { cg->run({x.view()}, {x.view()}); }), ErrorCode::InputBuffer);
  EXPECT_EQ(code_of([&] { cg->run({x.view()}, {TensorView{out.data(), DType::F32, {16, 2}}}); }),
            ErrorCode::InputShape);
  EXPECT_EQ(code_of([&] { cg->run({x.view()}, {xi.view()}); }), ErrorCode::InputDType);
}

TEST(Runtime, InvalidOptionsAreE10001) {
  auto g = mlp_block(2);
  EXPECT_EQ(code_of([&] { CompiledGraph::compile(*g, {.threads = -1}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { CompiledGraph::compile(*g, {.kernel_policy = "fastest"}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { CompiledGraph::compile(*g, {.disabled_passes = {"no_such_pass"}}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { CompiledGraph::compile(*g, {.plan_cache_capacity = 0}); }),
            ErrorCode::InvalidArgument);
}

TEST(Runtime, DeadCodeIsRemovedUnlessDisabled) {
  Graph g;
  Value* x = g.add_input("x", f32({4}));
  g.add("relu", {x}, {}, "unused");
  g.set_outputs({g.add("relu", {x}, {}, "used")});
  EXPECT_EQ(CompiledGraph::compile(g, {.verify = true})->graph().num_nodes(), 1u);
  // CSE would merge the two identical relus first.
  auto kept = CompiledGraph::compile(
      g, {.disabled_passes = {"dead_code_elimination", "common_subexpression_elimination"}});
  EXPECT_EQ(kept->graph().num_nodes(), 2u);
}

}  // namespace
}  // namespace kiln
