// Elementwise ops, with NumPy broadcasting and PyTorch's type promotion (docs/ops.md):
//
//   unary:    relu, neg, abs, sign, exp, expm1, log, log1p, log2, sqrt, rsqrt, reciprocal, sin,
//             cos, tanh, sigmoid, erf, gelu (approximate), silu, mish, hardswish, hardsigmoid,
//             leaky_relu (negative_slope), elu (alpha, scale, input_scale), softplus (beta,
//             threshold), hardtanh (min_val, max_val), clamp (min, max), floor, ceil, trunc,
//             round (decimals), isnan, isinf, logical_not, bitwise_not, erfc, erfinv, lgamma,
//             digamma
//   binary:   add (alpha), sub (alpha), mul, div (rounding_mode), pow, maximum, minimum, fmod,
//             remainder, atan2, hypot, logaddexp, logaddexp2, copysign, eq, ne, lt, le, gt, ge,
//             logical_and, logical_or, logical_xor, bitwise_and, bitwise_or, bitwise_xor,
//             bitwise_left_shift, bitwise_right_shift, nextafter, gcd
//   ternary:  where (condition, a, b), fma (a * b + c rounded once)
//
// Each op is one table entry: a scalar functor (its operator() a template over the element type
// it computes in) that makes the reference kernel for every dtype the op takes, a dtype rule, and
// optionally an AVX2 f32 array kernel from src/kernels/cpu/elementwise_avx2.h. One driver runs
// them all: it walks the broadcast output in runs, converts inputs whose dtype differs from the
// computing dtype (mixed dtypes, f16/bf16 computed in f32) block by block, and converts the
// result to the output dtype.
//
// Binary and ternary ops take the attribute wrapped_numbers: the inputs that hold a Python number
// (a rank-0 constant), which take part in type promotion as PyTorch's wrapped numbers do.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"
#include "ops/type_promotion.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------- dtype rules

// The dtype categories an op takes, as a bit set.
enum Categories : unsigned { kBool = 1, kIntegers = 2, kFloats = 4, kNumbers = 6, kAll = 7 };

// The dtype an op computes in, from its inputs' promoted dtype.
enum class Compute : uint8_t {
  Promoted,        // the promoted dtype itself
  FloatIfInteger,  // integer and bool become f32, PyTorch's default dtype (exp, true division)
  Bool,            // every input as bool, x != 0 with NaN true (logical ops)
};

struct Rule {
  unsigned takes;  // categories of the promoted dtype
  Compute compute;
  bool bool_result;  // comparisons and predicates; otherwise the computing dtype
};

constexpr Rule kAny{kAll, Compute::Promoted, false};
constexpr Rule kNumeric{kNumbers, Compute::Promoted, false};
constexpr Rule kFloating{kAll, Compute::FloatIfInteger, false};
constexpr Rule kFloatOnly{kFloats, Compute::Promoted, false};
constexpr Rule kPredicate{kAll, Compute::Promoted, true};
constexpr Rule kLogical{kAll, Compute::Bool, true};
constexpr Rule kBitwise{kIntegers | kBool, Compute::Promoted, false};
constexpr Rule kIntegerOnly{kIntegers, Compute::Promoted, false};

unsigned category_of(DType d) {
  if (d == DType::Bool) return kBool;
  return is_floating(d) ? kFloats : kIntegers;
}

std::string categories_string(unsigned categories) {
  std::string out;
  auto add = [&](unsigned bit, const char* name) {
    if (categories & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(kFloats, "floating");
  add(kIntegers, "integer");
  add(kBool, "bool");
  return out + " dtypes";
}

// The element types a rule's reference kernels are instantiated for (f16 and bf16 compute in
// f32, as PyTorch's CPU kernels do).
constexpr unsigned instantiated(Rule rule) {
  switch (rule.compute) {
    case Compute::FloatIfInteger: return kFloats;
    case Compute::Bool: return kBool;
    case Compute::Promoted: break;
  }
  return rule.takes;
}

template <typename T>
constexpr unsigned kCategoryOf = std::is_same_v<T, bool>            ? kBool
                                 : std::is_floating_point_v<T>      ? kFloats
                                 : std::is_integral_v<T>            ? kIntegers
                                                                    : 0u;  // f16, bf16

// ---------------------------------------------------------------- scalar functors

// Transcendental functions of f32 run in double and round once: double has more than twice
// f32's precision, so the result is within half an f32 ULP of the true value, which makes the
// reference the yardstick for the vectorized kernels. Ops PyTorch defines by a sequence of
// roundings in the element type (floor division, remainder) compute in the element type.
template <typename T>
using Wide = std::conditional_t<std::is_floating_point_v<T>, double, T>;

template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Integer arithmetic wraps around like PyTorch's rather than overflowing (undefined in C++).
template <typename T>
T wrapping_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
T wrapping_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T>
T wrapping_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

// Integer quotient and remainder without the traps of x / 0 (ruled out before the loop) and
// MIN / -1 (which wraps, as two's complement negation does).
template <typename T>
T truncated_quotient(T a, T b) {
  if constexpr (std::is_signed_v<T>)
    if (b == T(-1)) return wrapping_sub(T(0), a);
  return static_cast<T>(a / b);
}
template <typename T>
T truncated_remainder(T a, T b) {
  if constexpr (std::is_signed_v<T>)
    if (b == T(-1)) return T(0);
  return static_cast<T>(a % b);
}

// a + alpha * b with alpha converted to the element type, for floats rounded once (PyTorch's
// fused multiply-add). sub is a - alpha * b, PyTorch's add with -alpha.
struct Add {
  double alpha;
  explicit Add(const Node& node) : alpha(node.attr_float("alpha")) {}
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a || (alpha != 0 && b);
    else if constexpr (kIsInteger<T>)
      return wrapping_add(a, wrapping_mul(cpu::convert<T>(alpha), b));
    else return alpha == 1 ? a + b : std::fma(static_cast<T>(alpha), b, a);
  }
};
struct Sub {
  double alpha;
  explicit Sub(const Node& node) : alpha(node.attr_float("alpha")) {}
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) return wrapping_sub(a, wrapping_mul(cpu::convert<T>(alpha), b));
    else return alpha == 1 ? a - b : std::fma(-static_cast<T>(alpha), b, a);
  }
};
struct Mul {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else if constexpr (kIsInteger<T>) return wrapping_mul(a, b);
    else return a * b;
  }
};
struct Div {
  template <typename T> T operator()(T a, T b) const { return a / b; }
};
struct DivTrunc {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) return truncated_quotient(a, b);
    else return std::trunc(a / b);
  }
};
// PyTorch's div_floor: for floats its sequence of roundings in the element type, which keeps
// a / b's sign on zero and corrects a quotient rounded up to an integer.
struct DivFloor {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) {
      const T quotient = truncated_quotient(a, b);
      if constexpr (std::is_signed_v<T>)
        if ((a < 0) != (b < 0) && truncated_remainder(a, b) != 0)
          return wrapping_sub(quotient, T(1));
      return quotient;
    } else {
      if (b == 0) return a / b;
      const T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != 0 && (b < 0) != (mod < 0)) div -= T(1);
      if (div == 0) return std::copysign(T(0), a / b);
      T floor_div = std::floor(div);
      if (div - floor_div > T(0.5)) floor_div += T(1);
      return floor_div;
    }
  }
};
struct Fmod {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) return truncated_remainder(a, b);
    else return std::fmod(a, b);
  }
};
// The remainder with the divisor's sign (Python's %).
struct Remainder {
  template <typename T> T operator()(T a, T b) const {
    T r;
    if constexpr (kIsInteger<T>) r = truncated_remainder(a, b);
    else r = std::fmod(a, b);
    if constexpr (std::is_signed_v<T>)
      if (r != 0 && (b < T(0)) != (r < T(0))) r += b;
    return r;
  }
};

