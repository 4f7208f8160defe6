#include "ops/op_registry.h"

#include <algorithm>
#include <sstream>

#include "ir/sym_expr.h"

namespace kiln {

#define KILN_OP_FAMILY(family) void register_##family##_ops(OpRegistry&);
#include "ops/op_list.inc"
#undef KILN_OP_FAMILY

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry registry = [] {
    OpRegistry r;
#define KILN_OP_FAMILY(family) register_##family##_ops(r);
#include "ops/op_list.inc"
#undef KILN_OP_FAMILY
    return r;
  }();
  return registry;
}

const OpDef* OpRegistry::find(const std::string& op) const {
  for (const OpDef& d : ops_)
    if (d.name == op) return &d;
  return nullptr;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const OpDef& d : ops_) names.push_back(d.name);
  std::sort(names.begin(), names.end());
  return names;
}

void OpRegistry::add(OpDef def) {
  KILN_ASSERT(!find(def.name), "op " << def.name << " registered twice");
  KILN_ASSERT(def.infer, "op " << def.name << " has no type inference");
  KILN_ASSERT(!def.kernels.empty(), "op " << def.name << " has no kernel");
  for (size_t i = 0; i + 1 < def.inputs.size(); ++i)
    KILN_ASSERT(!def.inputs[i].variadic, "op " << def.name << ": only the last input may be variadic");
  ops_.push_back(std::move(def));
}

// ---------------------------------------------------------------- InferContext

InferContext::InferContext(const std::string& op, const std::string& node_name,
                           std::vector<TensorType> input_types, const AttrMap& attrs,
                           SymbolTable& symbols, size_t num_outputs)
    : op_(op),
      node_name_(node_name),
      inputs_(std::move(input_types)),
      attrs_(attrs),
      symbols_(symbols),
      outputs_(num_outputs) {}

namespace {
template <typename T>
const T& attr_of(const AttrMap& attrs, const std::string& key, const std::string& op) {
  auto it = attrs.find(key);
  KILN_ASSERT(it != attrs.end(), op << " infer reads undeclared attribute " << key);
  const T* v = std::get_if<T>(&it->second);
  KILN_ASSERT(v, op << " infer reads attribute " << key << " as the wrong kind");
  return *v;
}
}  // namespace

int64_t InferContext::attr_int(const std::string& key) const {
  return attr_of<int64_t>(attrs_, key, op_);
}
double InferContext::attr_float(const std::string& key) const {
  return attr_of<double>(attrs_, key, op_);
}
bool InferContext::attr_bool(const std::string& key) const {
  return attr_of<bool>(attrs_, key, op_);
}
const std::string& InferContext::attr_string(const std::string& key) const {
  return attr_of<std::string>(attrs_, key, op_);
}
const std::vector<int64_t>& InferContext::attr_ints(const std::string& key) const {
  return attr_of<std::vector<int64_t>>(attrs_, key, op_);
}

void InferContext::fail(const std::string& reason) const {
  std::ostringstream msg;
  msg << "node '" << node_name_ << "' (" << op_ << ") can't take its inputs (";
  for (size_t i = 0; i < inputs_.size(); ++i)
    msg << (i ? ", " : "") << type_string(inputs_[i], &symbols_);
  msg << "): " << reason << ". Check the shapes and attributes given to this node.";
  throw Error(ErrorCode::ShapeInference, msg.str());
}

Dim InferContext::sym_dim(const std::string& text) {
  try {
    return resolve_sym_dim(text, symbols_, [this](const std::string& why) { fail(why); });
  } catch (const Error& e) {
    if (e.code() != ErrorCode::ParseError) throw;
    fail(e.detail());
  }
}

Dim InferContext::derive(Dim in, const std::function<int64_t(int64_t)>& f,
                         const std::string& expr) {
  if (in.is_static()) return Dim(f(in.size()));
  const Symbol& s = symbols_[in.symbol()];
  std::string name = expr;
  for (size_t pos; (pos = name.find("{}")) != std::string::npos;) name.replace(pos, 2, s.name);
  // f is monotone (a window count, a transposed size): one value over the range is static, as
  // PyTorch makes (H//32) of H in [32, 63].
  const int64_t lo = f(s.min), hi = f(s.max);
  if (lo == hi) return Dim(lo);
  int32_t existing = symbols_.find(name);
  if (existing >= 0) return Dim::symbolic(existing);
  return Dim::symbolic(symbols_.add(name, lo, hi));
}

Dim InferContext::derived_dim(const std::string& name, int64_t min, int64_t max) {
  if (min == max) return Dim(min);
  const int32_t existing = symbols_.find(name);
  return Dim::symbolic(existing >= 0 ? existing : symbols_.add(name, min, max));
}

