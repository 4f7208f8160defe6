// Layout choice (stage format). Convolutions connected through their data (x or the residual r)
// form a chain that shares one layout L, so that activations stay in L from one convolution to the
// next; explicit reorder nodes appear only where a chain meets the rest of the graph (graph inputs
// and outputs stay plain, as PyTorch passes them):
//   %a = conv2d(%x, %w1) ; %b = conv2d(%a, %w2) ; %c = relu(%b) ; output %c
//     →  %xL = reorder(%x) {layout = L}
//        %a' : <L> = conv2d(%xL, %w1) {layout = L} ; %b' : <L> = conv2d(%a', %w2) {layout = L}
//        %p = reorder(%b') {layout = "plain"} ; %c = relu(%p) ; output %c
// L is the first of the pass's candidate layouts for the chain's dtype and convolutions
// (cpu::conv_layout_candidates: measured per CPU) that fits every member: each output's channels
// suit it, and so does each input from outside the chain, or x has fewer channels than a block
// (oneDNN's first-layer kernels read such an x plain, as a stem convolution reads its 3
// channels). A chain that no candidate fits takes the last one, the fallback. Only f32 and bf16
// convolutions join a chain, and only those whose output channels suit the fallback and whose x
// comes from a member or can be read in the fallback as above (any other plain x would leave
// oneDNN only its reference kernel; such a convolution stays plain, where oneDNN runs im2col and
// GEMM). A max or average pooling of
// a chain member's output joins the chain too (pooling keeps the channels, and its kernels take
// every layout), so ResNet's stem conv → max_pool2d → conv stays in L:
//   %a : <L> = conv2d(...) ; %m = max_pool2d(%a) ; %b = conv2d(%m, %w)
//     →  %m' : <L> = max_pool2d(%a) ; %b' : <L> = conv2d(%m', %w) {layout = L}
// instead of reorders to plain before the pooling and back to L after it. The weights stay
// plain constants in the graph: each oneDNN convolution reorders them once, when its plan is
// built, into the blocked layout it picks for L. A convolution whose layout is already set is
// pinned: its chain takes that layout, and two different pinned layouts in one chain are E30012
// (an explicit reorder between the two splits the chain).
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "kernels/cpu/layout.h"
#include "passes/pass_list.h"

namespace kiln {

namespace {

Layout layout_of(const Node& conv) {
  Layout layout = Layout::Plain;
  KILN_ASSERT(parse_layout(conv.attr_string("layout"), layout),
              "conv2d " << conv.name() << " has an unchecked layout");
  return layout;
}

bool is_conv(const Node& n) { return n.op() == "conv2d"; }
bool is_pool(const Node& n) { return n.op() == "max_pool2d" || n.op() == "avg_pool2d"; }

// Operand positions that carry activations: x, and a convolution's r when its epilogue has a
// residual.
std::vector<size_t> data_inputs(const Node& n) {
  if (is_conv(n) && n.attr_bool("residual")) return {0, n.inputs().size() - 1};
  return {0};
}

class ChooseLayouts final : public Pass {
 public:
  explicit ChooseLayouts(LayoutCandidates candidates) : candidates_(std::move(candidates)) {}
  std::string name() const override { return "choose_layouts"; }