// PyTorch's pow. Integers: repeated squaring, wrapping; a negative exponent gives 0 except for
// bases 1 and -1. Floats: std::pow, except that an exponent given as a Python number (a wrapped
// number) of 2, 3, 0.5, -0.5, -1 or -2 is computed as PyTorch's pow(Tensor, Scalar) computes it,
// in the element type: x * x, x * x * x, sqrt(x), 1 / sqrt(x), 1 / x, 1 / (x * x) (sqrt differs
// from pow at -0 and -inf, and 1 / (x * x) overflows where pow doesn't).
struct Pow {
  bool scalar_exponent = false;
  explicit Pow(const Node& node) {
    for (int64_t i : node.attr_ints("wrapped_numbers")) scalar_exponent |= i == 1;
  }
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) {
          if (a == 1) return 1;
          if (a == -1) return (b % 2) ? T(-1) : T(1);
          return 0;
        }
      }
      T result = 1;
      for (; b != 0; b = static_cast<T>(b / 2)) {
        if (b & 1) result = wrapping_mul(result, a);
        a = wrapping_mul(a, a);
      }
      return result;
    } else {
      if (scalar_exponent) {
        if (b == T(2)) return a * a;
        if (b == T(3)) return a * a * a;
        if (b == T(0.5)) return std::sqrt(a);
        if (b == T(-0.5)) return T(1) / std::sqrt(a);
        if (b == T(-1)) return T(1) / a;
        if (b == T(-2)) return T(1) / (a * a);
      }
      return static_cast<T>(std::pow(Wide<T>(a), Wide<T>(b)));
    }
  }
};

// NaN when either input is NaN (the NaN itself); the first input on ties (+0 and -0).
struct Maximum {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(b)) return b;
    return a < b ? b : a;
  }
};
struct Minimum {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(b)) return b;
    return b < a ? b : a;
  }
};

template <typename Op>
struct Comparison {
  template <typename T> bool operator()(T a, T b) const { return Op{}(a, b); }
};

struct LogicalAnd {
  bool operator()(bool a, bool b) const { return a && b; }
};
struct LogicalOr {
  bool operator()(bool a, bool b) const { return a || b; }
};
struct LogicalXor {
  bool operator()(bool a, bool b) const { return a != b; }
};
struct LogicalNot {
  bool operator()(bool x) const { return !x; }
};

// Bitwise ops on integers and bools (bool & bool is logical and, as in PyTorch).
template <typename Op>
struct Bitwise {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(Op{}(a, b)); }
};
struct BitwiseNot {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return static_cast<T>(~x);
  }
};
// PyTorch's shifts: a count below 0 or past the type's width gives 0 to the left and the sign
// fill to the right, where C++ leaves the result undefined.
struct LeftShift {
  template <typename T> T operator()(T a, T b) const {
    constexpr int kBits = 8 * sizeof(T);
    if (static_cast<std::make_signed_t<T>>(b) < 0 || b >= kBits) return 0;
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) << b);
  }
};
struct RightShift {
  template <typename T> T operator()(T a, T b) const {
    constexpr int kLastShift = 8 * sizeof(T) - std::is_signed_v<T>;
    if (static_cast<std::make_signed_t<T>>(b) < 0 || b >= kLastShift) return a >> kLastShift;
    return a >> b;
  }
};

// The next representable value after a towards b, in the element type itself.
struct NextAfter {
  template <typename T> T operator()(T a, T b) const { return std::nextafter(a, b); }
};
// PyTorch's Euclid on the magnitudes, wrapping as its loop does (gcd(INT_MIN, 0) is INT_MIN).
struct Gcd {
  template <typename T> T operator()(T a, T b) const {
    a = a < T(0) ? wrapping_sub(T(0), a) : a;
    b = b < T(0) ? wrapping_sub(T(0), b) : b;
    while (a != T(0)) {
      const T next = static_cast<T>(b % a);
      b = a;
      a = next;
    }
    return b;
  }
};

// a * b + c rounded once, for converters of PyTorch kernels that the compiler contracted into an
// FMA (linalg_cross).
struct Fma {
  template <typename T> T operator()(T a, T b, T c) const { return std::fma(a, b, c); }
};

struct Where {
  template <typename T> T operator()(bool condition, T a, T b) const { return condition ? a : b; }
};

// `x < 0 ? 0 : x` keeps NaN and -0 as PyTorch does.
struct Relu {
  template <typename T> T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
struct Neg {
  template <typename T> T operator()(T x) const {
    if constexpr (kIsInteger<T>) return wrapping_sub(T(0), x);
    else return -x;
  }
};
struct Abs {
  template <typename T> T operator()(T x) const {
    if constexpr (kIsInteger<T>) return x < T(0) ? wrapping_sub(T(0), x) : x;
    else return std::fabs(x);
  }
};
// (0 < x) - (x < 0): 0 for NaN and both zeros, as PyTorch's.
struct Sign {
  template <typename T> T operator()(T x) const {
    return static_cast<T>(static_cast<int>(T(0) < x) - static_cast<int>(x < T(0)));
  }
};

// ---------------------------------------------------------------- special functions in double

// ln|Gamma(x)| through lgamma_r, which doesn't write the global signgam that lgamma does (the
// kernels run on several threads).
inline double log_gamma(double x) {
  int sign;
  return lgamma_r(x, &sign);
}

// The digamma function as PyTorch defines it at its poles: -inf at +0, +inf at -0, NaN at the
// negative integers and -inf. Below 0 by reflection, psi(x) = psi(1 - x) - pi / tan(pi x) (tan
// taken of x's distance to the nearest integer, exact in double); above, the recurrence
// psi(x) = psi(x + 1) - 1 / x up to 10 and there the asymptotic series to B14, whose next term
// is below 4e-17 (one term less left 1e-14, 13 ULP near psi's positive root, where the result
// is the difference of terms near 2).
inline double digamma(double x) {
  constexpr double kPi = std::numbers::pi;
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  if (x < 0) {
    if (x == std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
    return digamma(1 - x) - kPi / std::tan(kPi * (x - std::round(x)));
  }
  double shift = 0;
  for (; x < 10; x += 1) shift -= 1 / x;
  const double r = 1 / (x * x);  // Bernoulli numbers B2k / 2k
  const double series =
      r * (1.0 / 12 -
           r * (1.0 / 120 -
                r * (1.0 / 252 -
                     r * (1.0 / 240 - r * (1.0 / 132 - r * (691.0 / 32760 - r / 12))))));
  return shift + std::log(x) - 0.5 / x - series;
}

// The inverse of erf: Winitzki's closed form (within 2e-3) refined by Newton steps on erf, or on
// erfc beyond 0.5, where 1 - |y| is exact and erf's residual would lose the tail.
inline double erfinv(double y) {
  constexpr double kPi = std::numbers::pi, kA = 0.147;
  const double magnitude = std::fabs(y);
  if (!(magnitude < 1)) {
    return magnitude == 1 ? std::copysign(std::numeric_limits<double>::infinity(), y)
                          : std::numeric_limits<double>::quiet_NaN();
  }
  if (y == 0) return y;
  const double l = std::log((1 - magnitude) * (1 + magnitude));
  const double t = 2 / (kPi * kA) + l / 2;
  double x = std::sqrt(std::sqrt(t * t - l / kA) - t);
  const double slope = 2 / std::sqrt(kPi);  // d erf / dx = slope * exp(-x^2)
  for (int step = 0; step < 4; ++step) {
    const double residual =
        magnitude > 0.5 ? (1 - magnitude) - std::erfc(x) : std::erf(x) - magnitude;
    x -= residual / (slope * std::exp(-x * x));
  }
  return std::copysign(x, y);
}

// A function evaluated in double for f32 and rounded once.
#define KILN_WIDE_UNARY(Name, expression)                        \
  struct Name {                                                  \
    template <typename T> T operator()(T value) const {          \
      const Wide<T> x = value;                                   \
      return static_cast<T>(expression);                         \
    }                                                            \
  };
KILN_WIDE_UNARY(Exp, std::exp(x))
KILN_WIDE_UNARY(Expm1, std::expm1(x))
KILN_WIDE_UNARY(Log, std::log(x))
KILN_WIDE_UNARY(Log1p, std::log1p(x))
KILN_WIDE_UNARY(Log2, std::log2(x))
KILN_WIDE_UNARY(Sqrt, std::sqrt(x))
KILN_WIDE_UNARY(Rsqrt, 1 / std::sqrt(x))
KILN_WIDE_UNARY(Reciprocal, 1 / x)
KILN_WIDE_UNARY(Sin, std::sin(x))
KILN_WIDE_UNARY(Cos, std::cos(x))
KILN_WIDE_UNARY(Tanh, std::tanh(x))
KILN_WIDE_UNARY(Sigmoid, 1 / (1 + std::exp(-x)))
KILN_WIDE_UNARY(Erf, std::erf(x))
KILN_WIDE_UNARY(Tan, std::tan(x))
KILN_WIDE_UNARY(Asin, std::asin(x))
KILN_WIDE_UNARY(Acos, std::acos(x))
KILN_WIDE_UNARY(Atan, std::atan(x))
KILN_WIDE_UNARY(Sinh, std::sinh(x))
KILN_WIDE_UNARY(Cosh, std::cosh(x))
KILN_WIDE_UNARY(Asinh, std::asinh(x))
KILN_WIDE_UNARY(Acosh, std::acosh(x))
KILN_WIDE_UNARY(Atanh, std::atanh(x))
KILN_WIDE_UNARY(Exp2, std::exp2(x))
KILN_WIDE_UNARY(Log10, std::log10(x))
// x * Phi(x) with Phi written through erfc, which keeps its relative accuracy for x << 0 where
// 1 + erf(x / sqrt 2) would cancel.
KILN_WIDE_UNARY(GeluErf, 0.5 * x * std::erfc(-x * std::numbers::sqrt2 / 2))
// 0.5 x (1 + tanh(u)) written as x * sigmoid(2u), which does not cancel for x << 0.
KILN_WIDE_UNARY(GeluTanh, x / (1 + std::exp(-2 * std::sqrt(2 / std::numbers::pi) *
                                            (x + 0.044715 * x * x * x))))
KILN_WIDE_UNARY(Silu, x / (1 + std::exp(-x)))
KILN_WIDE_UNARY(Mish, x * std::tanh(std::log1p(std::exp(x))))
KILN_WIDE_UNARY(Erfc, std::erfc(x))
KILN_WIDE_UNARY(Erfinv, erfinv(x))
KILN_WIDE_UNARY(Lgamma, log_gamma(x))
KILN_WIDE_UNARY(Digamma, digamma(x))
#undef KILN_WIDE_UNARY

// A function of two operands evaluated in double for f32 and rounded once.
#define KILN_WIDE_BINARY(Name, expression)                        \
  struct Name {                                                   \
    template <typename T> T operator()(T first, T second) const { \
      const Wide<T> a = first, b = second;                        \
      return static_cast<T>(expression);                          \
    }                                                             \
  };
KILN_WIDE_BINARY(Atan2, std::atan2(a, b))
KILN_WIDE_BINARY(Hypot, std::hypot(a, b))
KILN_WIDE_BINARY(CopySign, std::copysign(a, b))
// PyTorch's: equal infinities give themselves (their difference would be NaN).
KILN_WIDE_BINARY(LogAddExp, std::isinf(a) && a == b
                                ? a
                                : std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))))
