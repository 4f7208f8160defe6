// PyTorch's type promotion (torch.promote_types, torch.result_type) over Kiln's dtypes, for ops
// whose inputs may differ in dtype. Categories rank bool < integers < floating.
#pragma once

#include <cstddef>
#include <span>

#include "kiln/dtype.h"

namespace kiln {

// torch.promote_types: the smallest dtype both convert to within the higher category: u8 with
// i8 gives i16, an integer with a float gives the float, f16 with bf16 gives f32.
DType promote_types(DType a, DType b);

// One operand of torch.result_type: a tensor of some rank, or a Python number, which PyTorch
// wraps into a rank-0 tensor (a "wrapped number": i64 for an int, f64 for a float, bool).
struct PromotionOperand {
  DType dtype;
  size_t rank;
  bool wrapped_number = false;
};

// torch.result_type of one or more operands. Tensors of rank >= 1 decide first, then rank-0
// tensors, then wrapped numbers; a later group changes the result only when its category is
// higher (an f64 rank-0 tensor doesn't widen an f32 tensor, 2.5 makes an int tensor's result
// f32), or when every earlier operand is bool. A wrapped float counts as f32 (PyTorch's default
// dtype), whatever its own width.
DType result_type(std::span<const PromotionOperand> operands);

}  // namespace kiln
