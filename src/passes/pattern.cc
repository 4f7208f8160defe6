#include "passes/pattern.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "kiln/error.h"
#include "kernels/cpu/convert.h"

namespace kiln {

struct Pattern::Data {
  enum class Kind { Any, Constant, Op } kind = Kind::Any;
  std::vector<std::string> ops;       // Op: alternatives
  bool free_inputs = false;           // Op: inputs unconstrained
  std::vector<Pattern> inputs;        // Op
  bool commutative = false;
  int output_index = 0;
  std::string capture;
  bool single_use = false;
  std::vector<std::pair<std::string, std::function<bool(const Value&)>>> predicates;
};

namespace {

using Data = Pattern::Data;

Pattern make(Data d) { return Pattern(std::make_shared<const Data>(std::move(d))); }

std::string describe(const Value& v) { return "%" + v.name(); }

std::string what_defines(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Input: return "an input";
    case Value::Kind::Constant: return "a constant";
    case Value::Kind::NodeOutput: return "op " + v.producer()->op();
  }
  return "";
}

class Matcher {
 public:
  explicit Matcher(const Graph& graph) : outputs_(graph.outputs().begin(), graph.outputs().end()) {}

  // Matches `p` against `v`, extending `m`; on failure leaves a reason in failure_.
  bool run(const Pattern& p, Value* v, const std::string& path, Match& m) {
    const Data& d = p.data();
    std::string here = path + " (" + describe(*v) + ")";
    switch (d.kind) {
      case Data::Kind::Any: break;
      case Data::Kind::Constant:
        if (v->kind() != Value::Kind::Constant)
          return fail(here, "expected a constant, found " + what_defines(*v));
        break;
      case Data::Kind::Op: {
        Node* n = v->producer();
        if (!n) return fail(here, "expected op " + join(d.ops) + ", found " + what_defines(*v));
        if (std::find(d.ops.begin(), d.ops.end(), n->op()) == d.ops.end())
          return fail(here, "expected op " + join(d.ops) + ", found " + n->op());
        if (v->producer_index() != d.output_index)
          return fail(here, "expected output " + std::to_string(d.output_index) + " of " + n->op() +
                                ", found output " + std::to_string(v->producer_index()));
        if (!d.free_inputs && n->inputs().size() != d.inputs.size())
          return fail(here, "expected " + std::to_string(d.inputs.size()) + " inputs, found " +
                                std::to_string(n->inputs().size()));
        break;
      }
    }
    if (d.single_use && (v->users().size() != 1 || outputs_.count(v)))
      return fail(here, "expected a single use, found " + std::to_string(v->users().size()) +
                            (outputs_.count(v) ? " uses and a graph output" : " uses"));
    for (const auto& [what, predicate] : d.predicates)
      if (!predicate(*v)) return fail(here, "constraint failed: " + what);
    if (!d.capture.empty()) {
      auto [it, fresh] = m.values.emplace(d.capture, v);
      if (!fresh && it->second != v)
        return fail(here, "capture '" + d.capture + "' is already bound to " + describe(*it->second));
    }
    if (d.kind != Data::Kind::Op) return true;
    Node* n = v->producer();
    m.nodes.push_back(n);
    if (d.free_inputs) return true;
    std::string base = path + ".in";
    if (match_inputs(d, n, base, /*swap=*/false, m)) return true;
    if (!d.commutative || d.inputs.size() != 2) return false;
    std::string first_failure = failure_;
    if (match_inputs(d, n, base, /*swap=*/true, m)) return true;
    failure_ = first_failure + "; swapped: " + failure_;
    return false;
  }

  std::string failure_;

 private:
  bool match_inputs(const Data& d, Node* n, const std::string& base, bool swap, Match& m) {
    Match trial = m;  // captures bound by a failed order must not leak into the other
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      size_t operand = swap ? d.inputs.size() - 1 - i : i;
      if (!run(d.inputs[i], n->input(operand), base + std::to_string(operand) + ":" +
                                                       pattern_name(d.inputs[i]), trial))
        return false;
    }
    m = std::move(trial);
    return true;
  }

  static std::string pattern_name(const Pattern& p) {
    const Data& d = p.data();
    switch (d.kind) {
      case Data::Kind::Any: return d.capture.empty() ? "any" : d.capture;
      case Data::Kind::Constant: return "const";
      case Data::Kind::Op: return join(d.ops);
    }
    return "";
  }

  static std::string join(const std::vector<std::string>& ops) {
    std::string s;
    for (const auto& o : ops) s += (s.empty() ? "" : "|") + o;
    return s;
  }

  bool fail(const std::string& where, const std::string& why) {
    failure_ = where + ": " + why;
    return false;
  }

  std::unordered_set<const Value*> outputs_;
};

Pattern with(const Pattern& p, const std::function<void(Data&)>& edit) {
  Data d = p.data();
  edit(d);
  return make(std::move(d));
}

