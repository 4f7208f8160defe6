// Importing a serialized FX graph (docs/frontend.md) through the converter registry.
#include <algorithm>
#include <memory>
#include <set>
#include <unordered_map>

#include "frontend/converter.h"
#include "kernels/cpu/cast.h"
#include "ir/sym_expr.h"
#include "ops/low_precision.h"
#include "ops/op_registry.h"
#include "kiln/error.h"

namespace kiln {

#define KILN_CONVERTER_FAMILY(family) void register_##family##_converters(ConverterRegistry&);
#include "frontend/converter_list.inc"
#undef KILN_CONVERTER_FAMILY

const ConverterRegistry& ConverterRegistry::instance() {
  static const ConverterRegistry registry = [] {
    ConverterRegistry r;
#define KILN_CONVERTER_FAMILY(family) register_##family##_converters(r);
#include "frontend/converter_list.inc"
#undef KILN_CONVERTER_FAMILY
    return r;
  }();
  return registry;
}

void ConverterRegistry::add(const std::string& target, Converter converter) {
  KILN_ASSERT(!converters_.count(target), "converter for " << target << " registered twice");
  converters_.emplace(target, std::move(converter));
}

const Converter* ConverterRegistry::find(const std::string& target) const {
  auto it = converters_.find(target);
  return it == converters_.end() ? nullptr : &it->second;
}

std::vector<std::string> ConverterRegistry::targets() const {
  std::vector<std::string> names;
  for (const auto& [name, fn] : converters_) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------- ConvertContext

ConvertContext::ConvertContext(Graph& graph, const Json& node, const ReadOutputs& read,
                               const std::function<Value*(const Json&)>& resolve)
    : graph_(graph),
      node_(node),
      name_(node.at("name").get<std::string>()),
      target_(node.at("target").get<std::string>()),
      read_(read),
      resolve_(resolve) {}

const Json& ConvertContext::arg(const std::string& name) const {
  const Json& args = node_.at("args");
  auto it = args.find(name);
  if (it == args.end())
    throw_error(ErrorCode::BadModelFile, "FX node '", name_, "' (", target_, ") has no argument '",
                name, "'");
  return *it;
}

bool ConvertContext::has(const std::string& name) const {
  const Json& args = node_.at("args");
  auto it = args.find(name);
  return it != args.end() && !it->is_null();
}

bool ConvertContext::is_tensor(const std::string& name) const {
  if (!has(name)) return false;
  const Json& a = arg(name);
  return a.is_object() && a.contains("ref");
}

void ConvertContext::unsupported(const std::string& reason) const {
  throw_error(ErrorCode::UnsupportedOperator, "Kiln can't convert node '", name_, "' (", target_,
              "): ", reason);
}

Value* ConvertContext::tensor(const std::string& name) const {
  const Json& a = arg(name);
  if (!a.is_object() || !a.contains("ref")) unsupported("argument '" + name + "' is not a tensor");
  return resolve_(a);
}

Value* ConvertContext::optional_tensor(const std::string& name) const {
  return has(name) ? tensor(name) : nullptr;
}

std::vector<Value*> ConvertContext::optional_tensors(const std::string& name) const {
  const Json& a = arg(name);
  if (!a.is_array()) unsupported("argument '" + name + "' is not a list of tensors");
  std::vector<Value*> out;
  for (const Json& item : a) {
    if (item.is_null()) {
      out.push_back(nullptr);
      continue;
    }
    if (!item.is_object() || !item.contains("ref"))
      unsupported("argument '" + name + "' holds something other than tensors");
    out.push_back(resolve_(item));
  }
  return out;
}

std::vector<Value*> ConvertContext::tensors(const std::string& name) const {
  std::vector<Value*> out = optional_tensors(name);
  if (std::find(out.begin(), out.end(), nullptr) != out.end())
    unsupported("argument '" + name + "' holds None where a tensor is needed");
  return out;
}

int64_t ConvertContext::integer(const std::string& name) const {
  const Json& a = arg(name);
  if (a.is_boolean() || !a.is_number_integer())
    unsupported("argument '" + name + "' is " + (a.is_object() && a.contains("sym")
                                                      ? "a symbolic size"
                                                      : "not an integer: " + a.dump()));
  return a.get<int64_t>();
}

namespace {

std::optional<double> json_number(const Json& a) {
  if (a.is_boolean()) return a.get<bool>() ? 1.0 : 0.0;
  if (a.is_number()) return a.get<double>();
  if (a.is_string()) {  // inf, -inf and nan cross as strings (JSON has no literal for them)
    std::string s = a.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  return std::nullopt;
}

}  // namespace

double ConvertContext::number(const std::string& name) const {
  const Json& a = arg(name);
  if (std::optional<double> value = json_number(a)) return *value;
  unsupported("argument '" + name + "' is not a number: " + a.dump());
}

std::vector<double> ConvertContext::numbers(const std::string& name) const {
  const Json& a = arg(name);
  if (!a.is_array()) unsupported("argument '" + name + "' is not a list of numbers");
  std::vector<double> out;
  for (const Json& item : a) {
    std::optional<double> value = json_number(item);
    if (!value) unsupported("argument '" + name + "' holds " + item.dump());
    out.push_back(*value);
  }
  return out;
}

bool ConvertContext::boolean(const std::string& name) const {
  const Json& a = arg(name);
  if (!a.is_boolean()) unsupported("argument '" + name + "' is not a bool: " + a.dump());
  return a.get<bool>();
}

std::string ConvertContext::string(const std::string& name) const {
  const Json& a = arg(name);
  if (!a.is_string()) unsupported("argument '" + name + "' is not a string: " + a.dump());
  return a.get<std::string>();
}

std::vector<int64_t> ConvertContext::integers(const std::string& name) const {
  const Json& a = arg(name);
  if (a.is_number_integer()) return {a.get<int64_t>()};  // int[1] arguments accept a scalar
  if (!a.is_array()) unsupported("argument '" + name + "' is not a list of integers");
  std::vector<int64_t> out;
  for (const Json& item : a) {
    if (item.is_boolean() || !item.is_number_integer())
      unsupported("argument '" + name + "' holds " +
                  (item.is_object() && item.contains("sym") ? "a symbolic size" : item.dump()));
    out.push_back(item.get<int64_t>());
  }
  return out;
}

ConvertContext::Sizes ConvertContext::sizes(const std::string& name) const {
  const Json& a = arg(name);
  if (!a.is_array()) return Sizes{integers(name), {}};
  Sizes out;
  bool symbolic = false;
  for (const Json& item : a) {
    const bool is_sym = item.is_object() && item.contains("sym") && item.at("sym").is_string();
    if (!is_sym && (item.is_boolean() || !item.is_number_integer()))
      unsupported("argument '" + name + "' holds " + item.dump());
    out.ints.push_back(is_sym ? -1 : item.get<int64_t>());
    out.syms.push_back(is_sym ? item.at("sym").get<std::string>() : "");
    symbolic |= is_sym;
  }
  if (!symbolic) out.syms.clear();
  return out;
}

std::string ConvertContext::sym(const std::string& name) const {
  const Json& a = arg(name);
  return a.is_object() && a.contains("sym") && a.at("sym").is_string()
             ? a.at("sym").get<std::string>()
             : "";
}

std::optional<DType> ConvertContext::dtype(const std::string& name) const {
  if (!has(name)) return std::nullopt;
  const Json& a = arg(name);
  if (!a.is_object() || !a.contains("dtype"))
    unsupported("argument '" + name + "' is not a dtype");
  std::string dname = a.at("dtype").get<std::string>();
  std::optional<DType> d = parse_dtype(dname);
  if (!d) unsupported("dtype " + dname + " is not supported by Kiln");
  return d;
}

std::string ConvertContext::enum_name(const std::string& name) const {
  if (!has(name)) return "";
  const Json& a = arg(name);
  if (!a.is_object() || !a.contains("enum")) unsupported("argument '" + name + "' is not an enum");
  return a.at("enum").get<std::string>();
}

const Json& ConvertContext::output_meta(size_t i) const { return node_.at("outputs").at(i); }

bool ConvertContext::output_used(size_t i) const { return read_.count({name_, i}) > 0; }

DType ConvertContext::output_dtype(size_t i) const {
  std::string name = output_meta(i).at("dtype").get<std::string>();
  std::optional<DType> d = parse_dtype(name);
  if (!d) unsupported("output dtype " + name + " is not supported by Kiln");
  return *d;
}

Value* ConvertContext::add(const std::string& op, const std::vector<Value*>& inputs,
                           AttrMap attrs) {
  // A cast reads the f32 value: to(bf16) rounds it once, to(f32) keeps it, as its dtype says.
  if (op == "to") return graph_.add(op, inputs, std::move(attrs), name_);
  // Operands as PyTorch sees them: an unrounded value has its f16 or bf16 dtype.
  std::vector<PromotionOperand> operands;
  bool reads_unrounded = false, low = false;
  for (Value* in : inputs) {
    if (!in) continue;
    auto it = unrounded_.find(in);
    reads_unrounded |= it != unrounded_.end();
    const DType dtype = it != unrounded_.end() ? it->second : in->type().dtype;
    low |= is_low_precision_float(dtype);
    operands.push_back({dtype, in->type().rank()});
  }
  const OpDef* def = OpRegistry::instance().find(op);
  const DType result = !low ? DType::F32
                     : def     ? low_precision_result(*def, operands)
                               : result_type(operands);
  if (def && low && is_low_precision_float(result) &&
      (def->computes_low_precision_in_f32 || reads_unrounded)) {
    // Built in f32, not cast back: the result is rounded once, by round_results.
    std::vector<Value*> outs =
        add_node_through_f32(graph_, *def, inputs, std::move(attrs), name_, DType::F32);
    if (outs.size() != 1)
      throw_error(ErrorCode::InvalidArgument, "op '", op, "' has ", outs.size(),
                  " outputs; use add_node()");
    if (outs[0]->type().dtype == DType::F32) unrounded_.emplace(outs[0], result);
    return outs[0];
  }
  // An op whose result is wider (an f32 operand) reads the rounded values.
  std::vector<Value*> rounded = reads_unrounded ? round_results(inputs) : inputs;
  return graph_.add(op, rounded, std::move(attrs), name_);
}

std::vector<Value*> ConvertContext::round_results(std::vector<Value*> outputs) {
  for (Value*& v : outputs) {
    auto it = v ? unrounded_.find(v) : unrounded_.end();
    if (it != unrounded_.end())
      v = graph_.add("to", {v}, {{"dtype", std::string(dtype_name(it->second))}}, name_);
  }
  return outputs;
}

Value* ConvertContext::scalar(double value, DType dtype) {
  Tensor t = Tensor::empty(dtype, {});
  // PyTorch's conversion of a Python number (f16 and bf16 through float, as c10's constructors).
  cpu::cast_reference(DType::F64, dtype, &value, t.data(), 0, 1);
  return graph_.add_constant(name_ + "_scalar", t);
}

// The JSON value's own type tells an int from a float (number() reads both as double).
Value* ConvertContext::number_tensor(const std::string& arg) {
  if (const std::string size = sym(arg); !size.empty()) return size_value(size);
  Tensor t;
  try {
    t = Tensor::empty(DType::Bool, {});
    *t.data<bool>() = boolean(arg);
  } catch (const Error&) {
    try {
      t = Tensor::empty(DType::I64, {});
      *t.data<int64_t>() = integer(arg);
    } catch (const Error&) {
      t = Tensor::empty(DType::F64, {});
      *t.data<double>() = number(arg);
    }
  }
  return graph_.add_constant(name_ + "_" + arg, t);
}

Value* ConvertContext::size_value(const std::string& expr) {
  auto symbol = [&](const std::string& name) -> Value* {
    for (Value* in : graph_.inputs()) {
      const Shape& shape = in->type().shape;
      for (size_t d = 0; d < shape.size(); ++d)
        if (!shape[d].is_static() && graph_.symbols()[shape[d].symbol()].name == name)
          return add("dim_size", {in}, {{"dim", static_cast<int64_t>(d)}});
    }
    unsupported("the size '" + expr + "' reads symbol '" + name +
                "', which no input of the graph has as a dim");
  };
  auto apply = [&](SymExpr::Op op, Value* a, Value* b) -> Value* {
    switch (op) {
      case SymExpr::Op::Add: return add("add", {a, b});
      case SymExpr::Op::Sub: return add("sub", {a, b});
      case SymExpr::Op::Mul: return add("mul", {a, b});
      case SymExpr::Op::FloorDiv:
        return add("div", {a, b}, {{"rounding_mode", std::string("floor")}});
      case SymExpr::Op::Mod: return add("remainder", {a, b});
      case SymExpr::Op::Max: return add("maximum", {a, b});
      case SymExpr::Op::Min: return add("minimum", {a, b});
    }
    KILN_ASSERT(false, "unknown size operation");
  };
  return SymExpr::parse(expr).fold(
      [&](int64_t v) {
        Tensor t = Tensor::empty(DType::I64, {});
        *t.data<int64_t>() = v;
        return graph_.add_constant(name_ + "_size", t);
      },
      symbol, apply);
}

Value* ConvertContext::cast(Value* v, DType dtype) {
  if (v->type().dtype == dtype) return v;
  return add("to", {v}, {{"dtype", std::string(dtype_name(dtype))}});
}

Value* ConvertContext::reshape_to_output(Value* v, size_t i) {
  std::vector<int64_t> shape;
  std::vector<std::string> sym_shape;
  bool dynamic = false;
  for (const Json& d : output_meta(i).at("shape")) {
    shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
    sym_shape.push_back(d.is_string() ? d.get<std::string>() : "");
    dynamic |= d.is_string();
  }
  if (!dynamic) return add("reshape", {v}, {{"shape", shape}});
  return add("reshape", {v}, {{"shape", shape}, {"sym_shape", sym_shape}});
}

int64_t ConvertContext::dim(const std::string& arg, size_t rank) const {
  const int64_t d = integer(arg), r = static_cast<int64_t>(rank);
  if (d < -r || d >= r)
    unsupported(arg + " " + std::to_string(d) + " out of range for a tensor of rank " +
                std::to_string(r));
  return d < 0 ? d + r : d;
}

// ---------------------------------------------------------------- import

namespace {

// Declares the graph's symbols and turns JSON shapes into Kiln shapes. A dim that PyTorch gives
// as an expression (e.g. "s0 + 1") becomes a symbol of that name with an open range.
class ShapeReader {
 public:
  explicit ShapeReader(Graph& g) : graph_(g) {}

  void declare(const Json& symbols) {
    for (const Json& s : symbols)
      graph_.add_symbol(s.at("name").get<std::string>(), s.at("min").get<int64_t>(),
                        s.at("max").get<int64_t>());
  }

  TensorType type_of(const Json& meta) {
    std::string dname = meta.at("dtype").get<std::string>();
    std::optional<DType> d = parse_dtype(dname);
    if (!d) throw_error(ErrorCode::UnsupportedOperator, "dtype ", dname, " is not supported by Kiln");
    TensorType t{*d, {}, Layout::Plain};
    for (const Json& dim : meta.at("shape")) {
      if (dim.is_number_integer()) {
        t.shape.push_back(Dim(dim.get<int64_t>()));
        continue;
      }
      std::string name = dim.get<std::string>();
      int32_t id = graph_.symbols().find(name);
      t.shape.push_back(id >= 0 ? Dim::symbolic(id) : derived_size(name));
    }
    return t;
  }

  // A size PyTorch computed from the symbols ("s0 + 1"): a symbol of its own, ranged by interval
  // arithmetic over the symbols it reads when Kiln parses it (so a slice can prove its bounds),
  // else [0, max].
  Dim derived_size(const std::string& name) {
    std::pair<int64_t, int64_t> range{0, INT64_MAX};
    try {
      const SymExpr e = SymExpr::parse(name);
      const SymbolTable& symbols = graph_.symbols();
      const std::vector<std::string> reads = e.symbol_names();
      if (std::all_of(reads.begin(), reads.end(),
                      [&](const std::string& s) { return symbols.find(s) >= 0; }))
        range = e.range([&](const std::string& s) {
          const Symbol& symbol = symbols[symbols.find(s)];
          return std::make_pair(symbol.min, symbol.max);
        });
    } catch (const Error&) {  // sympy text Kiln's grammar doesn't take: no range known
    }
    return graph_.add_symbol(name, range.first, range.second);
  }

 private:
  Graph& graph_;
};

bool same_dims(const Graph& g, const TensorType& kiln, const TensorType& torch) {
  if (kiln.dtype != torch.dtype || kiln.rank() != torch.rank()) return false;
  for (size_t i = 0; i < kiln.rank(); ++i) {
    const Dim &a = kiln.shape[i], &b = torch.shape[i];
    if (a.is_static() && b.is_static() && a.size() != b.size()) return false;
    if (a.is_static() != b.is_static()) return false;
  }
  return true;
}

// Converts one node; checks what it produced against PyTorch's metadata.
std::vector<Value*> convert_node(Graph& g, ShapeReader& shapes, const Json& node,
                                 const ReadOutputs& read,
                                 const std::function<Value*(const Json&)>& resolve) {
  std::string target = node.at("target").get<std::string>();
  const Converter* converter = ConverterRegistry::instance().find(target);
  std::string name = node.at("name").get<std::string>();
  if (!converter)
    throw_error(ErrorCode::UnsupportedOperator, "Kiln has no converter for ", target,
                " (node '", name, "')");
  ConvertContext ctx(g, node, read, resolve);
  std::vector<Value*> outs = ctx.round_results((*converter)(ctx));
  const Json& metas = node.at("outputs");
  KILN_ASSERT(outs.size() == metas.size(), "converter of " << target << " returned " << outs.size()
                                                            << " outputs for " << metas.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i] || metas[i].is_null()) continue;
    TensorType expected = shapes.type_of(metas[i]);
    if (!same_dims(g, outs[i]->type(), expected))
      throw_error(ErrorCode::InvalidGraph, "the converter of ", target, " made ",
                  type_string(outs[i]->type(), &g.symbols()), " for output ", i, " of node '",
                  name, "' where PyTorch computes ", type_string(expected, &g.symbols()),
                  "; this is a bug in Kiln, please report it");
  }
  return outs;
}

// convert_node, its errors naming the FX node (Error::fx_node).
std::vector<Value*> convert_tagged(Graph& g, ShapeReader& shapes, const Json& node,
                                   const ReadOutputs& read,
                                   const std::function<Value*(const Json&)>& resolve) {
  try {
    return convert_node(g, shapes, node, read, resolve);
  } catch (const Error& e) {
    if (!e.fx_node().empty()) throw;
    throw Error(e.code(), e.detail(), node.at("name").get<std::string>());
  }
}

Json parse_json(const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::BadModelFile, "the serialized FX graph is not valid JSON: ", e.what());
  }
}

