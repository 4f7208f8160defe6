#include "kiln/graph.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "ops/low_precision.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

template <typename T>
const T& get_attr(const AttrMap& attrs, const std::string& key, const char* kind,
                  const std::string& where) {
  auto it = attrs.find(key);
  KILN_ASSERT(it != attrs.end(), where << " has no attribute '" << key << "'");
  const T* v = std::get_if<T>(&it->second);
  KILN_ASSERT(v, where << " attribute '" << key << "' is not " << kind);
  return *v;
}

}  // namespace

int64_t Node::attr_int(const std::string& key) const {
  return get_attr<int64_t>(attrs_, key, "an int", name_);
}
double Node::attr_float(const std::string& key) const {
  return get_attr<double>(attrs_, key, "a float", name_);
}
bool Node::attr_bool(const std::string& key) const {
  return get_attr<bool>(attrs_, key, "a bool", name_);
}
const std::string& Node::attr_string(const std::string& key) const {
  return get_attr<std::string>(attrs_, key, "a string", name_);
}
const std::vector<int64_t>& Node::attr_ints(const std::string& key) const {
  return get_attr<std::vector<int64_t>>(attrs_, key, "an int list", name_);
}

std::string Node::annotation(const std::string& key) const {
  auto it = annotations_.find(key);
  return it == annotations_.end() ? std::string() : it->second;
}

void Node::inherit_source(const Node& from) {
  for (const char* key : {"source", "aten", "fx"}) {
    auto it = from.annotations_.find(key);
    if (it != from.annotations_.end()) annotations_[key] = it->second;
  }
}

Graph::Graph(std::string name) : name_(std::move(name)) {}

std::string NamePool::take(const std::string& hint) {
  std::string base = hint.empty() ? "v" : hint;
  std::string name = base;
  int& suffix = next_suffix_[base];
  while (used_.count(name)) name = base + "_" + std::to_string(++suffix);
  used_.insert(name);
  return name;
}

Dim Graph::add_symbol(const std::string& name, int64_t min, int64_t max) {
  if (name.empty() || symbols_.find(name) >= 0)
    throw_error(ErrorCode::InvalidArgument, "symbol '", name, "' is empty or declared twice");
  if (min < 0 || max < min)
    throw_error(ErrorCode::InvalidArgument, "symbol '", name, "' has an invalid range [", min,
                ", ", max, "]; need 0 <= min <= max");
  return Dim::symbolic(symbols_.add(name, min, max));
}