  bool run(Graph& g) override {
    std::vector<Node*> members;
    for (Node* n : g.nodes())
      if (joins(*n)) {
        parent_[n] = n;
        members.push_back(n);
      }
    for (Node* n : members)
      for (size_t i : data_inputs(*n))
        if (Node* p = n->input(i)->producer(); p && parent_.count(p)) parent_[find(p)] = find(n);

    // Each chain's layout: its pinned one, else the first candidate that fits it. Only
    // convolutions pin.
    std::unordered_map<Node*, Node*> pinned_by;  // chain root → its first pinned member
    for (Node* n : members) {
      if (!is_conv(*n) || layout_of(*n) == Layout::Plain) continue;
      auto [it, first] = pinned_by.emplace(find(n), n);
      if (!first && layout_of(*it->second) != layout_of(*n))
        conflict(*it->second, *n, std::string("are pinned to layouts ") +
                                      layout_name(layout_of(*it->second)) + " and " +
                                      layout_name(layout_of(*n)));
    }
    std::unordered_map<Node*, std::vector<Node*>> chains;  // chain root → its members
    for (Node* n : members) chains[find(n)].push_back(n);
    std::unordered_map<Node*, Layout> unpinned;  // chain root → its layout
    for (const auto& [root, chain] : chains) {
      if (pinned_by.count(root)) continue;
      const std::vector<Layout> candidates = candidates_for(chain);
      auto fits = [&](Layout candidate) {
        return std::all_of(chain.begin(), chain.end(),
                           [&](Node* n) { return member_fits(*n, candidate); });
      };
      auto first = std::find_if(candidates.begin(), candidates.end(), fits);
      unpinned.emplace(root, first == candidates.end() ? candidates.back() : *first);
    }
    auto chain_layout = [&](Node* n) {
      Node* root = find(n);
      if (auto it = pinned_by.find(root); it != pinned_by.end()) return layout_of(*it->second);
      return unpinned.at(root);
    };
    for (Node* n : members) {
      const std::string problem = layout_problem(n->output()->type().shape, chain_layout(n));
      if (!problem.empty())
        conflict(*pinned_by.at(find(n)), *n, "share a layout, but for " + n->name() + ": " + problem);
    }

    bool changed = false;
    for (Node* n : members) changed |= place(g, n, chain_layout(n));
    for (Node* r : created_)
      if (r->output()->users().empty() && !is_graph_output(g, r->output())) g.remove_node(r);
    if (changed) g.topological_sort();
    parent_.clear();
    reorders_.clear();
    created_.clear();
    return changed;
  }

 private:
  // A chain takes bf16's candidates when a convolution in it reads bf16 (its result may still be
  // f32), else f32's.
  static bool reads_bf16(const Node* n) {
    return is_conv(*n) && n->input(0)->type().dtype == DType::BF16;
  }
  std::vector<Layout> candidates_of(const std::vector<const Node*>& convs) const {
    const bool bf16 = std::any_of(convs.begin(), convs.end(), reads_bf16);
    std::vector<Layout> candidates = candidates_(bf16 ? DType::BF16 : DType::F32, convs);
    KILN_ASSERT(!candidates.empty(), "choose_layouts needs at least a fallback layout");
    return candidates;
  }
  std::vector<Layout> candidates_for(const std::vector<Node*>& chain) const {
    std::vector<const Node*> convs;
    for (const Node* n : chain)
      if (is_conv(*n)) convs.push_back(n);
    return candidates_of(convs);
  }
  // The layout a convolution would take alone.
  Layout fallback(const Node& conv) const { return candidates_of({&conv}).back(); }

  // Whether `layout` fits chain member `n` (see the top of the file).
  bool member_fits(const Node& n, Layout layout) const {
    if (!layout_problem(n.output()->type().shape, layout).empty()) return false;
    for (size_t i : data_inputs(n))
      if (!from_member(n.input(i)) && !readable(n, i, layout)) return false;
    return true;
  }

  bool from_member(const Value* v) const {
    Node* p = v->producer();
    return p && parent_.count(p);
  }

  // Whether member n's data input i, from outside the chain, can be read in a chain of `layout`:
  // reordered into it, or read plain when it is a convolution's x thinner than a block (what
  // oneDNN's first-layer kernels take; any other plain x gets only its reference kernel).
  static bool readable(const Node& n, size_t i, Layout layout) {
    const Shape& shape = n.input(i)->type().shape;
    if (layout_problem(shape, layout).empty()) return true;
    return is_conv(n) && i == 0 && shape.size() == 4 && shape[1].is_static() &&
           shape[1].size() < layout_channel_block(layout);
  }

