// Reduction ops.
//
// Over a set of dims (`dim`: an int list, empty = all dims, negative dims count from the end;
// `keepdim` keeps them as size 1):
//   sum, prod          f32/f64 keep their dtype; integers and bool give i64 (wrapping)
//   mean               f32, f64
//   amax, amin, max, min   every dtype; a NaN makes the result NaN; needs >= 1 element
//   var, std           f32, f64; `correction` (1): divide by max(0, N - correction)
//   any, all           every dtype; bool out (u8 in gives u8, as PyTorch)
//   logsumexp          every dtype; integers and bool give f32 (PyTorch's promotion)
//   argmax, argmin     numbers; `dim` holds at most one dim (none: the flattened input); i64
//                      index of the first extreme, or of the first NaN
//   max_dim, min_dim   (values, indices) over one int `dim`: PyTorch's max.dim / min.dim
// Along one dim (`dim`, an int):
//   log_softmax(dim)   f32, f64
//   cumsum(dim), cumprod(dim)   every dtype; integers and bool give i64
//   logcumsumexp(dim)  floats
//   cummax(dim), cummin(dim)    every dtype; (values, i64 indices)
//   topk(k, dim = -1, largest = true, sorted = true)  numbers; (values, i64 indices), always
//                      sorted, ties by lower index, NaN above every number; k = -1 takes every
//                      element (a sort, also along a symbolic dim)
//
// Every reference kernel is one template: reduce_reference walks any set of reduced dims by
// index arithmetic over the input's strides (no copy) and asks a policy struct (Sum, Mean,
// Extremum, ...) to fold each output's elements; line_reference does the same for the ops along
// one dim. Reference kernels compute f32 in double and round once. The AVX2 kernels
// (src/kernels/cpu/reduction_avx2.cc) take f32 reductions whose reduced dims form one block of
// adjacent dims ([outer, n, inner]).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/normalization_avx2.h"
#include "kernels/cpu/any_all.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/reduction_avx2.h"
#include "kernels/cpu/scan.h"
#include "kernels/cpu/topk.h"
#include "kernels/cpu/widened_bf16.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------- dtypes

constexpr unsigned bit(DType d) { return 1u << static_cast<unsigned>(d); }
constexpr unsigned kFloats = bit(DType::F32) | bit(DType::F64);
constexpr unsigned kIntegers =
    bit(DType::I64) | bit(DType::I32) | bit(DType::I16) | bit(DType::I8) | bit(DType::U8);
constexpr unsigned kNumbers = kFloats | kIntegers;
constexpr unsigned kAll = kNumbers | bit(DType::Bool);

// Calls fn(T{}) for the C++ type T of `dtype`, instantiating only the dtypes of kMask (inference
// has rejected the others).
template <unsigned kMask, typename R, typename Fn>
R visit_dtype(DType dtype, const Fn& fn) {
  auto take = [&](auto t) -> std::optional<R> {
    if constexpr ((kMask & bit(DTypeOf<decltype(t)>::value)) != 0) return fn(t);
    return std::nullopt;
  };
  std::optional<R> r;
  switch (dtype) {
    case DType::F32: r = take(float{}); break;
    case DType::F64: r = take(double{}); break;
    case DType::I64: r = take(int64_t{}); break;
    case DType::I32: r = take(int32_t{}); break;
    case DType::I16: r = take(int16_t{}); break;
    case DType::I8: r = take(int8_t{}); break;
    case DType::U8: r = take(uint8_t{}); break;
    case DType::Bool: r = take(bool{}); break;
    case DType::F16: r = take(cpu::Float16{}); break;
    case DType::BF16: r = take(cpu::BFloat16{}); break;
    default: break;
  }
  KILN_ASSERT(r.has_value(), "no reduction kernel for " << dtype_name(dtype));
  return std::move(*r);
}

