// Elementwise ops. Binary: add, sub, mul, div with NumPy broadcasting. Unary: relu, neg, exp,
// sigmoid, tanh, gelu (approximate = "none" | "tanh"), sqrt, rsqrt.
//
// Each op is one table entry {name, scalar function, vector function}: the scalar function (a
// struct with a static `apply`) makes the reference kernel for every dtype the op supports, the
// vector function (an AVX2 array kernel from src/kernels/cpu/elementwise_avx2.h) the f32 one.
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <span>
#include <string_view>
#include <type_traits>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

// The dtypes the reference kernels are instantiated for, in this order.
constexpr std::array<DType, 4> kKernelDTypes = {DType::F32, DType::F64, DType::I32, DType::I64};

int dtype_slot(DType dtype) {
  for (size_t i = 0; i < kKernelDTypes.size(); ++i)
    if (kKernelDTypes[i] == dtype) return static_cast<int>(i);
  return -1;
}

// Reference math runs in double for f32: double has more than twice f32's precision, so + - * /
// and sqrt round to exactly the f32 result, and transcendental functions become accurate to
// half an f32 ULP, which makes the reference the yardstick for the vectorized kernels.
template <typename T>
using Wide = std::conditional_t<std::is_floating_point_v<T>, double, T>;

// Integer arithmetic wraps around like PyTorch's rather than overflowing (undefined in C++).
template <typename T>
using Bits = std::make_unsigned_t<T>;

// ---------------------------------------------------------------- scalar functions

struct Add {
  template <typename T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(Bits<T>(a) + Bits<T>(b));
    else return a + b;
  }
};
struct Sub {
  template <typename T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(Bits<T>(a) - Bits<T>(b));
    else return a - b;
  }
};
struct Mul {
  template <typename T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(Bits<T>(a) * Bits<T>(b));
    else return a * b;
  }
};
// True division, as PyTorch's div: floating dtypes only (an integer division by zero would trap).
struct Div {
  static double apply(double a, double b) { return a / b; }
};

// `x < 0 ? 0 : x` keeps NaN and -0 as PyTorch does.
struct Relu {
  template <typename T> static T apply(T x) { return x < T(0) ? T(0) : x; }
};
struct Neg {
  template <typename T> static T apply(T x) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(Bits<T>(0) - Bits<T>(x));
    else return -x;
  }
};
struct Exp {
  static double apply(double x) { return std::exp(x); }
};
struct Sigmoid {
  static double apply(double x) { return 1.0 / (1.0 + std::exp(-x)); }
};
struct Tanh {
  static double apply(double x) { return std::tanh(x); }
};
// x * Phi(x) with Phi written through erfc, which keeps its relative accuracy for x << 0 where
// 1 + erf(x / sqrt 2) would cancel.
struct GeluErf {
  static double apply(double x) { return 0.5 * x * std::erfc(-x * std::numbers::sqrt2 / 2); }
};
// 0.5 x (1 + tanh(u)) written as x * sigmoid(2u), which does not cancel for x << 0.
struct GeluTanh {
  static double apply(double x) {
    double two_u = 2 * std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
    return x / (1.0 + std::exp(-two_u));
  }
};
struct Sqrt {
  static double apply(double x) { return std::sqrt(x); }
};
struct Rsqrt {
  static double apply(double x) { return 1.0 / std::sqrt(x); }
};

// Integer dtypes take the ops whose `apply` is a template.
template <typename F>
constexpr bool kTakesIntegers = requires { &F::template apply<int32_t>; };

// ---------------------------------------------------------------- reference kernels

template <typename F, typename T>
void unary_reference(const void* in, void* out, int64_t begin, int64_t end) {
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  for (int64_t i = begin; i < end; ++i)
    y[i] = static_cast<T>(F::apply(static_cast<Wide<T>>(x[i])));
}

template <typename F, typename T>
void binary_reference(const cpu::BroadcastPlan& plan, const void* a_data, const void* b_data,
                      void* out, int64_t begin, int64_t end) {
  const T* a = static_cast<const T*>(a_data);
  const T* b = static_cast<const T*>(b_data);
  T* y = static_cast<T*>(out);
  plan.for_each_run(begin, end, [&](int64_t o, int64_t ia, int64_t ib, int64_t n, int64_t sa,
                                    int64_t sb) {
    for (int64_t i = 0; i < n; ++i)
      y[o + i] = static_cast<T>(
          F::apply(static_cast<Wide<T>>(a[ia + i * sa]), static_cast<Wide<T>>(b[ib + i * sb])));
  });
}

using UnaryReferenceFn = void (*)(const void*, void*, int64_t, int64_t);
using BinaryReferenceFn = void (*)(const cpu::BroadcastPlan&, const void*, const void*, void*,
                                   int64_t, int64_t);