// Removes `node` when none of its outputs is used or a graph output, then its producers that
// became dead the same way; drops removed nodes from `alive`.
void erase_if_dead(Graph& graph, Node* node, std::unordered_set<const Node*>& alive) {
  std::vector<Node*> work{node};
  std::unordered_set<const Node*> removed;  // a node may be queued again after its removal
  while (!work.empty()) {
    Node* n = work.back();
    work.pop_back();
    if (removed.count(n)) continue;
    bool live = false;
    for (Value* out : n->outputs())
      live |= !out->users().empty() || std::find(graph.outputs().begin(), graph.outputs().end(),
                                                 out) != graph.outputs().end();
    if (live) continue;
    for (Value* in : n->inputs())
      if (in->producer()) work.push_back(in->producer());
    graph.remove_node(n);
    removed.insert(n);
    alive.erase(n);
  }
}

// A rewrite whose replacement computes a symbolic dim through other arithmetic gets another
// derived symbol for it ("(s0-2)/2+1" where the root had "(s0+1-3)/2+1"): equal sizes, but the
// root's users are typed with the root's symbol. Such a rewrite declines; any other difference
// of types is the rule's bug (asserted by the caller).
bool names_a_symbolic_dim_anew(const std::vector<Value*>& from, const std::vector<Value*>& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    if (!to[i] || to[i] == from[i]) continue;
    const TensorType &a = from[i]->type(), &b = to[i]->type();
    if (a == b || a.dtype != b.dtype || a.layout != b.layout || a.rank() != b.rank()) continue;
    bool renamed = false, other = false;
    for (size_t d = 0; d < a.rank(); ++d) {
      if (a.shape[d] == b.shape[d]) continue;
      if (a.shape[d].is_static() || b.shape[d].is_static()) other = true;
      else renamed = true;
    }
    if (renamed && !other) return true;
  }
  return false;
}

}  // namespace

Pattern Pattern::as(std::string name) const {
  return with(*this, [&](Data& d) { d.capture = std::move(name); });
}
Pattern Pattern::commutative() const {
  return with(*this, [](Data& d) { d.commutative = true; });
}
Pattern Pattern::output(int index) const {
  return with(*this, [&](Data& d) { d.output_index = index; });
}
Pattern Pattern::single_use() const {
  return with(*this, [](Data& d) { d.single_use = true; });
}
Pattern Pattern::where(std::function<bool(const Value&)> predicate, std::string what) const {
  return with(*this, [&](Data& d) { d.predicates.emplace_back(std::move(what), std::move(predicate)); });
}
Pattern Pattern::dtype(DType dtype) const {
  return where([dtype](const Value& v) { return v.type().dtype == dtype; },
               "dtype " + std::string(dtype_name(dtype)));
}
Pattern Pattern::attr(const std::string& key, Attr value) const {
  KILN_ASSERT(data().kind == Data::Kind::Op, "attr('" << key << "') on a pattern that is not an op");
  return where(
      [key, value](const Value& v) {
        auto it = v.producer()->attrs().find(key);
        return it != v.producer()->attrs().end() && it->second == value;
      },
      "attribute " + key);
}

namespace pat {

Pattern swap_permute(Pattern input, int before_last) {
  auto swaps = [before_last](const Value& v) {
    const std::vector<int64_t>& dims = v.producer()->attr_ints("dims");
    const auto rank = static_cast<int64_t>(dims.size());
    const int64_t first = rank - 2 - before_last;
    if (first < 0) return false;
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t expected = i == first ? first + 1 : i == first + 1 ? first : i;
      if ((dims[i] < 0 ? dims[i] + rank : dims[i]) != expected) return false;
    }
    return true;
  };
  return op("permute", {std::move(input)})
      .where(swaps, before_last == 0 ? "swaps the last two dims"
                                     : "swaps dims n-" + std::to_string(before_last + 2) +
                                           " and n-" + std::to_string(before_last + 1));
}

Pattern widened_to_f32(DType from, std::string capture) {
  return op("to", {any(std::move(capture)).dtype(from)}).dtype(DType::F32);
}

Pattern any(std::string capture) {
  Data d;
  d.capture = std::move(capture);
  return make(std::move(d));
}

Pattern constant(std::string capture) {
  Data d;
  d.kind = Data::Kind::Constant;
  d.capture = std::move(capture);
  return make(std::move(d));
}

Pattern constant_where(std::function<bool(double)> element, std::string what, std::string capture) {
  return constant(std::move(capture))
      .where(
          [element = std::move(element)](const Value& v) {
            const Tensor& t = v.constant();
            return cpu::dispatch_dtype(t.dtype(), [&](auto zero) {
              using T = decltype(zero);
              const T* data = t.data<T>();
              for (int64_t i = 0; i < t.numel(); ++i)
                if (!element(cpu::convert<double>(data[i]))) return false;
              return true;
            });
          },
          std::move(what));
}

Pattern splat(double value, std::string capture) {
  std::ostringstream what;
  what << "every element equals " << value;
  return constant_where([value](double e) { return e == value; }, what.str(), std::move(capture));
}

