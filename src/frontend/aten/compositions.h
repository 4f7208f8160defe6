// Compositions of Kiln ops that more than one converter family emits.
#pragma once

#include "frontend/converter.h"

namespace kiln {

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), without overflow or cancellation
// (aten_elementwise.cc: F.logsigmoid; aten_loss.cc: binary_cross_entropy_with_logits).
Value* log_sigmoid(ConvertContext& ctx, Value* x);

}  // namespace kiln