// One kernel per slot of kKernelDTypes: make(T{}) for each dtype that F takes, else null.
template <typename F, typename Fn, typename Make>
constexpr std::array<Fn, 4> per_dtype(Make make) {
  std::array<Fn, 4> fns{make(float{}), make(double{}), nullptr, nullptr};
  if constexpr (kTakesIntegers<F>) {
    fns[2] = make(int32_t{});
    fns[3] = make(int64_t{});
  }
  return fns;
}

// ---------------------------------------------------------------- the op tables

struct UnaryOp {
  std::string_view name;
  // The value of the attribute "approximate" that selects this entry (gelu), else empty.
  std::string_view approximate;
  std::array<UnaryReferenceFn, 4> reference;
  cpu::UnaryArrayFn vector;  // f32, AVX2+FMA; null off x86
};

struct BinaryOp {
  std::string_view name;
  std::array<BinaryReferenceFn, 4> reference;
  cpu::BinaryArrayFn vector;  // f32, AVX2+FMA; null off x86
};

template <typename F>
constexpr UnaryOp unary(std::string_view name, std::string_view approximate,
                        cpu::UnaryArrayFn vector) {
  return {name, approximate,
          per_dtype<F, UnaryReferenceFn>([](auto t) { return &unary_reference<F, decltype(t)>; }),
          vector};
}
template <typename F>
constexpr BinaryOp binary(std::string_view name, cpu::BinaryArrayFn vector) {
  return {name,
          per_dtype<F, BinaryReferenceFn>([](auto t) { return &binary_reference<F, decltype(t)>; }),
          vector};
}

constexpr UnaryOp kUnaryOps[] = {
    unary<Relu>("relu", "", KILN_IF_X86(&cpu::avx2::relu)),
    unary<Neg>("neg", "", KILN_IF_X86(&cpu::avx2::neg)),
    unary<Exp>("exp", "", KILN_IF_X86(&cpu::avx2::exp)),
    unary<Sigmoid>("sigmoid", "", KILN_IF_X86(&cpu::avx2::sigmoid)),
    unary<Tanh>("tanh", "", KILN_IF_X86(&cpu::avx2::tanh)),
    unary<GeluErf>("gelu", "none", KILN_IF_X86(&cpu::avx2::gelu_erf)),
    unary<GeluTanh>("gelu", "tanh", KILN_IF_X86(&cpu::avx2::gelu_tanh)),
    unary<Sqrt>("sqrt", "", KILN_IF_X86(&cpu::avx2::sqrt)),
    unary<Rsqrt>("rsqrt", "", KILN_IF_X86(&cpu::avx2::rsqrt)),
};

constexpr BinaryOp kBinaryOps[] = {
    binary<Add>("add", KILN_IF_X86(&cpu::avx2::add)),
    binary<Sub>("sub", KILN_IF_X86(&cpu::avx2::sub)),
    binary<Mul>("mul", KILN_IF_X86(&cpu::avx2::mul)),
    binary<Div>("div", KILN_IF_X86(&cpu::avx2::div)),
};

// The dtypes an entry's reference kernels take, for messages: "f32, f64, i32, i64".
template <typename Fn>
std::string dtype_list(const std::array<Fn, 4>& reference) {
  std::string out;
  for (size_t i = 0; i < reference.size(); ++i)
    if (reference[i]) out += (out.empty() ? "" : ", ") + std::string(dtype_name(kKernelDTypes[i]));
  return out;
}

template <typename Fn>
void check_dtype(InferContext& ctx, DType dtype, const std::array<Fn, 4>& reference) {
  int slot = dtype_slot(dtype);
  ctx.check(slot >= 0 && reference[slot],
            std::string(ctx.op()) + " takes " + dtype_list(reference) + ", not " +
                std::string(dtype_name(dtype)) + "; insert a cast");
}

// The table entry of unary op `op`; gelu's attribute "approximate" picks one of its entries.
const UnaryOp* find_unary(const std::string& op, const AttrMap& attrs) {
  auto it = attrs.find("approximate");
  std::string_view approximate =
      it == attrs.end() ? std::string_view() : std::get<std::string>(it->second);
  for (const UnaryOp& u : kUnaryOps)
    if (u.name == op && u.approximate == approximate) return &u;
  return nullptr;
}

// ---------------------------------------------------------------- registration

