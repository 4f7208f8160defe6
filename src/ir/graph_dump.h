// Graph dumps (CompileOptions::dump_type, debug.graph_dump in Python): the graph after each
// compile stage as the annotated textual IR (txt), JSON, Graphviz DOT, or PNG/SVG rendered by
// Graphviz's `dot` program. Each node shows its annotations (Node::annotations: PyTorch source
// module path and ATen op, engine, kernel, engine subgraph) and the layout of its outputs.
#pragma once

#include <string>

#include "kiln/graph.h"

namespace kiln {

// Constants larger than this are shown without their data in txt dumps.
constexpr size_t kDumpMaxConstantBytes = 1024;

// Throws E10001 for anything but "", "txt", "json", "dot", "png" or "svg".
void check_dump_type(const std::string& type);

// {"name", "stage", "inputs", "constants", "nodes": [{"name", "op", "inputs", "outputs",
//  "attrs", "annotations": {..., "layout"}}], "outputs"} (docs/config.md).
std::string graph_to_json(const Graph& graph, const std::string& stage = "");
// One box per node (ops), ellipses for inputs and outputs, edges labeled with tensor types, and a
// cluster per engine subgraph when the nodes have "subgraph" annotations.
std::string graph_to_dot(const Graph& graph, const std::string& stage = "");

// Writes `graph` as dir/<graph>_<index, 2 digits>_<stage>.<type> (png and svg also keep their
// .dot source beside), creating dir; returns the path. Throws E10030 when the folder or file
// can't be written, or when png/svg is asked for and Graphviz's dot is missing or fails.
std::string write_graph_dump(const Graph& graph, const std::string& dir, int index,
                             const std::string& stage, const std::string& type);

}  // namespace kiln
