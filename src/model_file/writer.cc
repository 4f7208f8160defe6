// Writes a compiled graph as a .kiln file (docs/file-format.md).
#include <cstring>
#include <fstream>

#include "kiln/model.h"
#include "model_file/format.h"
#include "model_file/reader.h"

namespace kiln {

using nlohmann::json;
using namespace model_file;

namespace {

size_t align_up(size_t n) { return (n + kConstantAlignment - 1) / kConstantAlignment * kConstantAlignment; }

// The graph with every constant declared as an input of the same name and type: its text
// carries the structure, the constant bytes go to their own section.
std::string skeleton_text(const Graph& graph) {
  Graph skeleton(graph.name());
  for (const Symbol& s : graph.symbols().all()) skeleton.symbols().add(s.name, s.min, s.max);
  std::map<const Value*, Value*> map;
  for (const Value* v : graph.inputs()) map[v] = skeleton.add_input(v->name(), v->type());
  for (const Value* v : graph.constants()) map[v] = skeleton.add_input(v->name(), v->type());
  copy_nodes(graph, skeleton, map);
  return print_graph(skeleton);
}

// What the loader needs to plan the stored graph as the producer did (the pipeline has run).
json options_json(const CompileOptions& o) {
  return {{"threads", o.threads},
          {"optimization_level", o.optimization_level},
          {"kernel_policy", o.kernel_policy},
          {"disabled_passes", o.disabled_passes},
          {"plan_cache_capacity", o.plan_cache_capacity},
          {"memory_reuse_threshold", o.memory_reuse_threshold},
          {"memory_optimization_level", o.memory_optimization_level},
          {"gemm_weights_in_place", o.gemm_weights_in_place}};
}

}  // namespace

std::vector<uint8_t> serialize_model(const CompiledGraph& compiled, const ModelMetadata& metadata) {
  const Graph& graph = compiled.graph();
  const SymbolTable& symbols = graph.symbols();
  for (const Value* c : graph.constants())
    if (!c->constant().defined())
      throw_error(ErrorCode::InvalidArgument, "graph '", graph.name(), "' can't be saved: its "
                  "constant '", c->name(), "' was released after its kernels prepacked it; "
                  "compile with release_prepacked_constants = false to save it (kiln.export does)");

  json meta = {{"producer", std::string("kiln ") + KILN_VERSION},
               {"torch_version", metadata.torch_version},
               {"properties", metadata.properties},
               {"graph_name", graph.name()},
               {"compile_options", options_json(compiled.options())},
               {"symbols", symbols_json(symbols)},
               {"inputs", json::array()},
               {"outputs", json::array()}};
  for (const Value* v : graph.inputs()) meta["inputs"].push_back(io_json(*v, symbols));
  for (const Value* v : graph.outputs()) meta["outputs"].push_back(io_json(*v, symbols));

  json index = json::array();
  size_t data_size = 0;
  for (const Value* c : graph.constants()) {
    const Tensor& t = c->constant();
    data_size = align_up(data_size);
    index.push_back({{"name", c->name()}, {"offset", data_size}, {"bytes", t.nbytes()}});
    data_size += t.nbytes();
  }

  json plan = {{"input_sizes", nullptr}, {"arena_bytes", -1}, {"description", ""}};
  bool all_static = true;
  std::vector<std::vector<int64_t>> sizes;
  for (const Value* v : graph.inputs()) {
    all_static &= is_static(v->type().shape);
    if (all_static) sizes.push_back(static_sizes(v->type().shape));
  }
  if (all_static) {
    plan["input_sizes"] = sizes;
    plan["description"] = compiled.describe_plan(sizes);
    plan["arena_bytes"] = compiled.memory_stats(sizes).arena_bytes;
  }

  const std::string texts[] = {meta.dump(), skeleton_text(graph), index.dump(), plan.dump()};
  const SectionType text_types[] = {SectionType::Metadata, SectionType::Graph,
                                    SectionType::ConstantIndex, SectionType::Plan};

  // Layout: header, section table, the text sections, then the constant data, 64-aligned.
  const size_t table_offset = kHeaderSize;
  size_t offset = table_offset + kSectionTypeCount * kSectionEntrySize;
  struct Entry { SectionType type; size_t offset, size; };
  std::vector<Entry> entries;
  for (int i = 0; i < 4; ++i) {
    entries.push_back({text_types[i], offset, texts[i].size()});
    offset += texts[i].size();
  }
  const size_t data_offset = align_up(offset);
  entries.push_back({SectionType::ConstantData, data_offset, data_size});
  const size_t file_size = data_offset + data_size;

  std::vector<uint8_t> file(file_size, 0);
  uint8_t* p = file.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  write_u32(p + kOffVersion, kFormatVersion);
  write_u32(p + kOffFlags, 0);
  write_u16(p + kOffProducer, KILN_VERSION_MAJOR);
  write_u16(p + kOffProducer + 2, KILN_VERSION_MINOR);
  write_u16(p + kOffProducer + 4, KILN_VERSION_PATCH);
  write_u64(p + kOffFileSize, file_size);
  write_u64(p + kOffTableOffset, table_offset);
  write_u32(p + kOffSectionCount, static_cast<uint32_t>(entries.size()));
  for (size_t i = 0; i < entries.size(); ++i) {
    uint8_t* e = p + table_offset + i * kSectionEntrySize;
    write_u32(e, static_cast<uint32_t>(entries[i].type));
    write_u64(e + 8, entries[i].offset);
    write_u64(e + 16, entries[i].size);
  }
  for (int i = 0; i < 4; ++i) std::memcpy(p + entries[i].offset, texts[i].data(), texts[i].size());
  for (size_t i = 0; i < graph.constants().size(); ++i) {
    const Tensor& t = graph.constants()[i]->constant();
    if (t.nbytes())
      std::memcpy(p + data_offset + index[i]["offset"].get<size_t>(), t.data(), t.nbytes());
  }
  write_u32(p + kOffChecksum, file_checksum(p, file_size));
  return file;
}

void save_model(const CompiledGraph& compiled, const std::string& path,
                const ModelMetadata& metadata) {
  std::vector<uint8_t> bytes = serialize_model(compiled, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    throw_error(ErrorCode::InvalidArgument, "could not write the model file '", path,
                "'; check that its folder exists and is writable");
}

}  // namespace kiln