std::string dtype_list(unsigned mask) {
  std::string out;
  for (DType d : kAllDTypes)
    if (mask & bit(d)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
}

void check_dtype(InferContext& ctx, DType dtype, unsigned mask) {
  ctx.check((mask & bit(dtype)) != 0, ctx.op() + " takes " + dtype_list(mask) + ", not " +
                                          std::string(dtype_name(dtype)) + "; insert a cast");
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// v ranks above `best` for a maximum (kMax) or a minimum: a NaN ranks above every number.
template <bool kMax, typename T>
bool better(T v, T best) {
  if (is_nan(best)) return false;
  if (is_nan(v)) return true;
  return kMax ? v > best : v < best;
}

// Sums and products: f32 in double; integers and bool in wrapping 64-bit arithmetic, as PyTorch.
template <typename T>
using SumAccumulator = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
template <typename T>
using SumOut = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;

template <typename T>
struct IsPair : std::false_type {};
template <typename A, typename B>
struct IsPair<std::pair<A, B>> : std::true_type {};

// The output dtypes of a policy for an input dtype: Out<T>, or (T, i64) for (values, indices).
template <typename Policy>
std::vector<DType> output_dtypes(DType dtype) {
  // bf16 (kBf16Reductions): f32's result types, f32 rounded to bf16.
  if (dtype == DType::BF16) {
    std::vector<DType> types = output_dtypes<Policy>(DType::F32);
    std::replace(types.begin(), types.end(), DType::F32, DType::BF16);
    return types;
  }
  return visit_dtype<Policy::kDTypes, std::vector<DType>>(dtype, [](auto t) {
    using Out = typename Policy::template Out<decltype(t)>;
    if constexpr (IsPair<Out>::value)
      return std::vector<DType>{DTypeOf<decltype(t)>::value, DType::I64};
    else return std::vector<DType>{DTypeOf<Out>::value};
  });
}

// ---------------------------------------------------------------- dims

std::string list_string(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// A rank-0 input takes dim 0 or -1, as PyTorch does (and reduces nothing).
size_t resolve_dim(int64_t dim, size_t rank) {
  return rank == 0 ? 0 : static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(rank) : dim);
}

void check_dims(InferContext& ctx, const std::vector<int64_t>& dims, size_t rank) {
  const int64_t r = std::max<int64_t>(static_cast<int64_t>(rank), 1);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (int64_t d : dims) {
    ctx.check(d >= -r && d < r, "dim " + std::to_string(d) + " is out of range for rank " +
                                    std::to_string(rank) + "; use [-" + std::to_string(r) +
                                    ", " + std::to_string(r - 1) + "]");
    const size_t i = static_cast<size_t>(d < 0 ? d + r : d);
    ctx.check(!seen[i], "dim " + std::to_string(i) + " appears twice in dim " + list_string(dims));
    seen[i] = true;
  }
}

// Which of the input's dims are reduced: those listed, or all for an empty list.
std::vector<bool> reduced_flags(const std::vector<int64_t>& dims, size_t rank) {
  std::vector<bool> flags(rank, dims.empty());
  for (int64_t d : dims)
    if (rank > 0) flags[resolve_dim(d, rank)] = true;
  return flags;
}

// Dims walked in row-major order, each with its stride in the input (elements).
struct StridedDims {
  std::vector<int64_t> sizes, strides;

  int64_t numel() const { return num_elements(sizes); }
  // The input offset of the i-th multi-index.
  int64_t offset(int64_t i) const {
    int64_t offset = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      offset += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return offset;
  }
  // fn(offset) for every multi-index in order, the last dim in a tight loop.
  template <typename Fn>
  void walk(int64_t base, const Fn& fn, size_t d = 0) const {
    if (d == sizes.size()) return fn(base);
    if (d + 1 == sizes.size()) {
      for (int64_t i = 0; i < sizes[d]; ++i) fn(base + i * strides[d]);
      return;
    }
    for (int64_t i = 0; i < sizes[d]; ++i) walk(base + i * strides[d], fn, d + 1);
  }
};

// A reduction over any set of dims, planned once: dims of size 1 dropped, neighbours of the same
// kind (both kept or both reduced) merged. The output is row-major over the kept dims.
struct ReductionPlan {
  StridedDims kept, reduced;
  // x as [outer, n, inner] when the reduced dims form one block of adjacent dims.
  std::optional<cpu::ReduceExtents> extents;
};

ReductionPlan plan_reduction(const std::vector<int64_t>& sizes, const std::vector<bool>& flags) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  ReductionPlan plan;
  std::optional<bool> last_kind;
  int reduced_blocks = 0;
  int64_t before = 1, after = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    const bool reduced = flags[d];
    StridedDims& group = reduced ? plan.reduced : plan.kept;
    if (last_kind == reduced) {
      group.sizes.back() *= sizes[d];
      group.strides.back() = strides[d];
    } else {
      group.sizes.push_back(sizes[d]);
      group.strides.push_back(strides[d]);
      if (reduced) ++reduced_blocks;
    }
    last_kind = reduced;
    if (!reduced) (reduced_blocks == 0 ? before : after) *= sizes[d];
  }
  if (reduced_blocks <= 1) plan.extents = cpu::ReduceExtents{before, plan.reduced.numel(), after};
  return plan;
}

// x viewed as [outer, n, inner] around one dim (n = 1 for a rank-0 x).
cpu::ReduceExtents line_extents(const std::vector<int64_t>& sizes, size_t dim) {
  cpu::ReduceExtents e;
  for (size_t d = 0; d < sizes.size(); ++d)
    (d < dim ? e.outer : d == dim ? e.n : e.inner) *= sizes[d];
  return e;
}

// ---------------------------------------------------------------- reduction policies
//
// reduce<T>(each, n, params) folds the n elements of one output: each(fn) calls fn(value, k) for
// them in row-major order of the reduced dims (k = 0, 1, ...); a policy may walk them more than
// once. kDTypes: the input dtypes it takes; Out<T>: its output type (a pair: values and indices).

struct Params {
  double correction = 1;
};

struct Sum {
  static constexpr unsigned kDTypes = kAll;
  static constexpr bool kNeedsElements = false;
  template <typename T> using Out = SumOut<T>;
  template <typename T, typename Each>
  static Out<T> reduce(const Each& each, int64_t, const Params&) {
    SumAccumulator<T> acc = 0;
    each([&](T v, int64_t) { acc += static_cast<SumAccumulator<T>>(v); });
    return static_cast<Out<T>>(acc);
  }
};

struct Prod {
  static constexpr unsigned kDTypes = kAll;
  // PyTorch's f16 and bf16 prod rounds to the 2-byte type at every step: no f32 between casts.
  static constexpr bool kRoundsAsItGoes = true;
  static constexpr bool kNeedsElements = false;
  template <typename T> using Out = SumOut<T>;
  template <typename T, typename Each>
  static Out<T> reduce(const Each& each, int64_t, const Params&) {
    SumAccumulator<T> acc = 1;
    each([&](T v, int64_t) { acc *= static_cast<SumAccumulator<T>>(v); });
    return static_cast<Out<T>>(acc);
  }
};

struct Mean {
  static constexpr unsigned kDTypes = kFloats;
  static constexpr bool kNeedsElements = false;
  template <typename T> using Out = T;
  template <typename T, typename Each>
  static T reduce(const Each& each, int64_t n, const Params&) {
    double sum = 0;
    each([&](T v, int64_t) { sum += v; });
    return static_cast<T>(sum / static_cast<double>(n));
  }
};

template <bool kMax>
struct Extremum {
  static constexpr unsigned kDTypes = kAll;
  static constexpr bool kNeedsElements = true;
  template <typename T> using Out = T;
  template <typename T, typename Each>
  static T reduce(const Each& each, int64_t, const Params&) {
    T best = kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    if constexpr (std::is_floating_point_v<T>)
      best = kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    each([&](T v, int64_t) {
      if (better<kMax>(v, best)) best = v;
    });
    return best;
  }
};