KILN_WIDE_BINARY(LogAddExp2, std::isinf(a) && a == b
                                 ? a
                                 : std::max(a, b) + std::log1p(std::exp2(-std::abs(a - b))) /
                                                        std::numbers::ln2)
#undef KILN_WIDE_BINARY

// PyTorch's formulas in the element type, rounded at each step as PyTorch rounds them:
// x * min(max(x + 3, 0), 6) / 6 and min(max(x + 3, 0), 6) / 6 (NaN passes: both comparisons are
// false for it).
template <typename T>
T relu6_of_x_plus_3(T x) {
  return std::min(std::max(static_cast<T>(x + 3), T(0)), T(6));
}
struct Hardswish {
  template <typename T> T operator()(T x) const { return x * relu6_of_x_plus_3(x) / T(6); }
};
struct Hardsigmoid {
  template <typename T> T operator()(T x) const { return relu6_of_x_plus_3(x) / T(6); }
};

// Rounding to an integer; integers are their own.
#define KILN_ROUNDING(Name, function)                                        \
  struct Name {                                                              \
    template <typename T> T operator()(T x) const {                          \
      if constexpr (std::is_floating_point_v<T>) return function(x);         \
      else return x;                                                         \
    }                                                                        \
  };
KILN_ROUNDING(Floor, std::floor)
KILN_ROUNDING(Ceil, std::ceil)
KILN_ROUNDING(Trunc, std::trunc)
#undef KILN_ROUNDING

// Half to even (nearbyint in the default rounding mode). With decimals, PyTorch's formula in the
// element type: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for d < 0.
struct Round {
  int64_t decimals;
  explicit Round(const Node& node) : decimals(node.attr_int("decimals")) {}
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (decimals == 0) return std::nearbyint(x);
      const T scale = static_cast<T>(std::pow(10.0, std::fabs(static_cast<double>(decimals))));
      return decimals > 0 ? std::nearbyint(x * scale) / scale : std::nearbyint(x / scale) * scale;
    } else {
      return x;
    }
  }
};

struct IsNan {
  template <typename T> bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
    else return false;
  }
};
struct IsInf {
  template <typename T> bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    else return false;
  }
};

// Attribute parameters become the element type first, as PyTorch converts its Scalars, then
// compute in double.
struct LeakyRelu {
  double slope;
  explicit LeakyRelu(const Node& node) : slope(node.attr_float("negative_slope")) {}
  template <typename T> T operator()(T x) const {
    return x > T(0) ? x : static_cast<T>(Wide<T>(x) * static_cast<T>(slope));
  }
};
struct Elu {
  double alpha, scale, input_scale;
  explicit Elu(const Node& node)
      : alpha(node.attr_float("alpha")),
        scale(node.attr_float("scale")),
        input_scale(node.attr_float("input_scale")) {}
  template <typename T> T operator()(T value) const {
    const Wide<T> x = value;
    if (x > 0) return static_cast<T>(x * static_cast<T>(scale));
    return static_cast<T>(std::expm1(x * static_cast<T>(input_scale)) *
                          (Wide<T>(static_cast<T>(alpha)) * static_cast<T>(scale)));
  }
};
// x when x * beta > threshold (PyTorch's switch to the linear function), else
// log1p(e^(x beta)) / beta.
struct Softplus {
  double beta, threshold;
  explicit Softplus(const Node& node)
      : beta(node.attr_float("beta")), threshold(node.attr_float("threshold")) {}
  template <typename T> T operator()(T value) const {
    const Wide<T> x = value, b = static_cast<T>(beta);
    if (x * b > static_cast<T>(threshold)) return value;
    return static_cast<T>(std::log1p(std::exp(x * b)) / b);
  }
};
// min(max(x, lo), hi): x on ties and when x is NaN; a NaN bound makes every result NaN (PyTorch's
// clamp with both bounds). For integers an infinite bound is no bound.
struct Clamp {
  double lo, hi;
  Clamp(double lo, double hi) : lo(lo), hi(hi) {}
  explicit Clamp(const Node& node)
      : Clamp(node.attr_float(node.op() == "clamp" ? "min" : "min_val"),
              node.attr_float(node.op() == "clamp" ? "max" : "max_val")) {}
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(lo) || std::isnan(hi)) return std::numeric_limits<T>::quiet_NaN();
      const T low = static_cast<T>(lo), high = static_cast<T>(hi);
      const T y = x < low ? low : x;
      return high < y ? high : y;
    } else {
      T y = x;
      if (std::isfinite(lo) && y < cpu::convert<T>(lo)) y = cpu::convert<T>(lo);
      if (std::isfinite(hi) && cpu::convert<T>(hi) < y) y = cpu::convert<T>(hi);
      return y;
    }
  }
};

// ---------------------------------------------------------------- array functions

// fn(inputs, steps, out, n): out[i] = f(inputs[k][i * steps[k]]...) for i < n, the inputs and
// the output in the op's computing and result types; each step is 1 or 0 (broadcast).
using ArrayFn =
    std::function<void(const void* const* inputs, const int64_t* steps, void* out, int64_t n)>;

// bool elements loaded and stored as bytes: GCC 12 vectorizes no loop that loads or stores bool
// (logical_not took 12 times eager's time), but one that converts bytes, `byte != 0`, and back.
template <typename T>
using Bytes = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

