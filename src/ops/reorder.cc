// reorder: the same tensor in another memory layout (include/kiln/shape.h). The format stage
// (src/passes/choose_layouts.cc) inserts it where a consumer needs another layout than the
// producer's.
//
//   reorder(x; layout = "plain")   y has x's dtype and shape, stored in `layout`
//
// Any dtype. Non-plain layouts are for 4-D tensors whose channels suit them.
// Kernels, best first: oneDNN's reorder (f32 and bf16, 4-D), then the reference element copy.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/layout.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

void infer_reorder(InferContext& ctx) {
  TensorType y = ctx.input(0);
  const std::string& name = ctx.attr_string("layout");
  ctx.check(parse_layout(name, y.layout),
            "layout must be plain, nhwc, nChw8c or nChw16c, got \"" + name + "\"");
  const std::string problem = layout_problem(y.shape, y.layout);
  ctx.check(problem.empty(), "y can't be in its layout: " + problem);
  ctx.set_output(0, y);
}

// Elements move as unsigned integers of the dtype's size.
template <typename Word>
std::unique_ptr<KernelInstance> element_copy(const KernelSpec& spec) {
  return make_kernel([s = cpu::nchw_of(spec.input_sizes(0)), from = spec.inputs[0].layout,
                      to = spec.outputs[0].layout, threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    cpu::convert_layout(s, from, static_cast<const Word*>(in[0]), to, static_cast<Word*>(out[0]),
                        threads);
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  const size_t size = dtype_size(spec.inputs[0].dtype);
  if (spec.inputs[0].layout == spec.outputs[0].layout) {  // any rank: a plain copy
    const size_t bytes = static_cast<size_t>(num_elements(spec.input_sizes(0))) * size;
    return make_kernel([bytes](std::span<const void* const> in, std::span<void* const> out) {
      if (bytes) std::memcpy(out[0], in[0], bytes);
    });
  }
  // The layouts differ, so the tensor is 4-D.
  switch (size) {
    case 1: return element_copy<uint8_t>(spec);
    case 2: return element_copy<uint16_t>(spec);
    case 4: return element_copy<uint32_t>(spec);
    case 8: return element_copy<uint64_t>(spec);
  }
  KILN_ASSERT(false, "no element copy for " << size << "-byte elements");
}

std::string onednn_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::F32 && spec.inputs[0].dtype != DType::BF16)
    return "f32 and bf16 only";
  if (spec.inputs[0].rank() != 4) return "4-D tensors only";
  if (num_elements(spec.input_sizes(0)) == 0) return "zero-size tensor";
  return "";
}

}  // namespace

void register_reorder_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "reorder";
  def.inputs = {{"x"}};
  def.attrs = {{"layout", std::string("plain")}};
  def.infer = infer_reorder;
  def.layout_aware = true;
  def.kernels = {
      {"onednn", "onednn", onednn_unsupported, cpu::create_onednn_reorder},
      {"reference", "native", nullptr, create_reference},
  };
  registry.add(std::move(def));
}

}  // namespace kiln