// The index (and with kValues the value) of the first extreme element, or of the first NaN.
template <bool kMax, bool kValues>
struct ArgExtremum {
  // PyTorch's argmax rejects bool; max.dim takes it.
  static constexpr unsigned kDTypes = kValues ? kAll : kNumbers;
  static constexpr bool kArgMax = kMax;  // for arg_extremum_kernel
  static constexpr bool kNeedsElements = true;
  template <typename T> using Out = std::conditional_t<kValues, std::pair<T, int64_t>, int64_t>;
  template <typename T, typename Each>
  static Out<T> reduce(const Each& each, int64_t, const Params&) {
    T best{};
    int64_t index = -1;
    each([&](T v, int64_t k) {
      if (index < 0 || better<kMax>(v, best)) {
        best = v;
        index = k;
      }
    });
    if constexpr (kValues) return {best, index};
    else return index;
  }
};

// any (kAny) or all: nonzero elements (NaN counts) are true.
template <bool kAny>
struct Logical {
  static constexpr unsigned kDTypes = kAll;
  static constexpr bool kAnyOf = kAny;  // for bits_kernel
  static constexpr bool kNeedsElements = false;
  template <typename T> using Out = std::conditional_t<std::is_same_v<T, uint8_t>, uint8_t, bool>;
  template <typename T, typename Each>
  static Out<T> reduce(const Each& each, int64_t, const Params&) {
    bool acc = !kAny;
    each([&](T v, int64_t) { acc = kAny ? (acc || v != T(0)) : (acc && v != T(0)); });
    return static_cast<Out<T>>(acc);
  }
};

// var, or std (kRoot): two passes, the mean and then the squared deviations from it.
template <bool kRoot>
struct Variance {
  static constexpr unsigned kDTypes = kFloats;
  static constexpr bool kNeedsElements = false;
  template <typename T> using Out = T;
  template <typename T, typename Each>
  static T reduce(const Each& each, int64_t n, const Params& params) {
    double sum = 0;
    each([&](T v, int64_t) { sum += v; });
    const double mean = sum / static_cast<double>(n);
    double squares = 0;
    each([&](T v, int64_t) { squares += (v - mean) * (v - mean); });
    const double var = squares / std::max(0.0, static_cast<double>(n) - params.correction);
    return static_cast<T>(kRoot ? std::sqrt(var) : var);
  }
};

template <typename T>
double max_of_line(const T* x, int64_t n, int64_t stride) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < n; ++k)
    if (better<true, double>(static_cast<double>(x[k * stride]), max)) max = x[k * stride];
  return max;
}

struct LogSumExp {
  static constexpr unsigned kDTypes = kAll;
  static constexpr bool kNeedsElements = false;
  template <typename T> using Out = std::conditional_t<std::is_floating_point_v<T>, T, float>;
  template <typename T, typename Each>
  static Out<T> reduce(const Each& each, int64_t, const Params&) {
    double max = -std::numeric_limits<double>::infinity();
    each([&](T v, int64_t) {
      if (better<true, double>(static_cast<double>(v), max)) max = static_cast<double>(v);
    });
    // PyTorch's: an infinite maximum shifts nothing (all -inf gives -inf, a +inf gives +inf).
    const double shift = std::isinf(max) ? 0 : max;
    double sum = 0;
    each([&](T v, int64_t) { sum += std::exp(static_cast<double>(v) - shift); });
    return static_cast<Out<T>>(shift + std::log(sum));
  }
};

template <typename V>
void store_result(std::span<void* const> out, int64_t o, const V& v) {
  if constexpr (IsPair<V>::value) {
    static_cast<typename V::first_type*>(out[0])[o] = v.first;
    static_cast<int64_t*>(out[1])[o] = v.second;
  } else {
    static_cast<V*>(out[0])[o] = v;
  }
}

template <typename Policy>
std::unique_ptr<KernelInstance> reduce_reference(const KernelSpec& spec, const ReductionPlan& plan,
                                                 const Params& params) {
  using Made = std::unique_ptr<KernelInstance>;
  return visit_dtype<Policy::kDTypes, Made>(spec.inputs[0].dtype, [&](auto t) -> Made {
    using T = decltype(t);
    return make_kernel([plan, params, threads = spec.threads](std::span<const void* const> in,
                                                              std::span<void* const> out) {
      const T* x = static_cast<const T*>(in[0]);
      const int64_t n = plan.reduced.numel();
      cpu::parallel_chunks(plan.kept.numel(), n, threads, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          const int64_t base = plan.kept.offset(o);
          auto each = [&](const auto& fn) {
            int64_t k = 0;
            plan.reduced.walk(base, [&](int64_t offset) { fn(x[offset], k++); });
          };
          store_result(out, o, Policy::template reduce<T>(each, n, params));
        }
      });
    });
  });
}

// ---------------------------------------------------------------- line policies
//
// line<T>(x, n, stride, out, offset, params, scratch) handles one line along the dim: n elements
// of x `stride` apart; its outputs start at `offset` in each output, also `stride` apart.

struct LineParams {
  int64_t k = 0;  // topk's; -1: the whole line
  bool largest = true;
};

struct NoScratch {};

struct LogSoftmax {
  static constexpr unsigned kDTypes = kFloats;
  template <typename T> using Out = T;
  using Scratch = NoScratch;
  template <typename T>
  static void line(const T* x, int64_t n, int64_t stride, std::span<void* const> out,
                   int64_t offset, const LineParams&, Scratch&) {
    T* y = static_cast<T*>(out[0]) + offset;
    const double max = max_of_line(x, n, stride);
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += std::exp(static_cast<double>(x[k * stride]) - max);
    const double shift = max + std::log(sum);
    for (int64_t k = 0; k < n; ++k)
      y[k * stride] = static_cast<T>(static_cast<double>(x[k * stride]) - shift);
  }
};

