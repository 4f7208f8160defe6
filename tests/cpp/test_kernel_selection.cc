// Stage select at plan time (src/runtime/kernel_selection.h): the policies, max-autotune's choice
// among the supporting kernels, and the engine partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>

#include "kiln/kiln.h"
#include "ops_test_util.h"
#include "runtime/kernel_selection.h"

namespace kiln {
namespace {

// Small integers: every sum and product below stays exact in f32, so every kernel of an op must
// give the same bits whatever its summation order.
Tensor integer_tensor(std::vector<int64_t> sizes, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-4, 4);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(dist(rng));
  return t;
}

std::vector<std::string> names_of(const std::vector<const KernelDef*>& kernels) {
  std::vector<std::string> names;
  for (const KernelDef* k : kernels) names.push_back(k->name);
  return names;
}

TEST(KernelSelection, PoliciesPickTheFirstOrTheReferenceKernel) {
  test::OneNode one("matmul", {test::type_of(DType::F32, {32, 64}),
                               test::type_of(DType::F32, {64, 48})});
  const OpDef& def = *OpRegistry::instance().find("matmul");
  KernelSpec spec = test::spec_of(*one.node, 1);
  auto supporting = supporting_kernels(def, spec);
  ASSERT_GE(supporting.size(), 2u);  // an optimized kernel and the reference
  EXPECT_EQ(select_kernel(def, spec, "best").kernel, supporting.front());
  EXPECT_EQ(select_kernel(def, spec, "reference").kernel, &def.kernels.back());
}

// A library that refuses at creation what its kernel's rule accepted (oneDNN capped by
// ONEDNN_MAX_CPU_ISA) gives the node to the next kernel; when no kernel can be created, a coded
// error names each failure.
TEST(KernelSelection, ALibraryRefusalGivesTheNodeToTheNextKernel) {
  test::OneNode one("matmul", {test::type_of(DType::F32, {8, 16}),
                               test::type_of(DType::F32, {16, 4})});
  KernelSpec spec = test::spec_of(*one.node, 1);
  OpDef def = *OpRegistry::instance().find("matmul");
  const std::string next = supporting_kernels(def, spec).front()->name;
  KernelDef refusing = def.kernels.front();
  refusing.name = "refusing";
  refusing.unsupported_reason = nullptr;
  refusing.create = [](const KernelSpec&) -> std::unique_ptr<KernelInstance> {
    throw std::runtime_error("the library refused");
  };
  def.kernels.insert(def.kernels.begin(), refusing);
  for (const char* policy : {"best", "autotune"}) {
    KernelChoice choice = select_kernel(def, spec, policy);
    EXPECT_NE(choice.kernel->name, "refusing") << policy;
    EXPECT_NE(choice.instance, nullptr) << policy;
  }
  EXPECT_EQ(select_kernel(def, spec, "best").kernel->name, next);

  // Every optimized kernel refusing: autotune leaves the node to the reference kernel.
  for (size_t i = 0; i + 1 < def.kernels.size(); ++i) def.kernels[i].create = refusing.create;
  EXPECT_EQ(select_kernel(def, spec, "autotune").kernel, &def.kernels.back());
  def.kernels.back().create = refusing.create;
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { select_kernel(def, spec, "best"); }, &message),
            ErrorCode::UnsupportedOperator);
  EXPECT_NE(message.find("kernel 'refusing' failed to create: the library refused"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("ONEDNN_MAX_CPU_ISA"), std::string::npos) << message;
}

