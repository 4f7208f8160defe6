#include "ir/graph_dump.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"

extern char** environ;

namespace kiln {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// A pass may record the layout it chose; otherwise it is the first output's.
std::string node_layout(const Node& node) {
  std::string annotated = node.annotation("layout");
  if (!annotated.empty() || node.outputs().empty()) return annotated;
  return layout_name(node.output(0)->type().layout);
}

std::string type_of(const Value* v) { return type_string(v->type(), &v->graph()->symbols()); }

Json attr_json(const Attr& attr) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          if (!v.defined()) return "tensor<>";
          return "tensor<" + std::string(dtype_name(v.dtype())) + shape_string(v.sizes()) + ">";
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          Json list = Json::array();
          for (bool b : v) list.push_back(b);
          return list;
        } else {
          return v;
        }
      },
      attr);
}

Json values_json(const std::vector<Value*>& values) {
  Json list = Json::array();
  for (const Value* v : values) list.push_back({{"name", v->name()}, {"type", type_of(v)}});
  return list;
}

// A DOT string literal (labels break lines with \n).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out + '"';
}

const char* engine_color(const std::string& engine) {
  if (engine == "onednn") return "#cfe2f3";
  if (engine == "openblas") return "#fce5cd";
  if (engine == "native") return "#e6e6e6";
  return "#ffffff";
}

std::string node_label(const Node& node) {
  std::string label = node.op() + "  @" + node.name();
  for (const auto& [key, value] : node.annotations())
    if (key != "layout" && key != "subgraph")
      label.append("\n").append(key).append(": ").append(value);
  label.append("\nlayout: ").append(node_layout(node));
  for (const Value* out : node.outputs()) label.append("\n").append(type_of(out));
  return label;
}

std::string file_part(const std::string& s) {
  std::string out;
  for (char c : s)
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return out.empty() ? "_" : out;
}

bool dot_on_path() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && access((fs::path(dir) / "dot").c_str(), X_OK) == 0) return true;
  return false;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file)
    throw_error(ErrorCode::DumpFailed, "can't write the graph dump ", path.string(),
                "; set debug.graph_dump.path (dump_path) to a writable folder");
}

// Runs `dot -T<format> <source> -o <target>` without a shell (paths may hold any character).
void render(const fs::path& source, const fs::path& target, const std::string& format) {
  if (!dot_on_path())
    throw_error(ErrorCode::DumpFailed, "graph dumps of type ", format,
                " are rendered by Graphviz's 'dot' program, which is not on PATH; install "
                "Graphviz (Debian/Ubuntu: apt-get install graphviz) or use type txt, json or dot");
  std::string flag = "-T" + format, s = source.string(), t = target.string();
  char* argv[] = {const_cast<char*>("dot"), flag.data(), s.data(), const_cast<char*>("-o"),
                  t.data(), nullptr};
  pid_t pid;
  int status = 0;
  int err = posix_spawnp(&pid, "dot", nullptr, nullptr, argv, environ);
  if (err == 0 && waitpid(pid, &status, 0) < 0) err = errno;
  if (err != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw_error(ErrorCode::DumpFailed, "Graphviz's dot failed to render ", s, " as ", format,
                err ? std::string(": ") + std::strerror(err)
                    : " (exit status " + std::to_string(WEXITSTATUS(status)) + ")",
                "; check that Graphviz is installed completely, or use type txt, json or dot");
}

}  // namespace

void check_dump_type(const std::string& type) {
  if (type.empty() || type == "txt" || type == "json" || type == "dot" || type == "png" ||
      type == "svg")
    return;
  throw_error(ErrorCode::InvalidArgument, "graph dump type '", type,
              "' is unknown; use txt, json, dot, png or svg (or none)");
}