// Inlined into the two loops below, which differ only in the instruction set they are compiled
// for: the same C++ and, as -ffp-contract=off forbids fused multiply-adds, the same bits.
template <typename... In, typename F, size_t... I>
[[gnu::always_inline]] inline void apply_array(const F& f, const void* const* inputs,
                                               const int64_t* steps, void* out, int64_t n,
                                               std::index_sequence<I...>) {
  using R = decltype(f(In{}...));
  Bytes<R>* y = static_cast<Bytes<R>*>(out);
  const std::tuple<const Bytes<In>*...> x{static_cast<const Bytes<In>*>(inputs[I])...};
  if (((steps[I] == 1) && ...)) {  // the common case, in a loop the compiler can vectorize
    for (int64_t i = 0; i < n; ++i) y[i] = f(static_cast<In>(std::get<I>(x)[i])...);
  } else {
    const std::array<int64_t, sizeof...(In)> step{steps[I]...};
    for (int64_t i = 0; i < n; ++i) y[i] = f(static_cast<In>(std::get<I>(x)[i * step[I]])...);
  }
}

template <typename... In, typename F>
void apply_array_portable(const F& f, const void* const* inputs, const int64_t* steps, void* out,
                          int64_t n) {
  apply_array<In...>(f, inputs, steps, out, n, std::index_sequence_for<In...>{});
}

#ifdef KILN_X86
// The ops without kernels of their own (integer arithmetic, predicates, logical ops) gain most
// from AVX2: the portable build's SSE2 has no 32-bit multiply, for one.
template <typename... In, typename F>
KILN_TARGET_AVX2 void apply_array_avx2(const F& f, const void* const* inputs,
                                       const int64_t* steps, void* out, int64_t n) {
  apply_array<In...>(f, inputs, steps, out, n, std::index_sequence_for<In...>{});
}
#endif

template <typename... In, typename F>
ArrayFn array_fn(F f) {
#ifdef KILN_X86
  if (cpu::has_avx2_fma())
    return [f](const void* const* inputs, const int64_t* steps, void* out, int64_t n) {
      apply_array_avx2<In...>(f, inputs, steps, out, n);
    };
#endif
  return [f](const void* const* inputs, const int64_t* steps, void* out, int64_t n) {
    apply_array_portable<In...>(f, inputs, steps, out, n);
  };
}

template <typename F>
F make_functor(const Node& node) {
  if constexpr (std::is_constructible_v<F, const Node&>) return F(node);
  else return F{};
}

// The reference array function of functor F for the computing dtype (one of the types
// instantiated(R) covers).
template <typename F, Rule R, int Arity, bool Condition>
ArrayFn reference_fn(const Node& node, DType compute) {
  return cpu::dispatch_dtype(compute, [&](auto zero) -> ArrayFn {
    using C = decltype(zero);
    if constexpr ((instantiated(R) & kCategoryOf<C>) != 0) {
      const F f = make_functor<F>(node);
      if constexpr (Condition) return array_fn<bool, C, C>(f);
      else if constexpr (Arity == 1) return array_fn<C>(f);
      else if constexpr (Arity == 2) return array_fn<C, C>(f);
      else return array_fn<C, C, C>(f);
    } else {
      KILN_ASSERT(false, node.op() << " has no reference kernel for " << dtype_name(compute));
      return {};
    }
  });
}

#ifdef KILN_X86
ArrayFn unary_vector(cpu::UnaryArrayFn fn) {
  return [fn](const void* const* in, const int64_t*, void* out, int64_t n) {
    fn(static_cast<const float*>(in[0]), static_cast<float*>(out), n);
  };
}
ArrayFn binary_vector(cpu::BinaryArrayFn fn) {
  return [fn](const void* const* in, const int64_t* steps, void* out, int64_t n) {
    fn(static_cast<const float*>(in[0]), steps[0], static_cast<const float*>(in[1]), steps[1],
       static_cast<float*>(out), n);
  };
}
ArrayFn binary_vector_bf16(cpu::Bf16BinaryArrayFn fn) {
  return [fn](const void* const* in, const int64_t* steps, void* out, int64_t n) {
    fn(static_cast<const cpu::BFloat16*>(in[0]), steps[0],
       static_cast<const cpu::BFloat16*>(in[1]), steps[1], static_cast<cpu::BFloat16*>(out), n);
  };
}
ArrayFn compare_vector(cpu::CompareArrayFn fn) {
  return [fn](const void* const* in, const int64_t* steps, void* out, int64_t n) {
    fn(static_cast<const float*>(in[0]), steps[0], static_cast<const float*>(in[1]), steps[1],
       static_cast<bool*>(out), n);
  };
}
#endif

// ---------------------------------------------------------------- the op table

struct OpEntry {
  std::string_view name;
  int arity;  // inputs, the condition included
  bool condition;  // the first input is where's condition
  Rule rule;
  // The value of `variant_attr` that selects this entry among those of the same name
  // (gelu's approximate, div's rounding_mode); both empty for ops with one entry.
  std::string_view variant_attr, variant;
  std::vector<AttrSpec> attrs;  // besides the variant and wrapped_numbers
  ArrayFn (*reference)(const Node& node, DType compute);
  // The AVX2 array function for this node (f32), or an empty one when its attributes or
  // constant inputs have none. Null for ops without AVX2 kernels, and off x86.
  ArrayFn (*vector)(const KernelSpec& spec) = nullptr;
  // The same on bf16 operands and result (no f32 blocks between), for nodes whose inputs and
  // output are all bf16; empty where the attributes have none. Null for the other ops.
  ArrayFn (*bf16_vector)(const KernelSpec& spec) = nullptr;
  // Integer division and remainder: a zero divisor (input 1) is an E40002, checked before the loop.
  bool checks_divisor = false;
  // Further checks against the output dtype, the inputs' promoted one (bounds that must fit it,
  // ...; f16 and bf16 compute in f32).
  void (*check)(InferContext& ctx, DType dtype) = nullptr;
};

template <typename F, Rule R, int Arity = 1, bool Condition = false>
OpEntry entry(std::string_view name, std::vector<AttrSpec> attrs = {},
              ArrayFn (*vector)(const KernelSpec&) = nullptr) {
  return OpEntry{name, Arity, Condition, R, {}, {}, std::move(attrs),
                 &reference_fn<F, R, Arity, Condition>, vector};
}

OpEntry with_variant(OpEntry e, std::string_view attr, std::string_view value) {
  e.variant_attr = attr;
  e.variant = value;
  return e;
}
OpEntry checking_divisor(OpEntry e) {
  e.checks_divisor = true;
  return e;
}
OpEntry with_check(OpEntry e, void (*check)(InferContext&, DType)) {
  e.check = check;
  return e;
}
OpEntry with_bf16(OpEntry e, ArrayFn (*bf16_vector)(const KernelSpec&)) {
  e.bf16_vector = bf16_vector;
  return e;
}

// Finite bounds must fit an integer dtype (PyTorch: "value cannot be converted without
// overflow"); NaN bounds are for floats only.
void check_bounds(InferContext& ctx, DType dtype) {
  if (is_floating(dtype)) return;
  const bool clamp = ctx.op() == "clamp";
  for (const char* name : {clamp ? "min" : "min_val", clamp ? "max" : "max_val"}) {
    const double bound = ctx.attr_float(name);
    if (std::isinf(bound)) continue;
    std::string why = std::isnan(bound) ? "NaN is not a " + std::string(dtype_name(dtype))
                                        : cpu::scalar_unrepresentable_reason(dtype, bound);
    ctx.check(why.empty(), "attribute '" + std::string(name) + "': " + why);
  }
}

// PyTorch takes an integral alpha for integer dtypes and 0 or 1 for bool.
void check_alpha(InferContext& ctx, DType dtype) {
  const double alpha = ctx.attr_float("alpha");
  if (is_floating(dtype)) return;
  ctx.check(dtype == DType::Bool ? alpha == 0 || alpha == 1 : alpha == std::trunc(alpha),
            "attribute 'alpha' is " + std::to_string(alpha) + ", which is not a " +
                std::string(dtype_name(dtype)) + " (the inputs' promoted dtype)");
  if (dtype != DType::Bool) {
    const std::string why = cpu::scalar_unrepresentable_reason(dtype, alpha);
    ctx.check(why.empty(), "attribute 'alpha': " + why);
  }
}

