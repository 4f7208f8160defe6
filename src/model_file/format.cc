#include "model_file/format.h"

#include <zlib.h>

#include <algorithm>
#include <sstream>

namespace kiln::model_file {

uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc) {
  return static_cast<uint32_t>(::crc32_z(crc, data, size));
}

uint32_t file_checksum(const uint8_t* file, size_t size,
                       const std::function<void(size_t, size_t)>& read) {
  constexpr size_t kChunk = size_t(16) << 20;
  uint32_t crc = crc32(file, kOffChecksum);
  for (size_t at = 0; at < size; at += kChunk) {
    const size_t end = std::min(size, at + kChunk);
    const size_t from = std::max(at, size_t(kOffChecksum + 4));
    if (end > from) crc = crc32(file + from, end - from, crc);
    if (read) read(at, end - at);
  }
  return crc;
}

void copy_nodes(const Graph& from, Graph& to, std::map<const Value*, Value*>& map) {
  for (const Node* node : from.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* v : node->inputs()) inputs.push_back(map.at(v));
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (const Value* v : node->outputs()) {
      types.push_back(v->type());
      names.push_back(v->name());
    }
    Node* copy = to.add_node_with_types(node->op(), inputs, node->attrs(), types, node->name(), names);
    for (size_t i = 0; i < node->outputs().size(); ++i) map[node->output(i)] = copy->output(i);
  }
  std::vector<Value*> outputs;
  for (const Value* v : from.outputs()) outputs.push_back(map.at(v));
  to.set_outputs(outputs);
}

// Hand-written matching (no std::regex): the text comes from a file and may be hostile, and
// libstdc++'s regex recurses per character.
std::vector<std::string> plan_kernel_lines(const std::string& description) {
  std::vector<std::string> lines;
  std::istringstream in(description);
  for (std::string line; std::getline(in, line);) {
    size_t i = line.find_first_not_of(' ');
    size_t digits_end = line.find_first_not_of("0123456789", i);
    if (i == std::string::npos || digits_end == i || digits_end == std::string::npos ||
        line.compare(digits_end, 2, ": ") != 0)
      continue;
    std::string rest = line.substr(digits_end + 2);
    if (rest.find(" [kernel ") != std::string::npos && rest.back() == ']') lines.push_back(rest);
  }
  return lines;
}

}  // namespace kiln::model_file
