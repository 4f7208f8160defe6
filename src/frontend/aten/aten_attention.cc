// Scaled dot-product attention → Kiln's fused attention op.
#include "frontend/converter.h"

namespace kiln {

void register_aten_attention_converters(ConverterRegistry& r) {
  // Returns (output, logsumexp); inference uses only the output.
  r.add("aten._scaled_dot_product_flash_attention_for_cpu.default",
        [](ConvertContext& ctx) -> std::vector<Value*> {
          if (ctx.number("dropout_p") != 0.0) ctx.unsupported("dropout in attention");
          std::vector<Value*> inputs = {ctx.tensor("query"), ctx.tensor("key"), ctx.tensor("value")};
          if (Value* mask = ctx.optional_tensor("attn_mask")) inputs.push_back(mask);
          // Kiln's scale 0 means PyTorch's default 1/sqrt(E).
          double scale = ctx.has("scale") ? ctx.number("scale") : 0.0;
          // [B, H, L, E] operands; fewer key and value heads than query heads is grouped-query
          // attention, which this ATen op infers from the shapes.
          AttrMap attrs{{"is_causal", ctx.boolean("is_causal")}, {"scale", scale}};
          if (inputs[1]->type().shape.at(1) != inputs[0]->type().shape.at(1))
            attrs["enable_gqa"] = true;
          return {ctx.add("scaled_dot_product_attention", inputs, std::move(attrs)), nullptr};
        });
}

}  // namespace kiln