// nextafter steps on its dtype's own grid and fma rounds once in it: f16 and bf16 would compute
// in f32.
void check_full_width_float(InferContext& ctx, DType dtype) {
  ctx.check(dtype == DType::F32 || dtype == DType::F64,
            ctx.op() + " takes f32 and f64, not " + std::string(dtype_name(dtype)) +
                "; cast its operands to f32 (the result is then the f32 neighbour)");
}

void check_decimals(InferContext& ctx, DType dtype) {
  ctx.check(ctx.attr_int("decimals") == 0 || is_floating(dtype),
            "round with decimals takes floating dtypes, not " + std::string(dtype_name(dtype)));
}

#ifdef KILN_X86
// The vector kernels of ops without attributes (16 lanes where cpu::widest has them).
template <cpu::UnaryArrayFn F>
ArrayFn unary_avx2(const KernelSpec&) {
  return unary_vector(cpu::widest(F));
}
template <cpu::BinaryArrayFn F>
ArrayFn binary_avx2(const KernelSpec&) {
  return binary_vector(F);
}
template <cpu::Bf16BinaryArrayFn F>
ArrayFn binary_bf16(const KernelSpec&) {
  return binary_vector_bf16(F);
}
// add and sub with alpha 1 (the others round a + alpha * b once, in f32).
template <cpu::Bf16BinaryArrayFn F>
ArrayFn add_bf16(const KernelSpec& spec) {
  if (spec.node.attr_float("alpha") != 1) return {};
  return binary_vector_bf16(F);
}
template <cpu::CompareArrayFn F>
ArrayFn compare_avx2(const KernelSpec&) {
  return compare_vector(F);
}

ArrayFn clamp_avx2(const KernelSpec& spec) {
  const Clamp c(spec.node);
  if (std::isnan(c.lo) || std::isnan(c.hi)) return {};  // every result NaN: the reference's
  return [lo = static_cast<float>(c.lo), hi = static_cast<float>(c.hi)](
             const void* const* in, const int64_t*, void* out, int64_t n) {
    cpu::avx2::clamp(static_cast<const float*>(in[0]), static_cast<float*>(out), n, lo, hi);
  };
}

ArrayFn leaky_relu_avx2(const KernelSpec& spec) {
  return [slope = static_cast<float>(spec.node.attr_float("negative_slope"))](
             const void* const* in, const int64_t*, void* out, int64_t n) {
    cpu::avx2::leaky_relu(static_cast<const float*>(in[0]), static_cast<float*>(out), n, slope);
  };
}

// Parameters as the reference converts them: each to f32 first, alpha * scale then in double.
ArrayFn elu_avx2(const KernelSpec& spec) {
  const Elu e(spec.node);
  const float scale = static_cast<float>(e.scale);
  const auto negative_factor = static_cast<float>(
      static_cast<double>(static_cast<float>(e.alpha)) * static_cast<double>(scale));
  // The 16-lane loop gives the 8-lane loop's bits.
  const auto fn = cpu::has_avx512f() ? &cpu::avx512::elu : &cpu::avx2::elu;
  return [fn, scale, input_scale = static_cast<float>(e.input_scale), negative_factor](
             const void* const* in, const int64_t*, void* out, int64_t n) {
    fn(static_cast<const float*>(in[0]), static_cast<float*>(out), n, scale, input_scale,
       negative_factor);
  };
}

ArrayFn softplus_avx2(const KernelSpec& spec) {
  const Softplus p(spec.node);
  // The 16-lane loop gives the 8-lane loop's bits.
  const auto fn = cpu::has_avx512f() ? &cpu::avx512::softplus : &cpu::avx2::softplus;
  return [fn, beta = static_cast<float>(p.beta), threshold = static_cast<float>(p.threshold)](
             const void* const* in, const int64_t*, void* out, int64_t n) {
    fn(static_cast<const float*>(in[0]), static_cast<float*>(out), n, beta, threshold);
  };
}

ArrayFn round_avx2(const KernelSpec& spec) {
  if (spec.node.attr_int("decimals") != 0) return {};
  return unary_vector(&cpu::avx2::round);
}

// pow with a constant Python-number exponent that PyTorch computes without pow().
ArrayFn pow_avx2(const KernelSpec& spec) {
  const std::vector<int64_t>& wrapped = spec.node.attr_ints("wrapped_numbers");
  const Tensor* exponent = spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
  if (!exponent || std::find(wrapped.begin(), wrapped.end(), 1) == wrapped.end()) return {};
  float e = 0;
  cpu::cast_reference(exponent->dtype(), DType::F32, exponent->data(), &e, 0, 1);
  const std::pair<float, cpu::UnaryArrayFn> kernels[] = {
      {2.0f, &cpu::avx2::square}, {3.0f, &cpu::avx2::cube},   {0.5f, &cpu::avx2::sqrt},
      {-0.5f, &cpu::avx2::rsqrt}, {-1.0f, &cpu::avx2::reciprocal},
      {-2.0f, &cpu::avx2::reciprocal_square}};
  for (const auto& [value, fn] : kernels) {
    if (e != value) continue;
    // The base is input 0: the exponent's step is ignored.
    return [fn](const void* const* in, const int64_t*, void* out, int64_t n) {
      fn(static_cast<const float*>(in[0]), static_cast<float*>(out), n);
    };
  }
  return {};
}

// a + alpha * b: the plain kernels for alpha = 1, else one fused multiply-add.
template <cpu::BinaryArrayFn Plain, int Sign>
ArrayFn add_avx2(const KernelSpec& spec) {
  const double alpha = spec.node.attr_float("alpha");
  if (alpha == 1) return binary_vector(Plain);
  return [scale = Sign * static_cast<float>(alpha)](const void* const* in, const int64_t* steps,
                                                    void* out, int64_t n) {
    cpu::avx2::add_scaled(static_cast<const float*>(in[0]), steps[0],
                          static_cast<const float*>(in[1]), steps[1], static_cast<float*>(out), n,
                          scale);
  };
}

ArrayFn div_avx2(const KernelSpec& spec) {
  if (spec.node.attr_string("rounding_mode") != "none") return {};
  return binary_vector(&cpu::avx2::div);
}

ArrayFn where_avx2(const KernelSpec&) {
  return [](const void* const* in, const int64_t* steps, void* out, int64_t n) {
    cpu::avx2::where(static_cast<const bool*>(in[0]), steps[0], static_cast<const float*>(in[1]),
                     steps[1], static_cast<const float*>(in[2]), steps[2],
                     static_cast<float*>(out), n);
  };
}
#define KILN_AVX2(maker) &maker
#else
#define KILN_AVX2(maker) nullptr
#endif

