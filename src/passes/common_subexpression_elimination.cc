// Common subexpression elimination: two nodes running the same op on the same inputs with the
// same attributes compute the same outputs (Kiln's ops are pure), so the later one goes.
//   %a = op(%x, %y) {attrs};  %b = op(%x, %y) {attrs}   →   %a, with every use of %b on %a
#include <map>
#include <tuple>

#include "kiln/error.h"
#include "passes/pass.h"
#include "passes/pass_list.h"

namespace kiln {

namespace {

class CommonSubexpressionElimination final : public Pass {
 public:
  std::string name() const override { return "common_subexpression_elimination"; }

  bool run(Graph& graph) override {
    // Nodes seen so far by op and operands; attributes are compared within a bucket.
    std::map<std::tuple<std::string, std::vector<Value*>>, std::vector<Node*>> seen;
    bool changed = false;
    for (Node* node : graph.nodes()) {
      std::vector<Node*>& bucket = seen[{node->op(), node->inputs()}];
      Node* same = nullptr;
      for (Node* n : bucket)
        if (n->attrs() == node->attrs() && n->outputs().size() == node->outputs().size()) same = n;
      if (!same) {
        bucket.push_back(node);
        continue;
      }
      for (size_t i = 0; i < node->outputs().size(); ++i) {
        KILN_ASSERT(same->output(i)->type() == node->output(i)->type(),
                    "nodes " << same->name() << " and " << node->name()
                             << " have equal ops, operands and attributes but other types");
        graph.replace_all_uses(node->output(i), same->output(i));
      }
      graph.remove_node(node);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_common_subexpression_elimination() {
  return std::make_unique<CommonSubexpressionElimination>();
}

}  // namespace kiln
