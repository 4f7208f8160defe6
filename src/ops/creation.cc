// Creation ops: tensors made from attributes, or shaped like an input (attribute names are
// ATen's; dtype is a dtype name such as "f32", "i64"):
//
//   arange(; start = 0, end, step = 1, dtype = "f32")  start, start + step, ... up to end
//                              (excluded), with PyTorch's element count and arithmetic: for
//                              integer dtypes the bounds are first truncated to integers.
//                              sym_end (optional) replaces end by a size over the graph's
//                              symbols ("s1"), for arange(S) traced with S dynamic.
//   full(; size, fill_value, dtype = "f32"), zeros(; size, dtype = "f32"), ones(...)
//                              sym_size (optional): per dim, a size over the graph's symbols
//                              ("" where size holds it), for ones(B, S) traced with S dynamic.
//   full_like(x; fill_value, dtype = ""), zeros_like(x; dtype = ""), ones_like(x; dtype = "")
//                              x's shape (symbolic dims included) and, unless dtype is given, its
//                              dtype.
//
// PyTorch picks i64 for arange and full when their arguments are integers; attributes store
// numbers as floats, so here the dtype is always the attribute's (the ATen converter passes the
// node's dtype). A fill value the dtype can't hold is an E40002, as PyTorch's "value cannot be
// converted to type ... without overflow".
#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <span>
#include <type_traits>

#include "kernels/cpu/block_copy.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/dtype_attr.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

std::string number_string(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// ---------------------------------------------------------------- arange

// The type PyTorch's CPU arange computes start + step * i in: double for f32 and f64, float for
// f16 and bf16, int64 for the integer dtypes.
template <typename T>
using ArangeAcc = std::conditional_t<std::is_integral_v<T>, int64_t,
                                     std::conditional_t<cpu::kIs16BitFloat<T>, float, double>>;

struct Arange {
  double start, step;  // as given
  int64_t count;
};

// PyTorch's arange checks and element count (aten/src/ATen/native/RangeFactories.cpp): start,
// end and step converted to the accumulation type first (integers truncate), then step nonzero,
// bounds finite, the step's sign pointing from start to end; the count is exact for i64 and
// ceil((end - start) / step) in double for every other dtype.
Arange arange_of(InferContext& ctx, DType dtype, double end) {
  const double start = ctx.attr_float("start"), step = ctx.attr_float("step");
  const std::string range = "start " + number_string(start) + ", end " + number_string(end) +
                            ", step " + number_string(step);
  ctx.check(dtype != DType::Bool, "arange makes no bool tensors; use a numeric dtype");
  return cpu::dispatch_dtype(dtype, [&](auto zero) {
    using Acc = ArangeAcc<decltype(zero)>;
    for (double v : {start, end, step}) {
      const std::string why = cpu::scalar_unrepresentable_reason(DTypeOf<Acc>::value, v);
      ctx.check(why.empty(), range + ": " + why);
    }
    const Acc a = cpu::convert<Acc>(start), b = cpu::convert<Acc>(end),
              s = cpu::convert<Acc>(step);
    ctx.check(s != 0, range + ": the step must be nonzero" +
                          std::string(std::is_integral_v<Acc> ? " after truncation" : ""));
    ctx.check(std::isfinite(static_cast<double>(a)) && std::isfinite(static_cast<double>(b)),
              range + ": the bounds must be finite");
    ctx.check((s > 0 && b >= a) || (s < 0 && b <= a),
              range + ": the step's sign points away from end");
    double count;
    if constexpr (std::is_same_v<decltype(zero), int64_t>) {
      const __int128 sign = s > 0 ? 1 : -1;
      count = static_cast<double>((__int128{b} - a + s - sign) / s);
    } else {
      count = std::ceil((end - start) / step);
    }
    ctx.check(count >= 0 && count <= static_cast<double>(INT64_MAX / 16),
              range + " gives " + number_string(count) + " elements, too many");
    return Arange{start, step, static_cast<int64_t>(count)};
  });
}

void infer_arange(InferContext& ctx) {
  const DType dtype = dtype_attr(ctx, "dtype");
  const std::string& sym_end = ctx.attr_string("sym_end");
  const Dim end = sym_end.empty() ? Dim(0) : ctx.sym_dim(sym_end);
  if (end.is_static()) {
    const double e = sym_end.empty() ? ctx.attr_float("end") : static_cast<double>(end.size());
    ctx.set_output(0, TensorType{dtype, {Dim(arange_of(ctx, dtype, e).count)}});
    return;
  }
  // arange(S) traced with S symbolic: whole start and step, counting up from below S's range.
  const double start = ctx.attr_float("start"), step = ctx.attr_float("step");
  const Symbol& e = ctx.symbols()[end.symbol()];
  ctx.check(start == std::floor(start) && step == std::floor(step) && step >= 1 && start >= 0 &&
                start <= static_cast<double>(e.min),
            "a dynamic end " + sym_end + " takes a whole start in [0, " + std::to_string(e.min) +
                "] and a whole step >= 1, not start " + number_string(start) + ", step " +
                number_string(step));
  const auto a = static_cast<int64_t>(start), st = static_cast<int64_t>(step);
  const std::string count = a == 0 && st == 1 ? sym_end
                                              : "((" + sym_end + ") - " + std::to_string(a) +
                                                    " + " + std::to_string(st - 1) + ")//" +
                                                    std::to_string(st);
  ctx.set_output(0, TensorType{dtype, {ctx.sym_dim(count)}});
}

std::unique_ptr<KernelInstance> arange_kernel(const KernelSpec& spec) {
  const DType dtype = spec.outputs[0].dtype;
  const double start = spec.node.attr_float("start"), step = spec.node.attr_float("step");
  return make_kernel([dtype, start, step, n = num_elements(spec.output_sizes(0)),
                      threads = spec.threads](std::span<const void* const>,
                                              std::span<void* const> out) {
    cpu::dispatch_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      using Acc = ArangeAcc<T>;
      const Acc a = cpu::convert<Acc>(start), s = cpu::convert<Acc>(step);
      T* y = static_cast<T*>(out[0]);
      cpu::parallel_chunks(n, 1, threads, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if constexpr (std::is_integral_v<Acc>)  // wraps like PyTorch's, without overflow UB
            y[i] = cpu::convert<T>(static_cast<int64_t>(
                static_cast<uint64_t>(a) + static_cast<uint64_t>(s) * static_cast<uint64_t>(i)));
          else
            y[i] = cpu::convert<T>(a + s * static_cast<Acc>(i));
        }
      });
    });
  });
}