const std::vector<OpEntry>& op_table() {
  using A = AttrSpec;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  static const std::vector<OpEntry> table = {
      // unary
      entry<Relu, kNumeric>("relu", {}, KILN_AVX2(unary_avx2<&cpu::avx2::relu>)),
      entry<Neg, kNumeric>("neg", {}, KILN_AVX2(unary_avx2<&cpu::avx2::neg>)),
      entry<Abs, kNumeric>("abs", {}, KILN_AVX2(unary_avx2<&cpu::avx2::abs>)),
      entry<Sign, kAny>("sign"),
      entry<BitwiseNot, kBitwise>("bitwise_not"),
      entry<Exp, kFloating>("exp", {}, KILN_AVX2(unary_avx2<&cpu::avx2::exp>)),
      entry<Expm1, kFloating>("expm1", {}, KILN_AVX2(unary_avx2<&cpu::avx2::expm1>)),
      entry<Log, kFloating>("log", {}, KILN_AVX2(unary_avx2<&cpu::avx2::log>)),
      entry<Log1p, kFloating>("log1p", {}, KILN_AVX2(unary_avx2<&cpu::avx2::log1p>)),
      entry<Log2, kFloating>("log2", {}, KILN_AVX2(unary_avx2<&cpu::avx2::log2>)),
      entry<Sqrt, kFloating>("sqrt", {}, KILN_AVX2(unary_avx2<&cpu::avx2::sqrt>)),
      entry<Rsqrt, kFloating>("rsqrt", {}, KILN_AVX2(unary_avx2<&cpu::avx2::rsqrt>)),
      entry<Reciprocal, kFloating>("reciprocal", {},
                                   KILN_AVX2(unary_avx2<&cpu::avx2::reciprocal>)),
      entry<Sin, kFloating>("sin", {}, KILN_AVX2(unary_avx2<&cpu::avx2::sin>)),
      entry<Cos, kFloating>("cos", {}, KILN_AVX2(unary_avx2<&cpu::avx2::cos>)),
      entry<Tanh, kFloating>("tanh", {}, KILN_AVX2(unary_avx2<&cpu::avx2::tanh>)),
      entry<Sigmoid, kFloating>("sigmoid", {}, KILN_AVX2(unary_avx2<&cpu::avx2::sigmoid>)),
      entry<Erf, kFloating>("erf", {}, KILN_AVX2(unary_avx2<&cpu::avx2::erf>)),
      entry<Erfc, kFloating>("erfc"),
      entry<Erfinv, kFloating>("erfinv"),
      entry<Lgamma, kFloating>("lgamma"),
      entry<Digamma, kFloating>("digamma"),
      // Rare in models: the reference loop alone (libm in double, one rounding).
      entry<Tan, kFloating>("tan"),
      entry<Asin, kFloating>("asin"),
      entry<Acos, kFloating>("acos"),
      entry<Atan, kFloating>("atan"),
      entry<Sinh, kFloating>("sinh"),
      entry<Cosh, kFloating>("cosh"),
      entry<Asinh, kFloating>("asinh"),
      entry<Acosh, kFloating>("acosh"),
      entry<Atanh, kFloating>("atanh"),
      entry<Exp2, kFloating>("exp2"),
      entry<Log10, kFloating>("log10"),
      with_variant(entry<GeluErf, kFloatOnly>("gelu", {},
                                              KILN_AVX2(unary_avx2<&cpu::avx2::gelu_erf>)),
                   "approximate", "none"),
      with_variant(entry<GeluTanh, kFloatOnly>("gelu", {},
                                               KILN_AVX2(unary_avx2<&cpu::avx2::gelu_tanh>)),
                   "approximate", "tanh"),
      entry<Silu, kFloatOnly>("silu", {}, KILN_AVX2(unary_avx2<&cpu::avx2::silu>)),
      entry<Mish, kFloatOnly>("mish", {}, KILN_AVX2(unary_avx2<&cpu::avx2::mish>)),
      entry<Hardswish, kFloatOnly>("hardswish", {},
                                   KILN_AVX2(unary_avx2<&cpu::avx2::hardswish>)),
      entry<Hardsigmoid, kFloatOnly>("hardsigmoid", {},
                                     KILN_AVX2(unary_avx2<&cpu::avx2::hardsigmoid>)),
      entry<LeakyRelu, kFloatOnly>("leaky_relu", {A{"negative_slope", 0.01}},
                                   KILN_AVX2(leaky_relu_avx2)),
      entry<Elu, kFloatOnly>("elu", {A{"alpha", 1.0}, A{"scale", 1.0}, A{"input_scale", 1.0}},
                            KILN_AVX2(elu_avx2)),
      entry<Softplus, kFloatOnly>("softplus", {A{"beta", 1.0}, A{"threshold", 20.0}},
                                 KILN_AVX2(softplus_avx2)),
      with_check(entry<Clamp, kNumeric>("hardtanh", {A{"min_val", -1.0}, A{"max_val", 1.0}},
                                        KILN_AVX2(clamp_avx2)),
                 &check_bounds),
      with_check(entry<Clamp, kNumeric>("clamp", {A{"min", -kInf}, A{"max", kInf}},
                                        KILN_AVX2(clamp_avx2)),
                 &check_bounds),
      entry<Floor, kNumeric>("floor", {}, KILN_AVX2(unary_avx2<&cpu::avx2::floor>)),
      entry<Ceil, kNumeric>("ceil", {}, KILN_AVX2(unary_avx2<&cpu::avx2::ceil>)),
      entry<Trunc, kNumeric>("trunc", {}, KILN_AVX2(unary_avx2<&cpu::avx2::trunc>)),
      with_check(entry<Round, kNumeric>("round", {A{"decimals", int64_t{0}}},
                                        KILN_AVX2(round_avx2)),
                 &check_decimals),
      entry<IsNan, kPredicate>("isnan"),
      entry<IsInf, kPredicate>("isinf"),
      entry<LogicalNot, kLogical>("logical_not"),
      // binary
      with_bf16(with_check(entry<Add, kAny, 2>("add", {A{"alpha", 1.0}},
                                               KILN_AVX2((add_avx2<&cpu::avx2::add, 1>))),
                           &check_alpha),
                KILN_AVX2(add_bf16<&cpu::avx2::add>)),
      with_bf16(with_check(entry<Sub, kNumeric, 2>("sub", {A{"alpha", 1.0}},
                                                   KILN_AVX2((add_avx2<&cpu::avx2::sub, -1>))),
                           &check_alpha),
                KILN_AVX2(add_bf16<&cpu::avx2::sub>)),
      with_bf16(entry<Mul, kAny, 2>("mul", {}, KILN_AVX2(binary_avx2<&cpu::avx2::mul>)),
                KILN_AVX2(binary_bf16<&cpu::avx2::mul>)),
      with_bf16(with_variant(entry<Div, kFloating, 2>("div", {}, KILN_AVX2(div_avx2)),
                             "rounding_mode", "none"),
                KILN_AVX2(binary_bf16<&cpu::avx2::div>)),
      checking_divisor(
          with_variant(entry<DivTrunc, kNumeric, 2>("div"), "rounding_mode", "trunc")),
      checking_divisor(
          with_variant(entry<DivFloor, kNumeric, 2>("div"), "rounding_mode", "floor")),
      entry<Pow, kNumeric, 2>("pow", {}, KILN_AVX2(pow_avx2)),
      with_bf16(entry<Maximum, kAny, 2>("maximum", {},
                                        KILN_AVX2(binary_avx2<&cpu::avx2::maximum>)),
                KILN_AVX2(binary_bf16<&cpu::avx2::maximum>)),
      with_bf16(entry<Minimum, kAny, 2>("minimum", {},
                                        KILN_AVX2(binary_avx2<&cpu::avx2::minimum>)),
                KILN_AVX2(binary_bf16<&cpu::avx2::minimum>)),
      checking_divisor(
          entry<Fmod, kNumeric, 2>("fmod", {}, KILN_AVX2(binary_avx2<&cpu::avx2::fmod>))),
      checking_divisor(entry<Remainder, kNumeric, 2>(
          "remainder", {}, KILN_AVX2(binary_avx2<&cpu::avx2::remainder>))),
      entry<Atan2, kFloating, 2>("atan2"),
      entry<Hypot, kFloatOnly, 2>("hypot"),
      entry<LogAddExp, kFloatOnly, 2>("logaddexp"),
      entry<LogAddExp2, kFloatOnly, 2>("logaddexp2"),
      entry<CopySign, kFloating, 2>("copysign"),
      entry<Comparison<std::equal_to<>>, kPredicate, 2>("eq", {},
                                                       KILN_AVX2(compare_avx2<&cpu::avx2::eq>)),
      entry<Comparison<std::not_equal_to<>>, kPredicate, 2>(
          "ne", {}, KILN_AVX2(compare_avx2<&cpu::avx2::ne>)),
      entry<Comparison<std::less<>>, kPredicate, 2>("lt", {},
                                                   KILN_AVX2(compare_avx2<&cpu::avx2::lt>)),
      entry<Comparison<std::less_equal<>>, kPredicate, 2>(
          "le", {}, KILN_AVX2(compare_avx2<&cpu::avx2::le>)),
      entry<Comparison<std::greater<>>, kPredicate, 2>("gt", {},
                                                      KILN_AVX2(compare_avx2<&cpu::avx2::gt>)),
      entry<Comparison<std::greater_equal<>>, kPredicate, 2>(
          "ge", {}, KILN_AVX2(compare_avx2<&cpu::avx2::ge>)),
      entry<LogicalAnd, kLogical, 2>("logical_and"),
      entry<LogicalOr, kLogical, 2>("logical_or"),
      entry<LogicalXor, kLogical, 2>("logical_xor"),
      entry<Bitwise<std::bit_and<>>, kBitwise, 2>("bitwise_and"),
      entry<Bitwise<std::bit_or<>>, kBitwise, 2>("bitwise_or"),
      entry<Bitwise<std::bit_xor<>>, kBitwise, 2>("bitwise_xor"),
      with_check(entry<NextAfter, kFloatOnly, 2>("nextafter"), &check_full_width_float),
      entry<Gcd, kIntegerOnly, 2>("gcd"),
      entry<LeftShift, kIntegerOnly, 2>("bitwise_left_shift"),
      entry<RightShift, kIntegerOnly, 2>("bitwise_right_shift"),
      // ternary
      entry<Where, kAny, 3, true>("where", {}, KILN_AVX2(where_avx2)),
      with_check(entry<Fma, kFloatOnly, 3>("fma"), &check_full_width_float),
  };
  return table;
}
#undef KILN_AVX2