std::string graph_to_json(const Graph& graph, const std::string& stage) {
  Json nodes = Json::array();
  for (const Node* node : graph.nodes()) {
    Json inputs = Json::array();
    for (const Value* in : node->inputs()) inputs.push_back(in->name());
    Json attrs = Json::object();
    for (const auto& [key, value] : node->attrs()) attrs[key] = attr_json(value);
    Json annotations(node->annotations());
    annotations["layout"] = node_layout(*node);
    nodes.push_back({{"name", node->name()},
                     {"op", node->op()},
                     {"inputs", inputs},
                     {"outputs", values_json(node->outputs())},
                     {"attrs", attrs},
                     {"annotations", annotations}});
  }
  Json outputs = Json::array();
  for (const Value* v : graph.outputs()) outputs.push_back(v->name());
  Json g = {{"name", graph.name()},
            {"stage", stage},
            {"inputs", values_json(graph.inputs())},
            {"constants", values_json(graph.constants())},
            {"nodes", nodes},
            {"outputs", outputs}};
  // Non-finite attribute floats become null rather than aborting the dump.
  return g.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string graph_to_dot(const Graph& graph, const std::string& stage) {
  std::ostringstream out;
  out << "digraph " << quoted(graph.name()) << " {\n"
      << "  label=" << quoted(graph.name() + (stage.empty() ? "" : " after " + stage))
      << "; labelloc=t;\n"
      << "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
      << "  edge [fontname=\"Helvetica\", fontsize=8];\n";
  for (const Value* in : graph.inputs())
    out << "  " << quoted("in:" + in->name()) << " [shape=ellipse, fillcolor=\"#d9ead3\", label="
        << quoted(in->name() + "\n" + type_of(in)) << "];\n";
  // Nodes grouped by engine subgraph: each run of one engine is a cluster.
  std::map<std::string, std::vector<const Node*>> clusters;
  std::vector<const Node*> loose;
  for (const Node* node : graph.nodes()) {
    std::string subgraph = node->annotation("subgraph");
    (subgraph.empty() ? loose : clusters[subgraph]).push_back(node);
  }
  auto emit = [&](const Node* node, const char* indent) {
    out << indent << quoted("n:" + node->name()) << " [label=" << quoted(node_label(*node))
        << ", fillcolor=\"" << engine_color(node->annotation("engine")) << "\"];\n";
  };
  for (const auto& [subgraph, members] : clusters) {
    out << "  subgraph " << quoted("cluster_" + subgraph) << " {\n    label="
        << quoted("subgraph " + subgraph + ": " + members[0]->annotation("engine"))
        << "; style=dashed;\n";
    for (const Node* node : members) emit(node, "    ");
    out << "  }\n";
  }
  for (const Node* node : loose) emit(node, "  ");
  auto source_of = [](const Value* v) {
    if (v->producer()) return "n:" + v->producer()->name();
    return (v->kind() == Value::Kind::Input ? "in:" : "const:") + v->name();
  };
  // Constants (weights) are not drawn: a real model has hundreds; their use is in the label.
  for (const Node* node : graph.nodes())
    for (const Value* in : node->inputs())
      if (in->kind() != Value::Kind::Constant)
        out << "  " << quoted(source_of(in)) << " -> " << quoted("n:" + node->name())
            << " [label=" << quoted(type_of(in)) << "];\n";
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Value* v = graph.outputs()[i];
    std::string id = "out:" + std::to_string(i);
    out << "  " << quoted(id) << " [shape=ellipse, fillcolor=\"#f4cccc\", label="
        << quoted("output " + std::to_string(i) + "\n" + type_of(v)) << "];\n";
    if (v->kind() != Value::Kind::Constant)
      out << "  " << quoted(source_of(v)) << " -> " << quoted(id) << ";\n";
  }
  out << "}\n";
  return out.str();
}

std::string write_graph_dump(const Graph& graph, const std::string& dir, int index,
                             const std::string& stage, const std::string& type) {
  check_dump_type(type);
  KILN_ASSERT(!type.empty(), "write_graph_dump without a type");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw_error(ErrorCode::DumpFailed, "can't create the graph dump folder '", dir,
                "': ", ec.message(),
                "; set debug.graph_dump.path (dump_path) to a writable folder");
  std::ostringstream base;
  base << file_part(graph.name()) << '_' << std::setw(2) << std::setfill('0') << index << '_'
       << file_part(stage);
  fs::path stem = fs::path(dir) / base.str();
  fs::path target = stem;
  target += "." + type;
  if (type == "txt") {
    write_file(target, print_graph_annotated(graph, kDumpMaxConstantBytes));
  } else if (type == "json") {
    write_file(target, graph_to_json(graph, stage));
  } else {
    fs::path dot = stem;
    dot += ".dot";
    write_file(dot, graph_to_dot(graph, stage));
    if (type != "dot") render(dot, target, type);
  }
  return target.string();
}

}  // namespace kiln
