// conv1d: PyTorch's Conv1d forward on [N, C, L] tensors, f32 and f64, run by conv2d's kernels.
//
// Inputs x[N, C, L], w[O, C/groups, K] and optionally bias[O] (a variadic last input with zero
// or one values). Attributes: stride [s], padding [p] or [left, right], dilation [d], groups, and
// fused_activation ("none" or "relu"), as conv2d's.
//
// x[N, C, L] is the same memory as x[N, C, 1, L] (and w likewise), so each conv1d kernel is a
// conv2d kernel created for the equivalent conv2d node: stride [1, s], padding [0, left, 0,
// right], dilation [1, d]. conv1d therefore has conv2d's kernels, in conv2d's order, and must be
// registered after it (op_list.inc).
#include <algorithm>
#include <array>
#include <cstdint>

#include "ops/op_registry.h"
#include "ops/window_dims.h"

namespace kiln {

namespace {

std::array<int64_t, 2> padding_left_right(const std::vector<int64_t>& padding) {
  return {padding[0], padding.size() == 1 ? padding[0] : padding[1]};
}

void infer_conv1d(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& w = ctx.input(1);
  ctx.check(x.rank() == 3, "x must be 3-D [N, C, L]");
  ctx.check(w.rank() == 3, "w must be 3-D [O, C/groups, K]");
  ctx.check(ctx.num_inputs() <= 3, "takes x, w and at most one bias");
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            "conv1d takes f32 or f64, not " + std::string(dtype_name(x.dtype)));
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    ctx.check(ctx.input(i).dtype == x.dtype, "x, w and bias must have the same dtype");

  const int64_t groups = ctx.attr_int("groups");
  const auto& stride = ctx.attr_ints("stride");
  const auto& dilation = ctx.attr_ints("dilation");
  const auto& padding = ctx.attr_ints("padding");
  ctx.check(groups >= 1, "groups must be at least 1, got " + std::to_string(groups));
  // Below 2^31, every window computation stays far from overflow.
  auto in_range = [](int64_t v, int64_t least) { return v >= least && v <= INT32_MAX; };
  ctx.check(stride.size() == 1 && in_range(stride[0], 1),
            "stride must be one positive int [s] below 2^31");
  ctx.check(dilation.size() == 1 && in_range(dilation[0], 1),
            "dilation must be one positive int [d] below 2^31");
  ctx.check((padding.size() == 1 || padding.size() == 2) &&
                std::all_of(padding.begin(), padding.end(), [&](int64_t p) { return in_range(p, 0); }),
            "padding must be non-negative ints below 2^31, [p] or [left, right]");
  const std::string& activation = ctx.attr_string("fused_activation");
  ctx.check(activation == "none" || activation == "relu",
            "fused_activation must be \"none\" or \"relu\", got \"" + activation + "\"");
  ctx.check(w.shape[2].is_static() && in_range(w.shape[2].size(), 1),
            "the kernel's length (w's dim 2) must be known, positive and below 2^31");

