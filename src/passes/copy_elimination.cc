// Copy elimination: a copy (PyTorch's clone or contiguous) of a tensor already in the layout it
// asks for is its input. Kiln's IR is functional — no node writes its input in place, and in-place
// execution is the memory planner's choice on buffers nothing else reads — so the copy's result
// is never written through an alias of its input.
//   %y = copy(%x)   with %y of %x's type (dtype, shape, layout)   →   %x
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

std::unique_ptr<Pass> make_copy_elimination() {
  using namespace pat;
  return std::make_unique<PatternRewritePass>(
      "copy_elimination", std::vector<RewriteRule>{{"copy", op("copy", {any("x")}), forward("x")}});
}

}  // namespace kiln
