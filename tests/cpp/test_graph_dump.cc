// Node annotations and graph dumps (src/ir/graph_dump.h, CompileOptions::dump_type): the
// annotated textual IR still parses, JSON parses, DOT has a node per op, files per stage.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontend/converter.h"
#include "ir/graph_dump.h"
#include "kiln/kiln.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char* kGraph = R"(graph @block {
  input %x : f32[4, 8]
  const %w : f32[8, 2] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0,
                          -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]
  %mm = matmul(%x, %w)
  %r = relu(%mm)
  %s = sum(%r) {dim = [1], keepdim = false}
  output %s, %r
}
)";

std::unique_ptr<Graph> annotated_graph() {
  auto g = parse_graph(kGraph);
  std::vector<Node*> nodes = g->nodes();
  nodes[0]->annotate("source", "encoder.layer.3.attention.self.query");
  nodes[0]->annotate("aten", "aten.mm.default");
  nodes[1]->annotate("source", "encoder.layer.3.act");
  nodes[1]->annotate("engine", "native");
  return g;
}

std::string read(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A fresh folder under the test temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::path(::testing::TempDir()) / ("kiln_dump_" + name)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    if (fs::exists(path))
      for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST(NodeAnnotations, CloneKeepsThemAndInheritSourceCopiesTheOrigin) {
  auto g = annotated_graph();
  auto copy = g->clone();
  std::vector<Node*> a = g->nodes(), b = copy->nodes();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->annotations(), b[i]->annotations());
  b[2]->inherit_source(*a[0]);
  EXPECT_EQ(b[2]->annotation("source"), "encoder.layer.3.attention.self.query");
  EXPECT_EQ(b[2]->annotation("aten"), "aten.mm.default");
  EXPECT_EQ(b[2]->annotation("engine"), "");
}

TEST(NodeAnnotations, ImportedNodesCarryTheirModuleAndAtenOp) {
  // addmm becomes two Kiln nodes (matmul, add): both carry its origin.
  const char* fx = R"({"name": "linear", "placeholders": [
      {"name": "w", "kind": "constant", "dtype": "f32", "shape": [3, 4]},
      {"name": "b", "kind": "constant", "dtype": "f32", "shape": [3]},
      {"name": "x", "kind": "input", "dtype": "f32", "shape": [2, 4]}],
    "nodes": [
      {"name": "t", "target": "aten.t.default", "args": {"self": {"ref": "w"}},
       "outputs": [{"dtype": "f32", "shape": [4, 3]}], "source": "encoder.layer.3.query"},
      {"name": "addmm", "target": "aten.addmm.default",
       "args": {"self": {"ref": "b"}, "mat1": {"ref": "x"}, "mat2": {"ref": "t"},
                "beta": 1, "alpha": 1},
       "outputs": [{"dtype": "f32", "shape": [2, 3]}], "source": "encoder.layer.3.query"},
      {"name": "relu", "target": "aten.relu.default", "args": {"self": {"ref": "addmm"}},
       "outputs": [{"dtype": "f32", "shape": [2, 3]}], "source": ""}],
    "outputs": [{"ref": "relu"}]})";
  float w[12] = {}, b[3] = {};
  auto g = import_fx_graph(fx, {{"w", Tensor::copy_of(TensorView{w, DType::F32, {3, 4}})},
                                {"b", Tensor::copy_of(TensorView{b, DType::F32, {3}})}});
  std::map<std::string, int> from_addmm;
  for (const Node* node : g->nodes()) {
    if (node->op() == "relu") {
      EXPECT_EQ(node->annotation("aten"), "aten.relu.default");
      EXPECT_FALSE(node->annotations().count("source"));  // the root module's own code
      continue;
    }
    EXPECT_EQ(node->annotation("source"), "encoder.layer.3.query") << node->name();
    if (node->annotation("aten") == "aten.addmm.default") ++from_addmm[node->op()];
  }
  EXPECT_EQ(from_addmm, (std::map<std::string, int>{{"add", 1}, {"matmul", 1}}));
  const char* bad = R"({"placeholders": [{"name": "x", "kind": "input", "dtype": "f32",
      "shape": [2]}], "nodes": [{"name": "n", "target": "aten.relu.default",
      "args": {"self": {"ref": "x"}}, "outputs": [{"dtype": "f32", "shape": [2]}],
      "source": 3}], "outputs": [{"ref": "n"}]})";
  EXPECT_EQ(test::error_code_of([&] { import_fx_graph(bad, {}); }), ErrorCode::BadModelFile);
}

