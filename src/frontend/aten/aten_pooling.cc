// Pooling and batch norm → Kiln's CNN ops.
#include "frontend/converter.h"

namespace kiln {

void register_aten_pooling_converters(ConverterRegistry& r) {
  // Returns (values, indices); inference graphs usually read only the values, which
  // max_pool2d computes faster.
  r.add("aten.max_pool2d_with_indices.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const AttrMap attrs = {{"kernel_size", ctx.integers("kernel_size")},
                           {"stride", ctx.integers("stride")},
                           {"padding", ctx.integers("padding")},
                           {"dilation", ctx.integers("dilation")},
                           {"ceil_mode", ctx.boolean("ceil_mode")}};
    Value* x = ctx.tensor("self");
    if (!ctx.output_used(1)) return {ctx.add("max_pool2d", {x}, attrs), nullptr};
    return ctx.graph().add_node("max_pool2d_with_indices", {x}, attrs, ctx.node_name());
  });
  r.add("aten.avg_pool2d.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("avg_pool2d", {ctx.tensor("self")},
                    {{"kernel_size", ctx.integers("kernel_size")},
                     {"stride", ctx.integers("stride")},
                     {"padding", ctx.integers("padding")},
                     {"ceil_mode", ctx.boolean("ceil_mode")},
                     {"count_include_pad", ctx.boolean("count_include_pad")},
                     {"divisor_override",
                      ctx.has("divisor_override") ? ctx.integer("divisor_override") : 0}})};
  });
  r.add("aten._adaptive_avg_pool2d.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("adaptive_avg_pool2d", {ctx.tensor("self")},
                    {{"output_size", ctx.integers("output_size")}})};
  });
  // Returns (out, save_mean, save_invstd); inference uses only out.
  r.add("aten._native_batch_norm_legit_no_training.default",
        [](ConvertContext& ctx) -> std::vector<Value*> {
          Value* weight = ctx.optional_tensor("weight");
          Value* bias = ctx.optional_tensor("bias");
          if (!weight || !bias) ctx.unsupported("batch norm without affine weight and bias");
          return {ctx.add("batch_norm",
                          {ctx.tensor("input"), weight, bias, ctx.tensor("running_mean"),
                           ctx.tensor("running_var")},
                          {{"eps", ctx.number("eps")}}),
                  nullptr, nullptr};
        });
}

}  // namespace kiln