// The entry of `op` that the node's variant attribute selects, or null.
const OpEntry* find_entry(const std::string& op, const AttrMap& attrs) {
  for (const OpEntry& e : op_table()) {
    if (e.name != op) continue;
    if (e.variant_attr.empty()) return &e;
    auto it = attrs.find(std::string(e.variant_attr));
    const std::string* value = it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    if (value && *value == e.variant) return &e;
  }
  return nullptr;
}

// ---------------------------------------------------------------- dtypes of a node

// What a node reads, computes and writes.
struct Signature {
  std::vector<DType> compute;  // per input: the type the array function reads
  DType result;                // the type the array function writes
  DType output;                // the output's dtype
};

// The signature of an entry for these input types, or the reason it can't take them.
std::string signature_of(const OpEntry& e, const std::vector<TensorType>& inputs,
                         const std::vector<int64_t>& wrapped, Signature& sig) {
  const size_t first_value = e.condition ? 1 : 0;
  std::vector<PromotionOperand> operands;
  for (size_t i = first_value; i < inputs.size(); ++i)
    operands.push_back({inputs[i].dtype, inputs[i].rank(),
                        std::find(wrapped.begin(), wrapped.end(), int64_t(i)) != wrapped.end()});
  const DType promoted = result_type(operands);
  if (!(e.rule.takes & category_of(promoted))) {
    std::string label(e.name), dtypes;
    if (!e.variant_attr.empty())
      label += " with " + std::string(e.variant_attr) + " \"" + std::string(e.variant) + "\"";
    for (const TensorType& t : inputs)
      dtypes += (dtypes.empty() ? "" : ", ") + std::string(dtype_name(t.dtype));
    return label + " takes " + categories_string(e.rule.takes) + ", not " +
           std::string(dtype_name(promoted)) +
           (inputs.size() > 1 ? " (the promoted dtype of " + dtypes + ")" : "");
  }
  DType value = promoted;
  if (e.rule.compute == Compute::FloatIfInteger && !is_floating(value)) value = DType::F32;
  DType compute = is_floating(value) && dtype_size(value) == 2 ? DType::F32 : value;
  if (e.rule.compute == Compute::Bool) compute = DType::Bool;
  sig.compute.assign(inputs.size(), compute);
  if (e.condition) sig.compute[0] = DType::Bool;
  sig.result = e.rule.bool_result ? DType::Bool : compute;
  sig.output = e.rule.bool_result ? DType::Bool : value;
  return "";
}

const std::vector<int64_t>& wrapped_numbers(const AttrMap& attrs) {
  static const std::vector<int64_t> none;
  auto it = attrs.find("wrapped_numbers");
  return it == attrs.end() ? none : std::get<std::vector<int64_t>>(it->second);
}

Signature signature_of(const OpEntry& e, const KernelSpec& spec) {
  Signature sig;
  const std::string why = signature_of(e, spec.inputs, wrapped_numbers(spec.node.attrs()), sig);
  KILN_ASSERT(why.empty(), why);
  return sig;
}

// ---------------------------------------------------------------- the driver

// Converts n elements between dtypes: the vector cast where there is one (f16 <-> f32, ...).
using ConvertFn = std::function<void(const void* in, void* out, int64_t n)>;

ConvertFn converter(DType from, DType to) {
  if (cpu::vector_cast_unsupported_reason(from, to).empty()) {
    cpu::CastArrayFn fn = cpu::vector_cast(from, to);
    return [fn](const void* in, void* out, int64_t n) { fn(in, out, n); };
  }
  return [from, to](const void* in, void* out, int64_t n) {
    cpu::cast_reference(from, to, in, out, 0, n);
  };
}

// Elements per block when inputs or the output go through a conversion: small enough that the
// blocks of every operand stay in L1.
constexpr int64_t kBlock = 256;

class ElementwiseKernel final : public KernelInstance {
 public:
  ElementwiseKernel(const KernelSpec& spec, const OpEntry& e, const Signature& sig, ArrayFn fn)
      : node_name_(spec.node.name()),
        op_(spec.node.op()),
        plan_(input_sizes(spec), spec.output_sizes(0)),
        sig_(sig),
        fn_(std::move(fn)),
        threads_(spec.threads),
        checks_divisor_(e.checks_divisor && !is_floating(sig.compute[1])) {
    for (size_t k = 0; k < spec.inputs.size(); ++k) {
      stored_.push_back(spec.inputs[k].dtype);
      numel_.push_back(num_elements(spec.input_sizes(k)));
      to_compute_.push_back(stored_[k] == sig.compute[k] ? ConvertFn()
                                                         : converter(stored_[k], sig.compute[k]));
    }
    if (sig.result != sig.output) to_output_ = converter(sig.result, sig.output);
  }

  void run(std::span<const void* const> in, std::span<void* const> out, void*) const override {
    if (plan_.numel() == 0) return;
    const size_t n_in = stored_.size();
    // Inputs in the computing types. A single element (a Python number, a rank-0 tensor) of
    // another dtype is converted once here, which keeps the vector kernels for `x * 0.5`.
    std::array<const std::byte*, cpu::BroadcastPlan::kMaxInputs> data{};
    std::array<uint64_t, cpu::BroadcastPlan::kMaxInputs> single{};
    std::array<bool, cpu::BroadcastPlan::kMaxInputs> convert{};
    std::array<size_t, cpu::BroadcastPlan::kMaxInputs> size{};
    for (size_t k = 0; k < n_in; ++k) {
      data[k] = static_cast<const std::byte*>(in[k]);
      convert[k] = static_cast<bool>(to_compute_[k]);
      if (convert[k] && numel_[k] == 1) {
        to_compute_[k](in[k], &single[k], 1);
        data[k] = reinterpret_cast<const std::byte*>(&single[k]);
        convert[k] = false;
      }
      size[k] = dtype_size(convert[k] ? stored_[k] : sig_.compute[k]);
    }
    if (checks_divisor_) check_divisor(data[1], convert[1]);
    const bool blocked = to_output_ || std::any_of(convert.begin(), convert.end(), std::identity());
    const size_t out_size = dtype_size(sig_.output);
    std::byte* y = static_cast<std::byte*>(out[0]);

    cpu::parallel_chunks(plan_.numel(), 1, threads_, [&](int64_t begin, int64_t end) {
#ifdef KILN_X86
      // The thread's chunk of y, written run by run (a row broadcast's rows): the vector loops
      // judge by all of it whether to stream their stores (not when they write a block to
      // convert).
      std::optional<cpu::avx2::StreamingRegion> region;
      if (!to_output_) region.emplace((end - begin) * static_cast<int64_t>(out_size));
#endif
      // Per-thread blocks for converted inputs and a converted result.
      alignas(64) std::byte buffers[cpu::BroadcastPlan::kMaxInputs + 1][kBlock * 8];
      plan_.for_each_run_n(begin, end, [&](int64_t o, const int64_t* offsets, int64_t count,
                                           const int64_t* steps) {
        std::array<const void*, cpu::BroadcastPlan::kMaxInputs> x{};
        for (int64_t done = 0; done < count;) {
          const int64_t n = blocked ? std::min(kBlock, count - done) : count;
          for (size_t k = 0; k < n_in; ++k) {
            const std::byte* p = data[k] + (offsets[k] + done * steps[k]) * size[k];
            if (convert[k]) {
              to_compute_[k](p, buffers[k], steps[k] ? n : 1);
              p = buffers[k];
            }
            x[k] = p;
          }
          std::byte* target = y + (o + done) * out_size;
          if (to_output_) {
            fn_(x.data(), steps, buffers[n_in], n);
            to_output_(buffers[n_in], target, n);
          } else {
            fn_(x.data(), steps, target, n);
          }
          done += n;
        }
      });
    });
  }

