// Converting one value between dtypes with PyTorch's semantics on x86 (c10::convert), without
// the undefined behaviour of C++ casts from out-of-range floats:
//  * to bool: x != 0 (NaN is true);
//  * float to integer truncates toward zero; NaN, inf and out-of-range values give what the x86
//    truncating conversions give: INT64_MIN for i64 and u8 (which PyTorch converts through i64,
//    then wraps), INT32_MIN for i32, and for i16 and i8 the low bits of that i32 result (what the
//    compiler's cvttss2si gives for PyTorch's static_cast);
//  * integer to integer wraps around (two's complement);
//  * to f16 or bf16 through f32, rounding to nearest even at each step (f64 -> f16 rounds twice,
//    as PyTorch does).
// Also the check that a scalar attribute (fill value, pad value) fits a dtype, as PyTorch's
// "value cannot be converted to type ... without overflow".
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/float16.h"

namespace kiln::cpu {

template <typename T>
inline constexpr bool kIs16BitFloat = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// x86's cvttsd2si into an I of 32 or 64 bits: truncation, and I's minimum (the "integer
// indefinite") for NaN and values out of range.
template <typename I>
I truncate_like_x86(double v) {
  constexpr double limit = static_cast<double>(uint64_t{1} << (sizeof(I) * 8 - 1));
  if (v > -limit - 1 && v < limit) return static_cast<I>(v);  // false for NaN
  return std::numeric_limits<I>::min();
}

template <typename Dst, typename Src>
Dst convert(Src x) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return x;
  } else if constexpr (kIs16BitFloat<Src>) {
    return convert<Dst>(to_float(x));
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return x != Src(0);
  } else if constexpr (std::is_same_v<Dst, Float16>) {
    return to_float16(convert<float>(x));
  } else if constexpr (std::is_same_v<Dst, BFloat16>) {
    return to_bfloat16(convert<float>(x));
  } else if constexpr (std::is_floating_point_v<Dst> || !std::is_floating_point_v<Src>) {
    return static_cast<Dst>(x);  // rounds to nearest even, or wraps between integers
  } else if constexpr (sizeof(Dst) == 8 || std::is_same_v<Dst, uint8_t>) {
    return static_cast<Dst>(truncate_like_x86<int64_t>(x));
  } else {
    return static_cast<Dst>(truncate_like_x86<int32_t>(x));
  }
}

// Why `value` can't be a scalar of `dtype` (PyTorch's overflow rule for a float scalar: finite
// values beyond the dtype's range; for integers also NaN and inf), or empty.
inline std::string scalar_unrepresentable_reason(DType dtype, double value) {
  return dispatch_dtype(dtype, [&](auto zero) -> std::string {
    using T = decltype(zero);
    double lowest, highest;
    if constexpr (std::is_same_v<T, bool>) {
      return "";
    } else if constexpr (std::is_same_v<T, Float16>) {
      lowest = -65504.0, highest = 65504.0;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      highest = static_cast<double>(to_float(BFloat16{0x7F7F}));
      lowest = -highest;
    } else {
      lowest = static_cast<double>(std::numeric_limits<T>::lowest());
      highest = static_cast<double>(std::numeric_limits<T>::max());
    }
    if (is_floating(dtype) && !std::isfinite(value)) return "";
    if (value >= lowest && value <= highest) return "";  // false for NaN
    std::ostringstream message;
    message << value << " is outside the range of " << dtype_name(dtype) << " [" << lowest
            << ", " << highest << "]";
    return message.str();
  });
}

// The bytes of `value` converted to `dtype`, at the start of a uint64_t: a fill pattern for
// kernels that move elements without knowing their type.
inline uint64_t scalar_bits(DType dtype, double value) {
  return dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T converted = convert<T>(value);
    uint64_t bits = 0;
    std::memcpy(&bits, &converted, sizeof(T));
    return bits;
  });
}

// An element of type E holding the first sizeof(E) bytes of `bits` (from scalar_bits).
template <typename E>
E element_from_bits(uint64_t bits) {
  E e;
  std::memcpy(&e, &bits, sizeof(E));
  return e;
}

}  // namespace kiln::cpu
