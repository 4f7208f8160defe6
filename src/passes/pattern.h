// Declarative graph patterns and the pass that applies them (MLIR's DRR/PDL in miniature): a
// fusion or simplification is a pattern (data) plus a rewrite (captures → replacement values),
// not a chain of hand-written guards.
//
//   using namespace kiln::pat;
//   // gelu(x) + y  →  fused_gelu_add(x, y), only when nothing else reads the gelu
//   RewriteRule rule{
//       "gelu_add",
//       op("add", {op("gelu", {any("x")}).attr("approximate", std::string("none")).single_use(),
//                  any("y")})
//           .commutative()
//           .where([](const Value& v) { return v.type().dtype == DType::F32; }, "f32"),
//       [](Graph& g, const Match& m) -> std::vector<Value*> {
//         return {g.add("fused_gelu_add", {m["x"], m["y"]})};
//       }};
//   PatternRewritePass pass("gelu_add_fusion", {rule});
//   bool changed = pass.run(graph);
//
//   MatchResult r = match(rule.pattern, node);   // r.failure says why not, e.g.
//   // "add.in0 (%t): expected op gelu, found relu"
//
// A pattern matches a value. `op` patterns match a node output (index 0 unless .output(i)) whose
// producer runs one of the listed ops and whose inputs match the sub-patterns (exactly that
// many; op(name) without a list leaves the inputs free). A name captured twice must bind the same
// value both times, so sub(any("x"), any("x")) matches x - x only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace kiln {

class Pattern {
 public:
  // Captures the matched value under `name` (for an op pattern: its output; Match::node gives
  // the node).
  Pattern as(std::string name) const;
  // Binary ops: also try the two inputs swapped.
  Pattern commutative() const;
  // Which output of the producing node this pattern matches (multi-output ops).
  Pattern output(int index) const;
  // The matched value has exactly one use and is not a graph output, so the rewrite may absorb
  // its producer. Meaningful on inner patterns; the root is replaced, never kept.
  Pattern single_use() const;
  // Predicates; `what` names the constraint in failure messages.
  Pattern where(std::function<bool(const Value&)> predicate, std::string what) const;
  Pattern dtype(DType dtype) const;
  // The producing node's attribute `key` equals `value` (op patterns only).
  Pattern attr(const std::string& key, Attr value) const;

  struct Data;
  const Data& data() const { return *data_; }
  explicit Pattern(std::shared_ptr<const Data> data) : data_(std::move(data)) {}

 private:
  std::shared_ptr<const Data> data_;
};

namespace pat {
// Any value (an input, a constant or a node output).
Pattern any(std::string capture = "");
// A graph constant (weights, folded values).
Pattern constant(std::string capture = "");
// A graph constant whose every element, as a double, satisfies `element` (`what` names it).
Pattern constant_where(std::function<bool(double)> element, std::string what,
                       std::string capture = "");
// A graph constant whose every element equals `value` (any shape: a broadcast scalar).
Pattern splat(double value, std::string capture = "");
// A node output of op `name`, or of any op in `names`.
Pattern op(std::string name, std::vector<Pattern> inputs);
Pattern any_op(std::vector<std::string> names, std::vector<Pattern> inputs);
Pattern op(std::string name);  // inputs unconstrained
// A permute of `input` that swaps the two dims `before_last` places before the last dim and the
// one after it (0: the last two dims, 1: dims n-3 and n-2), keeping the others in place.
Pattern swap_permute(Pattern input, int before_last);
// to(x) {dtype = f32} of an x of dtype `from`: how the builder widens a 2-byte operand of an op
// that computes in f32 (docs/ops.md, "Low-precision floats"); x is captured as `capture`.
Pattern widened_to_f32(DType from, std::string capture);
}  // namespace pat

struct Match {
  Node* root = nullptr;
  std::map<std::string, Value*> values;
  std::vector<Node*> nodes;  // every matched node, root first

  Value* operator[](const std::string& capture) const;  // asserts the capture exists
  Node* node(const std::string& capture) const;          // producer of a captured value
  bool has(const std::string& capture) const { return values.count(capture) != 0; }
};

struct MatchResult {
  bool matched = false;
  Match match;
  std::string failure;  // why not, with the path into the pattern
  explicit operator bool() const { return matched; }
};

MatchResult match(const Pattern& pattern, Node* root);

// One replacement per output of the matched root node, each of the replaced value's type
// (asserted), or {} to decline (before adding nodes, or after removing them). New nodes are added
// with Graph::add; the pass sorts the graph and gives them the root's source annotation.
using Rewrite = std::function<std::vector<Value*>(Graph&, const Match&)>;

// The matched root's op again, named as the root and uncast (its operands keep their dtypes),
// with the inputs at the given positions replaced by those captures and `changed` applied to its
// attributes: what folding an operand's producer into the op builds.
Value* rebuild_root(Graph& g, const Match& m,
                    const std::vector<std::pair<size_t, std::string>>& captured_inputs,
                    const AttrMap& changed = {});

struct RewriteRule {
  std::string name;
  Pattern pattern;  // an op pattern
  Rewrite rewrite;
};

namespace pat {
// The rewrite of an identity: the root becomes capture `capture` when that has the root's type.
Rewrite forward(std::string capture);
}  // namespace pat

// Tries every rule on every node (in order, first match wins), redirects the root's uses to the
// replacements and removes the nodes that became dead. One sweep per run(); a fixed-point stage
// repeats it.
class PatternRewritePass : public Pass {
 public:
  PatternRewritePass(std::string name, std::vector<RewriteRule> rules);
  std::string name() const override { return name_; }
  bool run(Graph& graph) override;
  // How often each rule fired in the last run.
  const std::map<std::string, int>& fired() const { return fired_; }

 private:
  std::string name_;
  std::vector<RewriteRule> rules_;
  std::map<std::string, int> fired_;
};

}  // namespace kiln
