// Dead code elimination: a node none of whose outputs reach a graph output is removed, unless its
// op has side effects (a check), and so is a constant nothing uses any more (folded weights,
// simplified-away operands).
//   %a = op(...)  with %a unused and not an output   →   (nothing)
//   const %c      with %c unused and not an output   →   (nothing)
#include <unordered_set>

#include "ops/op_registry.h"
#include "passes/pass.h"
#include "passes/pass_list.h"

namespace kiln {

namespace {

class DeadCodeElimination final : public Pass {
 public:
  std::string name() const override { return "dead_code_elimination"; }

  bool run(Graph& graph) override {
    std::unordered_set<const Value*> graph_outputs(graph.outputs().begin(), graph.outputs().end());
    auto dead = [&](const Value* v) { return v->users().empty() && !graph_outputs.count(v); };
    bool changed = false;
    std::vector<Node*> nodes = graph.nodes();
    // Reverse topological order: removing a node may make its producers dead in the same sweep.
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const OpDef* def = OpRegistry::instance().find((*it)->op());
      bool live = def && def->has_side_effects;
      for (Value* out : (*it)->outputs()) live |= !dead(out);
      if (!live) {
        graph.remove_node(*it);
        changed = true;
      }
    }
    std::vector<Value*> constants = graph.constants();
    for (Value* c : constants)
      if (dead(c)) {
        graph.remove_constant(c);
        changed = true;
      }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_dead_code_elimination() { return std::make_unique<DeadCodeElimination>(); }

}  // namespace kiln
