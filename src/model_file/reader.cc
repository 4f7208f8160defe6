// Reads a .kiln file. Every offset, size and field is checked before use: a hostile file gives
// a coded error, never a crash or an out-of-bounds read, and nothing in it is executed.
#include "model_file/reader.h"

#include <sys/mman.h>

#include <cstring>

namespace kiln::model_file {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& what) {
  throw_error(ErrorCode::BadModelFile, "the model file is malformed: ", what,
              "; re-export the model with this version of Kiln");
}

const json& field(const json& object, const char* key, const std::string& where) {
  if (!object.is_object()) bad(where + " is not a JSON object");
  auto it = object.find(key);
  if (it == object.end()) bad(where + " has no field '" + key + "'");
  return *it;
}

int64_t int_field(const json& object, const char* key, const std::string& where, int64_t min,
                  int64_t max) {
  const json& v = field(object, key, where);
  // Checked before conversion: a float or a too-large unsigned would not convert exactly.
  bool fits = v.is_number_integer() &&
              (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX));
  if (!fits || v.get<int64_t>() < min || v.get<int64_t>() > max)
    bad(where + " field '" + key + "' is not an integer in [" + std::to_string(min) + ", " +
        std::to_string(max) + "]");
  return v.get<int64_t>();
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_string()) bad(where + " field '" + key + "' is not a string");
  return v.get<std::string>();
}

json parse_json(const uint8_t* data, size_t size, const char* section) {
  json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad(std::string("the ") + section + " section is not valid JSON");
  return j;
}

struct Section {
  uint64_t offset = 0, size = 0;
  bool present = false;
};

// nbytes of a static type, or -1 when it overflows.
int64_t checked_nbytes(const TensorType& type) {
  int64_t n = static_cast<int64_t>(dtype_size(type.dtype));
  for (const Dim& d : type.shape)
    if (__builtin_mul_overflow(n, d.size(), &n)) return -1;
  return n;
}

ModelMetadata read_metadata(const json& meta, CompileOptions& options) {
  ModelMetadata m;
  m.producer = string_field(meta, "producer", "metadata");
  m.torch_version = string_field(meta, "torch_version", "metadata");
  const json& props = field(meta, "properties", "metadata");
  if (!props.is_object()) bad("metadata field 'properties' is not an object");
  for (auto it = props.begin(); it != props.end(); ++it) {
    if (!it.value().is_string()) bad("metadata property '" + it.key() + "' is not a string");
    m.properties[it.key()] = it.value().get<std::string>();
  }
  // Values are checked by CompiledGraph::compile when the model is planned.
  const json& o = field(meta, "compile_options", "metadata");
  options.threads = static_cast<int>(int_field(o, "threads", "compile_options", 0, 1 << 16));
  options.optimization_level =
      static_cast<int>(int_field(o, "optimization_level", "compile_options", 0, 3));
  options.kernel_policy = string_field(o, "kernel_policy", "compile_options");
  options.plan_cache_capacity = static_cast<size_t>(
      int_field(o, "plan_cache_capacity", "compile_options", 1, 1 << 20));
  options.memory_reuse_threshold = static_cast<size_t>(
      int_field(o, "memory_reuse_threshold", "compile_options", 0, INT64_MAX));
  options.memory_optimization_level =
      string_field(o, "memory_optimization_level", "compile_options");
  // Absent from files written before the option existed: those prepacked their weights.
  if (o.contains("gemm_weights_in_place")) {
    const json& in_place = o["gemm_weights_in_place"];
    if (!in_place.is_boolean()) bad("compile option gemm_weights_in_place is not a bool");
    options.gemm_weights_in_place = in_place.get<bool>();
  }
  const json& passes = field(o, "disabled_passes", "compile_options");
  if (!passes.is_array()) bad("compile option disabled_passes is not a list");
  for (const json& p : passes) {
    if (!p.is_string()) bad("compile option disabled_passes holds a non-string");
    options.disabled_passes.insert(p.get<std::string>());
  }
  return m;
}

ModelPlanRecord read_plan(const json& plan, const Graph& graph) {
  ModelPlanRecord r;
  r.description = string_field(plan, "description", "plan");
  const json& sizes = field(plan, "input_sizes", "plan");
  bool all_static = true;
  for (const Value* v : graph.inputs()) all_static &= is_static(v->type().shape);
  if (sizes.is_null()) {
    if (all_static) bad("the plan section has no plan for a graph with static inputs");
    return r;
  }
  if (!all_static) bad("the plan section has a static plan for a graph with symbolic dims");
  std::vector<std::vector<int64_t>> expected;
  for (const Value* v : graph.inputs()) expected.push_back(static_sizes(v->type().shape));
  if (sizes != json(expected)) bad("the plan's input sizes differ from the graph's inputs");
  r.present = true;
  r.node_kernels = plan_kernel_lines(r.description);
  r.arena_bytes = int_field(plan, "arena_bytes", "plan", 0, INT64_MAX);
  return r;
}

}  // namespace

