// Elementwise ATen ops → Kiln's elementwise family (src/ops/elementwise.cc).
//
// Kiln's elementwise ops promote dtypes as PyTorch does, so converters pass operands through.
// A Python number operand becomes a rank-0 constant of PyTorch's wrapped-number dtype (i64 for
// an int, f64 for a float, bool) listed in the node's wrapped_numbers, which makes Kiln's type
// promotion match torch.result_type exactly.
#include <cmath>
#include <limits>

#include "frontend/aten/compositions.h"
#include "frontend/converter.h"
#include "kiln/error.h"

namespace kiln {

Value* log_sigmoid(ConvertContext& ctx, Value* x) {
  Value* low = ctx.add("minimum", {x, ctx.scalar(0, x->type().dtype)});
  return ctx.add("sub", {low, ctx.add("log1p", {ctx.add("exp", {ctx.add("neg", {ctx.add("abs", {x})})})})});
}

namespace {

// An op over the listed arguments, each a tensor or a Python number (listed in the node's
// wrapped_numbers). add's, sub's and rsub's alpha becomes the op's attribute of that name.
Converter elementwise(const std::string& op, std::initializer_list<const char*> args,
                      AttrMap attrs = {}) {
  std::vector<std::string> names(args.begin(), args.end());
  return [op, names, attrs](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<Value*> values;
    std::vector<int64_t> wrapped;
    for (const std::string& name : names) {
      if (ctx.is_tensor(name)) {
        values.push_back(ctx.tensor(name));
      } else {
        wrapped.push_back(static_cast<int64_t>(values.size()));
        values.push_back(ctx.number_tensor(name));
      }
    }
    AttrMap node_attrs = attrs;
    node_attrs["wrapped_numbers"] = wrapped;
    if (ctx.has("alpha")) node_attrs["alpha"] = ctx.number("alpha");
    return {ctx.add(op, values, std::move(node_attrs))};
  };
}

// A unary op whose attributes are the ATen node's numbers of the same names.
Converter unary(const std::string& op, std::vector<std::string> number_attrs = {}) {
  return [op, number_attrs](ConvertContext& ctx) -> std::vector<Value*> {
    AttrMap attrs;
    for (const std::string& name : number_attrs) attrs[name] = ctx.number(name);
    return {ctx.add(op, {ctx.tensor("self")}, std::move(attrs))};
  };
}

// clamp with Python-number bounds; PyTorch promotes the input with them (clamp(int, 0.5) is f32),
// so the input is cast to the output dtype first.
Converter clamp(bool has_min, bool has_max) {
  return [has_min, has_max](ConvertContext& ctx) -> std::vector<Value*> {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    Value* x = ctx.tensor("self");
    const DType out = ctx.output_dtype();
    x = ctx.cast(x, out);
    AttrMap attrs{{"min", has_min && ctx.has("min") ? ctx.number("min") : -kInf},
                  {"max", has_max && ctx.has("max") ? ctx.number("max") : kInf}};
    return {ctx.add("clamp", {x}, std::move(attrs))};
  };
}

// clamp with tensor bounds: maximum with min, then minimum with max, each promoting.
Converter clamp_tensor(const char* min_arg, const char* max_arg) {
  return [min_arg, max_arg](ConvertContext& ctx) -> std::vector<Value*> {
    Value* y = ctx.tensor("self");
    if (min_arg && ctx.has(min_arg)) y = ctx.add("maximum", {y, ctx.tensor(min_arg)});
    if (max_arg && ctx.has(max_arg)) y = ctx.add("minimum", {y, ctx.tensor(max_arg)});
    return {y};
  };
}

// Bitwise ops on bool tensors alone are the logical ones (PyTorch writes mask & mask this way),
// which Kiln's fusion and vector kernels know; any other operands take the bitwise op.
Converter bitwise(Converter as_bitwise, Converter as_logical,
                  std::initializer_list<const char*> args) {
  std::vector<std::string> names(args.begin(), args.end());
  return [=](ConvertContext& ctx) -> std::vector<Value*> {
    for (const std::string& name : names)
      if (!ctx.is_tensor(name) || ctx.tensor(name)->type().dtype != DType::Bool)
        return as_bitwise(ctx);
    return as_logical(ctx);
  };
}

}  // namespace

void register_aten_elementwise_converters(ConverterRegistry& r) {
  for (const char* overload : {".Tensor", ".Scalar"}) {
    const std::string o = overload;
    for (const char* op : {"add", "sub", "mul", "div", "fmod", "remainder", "eq", "ne", "lt",
                           "le", "gt", "ge"})
      r.add("aten." + std::string(op) + o, elementwise(op, {"self", "other"}));
    r.add("aten.rsub" + o, elementwise("sub", {"other", "self"}));  // other - alpha * self
  }
  r.add("aten.remainder.Scalar_Tensor", elementwise("remainder", {"self", "other"}));
  for (const char* overload : {".Tensor", ".Scalar"})
    r.add(std::string("aten.true_divide") + overload, elementwise("div", {"self", "other"}));
  for (const char* overload : {".Tensor_mode", ".Scalar_mode"})
    r.add(std::string("aten.div") + overload, [](ConvertContext& ctx) -> std::vector<Value*> {
      const std::string mode = ctx.has("rounding_mode") ? ctx.string("rounding_mode") : "none";
      return elementwise("div", {"self", "other"}, {{"rounding_mode", mode}})(ctx);
    });
  for (const char* overload : {".default", ".Scalar"})
    r.add(std::string("aten.floor_divide") + overload,
          elementwise("div", {"self", "other"}, {{"rounding_mode", std::string("floor")}}));
  for (const char* overload : {".Tensor_Tensor", ".Tensor_Scalar", ".Scalar"})
    r.add(std::string("aten.pow") + overload, elementwise("pow", {"self", "exponent"}));
  r.add("aten.maximum.default", elementwise("maximum", {"self", "other"}));
  // x.masked_fill(mask, v): v in x's dtype where mask is true, as PyTorch converts it.
  r.add("aten.masked_fill.Scalar", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    Value* value = ctx.scalar(ctx.number("value"), x->type().dtype);
    return {ctx.add("where", {ctx.tensor("mask"), value, x})};
  });
  r.add("aten.masked_fill.Tensor", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    Value* value = ctx.cast(ctx.tensor("value"), x->type().dtype);
    return {ctx.add("where", {ctx.tensor("mask"), value, x})};
  });
  r.add("aten.minimum.default", elementwise("minimum", {"self", "other"}));
  for (const char* op : {"logical_and", "logical_or", "logical_xor"}) {
    r.add("aten." + std::string(op) + ".default", elementwise(op, {"self", "other"}));
    const std::string bitwise_op = "bitwise_" + std::string(op + 8);
    for (const char* overload : {".Tensor", ".Scalar", ".Scalar_Tensor"})
      r.add("aten." + bitwise_op + overload,
            bitwise(elementwise(bitwise_op, {"self", "other"}), elementwise(op, {"self", "other"}),
                    {"self", "other"}));
  }
  r.add("aten.bitwise_not.default",
        bitwise(unary("bitwise_not"), unary("logical_not"), {"self"}));
  for (const char* op : {"nextafter", "gcd"})
    r.add("aten." + std::string(op) + ".default", elementwise(op, {"self", "other"}));
  for (const char* op : {"bitwise_left_shift", "bitwise_right_shift"})
    for (const char* overload : {".Tensor", ".Tensor_Scalar", ".Scalar_Tensor"})
      r.add("aten." + std::string(op) + overload, elementwise(op, {"self", "other"}));
  for (const auto& [dunder, op] : {std::pair{"__lshift__", "bitwise_left_shift"},
                                   std::pair{"__rshift__", "bitwise_right_shift"}})
    for (const char* overload : {".Tensor", ".Scalar"})
      r.add("aten." + std::string(dunder) + overload, elementwise(op, {"self", "other"}));
  for (const char* overload : {".self", ".ScalarSelf", ".ScalarOther", ".Scalar"})
    r.add(std::string("aten.where") + overload,
          elementwise("where", {"condition", "self", "other"}));

  for (const char* op : {"relu", "neg", "abs", "sign", "exp", "expm1", "log", "log1p", "log2",
                         "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf",
                         "silu", "mish", "hardswish", "hardsigmoid", "floor", "ceil", "trunc",
                         "round", "isnan", "isinf", "logical_not", "tan", "asin", "acos", "atan",
                         "sinh", "cosh", "asinh", "acosh", "atanh", "exp2", "log10", "erfc",
                         "erfinv", "lgamma", "digamma"})
    r.add("aten." + std::string(op) + ".default", unary(op));
  r.add("aten.round.decimals", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("round", {ctx.tensor("self")}, {{"decimals", ctx.integer("decimals")}})};
  });
  r.add("aten.gelu.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("gelu", {ctx.tensor("self")}, {{"approximate", ctx.string("approximate")}})};
  });
  // glu (Speech2Text's and the Conformer's gated convolutions): x's halves a and b along dim,
  // a · sigmoid(b). The halves are slices, so the size along dim must be known (and even).
  r.add("aten.glu.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const int64_t rank = static_cast<int64_t>(x->type().rank());
    const int64_t dim = ctx.integer("dim") < 0 ? ctx.integer("dim") + rank : ctx.integer("dim");
    if (dim < 0 || dim >= rank) ctx.unsupported("glu over a dim outside the input's rank");
    const Dim size = x->type().shape[static_cast<size_t>(dim)];
    if (!size.is_static()) ctx.unsupported("glu over a dynamic dim (its halves are slices)");
    if (size.size() % 2 != 0) ctx.unsupported("glu over a dim of odd size");
    auto half = [&](int64_t start) {
      return ctx.add("slice", {x}, {{"dim", dim}, {"start", start},
                                    {"end", start + size.size() / 2}, {"step", int64_t{1}}});
    };
    return {ctx.add("mul", {half(0), ctx.add("sigmoid", {half(size.size() / 2)})})};
  });
  // PReLU: x where x > 0, weight·x elsewhere, as PyTorch's kernel computes it (F.prelu has
  // already shaped weight to broadcast over the channels).
  r.add("aten._prelu_kernel.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    Value* positive = ctx.add("gt", {x, ctx.scalar(0, DType::I64)}, {{"wrapped_numbers", std::vector<int64_t>{1}}});
    return {ctx.add("where", {positive, x, ctx.add("mul", {ctx.tensor("weight"), x})})};
  });
  for (const char* op : {"atan2", "hypot", "logaddexp", "logaddexp2"})
    r.add("aten." + std::string(op) + ".default", elementwise(op, {"self", "other"}));
  for (const char* overload : {".Tensor", ".Scalar"})
    r.add(std::string("aten.copysign") + overload, elementwise("copysign", {"self", "other"}));
  r.add("aten.sgn.default", unary("sign"));  // real tensors: sgn is sign
  // isposinf(x) and isneginf(x): x == ±inf (false for every integer).
  for (const auto& [op, infinity] : {std::pair{"isposinf", std::numeric_limits<double>::infinity()},
                                     std::pair{"isneginf", -std::numeric_limits<double>::infinity()}})
    r.add("aten." + std::string(op) + ".default",
          [infinity](ConvertContext& ctx) -> std::vector<Value*> {
            return {ctx.add("eq", {ctx.tensor("self"), ctx.scalar(infinity, DType::F64)},
                            {{"wrapped_numbers", std::vector<int64_t>{1}}})};
          });
  // celu(x, alpha) is elu(x, alpha, scale 1, input_scale 1/alpha), as PyTorch computes it.
  r.add("aten.celu.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const double alpha = ctx.has("alpha") ? ctx.number("alpha") : 1.0;
    return {ctx.add("elu", {ctx.tensor("self")},
                    {{"alpha", alpha}, {"scale", 1.0}, {"input_scale", 1 / alpha}})};
  });
  // F.logsigmoid, and exp(-|x|), the buffer PyTorch's CPU kernel returns beside it for the
  // backward (unread in inference graphs).
  r.add("aten.log_sigmoid_forward.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {log_sigmoid(ctx, x),
            ctx.output_used(1) ? ctx.add("exp", {ctx.add("neg", {ctx.add("abs", {x})})}) : nullptr};
  });
  // lerp: self + weight·(end − self) for |weight| < 0.5, else end − (end − self)·(1 − weight):
  // PyTorch's two branches, each exact at its end.
  auto lerp = [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* start = ctx.tensor("self");
    Value* end = ctx.tensor("end");
    Value* weight = ctx.is_tensor("weight") ? ctx.tensor("weight")
                                            : ctx.scalar(ctx.number("weight"), start->type().dtype);
    Value* diff = ctx.add("sub", {end, start});
    Value* near_start = ctx.add("lt", {ctx.add("abs", {weight}), ctx.scalar(0.5, DType::F64)},
                                {{"wrapped_numbers", std::vector<int64_t>{1}}});
    Value* one = ctx.scalar(1, DType::I64);
    Value* from_end = ctx.add(
        "sub", {end, ctx.add("mul", {diff, ctx.add("sub", {one, weight},
                                                    {{"wrapped_numbers", std::vector<int64_t>{0}}})})});
    return {ctx.add("where", {near_start, ctx.add("add", {start, ctx.add("mul", {weight, diff})}),
                              from_end})};
  };
  r.add("aten.lerp.Scalar", lerp);
  r.add("aten.lerp.Tensor", lerp);
  // addcmul: self + value·t1·t2; addcdiv: self + value·t1 / t2, in PyTorch's order.
  for (const bool divide : {false, true})
    r.add(divide ? "aten.addcdiv.default" : "aten.addcmul.default",
          [divide](ConvertContext& ctx) -> std::vector<Value*> {
            Value* scaled = ctx.tensor("tensor1");
            if (!ctx.has("value") || ctx.number("value") != 1.0) {
              Tensor value = Tensor::empty(DType::F64, {});
              *value.data<double>() = ctx.number("value");
              scaled = ctx.add("mul", {ctx.graph().add_constant(ctx.node_name() + "_value", value),
                                       scaled},
                               {{"wrapped_numbers", std::vector<int64_t>{0}}});
            }
            Value* term = ctx.add(divide ? "div" : "mul", {scaled, ctx.tensor("tensor2")});
            return {ctx.add("add", {ctx.tensor("self"), term})};
          });
  // frac: x − trunc(x); heaviside: values where x == 0, else x > 0 as 1 or 0 (NaN gives 0).
  r.add("aten.frac.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {ctx.add("sub", {x, ctx.add("trunc", {x})})};
  });
  r.add("aten.heaviside.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const DType out = ctx.output_dtype();
    Value* zero = ctx.scalar(0, x->type().dtype);
    return {ctx.add("where", {ctx.add("eq", {x, zero}), ctx.cast(ctx.tensor("values"), out),
                              ctx.cast(ctx.add("gt", {x, zero}), out)})};
  });
  // logit(x, eps): log(z / (1 − z)) with z = x clamped to [eps, 1 − eps] when eps is given.
  r.add("aten.logit.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* z = ctx.cast(ctx.tensor("self"), ctx.output_dtype());
    if (ctx.has("eps"))
      z = ctx.add("clamp", {z}, {{"min", ctx.number("eps")}, {"max", 1 - ctx.number("eps")}});
    Value* rest = ctx.add("sub", {ctx.scalar(1, DType::I64), z},
                          {{"wrapped_numbers", std::vector<int64_t>{0}}});
    return {ctx.add("log", {ctx.add("div", {z, rest})})};
  });
  // nan_to_num: NaN, +inf and −inf replaced (by default 0 and the dtype's largest and lowest).
  r.add("aten.nan_to_num.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const DType dtype = x->type().dtype;
    if (!is_floating(dtype)) return {ctx.add("copy", {x})};
    const double largest = dtype == DType::F64 ? std::numeric_limits<double>::max()
                           : dtype == DType::F32 ? std::numeric_limits<float>::max()
                           : dtype == DType::F16 ? 65504.0
                                                 : 3.3895313892515355e38;  // bf16
    auto value = [&](const char* arg, double fallback) {
      return ctx.scalar(ctx.has(arg) ? ctx.number(arg) : fallback, dtype);
    };
    Value* inf = ctx.scalar(std::numeric_limits<double>::infinity(), dtype);
    Value* y = ctx.add("where", {ctx.add("isnan", {x}), value("nan", 0), x});
    y = ctx.add("where", {ctx.add("eq", {x, inf}), value("posinf", largest), y});
    return {ctx.add("where", {ctx.add("eq", {x, ctx.add("neg", {inf})}), value("neginf", -largest), y})};
  });
  // threshold(x, t, v): v where x <= t, else x; t and v in x's dtype, as PyTorch converts them.
  r.add("aten.threshold.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const DType dtype = x->type().dtype;
    return {ctx.add("where", {ctx.add("le", {x, ctx.scalar(ctx.number("threshold"), dtype)}),
                              ctx.scalar(ctx.number("value"), dtype), x})};
  });
  // fmax and fmin: the other operand where one is NaN, else maximum / minimum.
  for (const char* op : {"fmax", "fmin"})
    r.add("aten." + std::string(op) + ".default", [op](ConvertContext& ctx) -> std::vector<Value*> {
      const DType out = ctx.output_dtype();
      Value* a = ctx.cast(ctx.tensor("self"), out);
      Value* b = ctx.cast(ctx.tensor("other"), out);
      Value* y = ctx.add(std::string(op) == "fmax" ? "maximum" : "minimum", {a, b});
      if (!is_floating(out)) return {y};
      y = ctx.add("where", {ctx.add("isnan", {b}), a, y});
      return {ctx.add("where", {ctx.add("isnan", {a}), b, y})};
    });
  // deg2rad and rad2deg: x times π/180 or 180/π as a Python float, as PyTorch's own definitions.
  for (const auto& [op, factor] : {std::pair{"deg2rad", M_PI / 180}, std::pair{"rad2deg", 180 / M_PI}})
    r.add("aten." + std::string(op) + ".default", [factor](ConvertContext& ctx) -> std::vector<Value*> {
      return {ctx.add("mul", {ctx.tensor("self"), ctx.scalar(factor, DType::F64)},
                      {{"wrapped_numbers", std::vector<int64_t>{1}}})};
    });
  // signbit: a float's sign bit (-0 and -NaN included) is copysign(1, x)'s; an integer's is x < 0.
  r.add("aten.signbit.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const DType dtype = x->type().dtype;
    Value* zero = ctx.scalar(0, dtype);
    if (!is_floating(dtype)) return {ctx.add("lt", {x, zero})};
    return {ctx.add("lt", {ctx.add("copysign", {ctx.scalar(1, dtype), x}), zero})};
  });
  // xlogy(x, y) = x·log(y) and xlog1py(x, y) = x·log1p(y), as PyTorch's kernels: NaN where y is
  // NaN, else 0 where x is 0 (even for y = 0 or inf).
  for (const auto& [target, log] :
       {std::pair{"aten.xlogy.Tensor", "log"}, std::pair{"aten.xlogy.Scalar_Self", "log"},
        std::pair{"aten.xlogy.Scalar_Other", "log"},
        std::pair{"aten.special_xlog1py.default", "log1p"},
        std::pair{"aten.special_xlog1py.self_scalar", "log1p"},
        std::pair{"aten.special_xlog1py.other_scalar", "log1p"}})
    r.add(target, [log](ConvertContext& ctx) -> std::vector<Value*> {
      const DType out = ctx.output_dtype();
      auto operand = [&](const char* arg) {
        return ctx.is_tensor(arg) ? ctx.cast(ctx.tensor(arg), out)
                                  : ctx.scalar(ctx.number(arg), out);
      };
      Value* x = operand("self");
      Value* y = operand("other");
      Value* product = ctx.add("mul", {x, ctx.add(log, {y})});
      Value* zero = ctx.scalar(0, out);
      Value* y_or_zero = ctx.add("where", {ctx.add("eq", {x, zero}), zero, product});
      return {ctx.add("where", {ctx.add("isnan", {y}), y, y_or_zero})};
    });
  // rrelu at inference: leaky_relu with the mean of its slope range, as PyTorch's eval mode; the
  // noise passes through. Training draws random slopes: it stays in PyTorch.
  r.add("aten.rrelu_with_noise_functional.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (ctx.boolean("training")) ctx.unsupported("rrelu in training mode (random slopes)");
    const double lower = ctx.has("lower") ? ctx.number("lower") : 1.0 / 8;
    const double upper = ctx.has("upper") ? ctx.number("upper") : 1.0 / 3;
    return {ctx.add("leaky_relu", {ctx.tensor("self")}, {{"negative_slope", (lower + upper) / 2}}),
            ctx.tensor("noise")};
  });
  // sinc: 1 at 0, else sin(π·x) / (π·x) with π·x rounded once, as PyTorch's kernel: sin's
  // tolerance and the quotient's rounding.
  r.add("aten.sinc.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const DType out = ctx.output_dtype();
    Value* x = ctx.cast(ctx.tensor("self"), out);
    Value* product = ctx.add("mul", {x, ctx.scalar(M_PI, out)});
    Value* quotient = ctx.add("div", {ctx.add("sin", {product}), product});
    return {ctx.add("where", {ctx.add("eq", {x, ctx.scalar(0, out)}), ctx.scalar(1, out), quotient})};
  });
  // ldexp(x, e) = x · 2.0^e, PyTorch's own definition (2.0 a Python float).
  r.add("aten.ldexp.Tensor", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* power = ctx.add("pow", {ctx.scalar(2.0, DType::F64), ctx.tensor("other")},
                           {{"wrapped_numbers", std::vector<int64_t>{0}}});
    return {ctx.add("mul", {ctx.tensor("self"), power})};
  });
  r.add("aten.leaky_relu.default", unary("leaky_relu", {"negative_slope"}));
  r.add("aten.elu.default", unary("elu", {"alpha", "scale", "input_scale"}));
  r.add("aten.softplus.default", unary("softplus", {"beta", "threshold"}));
  r.add("aten.hardtanh.default", unary("hardtanh", {"min_val", "max_val"}));
  r.add("aten.clamp.default", clamp(true, true));
  r.add("aten.clamp_min.default", clamp(true, false));
  r.add("aten.clamp_max.default", clamp(false, true));
  r.add("aten.clamp.Tensor", clamp_tensor("min", "max"));
  r.add("aten.clamp_min.Tensor", clamp_tensor("min", nullptr));
  r.add("aten.clamp_max.Tensor", clamp_tensor(nullptr, "max"));
}

}  // namespace kiln
