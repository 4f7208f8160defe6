// Storage types for the 16-bit floating dtypes (f16: IEEE binary16; bf16: the top half of an
// f32) and their scalar conversions to and from f32. Arithmetic on them goes through f32, as in
// PyTorch's CPU kernels.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln::cpu {

struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

// Exact. A NaN keeps its sign and payload and comes out quiet, as VCVTPH2PS gives it, so this
// matches the F16C kernels bit for bit.
inline float to_float(Float16 h) {
  const uint32_t sign = uint32_t{h.bits & 0x8000u} << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1Fu;
  const uint32_t mantissa = h.bits & 0x3FFu;
  if (exponent == 0x1F)  // inf or NaN
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13) |
                                (mantissa ? 0x00400000u : 0u));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even; overflow gives inf. A NaN keeps its sign and the top of its
// payload and comes out quiet, as VCVTPS2PH gives it.
inline Float16 to_float16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u)  // NaN
    return {static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu))};
  if (magnitude >= 0x477FF000u)  // rounds to beyond 65504 (or is inf)
    return {static_cast<uint16_t>(sign | 0x7C00u)};
  if (magnitude < 0x38800000u) {
    // Below f16's smallest normal (2^-14): a subnormal, k units of 2^-24, k rounded from the
    // f32 significand shifted right (a carry to k = 1024 is the smallest normal, as encoded).
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return {sign};  // below 2^-25: rounds to zero
    const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24 bits dropped
    const uint32_t kept = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rounded = kept + (rest > half || (rest == half && (kept & 1u)));
    return {static_cast<uint16_t>(sign | rounded)};
  }
  // Normal: rebias the exponent and round the 13 dropped bits; a carry into the exponent is right.
  const uint32_t rebiased = magnitude - (112u << 23);
  const uint32_t rounded = rebiased + 0xFFFu + ((rebiased >> 13) & 1u);
  return {static_cast<uint16_t>(sign | (rounded >> 13))};
}

inline float to_float(BFloat16 b) { return std::bit_cast<float>(uint32_t{b.bits} << 16); }

// Round to nearest, ties to even (PyTorch's round_to_nearest_even); every NaN becomes 0x7FC0.
inline BFloat16 to_bfloat16(float f) {
  if (std::isnan(f)) return {0x7FC0};
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return {static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16)};
}

// Conversions that treat the 16-bit storage types as the floats they hold: widen_to<A>(v) reads v
// as an A (a 16-bit float through f32), narrow_to<T>(a) rounds a to T (to a 16-bit float
// through f32, as PyTorch rounds an f32 accumulator); other types convert with static_cast.
template <typename T>
constexpr bool kIsHalfFloat = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename A, typename T>
A widen_to(T v) {
  if constexpr (kIsHalfFloat<T>) return static_cast<A>(to_float(v));
  else return static_cast<A>(v);
}

template <typename T, typename A>
T narrow_to(A a) {
  if constexpr (std::is_same_v<T, Float16>) return to_float16(static_cast<float>(a));
  else if constexpr (std::is_same_v<T, BFloat16>) return to_bfloat16(static_cast<float>(a));
  else return static_cast<T>(a);
}

}  // namespace kiln::cpu

namespace kiln {
template <> struct DTypeOf<cpu::Float16> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<cpu::BFloat16> { static constexpr DType value = DType::BF16; };
}  // namespace kiln