// The running folds (cumsum, cumprod, logcumsumexp): Step's accumulator starts at Step::kInit,
// takes each element in the line's order and is written, rounded to Out, at every element: the
// arithmetic of PyTorch's CPU kernels (an f64 accumulator for f32 and f64, an f32 one for f16 and
// bf16, which the folds take as they are), so the same bits.
constexpr unsigned kHalfFloats = bit(DType::F16) | bit(DType::BF16);

template <typename T>
using FoldAccumulator = std::conditional_t<cpu::kIsHalfFloat<T>, float, SumAccumulator<T>>;
template <typename T>
using FoldOut = std::conditional_t<cpu::kIsHalfFloat<T>, T, SumOut<T>>;

// Sums and products: from the operation's identity.
template <typename Operation, int kIdentity>
struct ArithmeticStep {
  static constexpr unsigned kDTypes = kAll | kHalfFloats;
  template <typename T> using Out = FoldOut<T>;
  template <typename T> using Acc = FoldAccumulator<T>;
  static constexpr double kInit = kIdentity;
  template <typename A>
  static A apply(A acc, A v) { return Operation{}(acc, v); }
};
using SumStep = ArithmeticStep<std::plus<>, 0>;
using ProdStep = ArithmeticStep<std::multiplies<>, 1>;

// log(exp(acc) + exp(v)) without overflow; a NaN stays, and equal infinities stay themselves
// (inf - inf would make a NaN).
struct LogAddExpStep {
  static constexpr unsigned kDTypes = kFloats | kHalfFloats;
  template <typename T> using Out = T;
  template <typename T> using Acc = FoldAccumulator<T>;
  static constexpr double kInit = -std::numeric_limits<double>::infinity();
  template <typename A>
  static A apply(A acc, A v) {
    const A low = std::isnan(acc) ? acc : std::min(v, acc);
    const A high = std::isnan(acc) ? acc : std::max(v, acc);
    if (low != high || std::isfinite(low)) return std::log1p(std::exp(low - high)) + high;
    return v;
  }
};

template <typename Step>
struct Scan {
  static constexpr unsigned kDTypes = Step::kDTypes;
  template <typename T> using Out = typename Step::template Out<T>;
  using Scratch = NoScratch;
  template <typename T>
  static void line(const T* x, int64_t n, int64_t stride, std::span<void* const> out,
                   int64_t offset, const LineParams&, Scratch&) {
    using Acc = typename Step::template Acc<T>;
    Out<T>* y = static_cast<Out<T>*>(out[0]) + offset;
    Acc acc = static_cast<Acc>(Step::kInit);
    for (int64_t k = 0; k < n; ++k) {
      acc = Step::apply(acc, cpu::widen_to<Acc>(x[k * stride]));
      y[k * stride] = cpu::narrow_to<Out<T>>(acc);
    }
  }
};

// cummax and cummin: (values, i64 indices) of the extreme so far. As PyTorch: a tie moves the
// index to the later element, and a NaN, once seen, stays, its index moving to each later NaN.
template <bool kMax>
struct CumExtremum {
  static constexpr unsigned kDTypes = kAll;
  template <typename T> using Out = std::pair<T, int64_t>;
  using Scratch = NoScratch;
  template <typename T>
  static void line(const T* x, int64_t n, int64_t stride, std::span<void* const> out,
                   int64_t offset, const LineParams&, Scratch&) {
    T* values = static_cast<T*>(out[0]) + offset;
    int64_t* indices = static_cast<int64_t*>(out[1]) + offset;
    T best = n > 0 ? x[0] : T{};
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
      const T v = x[k * stride];
      if (is_nan(v) || (!is_nan(best) && (kMax ? v >= best : v <= best))) {
        best = v;
        at = k;
      }
      values[k * stride] = best;
      indices[k * stride] = at;
    }
  }
};

struct Topk {
  static constexpr unsigned kDTypes = kNumbers;  // PyTorch's topk rejects bool
  template <typename T> using Out = std::pair<T, int64_t>;
  using Scratch = std::vector<int64_t>;  // the line's indices, partially sorted
  template <typename T>
  static void line(const T* x, int64_t n, int64_t stride, std::span<void* const> out,
                   int64_t offset, const LineParams& params, Scratch& order) {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    // A total order: by value (NaN above every number), then by index.
    const bool largest = params.largest;
    auto before = [&](int64_t i, int64_t j) {
      const T a = x[i * stride], b = x[j * stride];
      if (largest ? better<true>(a, b) : better<true>(b, a)) return true;
      if (largest ? better<true>(b, a) : better<true>(a, b)) return false;
      return i < j;
    };
    const int64_t count = params.k < 0 ? n : params.k;
    std::partial_sort(order.begin(), order.begin() + count, order.end(), before);
    T* values = static_cast<T*>(out[0]) + offset;
    int64_t* indices = static_cast<int64_t*>(out[1]) + offset;
    for (int64_t k = 0; k < count; ++k) {
      values[k * stride] = x[order[static_cast<size_t>(k)] * stride];
      indices[k * stride] = order[static_cast<size_t>(k)];
    }
  }
};

// Runs Policy::line over every (outer, inner) line of x around the node's dim; the outputs have
// `out_n` elements along it.
template <typename Policy>
std::unique_ptr<KernelInstance> line_reference(const KernelSpec& spec, const LineParams& params) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  const size_t dim = resolve_dim(spec.node.attr_int("dim"), sizes.size());
  const cpu::ReduceExtents e = line_extents(sizes, dim);
  const int64_t out_n = sizes.empty() ? 1 : spec.output_sizes(0)[dim];
  using Made = std::unique_ptr<KernelInstance>;
  return visit_dtype<Policy::kDTypes, Made>(spec.inputs[0].dtype, [&](auto t) -> Made {
    using T = decltype(t);
    return make_kernel([e, out_n, params, threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      const T* x = static_cast<const T*>(in[0]);
      cpu::parallel_chunks(e.outer * e.inner, e.n, threads, [&](int64_t begin, int64_t end) {
        typename Policy::Scratch scratch;
        for (int64_t line = begin; line < end; ++line) {
          const int64_t o = line / e.inner, i = line % e.inner;
          Policy::template line<T>(x + o * e.n * e.inner + i, e.n, e.inner, out,
                                   o * out_n * e.inner + i, params, scratch);
        }
      });
    });
  });
}

