// Stages schedule and memory end to end: graphs in the textual IR compiled with every pass off
// (so the graph stays as written), their memory plans inspected, and their results compared
// with runs where nothing shares memory (memory_reuse_threshold above every size).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <thread>

#include "kiln/kiln.h"
#include "ops_test_util.h"
#include "passes/pass.h"

namespace kiln {
namespace {

using test::error_code_of;
using test::random_tensor;
using test::same_values;

CompileOptions no_passes(CompileOptions options = {}) {
  for (const std::string& name : default_pipeline().pass_names())
    options.disabled_passes.insert(name);
  return options;
}

// Runs `text` on random inputs as compiled with `options`, and with nothing sharing memory;
// expects identical outputs and returns the plan's stats.
MemoryStats expect_same_as_unshared(const std::string& text, CompileOptions options) {
  auto g = parse_graph(text);
  std::mt19937 rng(3);
  std::vector<Tensor> inputs;
  std::vector<TensorView> views;
  for (const Value* in : g->inputs()) {
    inputs.push_back(random_tensor(in->type().dtype, static_sizes(in->type().shape), rng));
    views.push_back(inputs.back().view());
  }
  std::vector<Tensor> before;
  for (const Tensor& t : inputs) before.push_back(Tensor::copy_of(t.view()));
  auto planned = CompiledGraph::compile(*g, options);
  CompileOptions unshared = options;
  unshared.memory_reuse_threshold = SIZE_MAX;
  auto reference = CompiledGraph::compile(*g, unshared);
  auto got = planned->run(views);
  auto expected = reference->run(views);
  EXPECT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size() && i < expected.size(); ++i)
    EXPECT_TRUE(same_values(got[i], expected[i])) << "output " << i;
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(same_values(inputs[i], before[i])) << "input " << i << " was overwritten";
  std::vector<std::vector<int64_t>> sizes;
  for (const Tensor& t : inputs) sizes.push_back(t.sizes());
  EXPECT_EQ(reference->memory_stats(sizes).in_place, 0u);
  return planned->memory_stats(sizes);
}

TEST(MemoryPlan, ElementwiseChainRunsInPlace) {
  const char* text = R"(graph @chain {
    input %x : f32[1024]
    %a = relu(%x)
    %b = sigmoid(%a)
    %c = tanh(%b)
    %d = neg(%c)
    output %d
  })";
  // a can't overwrite the graph input x; b overwrites a, c overwrites b: one 4 KiB buffer.
  MemoryStats stats = expect_same_as_unshared(text, no_passes());
  EXPECT_EQ(stats.in_place, 2u);
  EXPECT_EQ(stats.buffers, 1u);
  EXPECT_EQ(stats.arena_bytes, 4096u);
  EXPECT_EQ(stats.intermediate_bytes, 3 * 4096u);
  // Under the reuse threshold, nothing runs in place nor shares memory.
  MemoryStats apart = expect_same_as_unshared(text, no_passes({.memory_reuse_threshold = 4097}));
  EXPECT_EQ(apart.in_place, 0u);
  EXPECT_EQ(apart.arena_bytes, 3 * 4096u);
}

TEST(MemoryPlan, NeverInPlaceOverInputsConstantsOrOutputs) {
  // x is an input and k a constant: a gets its own buffer. b and c are graph outputs written
  // into the caller's buffers, so e can't overwrite them either.
  const char* text = R"(graph @edges {
    input %x : f32[16]
    const %k : f32[16] = [1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, -5, -6, -7, -8]
    %a = add(%x, %k)
    %b = relu(%a)
    %c = exp(%b)
    %e = neg(%c)
    output %b, %c, %e
  })";
  MemoryStats stats = expect_same_as_unshared(text, no_passes());
  EXPECT_EQ(stats.in_place, 0u);
  auto g = parse_graph(text);
  Tensor x = Tensor::zeros(DType::F32, {16});
  auto out = CompiledGraph::compile(*g, no_passes())->run({x.view()});
  for (int i = 0; i < 16; ++i) {
    float k = i < 8 ? i + 1.0f : 7.0f - i;
    EXPECT_EQ(out[0].data<float>()[i], std::max(k, 0.0f));
    EXPECT_FLOAT_EQ(out[1].data<float>()[i], std::exp(std::max(k, 0.0f)));  // exp: a few ULP
    EXPECT_EQ(out[2].data<float>()[i], -out[1].data<float>()[i]);
  }
}