ReadOutputs read_outputs(const Json& fx) {
  ReadOutputs read;
  std::function<void(const Json&)> collect = [&](const Json& a) {
    if (a.is_object() && a.contains("ref")) {
      read.emplace(a.at("ref").get<std::string>(), a.value("index", size_t{0}));
    } else if (a.is_array() || a.is_object()) {
      for (const Json& item : a) collect(item);
    }
  };
  for (const Json& node : fx.at("nodes")) collect(node.at("args"));
  collect(fx.at("outputs"));
  return read;
}

// Resolves {"ref": name, "index": i} against a map of produced values.
Value* lookup(const std::unordered_map<std::string, std::vector<Value*>>& values, const Json& ref) {
  std::string name = ref.at("ref").get<std::string>();
  size_t index = ref.value("index", 0);
  auto it = values.find(name);
  if (it == values.end() || index >= it->second.size())
    throw_error(ErrorCode::BadModelFile, "the FX graph refers to an unknown value '", name, "'");
  if (!it->second[index])
    throw_error(ErrorCode::UnsupportedOperator, "output ", index, " of node '", name,
                "' is used, but Kiln doesn't compute it");
  return it->second[index];
}

}  // namespace

std::unique_ptr<Graph> import_fx_graph(const std::string& json_text,
                                       const std::map<std::string, Tensor>& constants) {
  Json fx = parse_json(json_text);
  try {
    auto g = std::make_unique<Graph>(fx.value("name", "fx_graph"));
    ShapeReader shapes(*g);
    shapes.declare(fx.value("symbols", Json::array()));
    std::unordered_map<std::string, std::vector<Value*>> values;
    for (const Json& p : fx.at("placeholders")) {
      std::string name = p.at("name").get<std::string>();
      if (p.at("kind").get<std::string>() == "constant") {
        auto it = constants.find(name);
        if (it == constants.end())
          throw_error(ErrorCode::InvalidArgument, "no data given for constant '", name, "'");
        values[name] = {g->add_constant(name, it->second)};
      } else {
        values[name] = {g->add_input(name, shapes.type_of(p))};
      }
    }
    std::function<Value*(const Json&)> resolve = [&](const Json& ref) {
      return lookup(values, ref);
    };
    const ReadOutputs read = read_outputs(fx);
    for (const Json& node : fx.at("nodes")) {
      size_t first_new = g->num_nodes();
      const std::string fx_name = node.at("name").get<std::string>();
      std::vector<Value*>& outs = values[fx_name] = convert_tagged(*g, shapes, node, read, resolve);
      // Every node a converter adds carries the FX node's origin into dumps; the ones computing
      // its outputs also its name (the precision check compares them with PyTorch's): "name"
      // when the node's output k is the FX node's output k, "name#d" when it is output k + d.
      std::vector<Node*> nodes = g->nodes();
      for (size_t i = first_new; i < nodes.size(); ++i) {
        nodes[i]->annotate("aten", node.at("target").get<std::string>());
        std::string source = node.value("source", "");
        if (!source.empty()) nodes[i]->annotate("source", source);
        for (size_t o = 0; o < outs.size(); ++o) {
          if (!outs[o] || outs[o]->producer() != nodes[i]) continue;
          const auto& produced = nodes[i]->outputs();
          const size_t k = static_cast<size_t>(
              std::find(produced.begin(), produced.end(), outs[o]) - produced.begin());
          nodes[i]->annotate("fx", o == k ? fx_name : fx_name + "#" + std::to_string(static_cast<int64_t>(o) -
                                                                     static_cast<int64_t>(k)));
        }
      }
    }
    std::vector<Value*> outputs;
    for (const Json& ref : fx.at("outputs")) outputs.push_back(lookup(values, ref));
    g->set_outputs(outputs);
    return g;
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::BadModelFile, "the serialized FX graph is malformed: ", e.what());
  }
}