// ---------------------------------------------------------------- the reductions table

enum class DimStyle {
  List,       // `dim`: int list, empty = all dims
  AtMostOne,  // `dim`: int list of at most one dim, empty = the flattened input (argmax)
  One,        // `dim`: one int (max_dim)
};

template <typename Attrs>
std::vector<int64_t> dims_of(const Attrs& attrs, DimStyle style) {
  return style == DimStyle::One ? std::vector<int64_t>{attrs.attr_int("dim")}
                                : attrs.attr_ints("dim");
}

using ReferenceFn = std::unique_ptr<KernelInstance> (*)(const KernelSpec&, const ReductionPlan&,
                                                        const Params&);

struct ReductionOp {
  std::string_view name;
  DimStyle style;
  bool correction;  // takes the attribute `correction` (var, std)
  std::optional<cpu::VectorReduction> vector;
  unsigned dtypes;
  bool needs_elements;  // no identity value: every reduced dim must be non-empty
  size_t num_outputs;
  std::vector<DType> (*output_dtypes)(DType);
  ReferenceFn reference;
  std::optional<bool> arg_max;  // argmax and max_dim (true), argmin and min_dim (false)
  bool low_precision_in_f32;    // f16 and bf16 computed in f32 between casts (not prod)
  std::optional<bool> any_of;   // any (true) and all (false)
};

// The ops with a vector kernel take bf16 too, in fold_bf16_casts_into_widening_kernels' form (the
// builder computes bf16 in f32 between casts): the vector kernel widens each element as it reads
// it and rounds its results, the reference computes f32 on a widened copy and rounds; either way
// the bits of the f32 op between casts.
constexpr unsigned kBf16Reductions = bit(DType::BF16);

template <typename Policy>
ReductionOp reduction(std::string_view name, DimStyle style = DimStyle::List,
                      std::optional<cpu::VectorReduction> vector = std::nullopt,
                      bool correction = false) {
  using Sample = typename Policy::template Out<float>;
  constexpr bool kInF32 = !requires { Policy::kRoundsAsItGoes; };
  return {name,
          style,
          correction,
          vector,
          vector && kInF32 ? Policy::kDTypes | kBf16Reductions : Policy::kDTypes,
          Policy::kNeedsElements,
          IsPair<Sample>::value ? size_t{2} : size_t{1},
          &output_dtypes<Policy>,
          &reduce_reference<Policy>,
          []() -> std::optional<bool> {
            if constexpr (requires { Policy::kArgMax; }) return Policy::kArgMax;
            else return std::nullopt;
          }(),
          kInF32,
          []() -> std::optional<bool> {
            if constexpr (requires { Policy::kAnyOf; }) return Policy::kAnyOf;
            else return std::nullopt;
          }()};
}

const std::vector<ReductionOp>& reduction_ops() {
  using VR = cpu::VectorReduction;
  static const std::vector<ReductionOp> ops = {
      reduction<Sum>("sum", DimStyle::List, VR::Sum),
      reduction<Mean>("mean", DimStyle::List, VR::Mean),
      reduction<Prod>("prod", DimStyle::List, VR::Prod),
      reduction<Extremum<true>>("amax", DimStyle::List, VR::Amax),
      reduction<Extremum<false>>("amin", DimStyle::List, VR::Amin),
      reduction<Extremum<true>>("max", DimStyle::List, VR::Amax),
      reduction<Extremum<false>>("min", DimStyle::List, VR::Amin),
      reduction<ArgExtremum<true, false>>("argmax", DimStyle::AtMostOne),
      reduction<ArgExtremum<false, false>>("argmin", DimStyle::AtMostOne),
      reduction<ArgExtremum<true, true>>("max_dim", DimStyle::One),
      reduction<ArgExtremum<false, true>>("min_dim", DimStyle::One),
      reduction<Variance<false>>("var", DimStyle::List, VR::Var, true),
      reduction<Variance<true>>("std", DimStyle::List, VR::Std, true),
      reduction<Logical<true>>("any"),
      reduction<Logical<false>>("all"),
      reduction<LogSumExp>("logsumexp", DimStyle::List, VR::LogSumExp),
  };
  return ops;
}

void infer_reduction(InferContext& ctx, const ReductionOp& op) {
  const TensorType& x = ctx.input(0);
  check_dtype(ctx, x.dtype, op.dtypes);
  const std::vector<int64_t> dims = dims_of(ctx, op.style);
  if (op.style == DimStyle::AtMostOne)
    ctx.check(dims.size() <= 1, "dim " + list_string(dims) +
                                    " must hold at most one dim (none: the flattened input)");
  check_dims(ctx, dims, x.rank());
  const std::vector<bool> flags = reduced_flags(dims, x.rank());
  const bool keepdim = ctx.attr_bool("keepdim");
  Shape out;
  for (size_t d = 0; d < x.rank(); ++d) {
    const Dim& size = x.shape[d];
    if (!flags[d]) {
      out.push_back(size);
      continue;
    }
    if (op.needs_elements)
      ctx.check(!size.is_static() || size.size() > 0,
                "it reduces dim " + std::to_string(d) + " of size 0, and " + ctx.op() +
                    " of no elements is undefined; reduce only non-empty dims");
    if (keepdim) out.push_back(Dim(1));
  }
  const std::vector<DType> dtypes = op.output_dtypes(x.dtype);
  for (size_t i = 0; i < dtypes.size(); ++i)
    ctx.set_output(i, TensorType{dtypes[i], out, x.layout});
}

ReductionPlan plan_of(const KernelSpec& spec, const ReductionOp& op) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  return plan_reduction(sizes, reduced_flags(dims_of(spec.node, op.style), sizes.size()));
}