TEST(MemoryPlan, InPlaceOnlyWhenTheInputDies) {
  // b can't overwrite a, which c reads later; c overwrites one of a and b, both dying there.
  MemoryStats stats = expect_same_as_unshared(R"(graph @late {
    input %x : f32[64]
    %a = relu(%x)
    %b = sigmoid(%a)
    %c = add(%a, %b)
    %d = neg(%c)
    output %d
  })", no_passes());
  EXPECT_EQ(stats.in_place, 1u);
}

TEST(MemoryPlan, InPlaceNeedsTheSameDtypeAndBytes) {
  // eq makes bool from f32; add broadcasts [4, 1] and [1, 4] to [4, 4]: neither in place.
  MemoryStats stats = expect_same_as_unshared(R"(graph @mismatch {
    input %x : f32[4, 1]
    input %y : f32[1, 4]
    %a = relu(%x)
    %b = relu(%y)
    %c = add(%a, %b)
    %m = eq(%c, %c)
    %n = logical_not(%m)
    %o = logical_not(%n)
    output %o
  })", no_passes());
  // Only the first logical_not (bool over bool, same bytes) runs in place; o is an output.
  EXPECT_EQ(stats.in_place, 1u);
}

TEST(MemoryPlan, RowOpsRunInPlace) {
  // layer_norm and softmax read a row's statistics before writing it; batch_norm maps each
  // element alone: each overwrites its dying input.
  MemoryStats stats = expect_same_as_unshared(R"(graph @rows {
    input %x : f32[8, 32]
    const %w : f32[32] = hex"0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f0000003f"
    %a = relu(%x)
    %n = layer_norm(%a, %w, %w)
    %s = softmax(%n)
    %y = neg(%s)
    output %y
  })", no_passes());
  EXPECT_EQ(stats.in_place, 2u);
  EXPECT_EQ(stats.arena_bytes, 8 * 32 * 4u);
}

TEST(MemoryPlan, ReshapeIsAViewOfItsInput) {
  // r and d are views of a's buffer. a lives on after r (c reads it), so b can't overwrite r;
  // c overwrites a once a and r are dead. Two 512-byte buffers in all; e is the graph output.
  MemoryStats stats = expect_same_as_unshared(R"(graph @views {
    input %x : f32[8, 16]
    %a = relu(%x)
    %r = reshape(%a) {shape = [128]}
    %b = neg(%r)
    %c = exp(%a)
    %d = reshape(%c) {shape = [128]}
    %e = add(%b, %d)
    output %e
  })", no_passes());
  EXPECT_EQ(stats.in_place, 3u);
  EXPECT_EQ(stats.buffers, 2u);
  EXPECT_EQ(stats.arena_bytes, 2 * 512u);
  // A reshape of a graph input reads the caller's memory (r), and a reshape into a graph output
  // of a value nothing else reads copies nothing: b is written into the output's memory. No
  // arena at all.
  MemoryStats edges = expect_same_as_unshared(R"(graph @views_at_the_edges {
    input %x : f32[8, 16]
    %r = reshape(%x) {shape = [128]}
    %b = neg(%r)
    %o = reshape(%b) {shape = [16, 8]}
    output %o
  })", no_passes());
  EXPECT_EQ(edges.in_place, 0u);
  EXPECT_EQ(edges.buffers, 0u);
  EXPECT_EQ(edges.arena_bytes, 0u);
  // b read by another node too: it stays in the arena and the output reshape copies it.
  MemoryStats shared = expect_same_as_unshared(R"(graph @output_copy {
    input %x : f32[8, 16]
    %b = neg(%x)
    %o = reshape(%b) {shape = [16, 8]}
    %s = exp(%b)
    output %o, %s
  })", no_passes());
  EXPECT_EQ(shared.buffers, 1u);
}