// ---------------------------------------------------------------- full and friends

struct FillOp {
  const char* name;
  bool like;                          // shaped like input x, else by the attribute "size"
  std::optional<double> fixed_value;  // zeros and ones; else the attribute "fill_value"
};

constexpr FillOp kFillOps[] = {
    {"full", false, std::nullopt}, {"zeros", false, 0.0},     {"ones", false, 1.0},
    {"full_like", true, std::nullopt}, {"zeros_like", true, 0.0}, {"ones_like", true, 1.0},
};

double fill_value(const FillOp& op, const AttrMap& attrs) {
  return op.fixed_value ? *op.fixed_value : std::get<double>(attrs.at("fill_value"));
}

void infer_fill(const FillOp& op, InferContext& ctx) {
  TensorType out;
  if (op.like) {
    out = ctx.input(0);
    out.dtype = dtype_attr(ctx, "dtype", out.dtype);
  } else {
    const std::vector<int64_t>& size = ctx.attr_ints("size");
    const auto& sym = std::get<std::vector<std::string>>(ctx.attrs().at("sym_size"));
    ctx.check(sym.empty() || sym.size() == size.size(),
              "sym_size has " + std::to_string(sym.size()) + " entries for the " +
                  std::to_string(size.size()) + " of size " + shape_string(size));
    out = TensorType{dtype_attr(ctx, "dtype"), {}};
    for (size_t i = 0; i < size.size(); ++i) {
      if (!sym.empty() && !sym[i].empty()) {
        out.shape.push_back(ctx.sym_dim(sym[i]));
        continue;
      }
      ctx.check(size[i] >= 0, "size " + shape_string(size) + " has a negative dim");
      out.shape.push_back(Dim(size[i]));
    }
  }
  const std::string why =
      cpu::scalar_unrepresentable_reason(out.dtype, fill_value(op, ctx.attrs()));
  ctx.check(why.empty(), "fill_value " + why);
  ctx.set_output(0, out);
}

std::unique_ptr<KernelInstance> fill_kernel(const FillOp& op, const KernelSpec& spec) {
  const DType dtype = spec.outputs[0].dtype;
  return make_kernel([bits = cpu::scalar_bits(dtype, fill_value(op, spec.node.attrs())),
                      bytes = dtype_size(dtype), n = num_elements(spec.output_sizes(0)),
                      threads = spec.threads](std::span<const void* const>,
                                              std::span<void* const> out) {
    cpu::with_element_type(bytes, [&](auto zero) {
      using E = decltype(zero);
      const E value = cpu::element_from_bits<E>(bits);
      E* y = static_cast<E*>(out[0]);
      cpu::parallel_chunks(n, 1, threads, [&](int64_t begin, int64_t end) {
        std::fill(y + begin, y + end, value);
      });
    });
  });
}

KernelDef reference(std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> create) {
  return KernelDef{"reference", "native", [](const KernelSpec&) { return std::string(); },
                   std::move(create)};
}

}  // namespace

void register_creation_ops(OpRegistry& registry) {
  OpDef arange;
  arange.name = "arange";
  arange.attrs = {{"start", 0.0}, {"end", 0.0, true}, {"step", 1.0}, {"dtype", std::string("f32")},
                  {"sym_end", std::string()}};
  arange.infer = infer_arange;
  arange.kernels = {reference(arange_kernel)};
  registry.add(std::move(arange));

  for (const FillOp& op : kFillOps) {
    OpDef def;
    def.name = op.name;
    if (op.like) def.inputs = {{"x"}};
    else
      def.attrs.insert(def.attrs.end(), {{"size", std::vector<int64_t>{}, true},
                                         {"sym_size", std::vector<std::string>{}}});
    if (!op.fixed_value) def.attrs.push_back({"fill_value", 0.0, true});
    def.attrs.push_back({"dtype", std::string(op.like ? "" : "f32")});
    def.infer = [&op](InferContext& ctx) { infer_fill(op, ctx); };
    def.kernels = {reference([&op](const KernelSpec& spec) { return fill_kernel(op, spec); })};
    registry.add(std::move(def));
  }
}

}  // namespace kiln