  // Nodes come in topological order, so a pooling's or convolution's producer has been decided
  // before it.
  bool joins(const Node& n) const {
    const DType dtype = n.output()->type().dtype;
    if (dtype != DType::F32 && dtype != DType::BF16) return false;
    if (is_pool(n)) return from_member(n.input(0));
    if (!is_conv(n)) return false;
    if (layout_of(n) != Layout::Plain) return true;  // pinned
    const Layout fallback_layout = fallback(n);
    return fallback_layout != Layout::Plain &&
           layout_problem(n.output()->type().shape, fallback_layout).empty() &&
           (from_member(n.input(0)) || readable(n, 0, fallback_layout));
  }

  Node* find(Node* n) {
    while (parent_[n] != n) n = parent_[n] = parent_[parent_[n]];
    return n;
  }

  [[noreturn]] static void conflict(const Node& a, const Node& b, const std::string& what) {
    throw_error(ErrorCode::FormatMismatch, "convolutions '", a.name(), "' and '", b.name(),
                "' are in one chain (connected through their data) and ", what,
                "; a chain shares one layout. Insert an explicit reorder between them, or pin "
                "them to the same layout.");
  }

  static bool is_graph_output(const Graph& g, const Value* v) {
    return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
  }

  // `v` in layout `layout`: itself, the source of a reorder that made it, or a (shared) new
  // reorder; `v` unchanged when its channels don't suit the layout.
  Value* in_layout(Graph& g, Value* v, Layout layout) {
    if (v->type().layout == layout) return v;
    if (Node* p = v->producer(); p && p->op() == "reorder" && p->input(0)->type().layout == layout)
      return p->input(0);
    if (!layout_problem(v->type().shape, layout).empty()) return v;
    Value*& r = reorders_[{v, layout}];
    if (!r) r = reorder(g, v, layout);
    return r;
  }

  Value* reorder(Graph& g, Value* v, Layout layout) {
    Value* r = g.add("reorder", {v}, {{"layout", std::string(layout_name(layout))}},
                     v->name() + "_" + layout_name(layout));
    created_.push_back(r->producer());
    return r;
  }

  // Rebuilds member `n` in `layout` unless it already is (a convolution's is its attribute, a
  // pooling's its input's); its old readers get a plain copy, which later chain members look
  // through.
  bool place(Graph& g, Node* n, Layout layout) {
    std::vector<Value*> inputs = n->inputs();
    for (size_t i : data_inputs(*n)) inputs[i] = in_layout(g, inputs[i], layout);
    if ((!is_conv(*n) || layout_of(*n) == layout) && inputs == n->inputs()) return false;
    AttrMap attrs = n->attrs();
    if (is_conv(*n)) attrs["layout"] = std::string(layout_name(layout));
    Value* y = g.add_uncast(n->op(), inputs, std::move(attrs), n->name());
    y->producer()->inherit_source(*n);
    Value* out = n->output();
    Value* same = out->type().layout == layout ? y : reorder(g, y, out->type().layout);
    // The value in n's layout is what its origin computed (the precision check compares it).
    same->producer()->inherit_source(*n);
    g.replace_all_uses(out, same);
    g.remove_node(n);
    return true;
  }

  LayoutCandidates candidates_;  // per dtype, in order of preference; the last is the fallback
  std::unordered_map<Node*, Node*> parent_;  // union-find over chain members
  std::map<std::pair<Value*, Layout>, Value*> reorders_;
  std::vector<Node*> created_;
};

}  // namespace

std::unique_ptr<Pass> make_choose_layouts(LayoutCandidates candidates) {
  return std::make_unique<ChooseLayouts>(std::move(candidates));
}

std::unique_ptr<Pass> make_choose_layouts(std::vector<Layout> candidates) {
  return make_choose_layouts(
      [candidates](DType, const std::vector<const Node*>&) { return candidates; });
}

std::unique_ptr<Pass> make_choose_layouts() {
  return make_choose_layouts(cpu::conv_layout_candidates);
}

}  // namespace kiln
