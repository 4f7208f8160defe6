// Broadcasts, padding, squeezes, casts and tensor creation.
#include "frontend/converter.h"

namespace kiln {

namespace {

std::vector<Value*> same_value(ConvertContext& ctx) { return {ctx.tensor("self")}; }

std::string dtype_attr(ConvertContext& ctx) { return std::string(dtype_name(ctx.output_dtype())); }

// Sparse and other non-strided layouts stay in PyTorch. A memory format only orders a dense
// tensor's elements in memory, never their values, and Kiln's tensors are dense row-major: a
// to(memory_format=torch.channels_last) is the same values, given back contiguous.
void require_dense(ConvertContext& ctx) {
  std::string layout = ctx.enum_name("layout");
  if (!layout.empty() && layout != "torch.strided") ctx.unsupported("layout " + layout);
}

// `value` cast to `like`'s dtype and broadcast to its shape (static: a dynamic one is left to
// PyTorch), as copy_ and fill_ write into `like`.
Value* broadcast_into(ConvertContext& ctx, Value* value, const Value* like) {
  const TensorType& type = like->type();
  value = ctx.cast(value, type.dtype);
  if (value->type().shape == type.shape) return value;
  std::vector<int64_t> sizes;
  for (const Dim& d : type.shape) {
    if (!d.is_static()) ctx.unsupported("writing into a tensor of dynamic shape");
    sizes.push_back(d.size());
  }
  return ctx.add("expand", {value}, {{"size", sizes}});
}

// full's attributes for a `size` argument whose entries may be symbolic (sym_size).
AttrMap full_attrs(ConvertContext& ctx, double fill_value) {
  const ConvertContext::Sizes size = ctx.sizes("size");
  AttrMap attrs{{"size", size.ints}, {"fill_value", fill_value}, {"dtype", dtype_attr(ctx)}};
  if (!size.syms.empty()) attrs["sym_size"] = size.syms;
  return attrs;
}

// PyTorch's reflect and replicate padding take negative amounts, which crop: x with every
// negative amount of `pad` (pairs from the last dim backwards) cut off by a slice, and those
// amounts set to 0. Replicate padding is then the same; reflect padding too where its amounts
// stay below the cropped size (the pad op refuses the others, which stay in PyTorch), since its
// reflections then read only elements the crop kept.
Value* crop_negative_padding(ConvertContext& ctx, Value* x, std::vector<int64_t>& pad) {
  const int64_t rank = static_cast<int64_t>(x->type().rank());
  for (size_t i = 0; i + 1 < pad.size(); i += 2) {
    int64_t& before = pad[i];
    int64_t& after = pad[i + 1];
    if (before >= 0 && after >= 0) continue;
    const int64_t dim = rank - 1 - static_cast<int64_t>(i / 2);
    if (dim < 0) break;  // more amounts than dims: the pad op reports it
    AttrMap attrs{{"dim", dim}, {"start", std::max<int64_t>(-before, 0)}, {"step", int64_t{1}}};
    // The end as a negative offset from the size, which may be symbolic.
    attrs["end"] = after < 0 ? after : INT64_MAX;
    x = ctx.add("slice", {x}, std::move(attrs));
    before = std::max<int64_t>(before, 0);
    after = std::max<int64_t>(after, 0);
  }
  return x;
}

}  // namespace

void register_aten_layout_converters(ConverterRegistry& r) {
  r.add("aten.lift_fresh_copy.default", same_value);
  r.add("aten.expand.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const ConvertContext::Sizes size = ctx.sizes("size");
    AttrMap attrs{{"size", size.ints}};
    if (!size.syms.empty()) attrs["sym_size"] = size.syms;
    return {ctx.add("expand", {ctx.tensor("self")}, std::move(attrs))};
  });
  r.add("aten.repeat.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("repeat", {ctx.tensor("self")}, {{"repeats", ctx.integers("repeats")}})};
  });
  r.add("aten.flip.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("flip", {ctx.tensor("self")}, {{"dims", ctx.integers("dims")}})};
  });
  r.add("aten.roll.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("roll", {ctx.tensor("self")},
                    {{"shifts", ctx.integers("shifts")}, {"dims", ctx.integers("dims")}})};
  });
  r.add("aten.constant_pad_nd.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("pad", {ctx.tensor("self")},
                    {{"pad", ctx.integers("pad")}, {"mode", std::string("constant")},
                     {"value", ctx.number("value")}})};
  });
  for (const char* mode : {"reflection", "replication"})
    for (int d = 1; d <= 3; ++d) {
      std::string kiln_mode = std::string(mode) == "reflection" ? "reflect" : "replicate";
      r.add("aten." + std::string(mode) + "_pad" + std::to_string(d) + "d.default",
            [kiln_mode](ConvertContext& ctx) -> std::vector<Value*> {
              std::vector<int64_t> pad = ctx.integers("padding");
              Value* x = crop_negative_padding(ctx, ctx.tensor("self"), pad);
              return {ctx.add("pad", {x}, {{"pad", pad}, {"mode", kiln_mode}})};
            });
    }
  for (const char* t : {"tril", "triu"})
    r.add(std::string("aten.") + t + ".default", [t](ConvertContext& ctx) -> std::vector<Value*> {
      return {ctx.add(t, {ctx.tensor("self")}, {{"diagonal", ctx.integer("diagonal")}})};
    });
  r.add("aten.squeeze.dims", [](ConvertContext& ctx) -> std::vector<Value*> {
    std::vector<int64_t> dims = ctx.integers("dim");
    // PyTorch squeezes nothing for an empty list, where Kiln's squeeze reads it as every size-1 dim.
    if (dims.empty()) return {ctx.add("copy", {ctx.tensor("self")})};
    return {ctx.add("squeeze", {ctx.tensor("self")}, {{"dim", dims}})};
  });
  r.add("aten.squeeze.dim", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("squeeze", {ctx.tensor("self")},
                    {{"dim", std::vector<int64_t>{ctx.integer("dim")}}})};
  });
  r.add("aten.squeeze.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("squeeze", {ctx.tensor("self")})};
  });
  r.add("aten.unsqueeze.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("unsqueeze", {ctx.tensor("self")}, {{"dim", ctx.integer("dim")}})};
  });
  // _to_copy and to.dtype: a cast (a copy of the same dtype is the value itself).
  auto cast = [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    require_dense(ctx);
    if (x->type().dtype == ctx.output_dtype()) return {x};
    return {ctx.add("to", {x}, {{"dtype", dtype_attr(ctx)}})};
  };
  r.add("aten._to_copy.default", cast);
  r.add("aten.to.dtype", cast);
  // arange(S) with S a symbolic size: sym_end carries it (end is then unused).
  auto arange = [](ConvertContext& ctx, AttrMap attrs) -> std::vector<Value*> {
    require_dense(ctx);
    const std::string sym_end = ctx.sym("end");
    attrs["end"] = sym_end.empty() ? ctx.number("end") : 0.0;
    if (!sym_end.empty()) attrs["sym_end"] = sym_end;
    attrs["dtype"] = dtype_attr(ctx);
    return {ctx.add("arange", {}, std::move(attrs))};
  };
  r.add("aten.arange.default", [arange](ConvertContext& ctx) { return arange(ctx, {}); });
  r.add("aten.arange.start_step", [arange](ConvertContext& ctx) {
    return arange(ctx, {{"start", ctx.number("start")}, {"step", ctx.number("step")}});
  });
  r.add("aten.arange.start", [arange](ConvertContext& ctx) {
    return arange(ctx, {{"start", ctx.number("start")}});
  });
  // x.new_ones(size), torch.ones(size) and friends: a filled tensor of the node's dtype; x only
  // lends defaults. empty and new_empty too (PyTorch leaves their contents unspecified: zeros are
  // as valid as any, and the same every run); functionalized graphs overwrite them (circular
  // padding).
  for (auto [target, fill] : {std::pair<const char*, double>{"aten.new_ones.default", 1.0},
                              {"aten.new_zeros.default", 0.0},
                              {"aten.new_empty.default", 0.0},
                              {"aten.new_empty_strided.default", 0.0},  // strides: memory only
                              {"aten.empty_strided.default", 0.0},
                              {"aten.empty.memory_format", 0.0},
                              {"aten.ones.default", 1.0},
                              {"aten.zeros.default", 0.0}})
    r.add(target, [fill](ConvertContext& ctx) -> std::vector<Value*> {
      require_dense(ctx);
      return {ctx.add("full", {}, full_attrs(ctx, fill))};
    });
  r.add("aten.new_full.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    require_dense(ctx);
    return {ctx.add("full", {}, full_attrs(ctx, ctx.number("fill_value")))};
  });
  // zeros_like(x) and friends: x's shape (symbolic dims included), the node's dtype. The memory
  // format orders elements in memory only. empty_like as zeros_like, as empty above (MoE layers
  // fill one by index_put to invert a permutation).
  for (auto [aten_op, kiln_op] : {std::pair<const char*, const char*>{"full_like", "full_like"},
                                  {"zeros_like", "zeros_like"},
                                  {"ones_like", "ones_like"},
                                  {"empty_like", "zeros_like"}})
    r.add("aten." + std::string(aten_op) + ".default",
          [op = std::string(kiln_op)](ConvertContext& ctx) -> std::vector<Value*> {
            require_dense(ctx);
            AttrMap attrs{{"dtype", dtype_attr(ctx)}};
            if (op == "full_like") attrs["fill_value"] = ctx.number("fill_value");
            return {ctx.add(op, {ctx.tensor("self")}, std::move(attrs))};
          });
  // x.fill_(v) and x.copy_(src) as functionalization leaves them: new tensors shaped like x.
  r.add("aten.fill.Scalar", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {ctx.add("full_like", {x}, {{"fill_value", ctx.number("value")},
                                      {"dtype", std::string(dtype_name(x->type().dtype))}})};
  });
  // x.zero_() as functionalization leaves it.
  r.add("aten.zero.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {ctx.add("zeros_like", {x}, {{"dtype", std::string(dtype_name(x->type().dtype))}})};
  });
  r.add("aten.fill.Tensor", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {broadcast_into(ctx, ctx.tensor("value"), ctx.tensor("self"))};
  });
  r.add("aten.copy.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {broadcast_into(ctx, ctx.tensor("src"), ctx.tensor("self"))};
  });
  r.add("prims.convert_element_type.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("a");
    if (x->type().dtype == ctx.output_dtype()) return {x};
    return {ctx.add("to", {x}, {{"dtype", dtype_attr(ctx)}})};
  });
  // A 0-d tensor of a number (AOTAutograd makes them of Python floats computed from sizes).
  r.add("aten.scalar_tensor.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    require_dense(ctx);
    if (const std::string size = ctx.sym("s"); !size.empty())
      return {ctx.cast(ctx.size_value(size), ctx.output_dtype())};
    return {ctx.scalar(ctx.number("s"), ctx.output_dtype())};
  });
  r.add("aten.full.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    require_dense(ctx);
    return {ctx.add("full", {}, full_attrs(ctx, ctx.number("fill_value")))};
  });
}

}  // namespace kiln
