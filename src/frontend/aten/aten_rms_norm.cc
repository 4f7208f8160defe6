// aten::rms_norm (torch.nn.RMSNorm, F.rms_norm) kept whole, as torch.export programs that are
// not decomposed carry it. (AOTAutograd and kiln.export decompose it into pow, mean, add, rsqrt
// and mul; fuse_decomposed_rms_norm recognizes that form.)
#include "frontend/converter.h"

namespace kiln {

void register_aten_rms_norm_converters(ConverterRegistry& r) {
  // PyTorch computes in the input's "opmath" dtype (f32 for f16 and bf16, and its eps for eps=None)
  // and casts the result back; Kiln's rms_norm takes f32 and f64, so the casts are explicit here.
  r.add("aten.rms_norm.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("input");
    const DType out = ctx.output_dtype();
    if (!is_floating(x->type().dtype)) ctx.unsupported("an input that is not floating point");
    const DType compute = x->type().dtype == DType::F64 ? DType::F64 : DType::F32;
    std::vector<Value*> inputs = {ctx.cast(x, compute)};
    if (Value* weight = ctx.optional_tensor("weight")) inputs.push_back(ctx.cast(weight, compute));
    AttrMap attrs{{"normalized_ndim",
                   static_cast<int64_t>(ctx.sizes("normalized_shape").ints.size())}};
    if (ctx.has("eps")) {
      // The op reads -1 as None: a negative eps must not silently become the default.
      if (ctx.number("eps") < 0) ctx.unsupported("a negative eps");
      attrs["eps"] = ctx.number("eps");
    }
    return {ctx.cast(ctx.add("rms_norm", inputs, std::move(attrs)), out)};
  });
}

}  // namespace kiln
