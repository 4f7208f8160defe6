// Decomposed softmax recognition: the max-shifted exponentials divided by their sum over one
// dim become one softmax node (one pass over each row instead of five ops and four buffers).
//   %m = amax(%x) {dim = [d], keepdim = true} ; %e = exp(sub(%x, %m))
//   %y = div(%e, sum(%e) {dim = [d], keepdim = true})      →  %y = softmax(%x) {axis = d}
//   and the unshifted exp(%x) / sum(exp(%x)), which softmax computes without its overflow.
// %e is read by exactly the sum and the div; the other intermediates have no other use.
#include <algorithm>
#include <optional>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

// A reduction over one dim with keepdim: the dim (normalized), or nullopt.
std::optional<int64_t> single_kept_dim(const Node& reduction, size_t rank) {
  const std::vector<int64_t>& dims = reduction.attr_ints("dim");
  if (dims.size() != 1 || !reduction.attr_bool("keepdim")) return std::nullopt;
  const auto r = static_cast<int64_t>(rank);
  if (dims[0] < -r || dims[0] >= r) return std::nullopt;
  return dims[0] < 0 ? dims[0] + r : dims[0];
}

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  const TensorType& x = m["x"]->type();
  Value* e = m["e"];
  // Read by the sum and the div only (each matched node reads it once).
  const bool e_private = e->users().size() == 2 &&
                         std::find(g.outputs().begin(), g.outputs().end(), e) == g.outputs().end();
  if (!e_private || (x.dtype != DType::F32 && x.dtype != DType::F64) ||
      m.root->output()->type() != x)
    return {};
  std::optional<int64_t> dim = single_kept_dim(*m.node("total"), x.rank());
  if (!dim) return {};
  if (m.has("max") && single_kept_dim(*m.node("max"), x.rank()) != dim) return {};
  return {g.add("softmax", {m["x"]}, {{"axis", *dim}}, m.root->name())};
}

Pattern normalized(Pattern exponentials) {
  return op("div", {exponentials, op("sum", {any("e")}).single_use().as("total")});
}

}  // namespace

std::unique_ptr<Pass> make_fuse_decomposed_softmax() {
  Pattern shifted =
      op("exp", {op("sub", {any("x"), op("amax", {any("x")}).single_use().as("max")})
                     .attr("alpha", 1.0)
                     .single_use()})
          .as("e");
  Pattern unshifted = op("exp", {any("x")}).as("e");
  return std::make_unique<PatternRewritePass>(
      "fuse_decomposed_softmax",
      std::vector<RewriteRule>{{"softmax_shifted", normalized(shifted), rewrite},
                               {"softmax_unshifted", normalized(unshifted), rewrite}});
}

}  // namespace kiln