TEST(NodeAnnotations, PlainPrintIgnoresThemAnnotatedPrintStillParses) {
  auto g = annotated_graph();
  EXPECT_EQ(print_graph(*g), print_graph(*parse_graph(kGraph)));
  std::string text = print_graph_annotated(*g);
  size_t line = text.find("%mm : f32[4, 2] = matmul(%x, %w)");
  ASSERT_NE(line, std::string::npos) << text;
  std::string mm = text.substr(line, text.find('\n', line) - line);
  EXPECT_TRUE(mm.ends_with("  # aten=aten.mm.default source=encoder.layer.3.attention.self.query"))
      << mm;
  EXPECT_EQ(print_graph(*parse_graph(text)), print_graph(*g));
}

TEST(NodeAnnotations, DumpTextElidesLargeConstantsAsInputs) {
  auto g = annotated_graph();
  std::string text = print_graph_annotated(*g, /*max_constant_bytes=*/16);
  EXPECT_NE(text.find("input %w : f32[8, 2]  # constant, 64 bytes elided"), std::string::npos)
      << text;
  auto parsed = parse_graph(text);
  verify(*parsed);
  EXPECT_EQ(parsed->inputs().size(), 2u);
  EXPECT_EQ(parsed->num_nodes(), g->num_nodes());
}

TEST(GraphDump, JsonParsesAndCarriesEveryNodeAndAnnotation) {
  auto g = annotated_graph();
  Json j = Json::parse(graph_to_json(*g, "prepare"));
  EXPECT_EQ(j["name"], "block");
  EXPECT_EQ(j["stage"], "prepare");
  ASSERT_EQ(j["nodes"].size(), g->num_nodes());
  const Json& mm = j["nodes"][0];
  EXPECT_EQ(mm["op"], "matmul");
  EXPECT_EQ(mm["inputs"], Json::array({"x", "w"}));
  EXPECT_EQ(mm["outputs"][0]["type"], "f32[4, 2]");
  EXPECT_EQ(mm["annotations"]["source"], "encoder.layer.3.attention.self.query");
  EXPECT_EQ(mm["annotations"]["layout"], "plain");
  EXPECT_EQ(j["nodes"][2]["attrs"]["dim"], Json::array({1}));
  EXPECT_EQ(j["outputs"], Json::array({"s", "r"}));
  EXPECT_EQ(j["constants"][0]["name"], "w");
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(GraphDump, DotHasANodePerOpAndAClusterPerEngineSubgraph) {
  auto g = annotated_graph();
  std::string dot = graph_to_dot(*g, "select");
  for (const Node* node : g->nodes())
    EXPECT_EQ(count(dot, "\"n:" + node->name() + "\" [label=\"" + node->op() + "  @"), 1u)
        << node->name();
  EXPECT_EQ(count(dot, "[label="), g->num_nodes() + 3 /*edges; the constant has none*/) << dot;
  EXPECT_EQ(count(dot, "[shape=ellipse"), 1u /*input*/ + 2u /*outputs*/);
  EXPECT_NE(dot.find("source: encoder.layer.3.attention.self.query"), std::string::npos);
  EXPECT_EQ(count(dot, "subgraph "), 0u);
  std::vector<Node*> nodes = g->nodes();
  nodes[0]->annotate("subgraph", "0");
  nodes[1]->annotate("subgraph", "1");
  nodes[2]->annotate("subgraph", "1");
  dot = graph_to_dot(*g, "select");
  EXPECT_EQ(count(dot, "subgraph \"cluster_"), 2u) << dot;
  EXPECT_NE(dot.find("label=\"subgraph 1: native\""), std::string::npos) << dot;
}

TEST(GraphDump, WritesOneFilePerCallNamedByGraphIndexAndStage) {
  auto g = annotated_graph();
  TempDir dir("write");
  for (const char* type : {"txt", "json", "dot"})
    write_graph_dump(*g, dir.path.string(), 3, "fuse", type);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"block_03_fuse.dot", "block_03_fuse.json",
                                                   "block_03_fuse.txt"}));
  EXPECT_EQ(print_graph(*parse_graph(read(dir.path / "block_03_fuse.txt"))), print_graph(*g));
}