Params params_of(const KernelSpec& spec, const ReductionOp& op) {
  return Params{op.correction ? spec.node.attr_float("correction") : 1.0};
}

// `create`'s kernel, or for bf16 operands the kernel it makes for f32 run on a widened copy
// and rounded: the bits of the casts that fold_bf16_casts_into_widening_kernels dropped.
template <typename Create>
std::unique_ptr<KernelInstance> widening_bf16(const KernelSpec& spec, const Create& create) {
  if (spec.inputs[0].dtype == DType::BF16) return cpu::create_widened_bf16(spec, create);
  return create(spec);
}

KernelDef reference_kernel(
    std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> create) {
  return KernelDef{"reference", "native", [](const KernelSpec&) { return std::string(); },
                   std::move(create)};
}

#ifdef KILN_X86
// The AVX2 kernel of an f32 op over x viewed as extents(spec) (none: the reference's case).
KernelDef avx2_kernel(cpu::VectorReduction vector,
                      std::function<std::optional<cpu::ReduceExtents>(const KernelSpec&)> extents,
                      std::function<double(const KernelSpec&)> correction) {
  return KernelDef{
      "avx2", "native",
      [extents](const KernelSpec& spec) {
        // bf16 runs the f32 loops, widening as they read.
        const DType dtype = spec.inputs[0].dtype == DType::BF16 ? DType::F32 : spec.inputs[0].dtype;
        std::string reason = cpu::avx2_f32_unsupported_reason(dtype);
        if (reason.empty() && !extents(spec))
          reason = "the reduced dims of " + shape_string(spec.input_sizes(0)) +
                   " are not one block of adjacent dims (the reference kernel walks any)";
        return reason;
      },
      [vector, extents, correction](const KernelSpec& spec) {
        auto run = [vector, e = *extents(spec), c = correction(spec),
                    threads = spec.threads]<typename T>(const void* x, void* y) {
          cpu::avx2::reduce(vector, static_cast<const T*>(x), static_cast<T*>(y), e, c, threads);
        };
        const bool bf16 = spec.inputs[0].dtype == DType::BF16;
        return make_kernel([run, bf16](std::span<const void* const> in,
                                       std::span<void* const> out) {
          if (bf16) run.template operator()<cpu::BFloat16>(in[0], out[0]);
          else run.template operator()<float>(in[0], out[0]);
        });
      }};
}
#endif

// argmax, argmin, max_dim and min_dim of f32 (the values output written when there is one): the
// AVX2 kernel, over rows or columns.
KernelDef arg_extremum_kernel(const ReductionOp& op) {
  return KernelDef{
      "avx2", "native",
      [&op](const KernelSpec& spec) {
        std::string reason = cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
        // One reduced dim, or none (the flattened input): always one block.
        const cpu::ReduceExtents e = *plan_of(spec, op).extents;
        if (reason.empty() && e.n > std::numeric_limits<int32_t>::max())
          reason = "reduces 2^31 elements or more into one result";
        return reason;
      },
      [&op](const KernelSpec& spec) {
        return make_kernel([max = *op.arg_max, values = op.num_outputs == 2,
                            e = *plan_of(spec, op).extents, threads = spec.threads](
                               std::span<const void* const> in, std::span<void* const> out) {
          cpu::avx2::arg_extremum(max, static_cast<const float*>(in[0]), e,
                                  static_cast<int64_t*>(out[values ? 1 : 0]),
                                  values ? static_cast<float*>(out[0]) : nullptr, threads);
        });
      }};
}

// any and all of every dtype over one block of adjacent dims: the bits under the dtype's value
// mask decide (cpu::any_all).
KernelDef bits_kernel(const ReductionOp& op) {
  return KernelDef{
      "bits", "native",
      [&op](const KernelSpec& spec) -> std::string {
        if (!plan_of(spec, op).extents)
          return "the reduced dims of " + shape_string(spec.input_sizes(0)) +
                 " are not one block of adjacent dims (the reference kernel walks any)";
        return "";
      },
      [&op](const KernelSpec& spec) {
        const DType dtype = spec.inputs[0].dtype;
        const int bytes = static_cast<int>(dtype_size(dtype));
        uint64_t value_bits = bytes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
        if (is_floating(dtype)) value_bits >>= 1;  // all but the sign
        return make_kernel([any = *op.any_of, bytes, value_bits, e = *plan_of(spec, op).extents,
                            threads = spec.threads](std::span<const void* const> in,
                                                    std::span<void* const> out) {
          cpu::any_all(any, in[0], bytes, value_bits, e, static_cast<uint8_t*>(out[0]), threads);
        });
      }};
}

void register_reduction(OpRegistry& registry, const ReductionOp& op) {
  OpDef def;
  def.name = std::string(op.name);
  def.inputs = {{"x"}};
  def.num_outputs = op.num_outputs;
  if (op.style == DimStyle::One) def.attrs = {{"dim", int64_t{0}, true}};
  else def.attrs = {{"dim", std::vector<int64_t>{}}};
  def.attrs.push_back({"keepdim", false});
  if (op.correction) def.attrs.push_back({"correction", 1.0});
  def.infer = [&op](InferContext& ctx) { infer_reduction(ctx, op); };
  def.computes_low_precision_in_f32 = op.low_precision_in_f32;
#ifdef KILN_X86
  if (op.vector)
    def.kernels.push_back(avx2_kernel(
        *op.vector, [&op](const KernelSpec& spec) { return plan_of(spec, op).extents; },
        [&op](const KernelSpec& spec) { return params_of(spec, op).correction; }));
  if (op.arg_max) def.kernels.push_back(arg_extremum_kernel(op));
#endif
  if (op.any_of) def.kernels.push_back(bits_kernel(op));
  def.kernels.push_back(reference_kernel([&op](const KernelSpec& spec) {
    return widening_bf16(spec, [&op](const KernelSpec& spec) {
      return op.reference(spec, plan_of(spec, op), params_of(spec, op));
    });
  }));
  registry.add(std::move(def));
}

