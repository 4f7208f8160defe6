// The run observer (RunObserver/NodeRun) and the profiler built on it (runtime/profiler.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "kiln/kiln.h"
#include "ops_test_util.h"
#include "runtime/profiler.h"

namespace kiln {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

Tensor random_tensor(std::vector<int64_t> sizes, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// conv (groups 2) → relu → flatten → matmul → softmax: ops with and without FLOP counts.
std::unique_ptr<Graph> small_net(const std::string& name = "net") {
  auto g = std::make_unique<Graph>(name);
  Value* x = g->add_input("x", TensorType{DType::F32, make_shape({2, 4, 8, 8})});
  Value* w = g->add_constant("w", random_tensor({8, 2, 3, 3}, 1));
  Value* conv = g->add("conv2d", {x, w}, {{"groups", int64_t{2}}}, "conv");
  Value* flat = g->add("reshape", {g->add("relu", {conv}, {}, "act")},
                       {{"shape", std::vector<int64_t>{2, 288}}}, "flat");
  Value* fc = g->add("matmul", {flat, g->add_constant("fc_w", random_tensor({288, 10}, 2))}, {},
                     "fc");
  g->set_outputs({g->add("softmax", {fc}, {}, "probs")});
  return g;
}

std::string temp_path(const std::string& file) {
  return (fs::temp_directory_path() / ("kiln_test_profiler_" + file)).string();
}

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);  // throws (failing the test) when the file is not JSON
}

struct Recorder : RunObserver {
  std::vector<std::string> nodes, kernels;
  std::vector<std::vector<int64_t>> output_sizes;
  std::vector<size_t> steps;
  std::vector<float> first_outputs;
  bool ordered_times = true;
  void on_node(const NodeRun& run) override {
    nodes.push_back(run.node.name());
    kernels.push_back(run.kernel);
    steps.push_back(run.step);
    output_sizes.push_back(run.outputs[0].sizes);
    first_outputs.push_back(run.outputs[0].as<float>()[0]);
    ordered_times &= run.end >= run.start;
  }
};

TEST(RunObserver, SeesEveryNodeInExecutionOrderWithShapesAndData) {
  auto g = small_net();
  CompileOptions o;
  o.optimization_level = 1;  // no fusion: every node of the graph runs
  auto cg = CompiledGraph::compile(*g, o);
  Tensor x = random_tensor({2, 4, 8, 8}, 3);
  Recorder rec;
  std::vector<Tensor> observed = cg->run({x.view()}, rec);
  std::vector<Tensor> plain = cg->run({x.view()});
  ASSERT_EQ(rec.nodes.size(), cg->graph().num_nodes());
  std::set<std::string> names(rec.nodes.begin(), rec.nodes.end());
  for (const Node* n : cg->graph().nodes()) EXPECT_TRUE(names.count(n->name())) << n->name();
  for (size_t i = 0; i < rec.steps.size(); ++i) EXPECT_EQ(rec.steps[i], i);
  EXPECT_TRUE(rec.ordered_times);
  EXPECT_EQ(rec.nodes.back(), "probs");
  EXPECT_EQ(rec.output_sizes.back(), (std::vector<int64_t>{2, 10}));
  // The output view points at the data the node wrote: the graph output's first element.
  EXPECT_EQ(rec.first_outputs.back(), observed[0].data<float>()[0]);
  // Observing changes nothing.
  ASSERT_EQ(observed[0].numel(), plain[0].numel());
  for (int64_t i = 0; i < plain[0].numel(); ++i)
    EXPECT_EQ(observed[0].data<float>()[i], plain[0].data<float>()[i]);
}

TEST(Profiler, FlopCounts) {
  Graph g;
  Value* x = g.add_input("x", TensorType{DType::F32, make_shape({1, 4, 8, 8})});
  Value* w = g.add_input("w", TensorType{DType::F32, make_shape({8, 2, 3, 3})});
  Value* b = g.add_input("b", TensorType{DType::F32, make_shape({8})});
  Value* conv = g.add("conv2d", {x, w, b}, {{"groups", int64_t{2}}, {"fused_activation", std::string("relu")}});
  Value* a = g.add_input("a", TensorType{DType::F32, make_shape({3, 5, 7})});
  Value* m = g.add_input("m", TensorType{DType::F32, make_shape({7, 6})});
  Value* mm = g.add("matmul", {a, m});
  Value* q = g.add_input("q", TensorType{DType::F32, make_shape({2, 4, 16, 8})});
  Value* kv = g.add_input("k", TensorType{DType::F32, make_shape({2, 4, 32, 8})});
  Value* attn = g.add("scaled_dot_product_attention", {q, kv, kv});
  Value* r = g.add("relu", {mm});
  Value* v = g.add_input("v", TensorType{DType::F32, make_shape({1, 4, 3, 5, 5})});
  Value* conv3 = g.add("conv3d", {v, g.add_input("w3", TensorType{DType::F32, make_shape({6, 4, 2, 3, 3})})});
  Value* up3 = g.add("conv_transpose3d", {v, g.add_input("wt", TensorType{DType::F32, make_shape({4, 2, 2, 2, 2})})},
                     {{"stride", std::vector<int64_t>{2}}});
  auto view = [](const Value* v) {
    return TensorView{nullptr, v->type().dtype, static_sizes(v->type().shape), {}};
  };
  auto flops = [&](const Value* out) {
    std::vector<TensorView> ins, outs{view(out)};
    for (const Value* in : out->producer()->inputs()) ins.push_back(view(in));
    return node_flops(*out->producer(), ins, outs);
  };
  // out [1, 8, 6, 6] = 288 elements, each 2·3·3 = 18 multiply-adds; bias and relu one each.
  EXPECT_EQ(flops(conv), 2.0 * 288 * 18 + 2 * 288);
  EXPECT_EQ(flops(mm), 2.0 * 3 * 5 * 6 * 7);
  EXPECT_EQ(flops(attn), 2.0 * 8 * 16 * 32 * (8 + 8));
  EXPECT_EQ(flops(r), 0.0);  // elementwise: bytes only
  // conv3d: out [1, 6, 2, 3, 3] = 108 elements, each 4·2·3·3 = 72 multiply-adds;
  // conv_transpose3d: 300 input elements, each feeding 2·2·2·2 = 16.
  EXPECT_EQ(flops(conv3), 2.0 * 108 * 72);
  EXPECT_EQ(flops(up3), 2.0 * 300 * 16);
}