// Registers the op of `first`, the first table entry of its name.
void register_unary(OpRegistry& registry, const UnaryOp& first) {
  OpDef def;
  def.name = std::string(first.name);
  def.inputs = {{"x"}};
  std::vector<std::string> variants;
  for (const UnaryOp& u : kUnaryOps)
    if (u.name == first.name && !u.approximate.empty()) variants.emplace_back(u.approximate);
  if (!variants.empty()) def.attrs = {{"approximate", variants.front()}};

  def.infer = [variants](InferContext& ctx) {
    const UnaryOp* entry = find_unary(ctx.op(), ctx.attrs());
    if (!entry) {
      std::string allowed;
      for (const std::string& v : variants) allowed += (allowed.empty() ? "\"" : ", \"") + v + "\"";
      ctx.fail("attribute 'approximate' is \"" + ctx.attr_string("approximate") +
               "\"; it must be one of " + allowed);
    }
    check_dtype(ctx, ctx.input(0).dtype, entry->reference);
    ctx.set_output(0, ctx.input(0));
  };

  auto numel = [](const KernelSpec& spec) { return num_elements(spec.output_sizes(0)); };
  if (first.vector)
    def.kernels.push_back(KernelDef{
        "avx2", "native",
        [](const KernelSpec& spec) {
          return cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
        },
        [numel](const KernelSpec& spec) {
          cpu::UnaryArrayFn fn = find_unary(spec.node.op(), spec.node.attrs())->vector;
          return make_kernel([fn, n = numel(spec), threads = spec.threads](
                                 std::span<const void* const> in, std::span<void* const> out) {
            const float* x = static_cast<const float*>(in[0]);
            float* y = static_cast<float*>(out[0]);
            cpu::parallel_chunks(n, 1, threads, [&](int64_t begin, int64_t end) {
              fn(x + begin, y + begin, end - begin);
            });
          });
        }});
  def.kernels.push_back(KernelDef{
      "reference", "native", [](const KernelSpec&) { return std::string(); },
      [numel](const KernelSpec& spec) {
        const UnaryOp* entry = find_unary(spec.node.op(), spec.node.attrs());
        UnaryReferenceFn fn = entry->reference[dtype_slot(spec.inputs[0].dtype)];
        return make_kernel([fn, n = numel(spec), threads = spec.threads](
                               std::span<const void* const> in, std::span<void* const> out) {
          cpu::parallel_chunks(n, 1, threads,
                               [&](int64_t begin, int64_t end) { fn(in[0], out[0], begin, end); });
        });
      }});
  registry.add(std::move(def));
}

void register_binary(OpRegistry& registry, const BinaryOp& op) {
  OpDef def;
  def.name = std::string(op.name);
  def.inputs = {{"a"}, {"b"}};
  def.infer = [&op](InferContext& ctx) {
    const TensorType& a = ctx.input(0);
    const TensorType& b = ctx.input(1);
    ctx.check(a.dtype == b.dtype, "the inputs' dtypes differ (" + std::string(dtype_name(a.dtype)) +
                                      " and " + std::string(dtype_name(b.dtype)) +
                                      "); insert a cast so that both have the same dtype");
    check_dtype(ctx, a.dtype, op.reference);
    ctx.set_output(0, TensorType{a.dtype, ctx.broadcast(a.shape, b.shape), a.layout});
  };

  auto plan_of = [](const KernelSpec& spec) {
    return cpu::BroadcastPlan(spec.input_sizes(0), spec.input_sizes(1), spec.output_sizes(0));
  };
  if (op.vector)
    def.kernels.push_back(KernelDef{
        "avx2", "native",
        [](const KernelSpec& spec) {
          return cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
        },
        [&op, plan_of](const KernelSpec& spec) {
          return make_kernel([fn = op.vector, plan = plan_of(spec), threads = spec.threads](
                                 std::span<const void* const> in, std::span<void* const> out) {
            const float* a = static_cast<const float*>(in[0]);
            const float* b = static_cast<const float*>(in[1]);
            float* y = static_cast<float*>(out[0]);
            cpu::parallel_chunks(plan.numel(), 1, threads, [&](int64_t begin, int64_t end) {
              plan.for_each_run(begin, end, [&](int64_t o, int64_t ia, int64_t ib, int64_t n,
                                                int64_t sa, int64_t sb) {
                fn(a + ia, sa, b + ib, sb, y + o, n);
              });
            });
          });
        }});
  def.kernels.push_back(KernelDef{
      "reference", "native", [](const KernelSpec&) { return std::string(); },
      [&op, plan_of](const KernelSpec& spec) {
        BinaryReferenceFn fn = op.reference[dtype_slot(spec.inputs[0].dtype)];
        return make_kernel([fn, plan = plan_of(spec), threads = spec.threads](
                               std::span<const void* const> in, std::span<void* const> out) {
          cpu::parallel_chunks(plan.numel(), 1, threads, [&](int64_t begin, int64_t end) {
            fn(plan, in[0], in[1], out[0], begin, end);
          });
        });
      }});
  registry.add(std::move(def));
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  for (const BinaryOp& op : kBinaryOps) register_binary(registry, op);
  // One op per name; gelu's entries differ by attribute.
  std::vector<std::string_view> done;
  for (const UnaryOp& u : kUnaryOps) {
    if (std::find(done.begin(), done.end(), u.name) != done.end()) continue;
    done.push_back(u.name);
    register_unary(registry, u);
  }
}

}  // namespace kiln