Value* Graph::new_value(Value::Kind kind, const std::string& name, TensorType type) {
  auto v = std::make_unique<Value>();
  v->kind_ = kind;
  v->graph_ = this;
  v->name_ = value_names_.take(name);
  v->type_ = std::move(type);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::add_input(const std::string& name, TensorType type) {
  for (const Dim& d : type.shape) {
    if (d.is_static() && d.size() < 0)
      throw_error(ErrorCode::InvalidArgument, "input '", name, "' has a negative dim");
    if (!d.is_static() && static_cast<size_t>(d.symbol()) >= symbols_.size())
      throw_error(ErrorCode::InvalidArgument, "input '", name, "' uses an undeclared symbol");
  }
  Value* v = new_value(Value::Kind::Input, name, std::move(type));
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(const std::string& name, Tensor data) {
  if (!data.defined())
    throw_error(ErrorCode::InvalidArgument, "constant '", name, "' has no data");
  return new_constant(name, std::move(data));
}

Value* Graph::new_constant(const std::string& name, Tensor data) {
  Value* v = new_value(Value::Kind::Constant, name,
                       TensorType{data.dtype(), make_shape(data.sizes()), Layout::Plain});
  v->constant_ = std::move(data);
  constants_.push_back(v);
  return v;
}

void Graph::check_owned(const Value* v, const std::string& where) const {
  if (!v) throw_error(ErrorCode::InvalidArgument, "null value given as ", where);
  if (v->graph_ != this)
    throw_error(ErrorCode::InvalidArgument, "value %", v->name_, " given as ", where,
                " belongs to another graph; values can't be shared between graphs");
}

Node* Graph::append_node(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs,
                         const std::string& name) {
  for (Value* in : inputs) check_owned(in, "an input of a '" + op + "' node");
  auto n = std::make_unique<Node>();
  n->op_ = op;
  n->name_ = node_names_.take(name.empty() ? op : name);
  n->inputs_ = inputs;
  n->attrs_ = std::move(attrs);
  for (Value* in : inputs) in->users_.push_back(n.get());
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

std::vector<Value*> Graph::add_node(const std::string& op, const std::vector<Value*>& inputs,
                                    AttrMap attrs, const std::string& name) {
  return add_node_cast(op, inputs, std::move(attrs), name, /*cast=*/true);
}

Value* Graph::add(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs,
                  const std::string& name) {
  std::vector<Value*> outs = add_node(op, inputs, std::move(attrs), name);
  if (outs.size() != 1)
    throw_error(ErrorCode::InvalidArgument, "op '", op, "' has ", outs.size(),
                " outputs; use add_node()");
  return outs[0];
}

Value* Graph::add_uncast(const std::string& op, const std::vector<Value*>& inputs, AttrMap attrs,
                         const std::string& name) {
  std::vector<Value*> outs = add_node_cast(op, inputs, std::move(attrs), name, /*cast=*/false);
  KILN_ASSERT(outs.size() == 1, "add_uncast of " << op << ", which has several outputs");
  return outs[0];
}

std::vector<Value*> Graph::add_node_cast(const std::string& op, const std::vector<Value*>& inputs,
                                         AttrMap attrs, const std::string& name, bool cast) {
  const OpDef* def = OpRegistry::instance().find(op);
  if (!def)
    throw_error(ErrorCode::UnsupportedOperator, "unknown operator '", op,
                "'; see docs/ops.md for the ops Kiln supports");
  std::vector<TensorType> in_types;
  for (Value* in : inputs) {
    check_owned(in, "an input of a '" + op + "' node");
    in_types.push_back(in->type());
  }
  std::string node_name = name.empty() ? op : name;
  if (cast && def->computes_low_precision_in_f32)
    if (std::optional<DType> result = low_precision_result(*def, inputs))
      return add_node_through_f32(*this, *def, inputs, std::move(attrs), node_name, *result);
  std::vector<TensorType> out_types = infer_node_types(*def, node_name, in_types, attrs, symbols_);
  Node* n = add_node_with_types(op, inputs, std::move(attrs), out_types, node_name);
  return n->outputs_;
}

Node* Graph::add_node_with_types(const std::string& op, const std::vector<Value*>& inputs,
                                 AttrMap attrs, const std::vector<TensorType>& output_types,
                                 const std::string& name,
                                 const std::vector<std::string>& output_names) {
  Node* n = append_node(op, inputs, std::move(attrs), name);
  for (size_t i = 0; i < output_types.size(); ++i) {
    std::string hint = i < output_names.size() ? output_names[i]
                       : output_types.size() == 1 ? n->name_
                                                  : n->name_ + "_out" + std::to_string(i);
    Value* v = new_value(Value::Kind::NodeOutput, hint, output_types[i]);
    v->producer_ = n;
    v->producer_index_ = static_cast<int>(i);
    n->outputs_.push_back(v);
  }
  return n;
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  if (outputs.empty()) throw_error(ErrorCode::InvalidArgument, "a graph needs at least one output");
  for (Value* v : outputs) check_owned(v, "a graph output");
  outputs_ = std::move(outputs);
}

void Graph::replace_all_uses(Value* from, Value* to) {
  KILN_ASSERT(from->graph_ == this && to->graph_ == this, "replace_all_uses across graphs");
  if (from == to) return;
  for (Node* user : from->users_) {
    for (Value*& in : user->inputs_)
      if (in == from) in = to;
  }
  // A node that uses `from` twice appears twice in users_; its operands were all replaced at once.
  for (Node* user : from->users_) to->users_.push_back(user);
  from->users_.clear();
  for (Value*& out : outputs_)
    if (out == from) out = to;
}

void Graph::remove_node(Node* node) {
  for (Value* out : node->outputs_) {
    KILN_ASSERT(out->users_.empty(), "removing node " << node->name_ << " whose output "
                                                      << out->name_ << " is still used");
    KILN_ASSERT(std::find(outputs_.begin(), outputs_.end(), out) == outputs_.end(),
                "removing node " << node->name_ << " that defines a graph output");
  }
  for (Value* in : node->inputs_) {
    auto it = std::find(in->users_.begin(), in->users_.end(), node);
    KILN_ASSERT(it != in->users_.end());
    in->users_.erase(it);
  }
  std::vector<Value*> dead = node->outputs_;
  values_.erase(std::remove_if(values_.begin(), values_.end(),
                               [&](const auto& v) {
                                 return std::find(dead.begin(), dead.end(), v.get()) != dead.end();
                               }),
                values_.end());
  nodes_.erase(std::find_if(nodes_.begin(), nodes_.end(),
                            [&](const auto& n) { return n.get() == node; }));
}

void Graph::remove_constant(Value* constant) {
  KILN_ASSERT(constant->graph_ == this && constant->kind_ == Value::Kind::Constant,
              "remove_constant on %" << constant->name_ << ", not a constant of this graph");
  KILN_ASSERT(constant->users_.empty() &&
                  std::find(outputs_.begin(), outputs_.end(), constant) == outputs_.end(),
              "removing constant %" << constant->name_ << ", which is still used");
  constants_.erase(std::find(constants_.begin(), constants_.end(), constant));
  values_.erase(std::find_if(values_.begin(), values_.end(),
                             [&](const auto& v) { return v.get() == constant; }));
}

void Graph::release_constant_data(Value* constant) {
  KILN_ASSERT(constant->graph_ == this && constant->kind_ == Value::Kind::Constant,
              "release_constant_data on %" << constant->name_ << ", not a constant of this graph");
  constant->constant_ = constant->constant_.without_data();
}

void Graph::topological_sort() {
  // Kahn's algorithm, taking ready nodes in their current order so sorted graphs are unchanged.
  std::unordered_map<const Node*, size_t> pending;
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node* n = nodes_[i].get();
    position[n] = i;
    size_t deps = 0;
    for (Value* in : n->inputs_)
      if (in->producer_) ++deps;
    pending[n] = deps;
  }
  auto later = [&](const Node* a, const Node* b) { return position[a] > position[b]; };
  std::priority_queue<const Node*, std::vector<const Node*>, decltype(later)> ready(later);
  for (const auto& n : nodes_)
    if (pending[n.get()] == 0) ready.push(n.get());
  std::vector<const Node*> order;
  while (!ready.empty()) {
    const Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (Value* out : n->outputs_)
      for (Node* user : out->users_)
        if (--pending[user] == 0) ready.push(user);
  }
  KILN_ASSERT(order.size() == nodes_.size(), "topological_sort on a cyclic graph");
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  std::unordered_map<const Node*, std::unique_ptr<Node>*> slot;
  for (auto& n : nodes_) slot[n.get()] = &n;
  for (const Node* n : order) sorted.push_back(std::move(*slot[n]));
  nodes_ = std::move(sorted);
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

Value* Graph::find_value(const std::string& name) const {
  for (const auto& v : values_)
    if (v->name_ == name) return v.get();
  return nullptr;
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  g->symbols_ = symbols_;
  std::unordered_map<const Value*, Value*> map;
  for (Value* in : inputs_) map[in] = g->add_input(in->name_, in->type_);
  // Released constants (release_constant_data) stay released.
  for (Value* c : constants_) map[c] = g->new_constant(c->name_, c->constant_);
  for (const auto& n : nodes_) {
    std::vector<Value*> ins;
    for (Value* in : n->inputs_) {
      KILN_ASSERT(map.count(in), "clone: " << n->name_ << " uses an undefined value");
      ins.push_back(map[in]);
    }
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (Value* out : n->outputs_) {
      types.push_back(out->type_);
      names.push_back(out->name_);
    }
    Node* copy = g->add_node_with_types(n->op_, ins, n->attrs_, types, n->name_, names);
    copy->annotations_ = n->annotations_;
    for (size_t i = 0; i < n->outputs_.size(); ++i) map[n->outputs_[i]] = copy->outputs_[i];
  }
  for (Value* out : outputs_) g->outputs_.push_back(map.at(out));
  return g;
}

}  // namespace kiln
