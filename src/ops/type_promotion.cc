#include "ops/type_promotion.h"

#include <optional>

#include "kiln/error.h"

namespace kiln {

namespace {

enum class Category { Bool, Integer, Floating };

Category category(DType d) {
  if (d == DType::Bool) return Category::Bool;
  return is_floating(d) ? Category::Floating : Category::Integer;
}

// c10's combine_categories: `lower` (a later group) counts only from a higher category, or
// when `higher` is bool.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const Category ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == Category::Floating) {
    const bool a16 = dtype_size(a) == 2, b16 = dtype_size(b) == 2;
    if (a16 && b16) return DType::F32;  // f16 and bf16: neither holds the other
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  // Integers: u8 is the only unsigned one; with i8 neither holds the other.
  if (a == DType::U8 || b == DType::U8) {
    const DType other = a == DType::U8 ? b : a;
    return other == DType::I8 ? DType::I16 : other;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

DType result_type(std::span<const PromotionOperand> operands) {
  std::optional<DType> dims, zero_dim, wrapped;
  for (const PromotionOperand& op : operands) {
    const DType d = op.wrapped_number && is_floating(op.dtype) ? DType::F32 : op.dtype;
    std::optional<DType>& group = op.rank > 0 ? dims : op.wrapped_number ? wrapped : zero_dim;
    group = group ? promote_types(*group, d) : d;
  }
  std::optional<DType> result = combine(dims, combine(zero_dim, wrapped));
  KILN_ASSERT(result, "result_type of no operands");
  return *result;
}

}  // namespace kiln