json io_json(const Value& value, const SymbolTable& symbols) {
  json shape = json::array();
  for (const Dim& d : value.type().shape) {
    if (d.is_static())
      shape.push_back(d.size());
    else
      shape.push_back(symbols[d.symbol()].name);
  }
  return {{"name", value.name()}, {"dtype", std::string(dtype_name(value.type().dtype))},
          {"shape", shape}};
}

json symbols_json(const SymbolTable& symbols) {
  json all = json::array();
  for (const Symbol& s : symbols.all())
    all.push_back({{"name", s.name}, {"min", s.min}, {"max", s.max}});
  return all;
}

Model::Parts read_model(const uint8_t* data, size_t size, std::shared_ptr<const void> owner,
                        bool file_mapping) {
  if (size < kHeaderSize)
    bad("it is truncated (" + std::to_string(size) + " bytes; the header alone is " +
        std::to_string(kHeaderSize) + ")");
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0) bad("it is not a Kiln model (wrong magic)");
  Model::Parts parts;
  parts.format_version = read_u32(data + kOffVersion);
  if (parts.format_version == 0) bad("format version 0 is invalid");
  if (parts.format_version > kFormatVersion)
    throw_error(ErrorCode::ModelFileVersion, "the model file has format version ",
                parts.format_version, ", made by Kiln ", read_u16(data + kOffProducer), ".",
                read_u16(data + kOffProducer + 2), ".", read_u16(data + kOffProducer + 4),
                "; this Kiln reads versions up to ", kFormatVersion,
                ". Upgrade Kiln, or re-export the model with this version");
  uint32_t flags = read_u32(data + kOffFlags);
  if (flags & ~kKnownFlags)
    throw_error(ErrorCode::ModelFileVersion, "the model file sets flags 0x", std::hex, flags,
                " that this Kiln doesn't know; upgrade Kiln, or re-export the model");
  uint64_t file_size = read_u64(data + kOffFileSize);
  if (file_size != size)
    bad("its header says " + std::to_string(file_size) + " bytes but it has " +
        std::to_string(size) + (file_size > size ? " (truncated)" : " (trailing bytes)"));
  // A mapped file's pages go back as the checksum passes them (mapped at a page boundary, read in
  // pages' multiples): the whole file is never resident at once. Planning faults back in the
  // constants it prepacks, the run those that kernels read in place.
  auto give_back = [data](size_t offset, size_t bytes) {
    ::madvise(const_cast<uint8_t*>(data) + offset, bytes, MADV_DONTNEED);
  };
  if (read_u32(data + kOffChecksum) !=
      file_checksum(data, size, file_mapping ? give_back : std::function<void(size_t, size_t)>()))
    bad("its checksum doesn't match (the file is corrupted)");

  // The section table: every entry inside the file, each known type exactly once.
  uint64_t table = read_u64(data + kOffTableOffset);
  uint64_t count = read_u32(data + kOffSectionCount);
  if (table < kHeaderSize || table > size || count > (size - table) / kSectionEntrySize)
    bad("the section table lies outside the file");
  Section sections[kSectionTypeCount + 1];
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = data + table + i * kSectionEntrySize;
    uint32_t type = read_u32(e);
    Section s{read_u64(e + 8), read_u64(e + 16), true};
    std::string name = "section " + std::to_string(i) + " (type " + std::to_string(type) + ")";
    if (type == 0 || type > kSectionTypeCount) bad(name + " has an unknown type");
    if (read_u32(e + 4) != 0) bad(name + " has non-zero reserved bits");
    if (sections[type].present) bad(name + " appears twice");
    if (s.offset < kHeaderSize || s.offset > size || s.size > size - s.offset)
      bad(name + " lies outside the file");
    sections[type] = s;
  }
  for (uint32_t type = 1; type <= kSectionTypeCount; ++type)
    if (!sections[type].present) bad("section type " + std::to_string(type) + " is missing");
  auto bytes_of = [&](SectionType t) { return data + sections[static_cast<uint32_t>(t)].offset; };
  auto size_of = [&](SectionType t) { return sections[static_cast<uint32_t>(t)].size; };

  json meta = parse_json(bytes_of(SectionType::Metadata), size_of(SectionType::Metadata), "metadata");
  parts.metadata = read_metadata(meta, parts.options);

  // The graph: parsed by the textual IR parser, which checks every token and type.
  std::unique_ptr<Graph> skeleton;
  try {
    skeleton = parse_graph(std::string(reinterpret_cast<const char*>(bytes_of(SectionType::Graph)),
                                       size_of(SectionType::Graph)));
  } catch (const Error& e) {
    if (e.code() == ErrorCode::UnsupportedOperator) throw;  // an op of a newer Kiln
    bad("the graph section is invalid: " + std::string(e.what()));
  }

  if (!skeleton->constants().empty()) bad("the graph section declares constants inline");

  // Constants: skeleton inputs named in the index become constants over the file's bytes.
  json index = parse_json(bytes_of(SectionType::ConstantIndex), size_of(SectionType::ConstantIndex),
                          "constant index");
  if (!index.is_array()) bad("the constant index is not a list");
  const uint64_t data_offset = sections[static_cast<uint32_t>(SectionType::ConstantData)].offset;
  const uint64_t data_size = size_of(SectionType::ConstantData);
  if (data_offset % kConstantAlignment != 0) bad("the constant data is not 64-byte aligned");
  std::map<std::string, Tensor> constants;
  std::vector<std::string> constant_order;
  for (size_t i = 0; i < index.size(); ++i) {
    std::string where = "constant index entry " + std::to_string(i);
    std::string name = string_field(index[i], "name", where);
    int64_t offset = int_field(index[i], "offset", where, 0, INT64_MAX);
    int64_t bytes = int_field(index[i], "bytes", where, 0, INT64_MAX);
    const Value* v = skeleton->find_value(name);
    if (!v || v->kind() != Value::Kind::Input) bad(where + " names no graph input '" + name + "'");
    if (constants.count(name)) bad(where + " repeats constant '" + name + "'");
    if (!is_static(v->type().shape)) bad("constant '" + name + "' has a symbolic type");
    if (checked_nbytes(v->type()) != bytes) bad("constant '" + name + "' has the wrong size");
    if (offset % int64_t(kConstantAlignment) != 0) bad("constant '" + name + "' is misaligned");
    if (uint64_t(offset) > data_size || uint64_t(bytes) > data_size - uint64_t(offset))
      bad("constant '" + name + "' lies outside the constant data");
    const uint8_t* bytes_at = data + data_offset + offset;
    constants[name] =
        file_mapping ? Tensor::mapped_from_file(v->type().dtype, static_sizes(v->type().shape), bytes_at, owner)
                     : Tensor::borrowed(v->type().dtype, static_sizes(v->type().shape), bytes_at, owner);
    constant_order.push_back(name);
  }

  // Rebuild: real inputs in order, then the constants in index order, then the nodes.
  auto graph = std::make_unique<Graph>(skeleton->name());
  for (const Symbol& s : skeleton->symbols().all()) graph->symbols().add(s.name, s.min, s.max);
  std::map<const Value*, Value*> map;
  for (const Value* v : skeleton->inputs())
    if (!constants.count(v->name())) map[v] = graph->add_input(v->name(), v->type());
  for (const std::string& name : constant_order) {
    const Value* v = skeleton->find_value(name);
    map[v] = graph->add_constant(name, constants[name]);
    map[v]->set_type(v->type());  // keeps a non-plain layout (the bytes are in that layout)
  }
  try {
    copy_nodes(*skeleton, *graph, map);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::UnsupportedOperator) throw;
    bad("the graph section is invalid: " + std::string(e.what()));
  }

  // The metadata's description of the interface must be the graph's.
  const SymbolTable& symbols = graph->symbols();
  json inputs = json::array(), outputs = json::array();
  for (const Value* v : graph->inputs()) inputs.push_back(io_json(*v, symbols));
  for (const Value* v : graph->outputs()) outputs.push_back(io_json(*v, symbols));
  if (field(meta, "inputs", "metadata") != inputs || field(meta, "outputs", "metadata") != outputs ||
      field(meta, "symbols", "metadata") != symbols_json(symbols) ||
      field(meta, "graph_name", "metadata") != graph->name())
    bad("the metadata's inputs, outputs or symbols differ from the graph's");

  json plan = parse_json(bytes_of(SectionType::Plan), size_of(SectionType::Plan), "plan");
  parts.plan = read_plan(plan, *graph);
  parts.graph = std::move(graph);
  return parts;
}

}  // namespace kiln::model_file
