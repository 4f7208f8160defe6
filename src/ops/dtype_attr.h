// Reading a dtype attribute (`to`, the creation ops): a dtype name such as "f32" or "i64".
#pragma once

#include <optional>
#include <string>

#include "ops/op_registry.h"

namespace kiln {

// The dtype named by attribute `key`; `fallback` when the attribute is "" and a fallback is
// given (the _like ops: the input's dtype). Anything else is an E40002 listing the names.
inline DType dtype_attr(InferContext& ctx, const std::string& key,
                        std::optional<DType> fallback = std::nullopt) {
  const std::string& name = ctx.attr_string(key);
  if (name.empty() && fallback) return *fallback;
  std::optional<DType> dtype = parse_dtype(name);
  if (!dtype) {
    std::string names;
    for (DType d : kAllDTypes) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
    ctx.fail("attribute '" + key + "' is \"" + name + "\", not a dtype; use one of " + names +
             (fallback ? " (or \"\" for the input's)" : ""));
  }
  return *dtype;
}

}  // namespace kiln
