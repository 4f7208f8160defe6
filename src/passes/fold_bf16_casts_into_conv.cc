// A convolution of widened bf16 values reads them as they are, and rounds its own result, on
// CPUs whose bf16 dot products run at twice the f32 FMA rate (AVX512-BF16):
//   %x32 = to(%x) {dtype = f32} ; %w32 = to(%w) {dtype = f32} ; %y = conv2d(%x32, %w32 [, %b])
//     →  %y = conv2d(%x, %w [, %b])                (%x, %w bf16; %b and %y stay f32)
//   %y = conv2d(%x, %w [, %b]) ; %z = to(%y) {dtype = bf16}      (%x, %w bf16, %y f32)
//     →  %z = conv2d(%x, %w [, %b]) {dtype = bf16}
// The first is exact up to the order of the sum (a product of two bf16 values is exact in f32,
// and both forms accumulate in f32); the second rounds the same f32 value once, in the kernel,
// as PyTorch's bf16 convolution does (oneDNN's conversion flushes f32 results below 2^-126 to
// zero there too). The builder puts the casts around every convolution of a bf16 model
// (docs/ops.md, "Low-precision floats"); folding them before constant folding widens the
// weights keeps the weights bf16, and the activations between convolutions bf16: half the
// bytes, and no cast kernels. Elsewhere the f32 convolution stays, since oneDNN would emulate.
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "passes/pass_list.h"
#include "passes/pattern.h"

namespace kiln {

namespace {

using namespace pat;

std::vector<Value*> read_bf16(Graph& g, const Match& m) {
  return {rebuild_root(g, m, {{0, "x"}, {1, "w"}})};
}

// A residual would have to be bf16 too; the epilogue passes run later, so there is none yet.
std::vector<Value*> round_in_kernel(Graph& g, const Match& m) {
  Node* conv = m.node("y");
  if (conv->input(0)->type().dtype != DType::BF16 || !conv->attr_string("dtype").empty() ||
      conv->attr_bool("residual"))
    return {};
  AttrMap attrs = conv->attrs();
  attrs["dtype"] = std::string("bf16");
  return {g.add_uncast("conv2d", conv->inputs(), std::move(attrs), m.root->name())};
}

}  // namespace

std::unique_ptr<Pass> make_fold_bf16_casts_into_conv(bool native_bf16) {
  // Without native bf16 no rule: the pass keeps its name (for disabled_passes and the pass
  // records) and changes nothing.
  std::vector<RewriteRule> rules;
  if (native_bf16) {
    const Pattern x = widened_to_f32(DType::BF16, "x"), w = widened_to_f32(DType::BF16, "w");
    rules.push_back({"bf16_conv", op("conv2d", {x, w}), read_bf16});
    rules.push_back({"bf16_conv_bias", op("conv2d", {x, w, any()}), read_bf16});
    rules.push_back({"bf16_conv_result",
                     op("to", {op("conv2d").single_use().as("y")}).dtype(DType::BF16),
                     round_in_kernel});
  }
  return std::make_unique<PatternRewritePass>("fold_bf16_casts_into_conv", std::move(rules));
}

std::unique_ptr<Pass> make_fold_bf16_casts_into_conv() {
  return make_fold_bf16_casts_into_conv(cpu::onednn_has_bf16());
}

}  // namespace kiln