TEST(KernelSelection, AutotuneKeepsATimedSupportingKernel) {
  for (const char* op : {"matmul", "adaptive_avg_pool2d"}) {
    SCOPED_TRACE(op);
    bool matmul = std::string(op) == "matmul";
    test::OneNode one = matmul
        ? test::OneNode("matmul", {test::type_of(DType::F32, {32, 64}),
                                   test::type_of(DType::F32, {64, 48})})
        : test::OneNode(op, {test::type_of(DType::F32, {2, 8, 8, 8})},
                        {{"output_size", std::vector<int64_t>{1, 1}}});
    const OpDef& def = *OpRegistry::instance().find(op);
    KernelSpec spec = test::spec_of(*one.node, 1);
    std::vector<std::string> supporting = names_of(supporting_kernels(def, spec));
    KernelChoice choice = select_kernel(def, spec, "autotune");
    ASSERT_NE(choice.kernel, nullptr);
    ASSERT_NE(choice.instance, nullptr);
    EXPECT_NE(std::find(supporting.begin(), supporting.end(), choice.kernel->name),
              supporting.end());
    // The reference kernel is timed only when nothing else supports the node.
    if (supporting.size() > 1) {
      EXPECT_NE(choice.kernel->name, "reference");
    }
    if (supporting.size() > 2) {
      ASSERT_EQ(choice.timings.size(), supporting.size() - 1);
      for (const auto& [name, seconds] : choice.timings) {
        EXPECT_NE(name, "reference");
        EXPECT_GE(seconds, 0);
      }
      auto fastest = std::min_element(
          choice.timings.begin(), choice.timings.end(),
          [](const auto& a, const auto& b) { return a.second < b.second; });
      EXPECT_EQ(fastest->first, choice.kernel->name);
    }
  }
}

// linear + relu, 2x2 average pooling and global pooling on one input: ops with several kernels.
std::unique_ptr<Graph> several_kernel_graph() {
  auto g = std::make_unique<Graph>("tuned");
  Value* x = g->add_input("x", TensorType{DType::F32, make_shape({2, 8, 8, 8})});
  Value* w = g->add_constant("w", integer_tensor({8, 24}, 7));
  Value* rows = g->add("reshape", {x}, {{"shape", std::vector<int64_t>{128, 8}}});
  Value* mm = g->add("relu", {g->add("matmul", {rows, w})});
  Value* pooled = g->add("avg_pool2d", {x}, {{"kernel_size", std::vector<int64_t>{2, 2}}});
  Value* global =
      g->add("adaptive_avg_pool2d", {x}, {{"output_size", std::vector<int64_t>{1, 1}}});
  g->set_outputs({mm, pooled, global});
  return g;
}

TEST(KernelSelection, AutotunedPlanGivesTheBestPlansResults) {
  auto g = several_kernel_graph();
  Tensor x = integer_tensor({2, 8, 8, 8}, 3);
  auto best = CompiledGraph::compile(*g, {.kernel_policy = "best"})->run({x.view()});
  auto tuned = CompiledGraph::compile(*g, {.kernel_policy = "autotune"})->run({x.view()});
  auto reference = CompiledGraph::compile(*g, {.kernel_policy = "reference"})->run({x.view()});
  ASSERT_EQ(best.size(), tuned.size());
  for (size_t i = 0; i < best.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(test::values_of<float>(tuned[i]), test::values_of<float>(best[i]));
    EXPECT_EQ(test::values_of<float>(tuned[i]), test::values_of<float>(reference[i]));
  }
}

TEST(KernelSelection, UnknownPolicyIsRefused) {
  auto g = several_kernel_graph();
  auto compile = [&] { CompiledGraph::compile(*g, {.kernel_policy = "fastest"}); };
  EXPECT_EQ(test::error_code_of(compile), ErrorCode::InvalidArgument);
}

TEST(KernelSelection, EngineSubgraphsBreakWhereTheEngineChanges) {
  EXPECT_EQ(engine_subgraphs({}), std::vector<int>{});
  EXPECT_EQ(engine_subgraphs({"onednn", "onednn", "native", "openblas", "openblas", "onednn"}),
            (std::vector<int>{0, 0, 1, 2, 2, 3}));
}

TEST(KernelSelection, AnnotationsNameAKernelOfTheOpAndItsEngine) {
  auto g = several_kernel_graph();
  std::vector<std::pair<std::string, std::string>> node_kernels;
  for (const Node* node : g->nodes())
    node_kernels.emplace_back(node->name(),
                              OpRegistry::instance().find(node->op())->kernels.back().name);
  annotate_selection(*g, node_kernels);
  for (const Node* node : g->nodes()) {
    EXPECT_EQ(node->annotation("kernel"), "reference");
    EXPECT_EQ(node->annotation("engine"), "native");
    EXPECT_EQ(node->annotation("subgraph"), "0");
  }
}

}  // namespace
}  // namespace kiln