std::map<std::string, std::string> fx_node_support(const std::string& json_text) {
  Json fx = parse_json(json_text);
  std::map<std::string, std::string> verdicts;
  try {
    std::unordered_map<std::string, const Json*> metas;  // name → its "outputs" list
    Json placeholder_metas = Json::object();
    for (const Json& p : fx.at("placeholders")) {
      placeholder_metas[p.at("name").get<std::string>()] = Json::array({p});
    }
    for (auto& [name, list] : placeholder_metas.items()) metas[name] = &list;
    for (const Json& node : fx.at("nodes")) metas[node.at("name").get<std::string>()] = &node.at("outputs");
    // A node whose converter leaves a read output uncomputed (native_layer_norm's mean, say)
    // must stay in PyTorch.
    const ReadOutputs read = read_outputs(fx);

    for (const Json& node : fx.at("nodes")) {
      // Convert the node alone, its tensor operands standing in as inputs of a scratch graph.
      Graph scratch("support_check");
      ShapeReader shapes(scratch);
      shapes.declare(fx.value("symbols", Json::array()));
      // A size the node reads as a number is computed from an input having its symbols as
      // dims: its partition will have one (python/kiln/backend.py keeps the nodes it can't
      // bind out), so here each symbol gets one.
      for (int32_t id = 0; id < static_cast<int32_t>(scratch.symbols().size()); ++id)
        scratch.add_input("size_of_" + scratch.symbols()[id].name,
                          TensorType{DType::F32, {Dim::symbolic(id)}, Layout::Plain});
      std::map<std::pair<std::string, size_t>, Value*> operands;
      std::function<Value*(const Json&)> resolve = [&](const Json& ref) -> Value* {
        std::string name = ref.at("ref").get<std::string>();
        size_t index = ref.value("index", 0);
        auto key = std::make_pair(name, index);
        if (auto it = operands.find(key); it != operands.end()) return it->second;
        auto meta = metas.find(name);
        if (meta == metas.end() || index >= meta->second->size())
          throw_error(ErrorCode::BadModelFile, "the FX graph refers to an unknown value '", name, "'");
        return operands[key] = scratch.add_input(name, shapes.type_of((*meta->second)[index]));
      };
      const std::string name = node.at("name").get<std::string>();
      std::string verdict;
      try {
        std::vector<Value*> outs = convert_node(scratch, shapes, node, read, resolve);
        for (size_t i = 0; i < outs.size() && verdict.empty(); ++i)
          if (!outs[i] && read.count({name, i}))
            verdict = "output " + std::to_string(i) + " of node '" + name +
                      "' is used, but Kiln doesn't compute it";
      } catch (const Error& e) {
        verdict = e.what();
      }
      verdicts[name] = verdict;
    }
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::BadModelFile, "the serialized FX graph is malformed: ", e.what());
  }
  return verdicts;
}

}  // namespace kiln