// Two branches of one big and one small tensor each. Graph order runs both big ones first.
constexpr const char* kBranches = R"(graph @branches {
    input %x : f32[1024]
    %a1 = exp(%x) @a1
    %b1 = sin(%x) @b1
    %a2 = sum(%a1) @a2
    %b2 = sum(%b1) @b2
    %y = add(%a2, %b2) @join
    output %y
  })";

TEST(MemoryPlan, ScheduleFinishesBranchesFirst) {
  MemoryStats graph_order = expect_same_as_unshared(kBranches, no_passes({.optimization_level = 1}));
  EXPECT_EQ(graph_order.schedule, "graph_order");
  // a1, b1 and a2 live at once.
  EXPECT_EQ(graph_order.arena_bytes, 2 * 4096u + 64);
  MemoryStats scheduled = expect_same_as_unshared(kBranches, no_passes());
  EXPECT_EQ(scheduled.schedule, "frees_most");
  // One big tensor at a time, beside the two small sums: the lower bound.
  EXPECT_EQ(scheduled.arena_bytes, 4096u + 2 * 64);
  EXPECT_EQ(scheduled.peak_live_bytes, scheduled.arena_bytes);
  auto g = parse_graph(kBranches);
  std::string plan = CompiledGraph::compile(*g, no_passes())->describe_plan({{1024}});
  EXPECT_NE(plan.find("0: a1 = exp"), std::string::npos) << plan;
  EXPECT_NE(plan.find("1: a2 = sum"), std::string::npos) << plan;
  EXPECT_NE(plan.find("2: b1 = sin"), std::string::npos) << plan;
}

TEST(MemoryPlan, AggressiveTriesEveryScheduleAndKeepsTheSmallestArena) {
  MemoryStats fast = expect_same_as_unshared(kBranches, no_passes());
  MemoryStats thorough =
      expect_same_as_unshared(kBranches, no_passes({.memory_optimization_level = "aggressive"}));
  EXPECT_LE(thorough.arena_bytes, fast.arena_bytes);
  EXPECT_EQ(thorough.arena_bytes, 4096u + 2 * 64);
  // Ties go to the first order tried that reaches it (graph order is first, and worse here).
  EXPECT_EQ(thorough.schedule, "frees_most");
}

// A linear layer's weights, read in place, leave nothing prepacked: the compiled graph holds no
// second copy of them, and the results are the GEMM's (within matmul's bound of the reference).
TEST(MemoryPlan, GemmWeightsInPlaceHoldNoPrepackedCopy) {
  std::mt19937 rng(11);
  Graph g("linear");
  Value* x = g.add_input("x", TensorType{DType::F32, make_shape({4, 96})});
  Value* w = g.add_constant("w", random_tensor(DType::F32, {80, 96}, rng, -1, 1));
  Value* bias = g.add_constant("b", random_tensor(DType::F32, {80}, rng, -1, 1));
  g.set_outputs({g.add("matmul", {x, w, bias}, {{"transpose_b", true}, {"bias", true}})});
  Tensor input = random_tensor(DType::F32, {4, 96}, rng, -1, 1);
  auto prepacked = CompiledGraph::compile(g, CompileOptions{.verify = true});
  auto in_place =
      CompiledGraph::compile(g, CompileOptions{.verify = true, .gemm_weights_in_place = true});
  auto reference = CompiledGraph::compile(g, CompileOptions{.kernel_policy = "reference"});
  ASSERT_NE(in_place->describe_plan({{4, 96}}).find("onednn"), std::string::npos)
      << in_place->describe_plan({{4, 96}});
  EXPECT_GE(prepacked->memory_stats({{4, 96}}).prepacked_bytes, 80u * 96 * sizeof(float));
  EXPECT_EQ(in_place->memory_stats({{4, 96}}).prepacked_bytes, 0u);
  const Tensor want = reference->run({input.view()})[0];
  for (const auto& compiled : {prepacked, in_place}) {
    const Tensor got = compiled->run({input.view()})[0];
    ASSERT_EQ(got.sizes(), want.sizes());
    // |x|, |w|, |b| <= 1 and K = 96: matmul's bound (K + 2) 2^-24 sum|a b| is below 1e-5.
    for (int64_t i = 0; i < got.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << "at " << i;
  }
}

TEST(MemoryPlan, ImpossibleArenaIsOutOfMemory) {
  // An outer product of a dynamic vector with itself: f32[B, B], never allocatable for big B.
  auto g = parse_graph(R"(graph @outer {
    sym B in [1, 4294967296]
    input %x : f32[B]
    %c = unsqueeze(%x) {dim = 1}
    %r = unsqueeze(%x) {dim = 0}
    %p = mul(%c, %r)
    %s = sum(%p)
    output %s
  })");
  auto cg = CompiledGraph::compile(*g, no_passes());
  EXPECT_EQ(cg->output_sizes({{1000}}), (std::vector<std::vector<int64_t>>{{}}));
  std::string message;
  // 2^31 squared times 4 bytes is 2^64: past size_t.
  EXPECT_EQ(error_code_of([&] { cg->output_sizes({{int64_t{1} << 31}}); }, &message),
            ErrorCode::OutOfMemory);
  EXPECT_NE(message.find("needs 18446744073709551616 bytes"), std::string::npos) << message;
  // (2^31 - 1)^2 * 4 fits size_t but no allocation (at most PTRDIFF_MAX bytes).
  EXPECT_EQ(error_code_of([&] { cg->memory_stats({{(int64_t{1} << 31) - 1}}); }, &message),
            ErrorCode::OutOfMemory);
  EXPECT_NE(message.find("needs 18446744056529682436 bytes"), std::string::npos) << message;
}

