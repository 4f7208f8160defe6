// The pass pipeline: stages in GE's order, levels, fixed-point groups and their round cap, the
// verifier between passes, disabled passes, per-pass records, and O0 against O3 on one graph.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pass_list.h"

namespace kiln {
namespace {

ErrorCode code_of(const std::function<void()>& fn) { return test::error_code_of(fn); }

// A block full of work for stage prepare: weights-only subgraphs, identities, a duplicate, a
// copy and dead code, around real compute.
constexpr const char* kBlock = R"(
graph @block {
  input %x : f32[4, 6]
  const %w : f32[3, 6] = [1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6, 0.5, 0.25, 0, 1, 2, 3]
  const %b : f32[3] = [0.5, -1, 2]
  const %one : f32[] = [1.0]
  %wt = permute(%w) {dims = [1, 0]}
  %h = matmul(%x, %wt)
  %h1 = mul(%h, %one)
  %hb = add(%h1, %b)
  %c = copy(%hb)
  %r1 = relu(%c)
  %r2 = relu(%c)
  %s = add(%r1, %r2)
  %v = reshape(%s) {shape = [12]}
  %v2 = reshape(%v) {shape = [2, 6]}
  %dead = neg(%v2)
  output %v2
}
)";

TEST(PassPipeline, StagesInGeOrder) {
  PassPipeline p = default_pipeline();
  EXPECT_EQ(p.stage_names(),
            (std::vector<std::string>{"prepare", "fuse", "format", "partition", "select", "schedule"}));
  for (const char* name : {"constant_folding", "algebraic_simplification", "copy_elimination",
                           "common_subexpression_elimination", "dead_code_elimination"}) {
    auto names = p.pass_names();
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(PassPipeline, LevelsAndRecords) {
  auto g = parse_graph(kBlock);
  auto o0 = CompiledGraph::compile(*g, {.optimization_level = 0, .verify = true});
  EXPECT_TRUE(o0->pass_records().empty());
  EXPECT_EQ(o0->options().kernel_policy, "reference");
  EXPECT_EQ(print_graph(o0->graph()), print_graph(*g));

  auto o1 = CompiledGraph::compile(*g, {.optimization_level = 1, .verify = true});
  EXPECT_EQ(o1->options().kernel_policy, "best");
  EXPECT_TRUE(o1->pipeline_warnings().empty());
  const auto& records = o1->pass_records();
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front().nodes_before, g->num_nodes());
  EXPECT_EQ(records.back().nodes_after, o1->graph().num_nodes());
  EXPECT_FALSE(records.back().changed);  // the group ran until a round changed nothing
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].stage, "prepare");
    EXPECT_GE(records[i].seconds, 0.0);
    if (records[i].nodes_before != records[i].nodes_after) {
      EXPECT_TRUE(records[i].changed);
    }
    if (i > 0) {
      EXPECT_EQ(records[i].nodes_before, records[i - 1].nodes_after);
    }
  }
  // matmul, add, relu, add, reshape remain.
  EXPECT_EQ(o1->graph().num_nodes(), 5u) << print_graph(o1->graph());
  test::expect_same_results(*g, o1->graph());

  auto o3 = CompiledGraph::compile(*g, {.verify = true});
  Tensor x = Tensor::empty(DType::F32, {4, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  EXPECT_TRUE(test::same_values(o0->run({x.view()})[0], o3->run({x.view()})[0]));
}

TEST(PassPipeline, DisabledPassesDoNotRun) {
  auto g = parse_graph(kBlock);
  auto cg = CompiledGraph::compile(
      *g, {.verify = true,
           .disabled_passes = {"fold_transpose_into_matmul", "constant_folding",
                               "dead_code_elimination"}});
  for (const PassRecord& r : cg->pass_records()) {
    EXPECT_NE(r.pass, "fold_transpose_into_matmul");
    EXPECT_NE(r.pass, "constant_folding");
    EXPECT_NE(r.pass, "dead_code_elimination");
  }
  EXPECT_NE(cg->graph().find_value("wt"), nullptr);    // not folded
  EXPECT_NE(cg->graph().find_value("dead"), nullptr);  // not removed
}

TEST(PassPipeline, InvalidLevelIsE10001) {
  auto g = parse_graph(kBlock);
  EXPECT_EQ(code_of([&] { CompiledGraph::compile(*g, {.optimization_level = 4}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { CompiledGraph::compile(*g, {.optimization_level = -1}); }),
            ErrorCode::InvalidArgument);
}

// The fuse stage's folds replace constants (a convolution's weights and bias, the batch norm's
// parameters, a scalar turned immediate): none of the replaced ones stays in the compiled graph,
// whose constants an exported model file carries.
TEST(PassPipeline, NoConstantOutlivesItsReaders) {
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[2, 1, 4, 4]
  const %w : f32[1, 1, 2, 2] = [0.5, -1.0, 2.0, 0.25]
  const %b : f32[1] = [3.0]
  const %gamma : f32[1] = [1.5]
  const %beta : f32[1] = [-0.5]
  const %mean : f32[1] = [0.75]
  const %var : f32[1] = [4.0]
  const %half : f32[] = [0.5]
  %y = conv2d(%x, %w, %b) {stride = [2, 2]}
  %z = batch_norm(%y, %gamma, %beta, %mean, %var) {eps = 0.0}
  %e = exp(%z)
  %h = mul(%e, %half)
  %t = tanh(%h)
  output %t
})");
  for (int level : {2, 3}) {
    SCOPED_TRACE(level);
    auto cg = CompiledGraph::compile(*g, {.optimization_level = level, .verify = true});
    const Graph& out = cg->graph();
    EXPECT_EQ(out.constants().size(), 2u) << print_graph(out);  // the folded weights and bias
    for (const Value* c : out.constants())
      EXPECT_FALSE(c->users().empty()) << "%" << c->name() << " is read by nothing";
  }
}

// Replaces the graph output's producer with a fresh equal node on every run: it always reports
// a change, so its group never converges.
class NeverConverges final : public Pass {
 public:
  std::string name() const override { return "never_converges"; }
  bool run(Graph& graph) override {
    Value* out = graph.outputs()[0];
    Value* fresh = graph.add(out->producer()->op(), out->producer()->inputs());
    graph.replace_all_uses(out, fresh);
    graph.remove_node(out->producer());
    return true;
  }
};

// Breaks the IR: gives a node's output a type inference disagrees with.
class BreaksTypes final : public Pass {
 public:
  std::string name() const override { return "breaks_types"; }
  bool run(Graph& graph) override {
    graph.outputs()[0]->set_type(TensorType{DType::F64, make_shape({4})});
    return true;
  }
};

constexpr const char* kRelu = R"(
graph @g {
  input %x : f32[4]
  %y = relu(%x)
  output %y
})";

TEST(PassPipeline, FixedPointCapIsReported) {
  PassPipeline p;
  p.add_stage("prepare", 1);
  p.begin_fixed_point("spin", 3);
  p.add(std::make_unique<NeverConverges>());
  p.end_fixed_point();
  auto g = parse_graph(kRelu);
  PipelineReport report = p.run(*g, {});
  EXPECT_EQ(report.records.size(), 3u);
  EXPECT_EQ(report.records.back().round, 2);
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("'spin'"), std::string::npos) << report.warnings[0];
  EXPECT_DEATH(p.run(*parse_graph(kRelu), {.verify = true}), "still changed the graph after 3 rounds");
  // Skipped below its level.
  EXPECT_TRUE(p.run(*parse_graph(kRelu), {.optimization_level = 0}).records.empty());
}

TEST(PassPipeline, VerifierRunsBetweenPasses) {
  PassPipeline p;
  p.add_stage("prepare", 1);
  p.add(std::make_unique<BreaksTypes>());
  EXPECT_DEATH(p.run(*parse_graph(kRelu), {.verify = true}),
               "pass breaks_types \\(stage prepare\\) broke the graph");
}

}  // namespace
}  // namespace kiln