Pattern any_op(std::vector<std::string> names, std::vector<Pattern> inputs) {
  Data d;
  d.kind = Data::Kind::Op;
  d.ops = std::move(names);
  d.inputs = std::move(inputs);
  return make(std::move(d));
}

Pattern op(std::string name, std::vector<Pattern> inputs) {
  return any_op({std::move(name)}, std::move(inputs));
}

Pattern op(std::string name) {
  Data d;
  d.kind = Data::Kind::Op;
  d.ops = {std::move(name)};
  d.free_inputs = true;
  return make(std::move(d));
}

Rewrite forward(std::string capture) {
  return [capture = std::move(capture)](Graph&, const Match& m) -> std::vector<Value*> {
    Value* v = m[capture];
    if (m.root->outputs().size() == 1 && v->type() == m.root->output(0)->type()) return {v};
    return {};
  };
}

}  // namespace pat

Value* rebuild_root(Graph& g, const Match& m,
                    const std::vector<std::pair<size_t, std::string>>& captured_inputs,
                    const AttrMap& changed) {
  std::vector<Value*> inputs = m.root->inputs();
  for (const auto& [position, capture] : captured_inputs) inputs.at(position) = m[capture];
  AttrMap attrs = m.root->attrs();
  for (const auto& [key, value] : changed) attrs[key] = value;
  return g.add_uncast(m.root->op(), inputs, std::move(attrs), m.root->name());
}

Value* Match::operator[](const std::string& capture) const {
  auto it = values.find(capture);
  KILN_ASSERT(it != values.end(), "pattern has no capture '" << capture << "'");
  return it->second;
}

Node* Match::node(const std::string& capture) const {
  Node* n = (*this)[capture]->producer();
  KILN_ASSERT(n, "capture '" << capture << "' is not a node output");
  return n;
}

MatchResult match(const Pattern& pattern, Node* root) {
  KILN_ASSERT(pattern.data().kind == Pattern::Data::Kind::Op, "a root pattern must be an op pattern");
  MatchResult result;
  int index = pattern.data().output_index;
  if (index < 0 || static_cast<size_t>(index) >= root->outputs().size()) {
    result.failure = root->name() + ": has no output " + std::to_string(index);
    return result;
  }
  Matcher matcher(*root->output(0)->graph());
  result.match.root = root;
  std::string path = pattern.data().ops.size() == 1 ? pattern.data().ops[0] : "root";
  result.matched = matcher.run(pattern, root->output(static_cast<size_t>(index)), path, result.match);
  if (!result.matched) {
    result.failure = matcher.failure_;
    result.match = Match{};
  }
  return result;
}

PatternRewritePass::PatternRewritePass(std::string name, std::vector<RewriteRule> rules)
    : name_(std::move(name)), rules_(std::move(rules)) {
  for (const RewriteRule& r : rules_)
    KILN_ASSERT(r.pattern.data().kind == Pattern::Data::Kind::Op,
                "rule " << r.name << ": a root pattern must be an op pattern");
}

bool PatternRewritePass::run(Graph& graph) {
  fired_.clear();
  bool changed = false;
  // Removed nodes are freed; the snapshot is only dereferenced for nodes still in the graph.
  std::vector<Node*> snapshot = graph.nodes();
  std::unordered_set<const Node*> alive(snapshot.begin(), snapshot.end());
  for (Node* node : snapshot) {
    if (!alive.count(node)) continue;
    for (const RewriteRule& rule : rules_) {
      MatchResult r = match(rule.pattern, node);
      if (!r) continue;
      std::vector<Value*> replacements = rule.rewrite(graph, r.match);
      if (replacements.empty()) continue;
      KILN_ASSERT(replacements.size() == node->outputs().size(),
                  "rule " << rule.name << " gave " << replacements.size() << " replacements for "
                          << node->outputs().size() << " outputs of " << node->name());
      if (names_a_symbolic_dim_anew(node->outputs(), replacements)) {
        for (Value* to : replacements)
          if (to->producer() && !alive.count(to->producer()))
            erase_if_dead(graph, to->producer(), alive);
        continue;
      }
      for (size_t i = 0; i < replacements.size(); ++i) {
        Value* from = node->output(i);
        Value* to = replacements[i];
        KILN_ASSERT(to && to != from && to->type() == from->type(),
                    "rule " << rule.name << " replaces %" << from->name() << " ("
                            << type_string(from->type(), &graph.symbols()) << ") with a value of another type");
        graph.replace_all_uses(from, to);
        // A node the rewrite created computes what the root did: dumps show the root's source.
        Node* made = to->producer();
        if (made && !alive.count(made) && made->annotation("source").empty())
          made->inherit_source(*node);
      }
      erase_if_dead(graph, node, alive);
      ++fired_[rule.name];
      changed = true;
      break;
    }
  }
  if (changed) graph.topological_sort();
  return changed;
}

}  // namespace kiln