TEST(GraphDump, RendersSvgAndPngWithGraphviz) {
  // Graphviz is one of make test's Debian packages: a missing dot is a set-up bug, not a skip.
  ASSERT_EQ(std::system("dot -V > /dev/null 2>&1"), 0) << "Graphviz's dot is missing";
  auto g = annotated_graph();
  TempDir dir("render");
  std::string svg = write_graph_dump(*g, dir.path.string(), 1, "input", "svg");
  std::string png = write_graph_dump(*g, dir.path.string(), 1, "input", "png");
  EXPECT_NE(read(svg).find("<svg"), std::string::npos);
  EXPECT_EQ(read(png).substr(1, 3), "PNG");
}

TEST(GraphDump, MissingGraphvizIsACodedError) {
  auto g = annotated_graph();
  TempDir dir("nodot");
  std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", (dir.path / "empty").c_str(), 1);
  std::string message;
  ErrorCode code = test::error_code_of(
      [&] { write_graph_dump(*g, dir.path.string(), 0, "input", "png"); }, &message);
  setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(code, ErrorCode::DumpFailed);
  EXPECT_NE(message.find("install Graphviz"), std::string::npos) << message;
}

TEST(GraphDump, BadTypeOrUnwritableFolderIsACodedError) {
  auto g = annotated_graph();
  EXPECT_EQ(test::error_code_of([&] { CompiledGraph::compile(*g, {.dump_type = "pdf"}); }),
            ErrorCode::InvalidArgument);
  TempDir dir("blocked");
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "file") << "x";
  EXPECT_EQ(test::error_code_of([&] {
              write_graph_dump(*g, (dir.path / "file" / "sub").string(), 0, "input", "txt");
            }),
            ErrorCode::DumpFailed);
}

TEST(GraphDump, CompileDumpsEveryStageAndThePlanWithKernelsAndEngines) {
  auto g = annotated_graph();
  TempDir dir("compile");
  CompileOptions options;
  options.dump_type = "json";
  options.dump_path = dir.path.string();
  auto compiled = CompiledGraph::compile(*g, options);
  std::vector<std::string> files = dir.files();
  ASSERT_GE(files.size(), 3u);
  EXPECT_EQ(files.front(), "block_00_input.json");
  EXPECT_EQ(files.back().substr(files.back().size() - 10), "_plan.json");
  Json input = Json::parse(read(dir.path / files.front()));
  EXPECT_EQ(input["nodes"][0]["annotations"]["source"], "encoder.layer.3.attention.self.query");
  Json plan = Json::parse(read(dir.path / files.back()));
  ASSERT_EQ(plan["nodes"].size(), compiled->graph().num_nodes());
  for (const Json& node : plan["nodes"]) {
    const OpDef* def = OpRegistry::instance().find(node["op"].get<std::string>());
    ASSERT_NE(def, nullptr);
    const Json& notes = node["annotations"];
    auto k = std::find_if(def->kernels.begin(), def->kernels.end(),
                          [&](const KernelDef& d) { return d.name == notes["kernel"]; });
    ASSERT_NE(k, def->kernels.end()) << node.dump();
    EXPECT_EQ(notes["engine"], k->engine);
    EXPECT_TRUE(notes.contains("subgraph"));
  }
  // The dumps don't change what runs.
  Tensor x = test::tensor_of({4, 8}, std::vector<float>(32, 1.5f));
  auto dumped = compiled->run({x.view()});
  auto plain = CompiledGraph::compile(*g)->run({x.view()});
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(test::values_of<float>(dumped[i]), test::values_of<float>(plain[i]));
}

TEST(GraphDump, SymbolicGraphsDumpAPlanPerShape) {
  auto g = parse_graph(R"(graph @sym {
  sym B in [1, 8]
  input %x : f32[B, 4]
  %y = relu(%x)
  output %y
}
)");
  TempDir dir("symbolic");
  auto compiled =
      CompiledGraph::compile(*g, {.dump_type = "txt", .dump_path = dir.path.string()});
  size_t stages = dir.files().size();
  Tensor a = test::tensor_of({2, 4}, std::vector<float>(8, -1.f));
  Tensor b = test::tensor_of({3, 4}, std::vector<float>(12, 2.f));
  compiled->run({a.view()});
  compiled->run({b.view()});
  std::vector<std::string> files = dir.files();
  ASSERT_EQ(files.size(), stages + 2);
  EXPECT_NE(std::find_if(files.begin(), files.end(),
                         [](const std::string& f) { return f.find("_plan_2x4.txt") != f.npos; }),
            files.end());
  for (const std::string& f : files) parse_graph(read(dir.path / f));
}

}  // namespace
}  // namespace kiln