 private:
  static std::vector<std::vector<int64_t>> input_sizes(const KernelSpec& spec) {
    std::vector<std::vector<int64_t>> sizes;
    for (size_t k = 0; k < spec.inputs.size(); ++k) sizes.push_back(spec.input_sizes(k));
    return sizes;
  }

  // PyTorch raises ZeroDivisionError for an integer division by zero; x86 would trap. Runs
  // before the parallel loop, which can't carry an exception.
  void check_divisor(const std::byte* divisor, bool convert) const {
    const DType compute = sig_.compute[1];
    const size_t size = dtype_size(convert ? stored_[1] : compute);
    alignas(64) std::byte buffer[kBlock * 8];
    for (int64_t begin = 0; begin < numel_[1]; begin += kBlock) {
      const int64_t count = std::min(kBlock, numel_[1] - begin);
      const void* values = divisor + begin * size;
      if (convert) {
        to_compute_[1](values, buffer, count);
        values = buffer;
      }
      const bool zero = cpu::dispatch_dtype(compute, [&](auto z) {
        using T = decltype(z);
        const T* v = static_cast<const T*>(values);
        if constexpr (kIsInteger<T>) return std::find(v, v + count, T(0)) != v + count;
        else return false;
      });
      if (zero)
        throw_error(ErrorCode::ShapeInference, "node '", node_name_, "' (", op_,
                    "): integer division by zero: input b holds 0 (as ", dtype_name(compute),
                    "), which has no integer quotient or remainder; PyTorch raises "
                    "ZeroDivisionError here. Check the divisors fed to this node.");
    }
  }

  std::string node_name_, op_;
  cpu::BroadcastPlan plan_;
  Signature sig_;
  ArrayFn fn_;
  int threads_;
  bool checks_divisor_;
  std::vector<DType> stored_;
  std::vector<int64_t> numel_;
  std::vector<ConvertFn> to_compute_;  // empty where an input is already in its computing type
  ConvertFn to_output_;                // empty when the result type is the output's
};

// ---------------------------------------------------------------- registration

void infer(InferContext& ctx) {
  const OpEntry* e = find_entry(ctx.op(), ctx.attrs());
  if (!e) {
    std::string allowed, attr;
    for (const OpEntry& other : op_table())
      if (other.name == ctx.op()) {
        attr = other.variant_attr;
        allowed += (allowed.empty() ? "\"" : ", \"") + std::string(other.variant) + "\"";
      }
    ctx.fail("attribute '" + attr + "' is \"" + ctx.attr_string(attr) + "\"; it must be one of " +
             allowed);
  }
  const std::vector<int64_t>& wrapped = wrapped_numbers(ctx.attrs());
  for (int64_t i : wrapped) {
    ctx.check(i >= (e->condition ? 1 : 0) && i < static_cast<int64_t>(ctx.num_inputs()),
              "wrapped_numbers lists input " + std::to_string(i) +
                  ", which is not a value input of " + ctx.op());
    ctx.check(ctx.input(i).rank() == 0, "wrapped_numbers lists input " + std::to_string(i) +
                                            ", which has rank " +
                                            std::to_string(ctx.input(i).rank()) +
                                            "; a Python number is a rank-0 tensor");
  }
  if (e->condition)
    ctx.check(ctx.input(0).dtype == DType::Bool || ctx.input(0).dtype == DType::U8,
              "the condition must be bool (or u8), not " +
                  std::string(dtype_name(ctx.input(0).dtype)));
  std::vector<TensorType> inputs;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.input(i));
  Signature sig;
  const std::string why = signature_of(*e, inputs, wrapped, sig);
  ctx.check(why.empty(), why + "; insert a cast");
  if (e->check) e->check(ctx, sig.output);
  Shape shape = inputs[0].shape;
  for (size_t i = 1; i < inputs.size(); ++i) shape = ctx.broadcast(shape, inputs[i].shape);
  ctx.set_output(0, TensorType{sig.output, shape, inputs[0].layout});
}

// The entry's bf16 function for a node whose inputs and output are all bf16 tensors, or an
// empty one. A Python number (stored as f64) takes the f32 path: PyTorch computes with its f32
// value, which rounding it to bf16 first would change.
ArrayFn bf16_vector(const OpEntry& e, const KernelSpec& spec, const Signature& sig) {
  if (!e.bf16_vector || sig.output != DType::BF16) return {};
  for (const TensorType& t : spec.inputs)
    if (t.dtype != DType::BF16) return {};
  return e.bf16_vector(spec);
}

void register_op(OpRegistry& registry, const OpEntry& first) {
  OpDef def;
  def.name = std::string(first.name);
  if (first.arity == 1) def.inputs = {{"x"}};
  else if (first.condition) def.inputs = {{"condition"}, {"a"}, {"b"}};
  else if (first.arity == 3) def.inputs = {{"a"}, {"b"}, {"c"}};
  else def.inputs = {{"a"}, {"b"}};
  def.attrs = first.attrs;
  if (!first.variant_attr.empty())
    def.attrs.push_back({std::string(first.variant_attr), std::string(first.variant)});
  if (first.arity > 1) def.attrs.push_back({"wrapped_numbers", std::vector<int64_t>{}});
  def.infer = &infer;

  bool has_vector = false;
  for (const OpEntry& e : op_table()) has_vector |= e.name == first.name && e.vector;
  if (has_vector)
    def.kernels.push_back(KernelDef{
        "avx2", "native",
        [](const KernelSpec& spec) -> std::string {
          const OpEntry& e = *find_entry(spec.node.op(), spec.node.attrs());
          const Signature sig = signature_of(e, spec);
          std::string why = cpu::avx2_f32_unsupported_reason(sig.compute.back());
          if (why.empty() && (!e.vector || !e.vector(spec)))
            why = "no AVX2 kernel for these attributes or inputs";
          return why;
        },
        [](const KernelSpec& spec) -> std::unique_ptr<KernelInstance> {
          const OpEntry& e = *find_entry(spec.node.op(), spec.node.attrs());
          Signature sig = signature_of(e, spec);
          if (ArrayFn bf16 = bf16_vector(e, spec, sig)) {
            std::fill(sig.compute.begin(), sig.compute.end(), DType::BF16);
            sig.result = DType::BF16;
            return std::make_unique<ElementwiseKernel>(spec, e, sig, std::move(bf16));
          }
          return std::make_unique<ElementwiseKernel>(spec, e, sig, e.vector(spec));
        }});
  def.kernels.push_back(KernelDef{
      "reference", "native", [](const KernelSpec&) { return std::string(); },
      [](const KernelSpec& spec) -> std::unique_ptr<KernelInstance> {
        const OpEntry& e = *find_entry(spec.node.op(), spec.node.attrs());
        const Signature sig = signature_of(e, spec);
        return std::make_unique<ElementwiseKernel>(spec, e, sig,
                                                   e.reference(spec.node, sig.compute.back()));
      }});
  // An output element reads only the input elements at its own position: any input may be
  // overwritten in place.
  for (KernelDef& k : def.kernels)
    for (size_t i = 0; i < def.inputs.size(); ++i) k.in_place_inputs.push_back(i);
  registry.add(std::move(def));
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  // One op per name; the entries of gelu and div differ by attribute.
  std::vector<std::string_view> done;
  for (const OpEntry& e : op_table()) {
    if (std::find(done.begin(), done.end(), e.name) != done.end()) continue;
    done.push_back(e.name);
    register_op(registry, e);
  }
}

}  // namespace kiln