TEST(MemoryPlan, SharedPoolLendsOneArenaToGraphsRunInTurn) {
  auto small = parse_graph(R"(graph @small {
    input %x : f32[256]
    %a = relu(%x)
    %b = add(%a, %x)
    %c = neg(%b)
    output %c
  })");
  auto big = parse_graph(kBranches);
  auto pool = std::make_shared<MemoryPool>();
  auto cs = CompiledGraph::compile(*small, no_passes({.memory_pool = pool}));
  auto cb = CompiledGraph::compile(*big, no_passes({.memory_pool = pool}));
  const size_t largest = std::max(cs->memory_stats({{256}}).arena_bytes,
                                  cb->memory_stats({{1024}}).arena_bytes);
  EXPECT_EQ(pool->arena_bytes(), largest);
  auto own_small = CompiledGraph::compile(*small, no_passes());
  auto own_big = CompiledGraph::compile(*big, no_passes());
  std::mt19937 rng(5);
  Tensor xs = random_tensor(DType::F32, {256}, rng), xb = random_tensor(DType::F32, {1024}, rng);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(same_values(cs->run({xs.view()})[0], own_small->run({xs.view()})[0]));
    EXPECT_TRUE(same_values(cb->run({xb.view()})[0], own_big->run({xb.view()})[0]));
  }
  EXPECT_EQ(pool->arenas(), 1u);  // one thread, runs in turn: one arena

  // Concurrent runs borrow arenas of their own: results stay right.
  Tensor expected_small = own_small->run({xs.view()})[0];
  Tensor expected_big = own_big->run({xb.view()})[0];
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        mismatches[t] += !cs->run({xs.view()})[0].same_contents(expected_small);
        mismatches[t] += !cb->run({xb.view()})[0].same_contents(expected_big);
      }
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
  EXPECT_LE(pool->arenas(), 4u);
}

TEST(MemoryPlan, PrintsTableAndChart) {
  auto g = parse_graph(kBranches);
  auto cg = CompiledGraph::compile(*g, no_passes());
  MemoryStats stats = cg->memory_stats({{1024}});
  std::string table = cg->memory_plan({{1024}});
  EXPECT_NE(table.find("schedule frees_most"), std::string::npos) << table;
  EXPECT_NE(table.find("first  last   producer"), std::string::npos) << table;
  // The row of a1: its producer (node a1), then the buffer.
  EXPECT_NE(table.find("a1" + std::string(19, ' ') + "a1\n"), std::string::npos) << table;
  std::string svg = cg->memory_plan({{1024}}, "svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  size_t rects = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1))
    ++rects;
  EXPECT_EQ(rects, stats.buffers);
  EXPECT_EQ(error_code_of([&] { cg->memory_plan({{1024}}, "png"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] {
              CompiledGraph::compile(*g, {.memory_optimization_level = "max"});
            }),
            ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace kiln