Dim InferContext::unify(Dim a, Dim b, const std::string& what) {
  if (a == b) return a;
  if (a.is_static() && b.is_static())
    fail(what + " differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size()));
  return a.is_static() ? a : b;
}

Shape InferContext::broadcast(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    bool has_a = i < a.size(), has_b = i < b.size();
    Dim da = has_a ? a[a.size() - 1 - i] : Dim(1);
    Dim db = has_b ? b[b.size() - 1 - i] : Dim(1);
    Dim r;
    if (da == db || (db.is_static() && db.size() == 1)) {
      r = da;
    } else if (da.is_static() && da.size() == 1) {
      r = db;
    } else if (da.is_static() && db.is_static()) {
      fail("shapes " + shape_string(a, &symbols_) + " and " + shape_string(b, &symbols_) +
           " can't be broadcast together");
    } else {
      // Two distinct symbols, or a symbol against a size: equal at run time or an error there.
      r = da.is_static() ? da : db;
    }
    out[rank - 1 - i] = r;
  }
  return out;
}

// ---------------------------------------------------------------- schema checks

namespace {

const char* attr_kind_name(const Attr& a) {
  static const char* names[] = {"int",        "float",      "bool",        "string", "int list",
                                "float list", "bool list",  "string list", "tensor"};
  return names[a.index()];
}

bool is_list(const Attr& a) {
  return std::holds_alternative<std::vector<int64_t>>(a) ||
         std::holds_alternative<std::vector<double>>(a) ||
         std::holds_alternative<std::vector<bool>>(a) ||
         std::holds_alternative<std::vector<std::string>>(a);
}

bool is_empty_list(const Attr& a) {
  return std::visit(
      [](const auto& v) {
        if constexpr (requires { v.empty(); v.begin(); } &&
                      !std::is_same_v<std::decay_t<decltype(v)>, std::string>)
          return v.empty();
        return false;
      },
      a);
}

// Converts `given` to the kind of `declared` where that loses nothing (an int for a float
// attribute, an empty list of another kind); returns false if it can't.
bool coerce(const Attr& declared, Attr& given) {
  if (declared.index() == given.index()) return true;
  if (std::holds_alternative<double>(declared) && std::holds_alternative<int64_t>(given)) {
    given = static_cast<double>(std::get<int64_t>(given));
    return true;
  }
  if (std::holds_alternative<std::vector<double>>(declared) &&
      std::holds_alternative<std::vector<int64_t>>(given)) {
    const auto& ints = std::get<std::vector<int64_t>>(given);
    given = std::vector<double>(ints.begin(), ints.end());
    return true;
  }
  if (is_list(declared) && is_empty_list(given)) {
    given = declared;
    std::visit(
        [](auto& v) {
          if constexpr (requires { v.clear(); } &&
                        !std::is_same_v<std::decay_t<decltype(v)>, std::string>)
            v.clear();
        },
        given);
    return true;
  }
  return false;
}

}  // namespace

void complete_attrs(const OpDef& def, const std::string& node_name, AttrMap& attrs) {
  auto fail = [&](const std::string& why) {
    throw_error(ErrorCode::ShapeInference, "node '", node_name, "' (", def.name, "): ", why);
  };
  for (const auto& [key, value] : attrs) {
    auto spec = std::find_if(def.attrs.begin(), def.attrs.end(),
                             [&](const AttrSpec& s) { return s.name == key; });
    if (spec == def.attrs.end()) fail("has no attribute '" + key + "'");
  }
  for (const AttrSpec& spec : def.attrs) {
    auto it = attrs.find(spec.name);
    if (it == attrs.end()) {
      if (spec.required) fail("needs the attribute '" + spec.name + "'");
      attrs.emplace(spec.name, spec.default_value);
    } else if (!coerce(spec.default_value, it->second)) {
      fail("attribute '" + spec.name + "' must be " + attr_kind_name(spec.default_value) +
           ", got " + attr_kind_name(it->second));
    }
  }
}

std::vector<TensorType> infer_node_types(const OpDef& def, const std::string& node_name,
                                         const std::vector<TensorType>& input_types,
                                         AttrMap& attrs, SymbolTable& symbols) {
  bool variadic = !def.inputs.empty() && def.inputs.back().variadic;
  size_t fixed = variadic ? def.inputs.size() - 1 : def.inputs.size();
  if (variadic ? input_types.size() < fixed : input_types.size() != fixed)
    throw_error(ErrorCode::ShapeInference, "node '", node_name, "' (", def.name, "): takes ",
                variadic ? "at least " : "", fixed, " inputs, got ", input_types.size());
  complete_attrs(def, node_name, attrs);
  for (size_t i = 0; i < input_types.size(); ++i)
    for (const Dim& d : input_types[i].shape)
      KILN_ASSERT(d.is_static() || static_cast<size_t>(d.symbol()) < symbols.size(),
                  "input " << i << " of " << node_name << " uses an unknown symbol");
  InferContext ctx(def.name, node_name, input_types, attrs, symbols, def.num_outputs);
  if (!def.layout_aware)
    for (size_t i = 0; i < input_types.size(); ++i)
      ctx.check(input_types[i].layout == Layout::Plain,
                "input " + std::to_string(i) + " is in layout " +
                    layout_name(input_types[i].layout) + ", but " + def.name +
                    " takes only plain tensors; reorder it to plain first");
  def.infer(ctx);
  std::vector<TensorType> out = ctx.take_outputs();
  return out;
}

}  // namespace kiln
