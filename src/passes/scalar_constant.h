// The value of a scalar constant (a Python number or a folded one-element tensor), for passes
// that match formulas with constants in them.
#pragma once

#include <optional>

#include "kiln/graph.h"

namespace kiln {

// The value of a one-element f32 or f64 constant, or nullopt for anything else.
inline std::optional<double> scalar_value(const Value& v) {
  if (v.kind() != Value::Kind::Constant || v.constant().numel() != 1) return std::nullopt;
  if (v.type().dtype == DType::F64) return v.constant().data<double>()[0];
  if (v.type().dtype == DType::F32) return v.constant().data<float>()[0];
  return std::nullopt;
}

}  // namespace kiln