TEST(Profiler, TraceHasEveryNodeOfEveryRunAndParses) {
  auto g = small_net();
  const std::string path = temp_path("trace.json");
  fs::remove(path);
  CompileOptions o;
  o.optimization_level = 1;
  o.profile_path = path;
  auto cg = CompiledGraph::compile(*g, o);
  ASSERT_TRUE(cg->profiler());
  EXPECT_TRUE(fs::exists(path)) << "created at compile, so a bad path fails early";
  Tensor x = random_tensor({2, 4, 8, 8}, 3);
  for (int i = 0; i < 3; ++i) cg->run({x.view()});
  cg->profiler()->write();
  Json trace = read_json(path);
  std::map<std::string, int> node_events;
  int runs = 0;
  for (const Json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    if (e.at("cat") == "run") {
      ++runs;
      continue;
    }
    ++node_events[e.at("name").get<std::string>()];
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    const Json& args = e.at("args");
    EXPECT_TRUE(args.contains("op") && args.contains("kernel") && args.contains("shapes"));
    if (args.at("op") == "matmul" || args.at("op") == "conv2d") {
      EXPECT_TRUE(args.contains("GFLOP/s")) << e.dump();
    }
    if (e.at("name") == "fc") {
      EXPECT_EQ(args.at("shapes"), "[2, 288]x[288, 10] -> [2, 10]");
    }
  }
  EXPECT_EQ(runs, 3);
  for (const Node* n : cg->graph().nodes()) EXPECT_EQ(node_events[n->name()], 3) << n->name();
  EXPECT_EQ(node_events.size(), cg->graph().num_nodes());
  for (const Json& s : trace.at("kilnNodeStats")) EXPECT_EQ(s.at("calls"), 3);
  const std::string table = cg->profiler()->summary();
  EXPECT_NE(table.find("fc (matmul)"), std::string::npos) << table;
  EXPECT_NE(table.find("3 run(s)"), std::string::npos) << table;
  fs::remove(path);
}

TEST(Profiler, StatsCoverAllRunsTraceKeepsTheLast) {
  auto g = small_net();
  Profiler profiler;
  auto cg = CompiledGraph::compile(*g);
  Tensor x = random_tensor({2, 4, 8, 8}, 3);
  const size_t runs = Profiler::kTraceRuns + 5;
  for (size_t i = 0; i < runs; ++i) cg->run({x.view()}, profiler);
  EXPECT_EQ(profiler.runs(), runs);
  for (const Profiler::NodeStats& s : profiler.stats()) EXPECT_EQ(s.calls, runs) << s.node;
  Json trace = Json::parse(profiler.trace_json());
  std::set<int64_t> kept;
  for (const Json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") kept.insert(e.at("args").at("run").get<int64_t>());
  EXPECT_EQ(kept.size(), Profiler::kTraceRuns);
  EXPECT_EQ(*kept.begin(), static_cast<int64_t>(runs - Profiler::kTraceRuns + 1));
}

TEST(Profiler, GraphsSharingAPathShareOneFileWithATrackEach) {
  const std::string path = temp_path("shared.json");
  CompileOptions o;
  o.profile_path = path;
  auto a = CompiledGraph::compile(*small_net("part_a"), o);
  auto b = CompiledGraph::compile(*small_net("part_b"), o);
  EXPECT_EQ(a->profiler(), b->profiler());
  Tensor x = random_tensor({2, 4, 8, 8}, 3);
  a->run({x.view()});
  b->run({x.view()});
  a->profiler()->write();
  std::set<std::string> tracks;
  const Json trace = read_json(path);
  for (const Json& e : trace.at("traceEvents"))
    if (e.at("name") == "thread_name") tracks.insert(e.at("args").at("name").get<std::string>());
  EXPECT_EQ(tracks, (std::set<std::string>{"part_a", "part_b"}));
  fs::remove(path);
}

TEST(Profiler, EnvironmentVariableProfilesAndBadPathIsE10030) {
  const std::string path = temp_path("env.json");
  ASSERT_EQ(setenv("KILN_PROFILE", path.c_str(), 1), 0);
  auto cg = CompiledGraph::compile(*small_net());
  unsetenv("KILN_PROFILE");
  ASSERT_TRUE(cg->profiler());
  EXPECT_EQ(cg->profiler()->path(), path);
  EXPECT_FALSE(CompiledGraph::compile(*small_net())->profiler());
  CompileOptions o;
  o.profile_path = "/nonexistent_kiln_dir/trace.json";
  EXPECT_EQ(test::error_code_of([&] { CompiledGraph::compile(*small_net(), o); }),
            ErrorCode::DumpFailed);
  fs::remove(path);
}

}  // namespace
}  // namespace kiln
