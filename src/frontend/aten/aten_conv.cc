// aten.convolution → Kiln's conv2d.
#include "frontend/converter.h"

namespace kiln {

void register_aten_conv_converters(ConverterRegistry& r) {
  r.add("aten.convolution.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("input");
    if (ctx.boolean("transposed")) ctx.unsupported("transposed convolution");
    if (x->type().rank() != 4)
      ctx.unsupported("a " + std::to_string(x->type().rank() - 2) + "-d convolution");
    std::vector<Value*> inputs = {x, ctx.tensor("weight")};
    if (Value* bias = ctx.optional_tensor("bias")) inputs.push_back(bias);
    return {ctx.add("conv2d", inputs,
                    {{"stride", ctx.integers("stride")},
                     {"padding", ctx.integers("padding")},
                     {"dilation", ctx.integers("dilation")},
                     {"groups", ctx.integer("groups")}})};
  });
}

}  // namespace kiln