// ---------------------------------------------------------------- ops along one dim

// Checks x's dtype and `dim`; returns the dim in [0, rank) (0 for a rank-0 x).
size_t infer_line_dim(InferContext& ctx, unsigned dtypes) {
  const TensorType& x = ctx.input(0);
  check_dtype(ctx, x.dtype, dtypes);
  const int64_t dim = ctx.attr_int("dim");
  check_dims(ctx, {dim}, x.rank());
  return resolve_dim(dim, x.rank());
}

void infer_log_softmax(InferContext& ctx) {
  infer_line_dim(ctx, LogSoftmax::kDTypes | kBf16Reductions);
  ctx.set_output(0, ctx.input(0));
}

template <typename Policy>
void infer_scan(InferContext& ctx) {
  infer_line_dim(ctx, Policy::kDTypes);
  const TensorType& x = ctx.input(0);
  const std::vector<DType> types = output_dtypes<Policy>(x.dtype);
  for (size_t i = 0; i < types.size(); ++i)
    ctx.set_output(i, TensorType{types[i], x.shape, x.layout});
}

void infer_topk(InferContext& ctx) {
  const size_t dim = infer_line_dim(ctx, Topk::kDTypes);
  const TensorType& x = ctx.input(0);
  const int64_t k = ctx.attr_int("k");
  Shape out = x.shape;
  if (x.rank() == 0) {
    ctx.check(k == 1 || k == -1, "k is " + std::to_string(k) + "; a rank-0 input takes k = 1");
  } else if (k != -1) {  // -1: every element, the dim's size (symbolic or not) kept
    const Dim size = x.shape[dim];
    const int64_t most = size.is_static() ? size.size() : ctx.symbols()[size.symbol()].max;
    ctx.check(k >= 0 && k <= most, "k is " + std::to_string(k) + "; it must be in [0, " +
                                       std::to_string(most) + "] (the size of dim " +
                                       std::to_string(dim) + ") or -1 (every element)");
    out[dim] = Dim(k);
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
  ctx.set_output(1, TensorType{DType::I64, out, x.layout});
}

// topk's native kernel (src/kernels/cpu/topk.cc) over every line; a strided line is gathered
// first.
template <typename T>
std::unique_ptr<KernelInstance> topk_select_kernel(const KernelSpec& spec) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  const size_t dim = resolve_dim(spec.node.attr_int("dim"), sizes.size());
  const cpu::ReduceExtents e = line_extents(sizes, dim);
  const int64_t out_n = sizes.empty() ? 1 : spec.output_sizes(0)[dim];
  return make_kernel([e, out_n, k = spec.node.attr_int("k"), largest = spec.node.attr_bool("largest"),
                      threads = spec.threads](std::span<const void* const> in,
                                              std::span<void* const> out) {
    const T* x = static_cast<const T*>(in[0]);
    cpu::parallel_chunks(e.outer * e.inner, e.n, threads, [&](int64_t begin, int64_t end) {
      // Each thread keeps its buffers across calls: no allocation per call once it has seen lines
      // this long.
      thread_local cpu::TopkScratch scratch;
      for (int64_t line = begin; line < end; ++line) {
        const int64_t o = line / e.inner, i = line % e.inner;
        const T* first = x + o * e.n * e.inner + i;
        if (e.inner > 1) {
          scratch.line.resize(static_cast<size_t>(e.n) * sizeof(T));
          T* gathered = reinterpret_cast<T*>(scratch.line.data());
          for (int64_t j = 0; j < e.n; ++j) gathered[j] = first[j * e.inner];
          first = gathered;
        }
        const int64_t offset = o * out_n * e.inner + i;
        cpu::topk_line(first, e.n, k < 0 ? e.n : k, largest, static_cast<T*>(out[0]) + offset,
                       static_cast<int64_t*>(out[1]) + offset, e.inner, scratch);
      }
    });
  });
}

cpu::ReduceExtents scan_extents(const KernelSpec& spec) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  return line_extents(sizes, resolve_dim(spec.node.attr_int("dim"), sizes.size()));
}

template <typename Policy>
struct ScanStep {};
template <typename Step>
struct ScanStep<Scan<Step>> {
  using type = Step;
};

// A scan op: its native kernels, then the reference. The folds (Scan<Step>) walk the columns of
// a dim that isn't the last in blocks, reading along rows; cumsum of f32 rows has its AVX2 kernel.
template <typename Policy>
void register_scan(OpRegistry& registry, const char* name) {
  OpDef def;
  def.name = name;
  def.inputs = {{"x"}};
  def.num_outputs = static_cast<int>(output_dtypes<Policy>(DType::F32).size());
  def.attrs = {{"dim", int64_t{0}, true}};
  def.infer = infer_scan<Policy>;
  // The folds take f16 and bf16 as they are (an f32 accumulator, as PyTorch's); cummax and cummin
  // are exact through f32.
  def.computes_low_precision_in_f32 = (Policy::kDTypes & kHalfFloats) == 0;
#ifdef KILN_X86
  if constexpr (std::is_same_v<Policy, Scan<SumStep>>)
    def.kernels.push_back(
        {"avx2", "native",
         [](const KernelSpec& spec) {
           std::string reason = cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
           if (reason.empty() && scan_extents(spec).inner != 1)
             reason = "cumsum along a dim that isn't the last: the columns kernel takes it";
           return reason;
         },
         [](const KernelSpec& spec) {
           return make_kernel([e = scan_extents(spec), threads = spec.threads](
                                  std::span<const void* const> in, std::span<void* const> out) {
             cpu::avx2::cumsum_rows(static_cast<const float*>(in[0]), static_cast<float*>(out[0]),
                                    e.outer, e.n, threads);
           });
         }});
#endif
  if constexpr (requires { typename ScanStep<Policy>::type; }) {
    using Step = typename ScanStep<Policy>::type;
    def.kernels.push_back(
        {"columns", "native",
         [](const KernelSpec& spec) -> std::string {
           if (scan_extents(spec).inner == 1) return "along the last dim: no columns";
           return "";
         },
         [](const KernelSpec& spec) {
           using Made = std::unique_ptr<KernelInstance>;
           return visit_dtype<Step::kDTypes, Made>(spec.inputs[0].dtype, [&](auto t) -> Made {
             using T = decltype(t);
             using Acc = typename Step::template Acc<T>;
             using Out = typename Step::template Out<T>;
             return make_kernel([e = scan_extents(spec), threads = spec.threads](
                                    std::span<const void* const> in, std::span<void* const> out) {
               cpu::scan_columns<T, Acc>(static_cast<const T*>(in[0]), static_cast<Out*>(out[0]),
                                         e, static_cast<Acc>(Step::kInit), threads,
                                         [](Acc acc, Acc v) { return Step::apply(acc, v); });
             });
           });
         }});
  }
  def.kernels.push_back(reference_kernel(
      [](const KernelSpec& spec) { return line_reference<Policy>(spec, {}); }));
  registry.add(std::move(def));
}

