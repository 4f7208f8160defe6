// Zero padding folded into the convolution that reads it (Hugging Face's MobileNetV2 pads every
// convolution's input "TensorFlow-style" with F.pad and gives the convolution no padding):
//   %p = pad(%x) {mode = "constant", pad = [l, r, t, b], value = 0.0} ; %y = conv2d(%p, ...)
//     →  %y = conv2d(%x, ...) {padding = [top + t, left + l, bottom + b, right + r]}
// pad lists the last dim first (PyTorch's order); [l, r] pads only the width. Only non-negative
// amounts of +0.0 (a convolution pads with +0.0), and only when nothing else reads %p.
#include <cmath>
#include <string>

#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

std::vector<Value*> rewrite(Graph& g, const Match& m) {
  Node* pad = m.node("p");
  const std::vector<int64_t>& amounts = pad->attr_ints("pad");
  const double value = pad->attr_float("value");
  if (pad->attr_string("mode") != "constant" || value != 0.0 || std::signbit(value) ||
      (amounts.size() != 2 && amounts.size() != 4))
    return {};
  for (int64_t a : amounts)
    if (a < 0) return {};
  const std::vector<int64_t>& old = m.root->attr_ints("padding");
  // [top, left, bottom, right] from conv2d's [ph, pw] or the same four.
  std::vector<int64_t> padding = old.size() == 2
                                     ? std::vector<int64_t>{old[0], old[1], old[0], old[1]}
                                     : old;
  padding[1] += amounts[0];
  padding[3] += amounts[1];
  if (amounts.size() == 4) {
    padding[0] += amounts[2];
    padding[2] += amounts[3];
  }
  return {rebuild_root(g, m, {{0, "x"}}, {{"padding", padding}})};
}

}  // namespace

std::unique_ptr<Pass> make_fold_pad_into_conv() {
  // conv2d takes 2 to 4 inputs (x, w, bias, residual); x is the pad in each.
  std::vector<RewriteRule> rules;
  std::vector<Pattern> inputs{op("pad", {any("x")}).single_use().as("p"), any()};
  for (int n = 2; n <= 4; ++n) {
    rules.push_back({"pad_conv" + std::to_string(n), op("conv2d", inputs), rewrite});
    inputs.push_back(any());
  }
  return std::make_unique<PatternRewritePass>("fold_pad_into_conv", std::move(rules));
}

}  // namespace kiln
