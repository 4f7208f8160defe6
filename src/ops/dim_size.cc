// dim_size(x; dim) -> i64[]: x's size along dim (negative counts from the end), as a 0-d tensor:
// PyTorch's sym_size read as a value. A size PyTorch hands an op as a number (an add of the
// cache position, a scalar_tensor of a window count) is built from these and the integer ops
// (docs/frontend.md), so the graph computes it for each run's shapes. The kernel reads only
// x's size, never its data; x may be in any layout (sizes are logical).
#include "ops/op_registry.h"

namespace kiln {

namespace {

void infer_dim_size(InferContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.input(0).rank());
  const int64_t dim = ctx.attr_int("dim");
  ctx.check(dim >= -rank && dim < rank, "dim " + std::to_string(dim) +
                                            " is out of range for rank " + std::to_string(rank));
  ctx.set_output(0, TensorType{DType::I64, {}, Layout::Plain});
}

std::unique_ptr<KernelInstance> dim_size_kernel(const KernelSpec& spec) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  const int64_t dim = spec.node.attr_int("dim");
  const int64_t size = sizes[static_cast<size_t>(dim < 0 ? dim + int64_t(sizes.size()) : dim)];
  return make_kernel([size](std::span<const void* const>, std::span<void* const> out) {
    *static_cast<int64_t*>(out[0]) = size;
  });
}

}  // namespace

void register_dim_size_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "dim_size";
  def.inputs = {{"x"}};
  def.attrs = {{"dim", int64_t{0}, true}};
  def.infer = infer_dim_size;
  def.layout_aware = true;
  def.kernels = {{"reference", "native", [](const KernelSpec&) { return std::string(); },
                  dim_size_kernel}};
  registry.add(std::move(def));
}

}  // namespace kiln
