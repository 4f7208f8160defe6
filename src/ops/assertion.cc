// assert(condition; message): the model's own run-time check (PyTorch's aten._assert_async, which
// F.one_hot emits for its class values): nothing when the condition's one element is nonzero,
// else E40002 naming the node and carrying the message. Its output is the condition, which nothing
// need read: the op has side effects, so dead-code elimination keeps it (and passes may assume
// every node has an output); constant folding decides it at compile time where it can.
#include <cstring>
#include <string>

#include "ops/op_registry.h"

namespace kiln {

namespace {

void infer_assert(InferContext& ctx) {
  const TensorType& condition = ctx.input(0);
  for (const Dim& d : condition.shape)
    ctx.check(d.is_static() && d.size() == 1,
              "the condition " + shape_string(condition.shape) +
                  " must hold one element (PyTorch: a tensor of one value)");
  ctx.set_output(0, condition);
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  return make_kernel([node = spec.node.name(), message = spec.node.attr_string("message"),
                      bytes = dtype_size(spec.inputs[0].dtype),
                      floating = is_floating(spec.inputs[0].dtype)](
                         std::span<const void* const> in, std::span<void* const> out) {
    std::memcpy(out[0], in[0], bytes);
    // Nonzero: any bit set, the sign aside for floats (-0 is false, NaN true).
    unsigned char value[8] = {};
    std::memcpy(value, in[0], bytes);
    if (floating) value[bytes - 1] &= 0x7F;
    for (size_t i = 0; i < bytes; ++i)
      if (value[i]) return;
    throw_error(ErrorCode::ShapeInference, "node '", node,
                "' (assert): the model's own check failed at run time: ",
                message.empty() ? std::string("assertion failed") : message,
                ". Eager PyTorch raises the same for these inputs: check them.");
  });
}

}  // namespace

void register_assertion_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "assert";
  def.inputs = {{"condition"}};
  def.attrs = {{"message", std::string()}};
  def.infer = infer_assert;
  def.has_side_effects = true;
  def.kernels = {{"reference", "native", [](const KernelSpec&) { return std::string(); },
                  create_reference}};
  registry.add(std::move(def));
}

}  // namespace kiln