void register_line_ops(OpRegistry& registry) {
  OpDef log_softmax;
  log_softmax.name = "log_softmax";
  log_softmax.inputs = {{"x"}};
  log_softmax.attrs = {{"dim", int64_t{0}, true}};
  log_softmax.infer = infer_log_softmax;
  log_softmax.computes_low_precision_in_f32 = true;
#ifdef KILN_X86
  log_softmax.kernels.push_back(
      {"avx512", "native",
       [](const KernelSpec& spec) -> std::string {
         if (std::string why = cpu::isa_unavailable_reason(cpu::Isa::Avx512); !why.empty())
           return why;
         if (spec.inputs[0].dtype != DType::F32 && spec.inputs[0].dtype != DType::BF16)
           return "takes f32 and bf16";
         const std::vector<int64_t> sizes = spec.input_sizes(0);
         if (line_extents(sizes, resolve_dim(spec.node.attr_int("dim"), sizes.size())).inner != 1)
           return "log_softmax over a dim that isn't the last: the avx2 kernel takes it";
         return "";
       },
       [](const KernelSpec& spec) {
         const std::vector<int64_t> sizes = spec.input_sizes(0);
         const cpu::ReduceExtents e =
             line_extents(sizes, resolve_dim(spec.node.attr_int("dim"), sizes.size()));
         auto rows = [e, threads = spec.threads]<typename T>(const void* in, void* out) {
           cpu::parallel_chunks(e.outer, e.n, threads, [&](int64_t begin, int64_t end) {
             cpu::avx512::log_softmax_rows(static_cast<const T*>(in) + begin * e.n,
                                           static_cast<T*>(out) + begin * e.n, end - begin, e.n);
           });
         };
         const bool bf16 = spec.inputs[0].dtype == DType::BF16;
         return make_kernel([rows, bf16](std::span<const void* const> in,
                                         std::span<void* const> out) {
           if (bf16) rows.template operator()<cpu::BFloat16>(in[0], out[0]);
           else rows.template operator()<float>(in[0], out[0]);
         });
       }});
  log_softmax.kernels.push_back(avx2_kernel(
      cpu::VectorReduction::LogSoftmax,
      [](const KernelSpec& spec) -> std::optional<cpu::ReduceExtents> {
        const std::vector<int64_t> sizes = spec.input_sizes(0);
        return line_extents(sizes, resolve_dim(spec.node.attr_int("dim"), sizes.size()));
      },
      [](const KernelSpec&) { return 0.0; }));
#endif
  log_softmax.kernels.push_back(reference_kernel(
      [](const KernelSpec& spec) {
        return widening_bf16(spec, [](const KernelSpec& spec) {
          return line_reference<LogSoftmax>(spec, {});
        });
      }));
  registry.add(std::move(log_softmax));

  register_scan<Scan<SumStep>>(registry, "cumsum");
  register_scan<Scan<ProdStep>>(registry, "cumprod");
  register_scan<Scan<LogAddExpStep>>(registry, "logcumsumexp");
  register_scan<CumExtremum<true>>(registry, "cummax");
  register_scan<CumExtremum<false>>(registry, "cummin");

  OpDef topk;
  topk.name = "topk";
  topk.inputs = {{"x"}};
  topk.num_outputs = 2;
  topk.attrs = {{"k", int64_t{0}, true},
                {"dim", int64_t{-1}},
                {"largest", true},
                // Accepted for PyTorch's signature: the results are always sorted, a valid
                // order for sorted = false too.
                {"sorted", true}};
  topk.infer = infer_topk;
  topk.computes_low_precision_in_f32 = true;
  topk.kernels.push_back(
      {"select", "native",
       [](const KernelSpec& spec) -> std::string {
         const std::vector<int64_t> sizes = spec.input_sizes(0);
         if (line_extents(sizes, resolve_dim(spec.node.attr_int("dim"), sizes.size())).n >
             std::numeric_limits<uint32_t>::max())
           return "lines of 2^32 elements or more";
         return "";
       },
       [](const KernelSpec& spec) {
         using Made = std::unique_ptr<KernelInstance>;
         return visit_dtype<Topk::kDTypes, Made>(spec.inputs[0].dtype, [&](auto t) -> Made {
           return topk_select_kernel<decltype(t)>(spec);
         });
       }});
  topk.kernels.push_back(reference_kernel([](const KernelSpec& spec) {
    return line_reference<Topk>(
        spec, LineParams{spec.node.attr_int("k"), spec.node.attr_bool("largest")});
  }));
  registry.add(std::move(topk));
}

}  // namespace

void register_reduction_ops(OpRegistry& registry) {
  for (const ReductionOp& op : reduction_ops()) register_reduction(registry, op);
  register_line_ops(registry);
}

}  // namespace kiln