  const Dim out_channels = check_conv_channels(ctx, x, w, groups, ctx.num_inputs() == 3);
  const auto pad = padding_left_right(padding);
  const WindowAxis axis{.kernel = w.shape[2].size(), .stride = stride[0],
                        .dilation = dilation[0], .pad_begin = pad[0], .pad_end = pad[1]};
  const Dim length = window_output_dim(ctx, x.shape[2], axis, "position");
  ctx.set_output(0, TensorType{x.dtype, {x.shape[0], out_channels, length}, Layout::Plain});
}

// [..., L] as [..., 1, L].
Shape with_unit_height(const Shape& shape) {
  Shape out = shape;
  out.insert(out.end() - 1, Dim(1));
  return out;
}

// The conv2d node equivalent to a conv1d kernel's node, in a graph of its own, and the spec
// conv2d's kernels are created with.
struct Conv2dEquivalent {
  std::unique_ptr<Graph> graph;
  KernelSpec spec;
};

Conv2dEquivalent conv2d_equivalent(const KernelSpec& spec) {
  auto graph = std::make_unique<Graph>("conv1d_as_conv2d");
  std::vector<Value*> operands;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    TensorType type = spec.inputs[i];
    if (i < 2) type.shape = with_unit_height(type.shape);  // x and w gain H = 1; bias stays
    operands.push_back(graph->add_input("in" + std::to_string(i), type));
  }
  const Node& node = spec.node;
  const auto pad = padding_left_right(node.attr_ints("padding"));
  AttrMap attrs{{"stride", std::vector<int64_t>{1, node.attr_ints("stride")[0]}},
                {"padding", std::vector<int64_t>{0, pad[0], 0, pad[1]}},
                {"dilation", std::vector<int64_t>{1, node.attr_ints("dilation")[0]}},
                {"groups", node.attr_int("groups")},
                {"fused_activation", node.attr_string("fused_activation")}};
  const Node* conv2d = graph->add("conv2d", operands, std::move(attrs), node.name())->producer();
  KernelSpec conv2d_spec{*conv2d, {}, {}, {}, spec.threads};
  for (const Value* in : conv2d->inputs()) conv2d_spec.inputs.push_back(in->type());
  conv2d_spec.outputs.push_back(conv2d->output()->type());
  // A constant's bytes are already conv2d's layout (only its recorded sizes lack the H = 1), so
  // conv2d's kernels prepack the very constants of the conv1d node.
  conv2d_spec.constant_inputs = spec.constant_inputs;
  conv2d_spec.prepared = spec.prepared;
  return Conv2dEquivalent{std::move(graph), std::move(conv2d_spec)};
}

// A conv2d kernel running a conv1d node: the same buffers, read as [N, C, 1, L].
class Conv1dKernel final : public KernelInstance {
 public:
  Conv1dKernel(std::unique_ptr<Graph> graph, std::unique_ptr<KernelInstance> conv2d)
      : graph_(std::move(graph)), conv2d_(std::move(conv2d)) {}
  size_t scratch_bytes() const override { return conv2d_->scratch_bytes(); }
  bool reads_input_at_run_time(size_t input) const override {
    return conv2d_->reads_input_at_run_time(input);
  }
  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    conv2d_->run(inputs, outputs, scratch);
  }

 private:
  std::unique_ptr<Graph> graph_;  // owns the node conv2d_ was created for
  std::unique_ptr<KernelInstance> conv2d_;
};

KernelDef as_conv1d_kernel(const KernelDef& conv2d) {
  return KernelDef{
      conv2d.name, conv2d.engine,
      [conv2d](const KernelSpec& spec) {
        return conv2d.unsupported_reason ? conv2d.unsupported_reason(conv2d_equivalent(spec).spec)
                                         : std::string();
      },
      [conv2d](const KernelSpec& spec) -> std::unique_ptr<KernelInstance> {
        Conv2dEquivalent equivalent = conv2d_equivalent(spec);
        std::unique_ptr<KernelInstance> kernel = conv2d.create(equivalent.spec);
        return std::make_unique<Conv1dKernel>(std::move(equivalent.graph), std::move(kernel));
      }};
}

}  // namespace

void register_conv1d_ops(OpRegistry& registry) {
  const OpDef* conv2d = registry.find("conv2d");
  KILN_ASSERT(conv2d, "conv1d runs conv2d's kernels: KILN_OP_FAMILY(conv1d) must come after "
                      "KILN_OP_FAMILY(conv) in src/ops/op_list.inc");
  OpDef def;
  def.name = "conv1d";
  def.inputs = {{"x"}, {"w"}, {"bias", /*variadic=*/true}};
  def.attrs = {{"stride", std::vector<int64_t>{1}},
               {"padding", std::vector<int64_t>{0}},
               {"dilation", std::vector<int64_t>{1}},
               {"groups", int64_t{1}},
               {"fused_activation", std::string("none")}};
  def.infer = infer_conv1d;
  def.computes_low_precision_in_f32 = true;
  for (const KernelDef& kernel : conv2d->kernels) def.kernels.push_back(as_conv1d_kernel(kernel));
  registry.add(std::move(def));
}

}  // namespace kiln
