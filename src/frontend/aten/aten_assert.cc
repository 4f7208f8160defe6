// aten._assert_async (F.one_hot checks its class values with it): Kiln's `assert`, which raises
// E40002 with PyTorch's message at run time when its condition is zero.
#include "frontend/converter.h"

namespace kiln {

void register_aten_assert_converters(ConverterRegistry& r) {
  for (const char* overload : {".default", ".msg"})
    r.add(std::string("aten._assert_async") + overload,
          [](ConvertContext& ctx) -> std::vector<Value*> {
            AttrMap attrs;
            if (ctx.has("assert_msg")) attrs["message"] = ctx.string("assert_msg");
            ctx.add("assert", {ctx.tensor("self")}, std::move(attrs));
            return {nullptr};  // PyTorch's result is None
          });
}

}  // namespace kiln
