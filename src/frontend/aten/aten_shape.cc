// Views, reshapes and permutations. Kiln values are immutable, so a view is a new value (a
// reshape or permute) and a clone or contiguous is the value itself.
#include <numeric>

#include "frontend/converter.h"

namespace kiln {

namespace {

// A dynamic output shape is taken from PyTorch's, where every size is resolved to an expression
// over the symbols ([s0*s1, 64] for view(x, [-1, 64]) of an [s0, s1, 64] tensor): a single -1
// can't stand for two dynamic dims.
std::vector<Value*> reshape(ConvertContext& ctx) {
  const ConvertContext::Sizes size = ctx.sizes("size");
  std::vector<int64_t> shape;
  std::vector<std::string> sym_shape;
  bool dynamic = false;
  for (const Json& d : ctx.output_meta().at("shape")) {
    shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
    sym_shape.push_back(d.is_string() ? d.get<std::string>() : "");
    dynamic |= d.is_string();
  }
  if (!dynamic) return {ctx.add("reshape", {ctx.tensor("self")}, {{"shape", size.ints}})};
  return {ctx.add("reshape", {ctx.tensor("self")}, {{"shape", shape}, {"sym_shape", sym_shape}})};
}

std::vector<Value*> same_value(ConvertContext& ctx) { return {ctx.tensor("self")}; }

int64_t normalized_dim(ConvertContext& ctx, int64_t dim, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r) ctx.unsupported("dim " + std::to_string(dim) + " out of range");
  return dim < 0 ? dim + r : dim;
}

Value* swap_dims(ConvertContext& ctx, Value* x, int64_t a, int64_t b) {
  std::vector<int64_t> dims(x->type().rank());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[normalized_dim(ctx, a, dims.size())], dims[normalized_dim(ctx, b, dims.size())]);
  return ctx.add("permute", {x}, {{"dims", dims}});
}

}  // namespace

void register_aten_shape_converters(ConverterRegistry& r) {
  r.add("aten.view.default", reshape);
  r.add("aten._unsafe_view.default", reshape);
  r.add("aten.reshape.default", reshape);
  for (const char* t : {"aten.clone.default", "aten.alias.default", "aten.detach.default"})
    r.add(t, same_value);
  // torch.export's guard on a tensor's metadata computes nothing; Kiln's types are fixed when
  // converting, so its dtype check happens here, once (sizes are checked by shape inference).
  r.add("aten._assert_tensor_metadata.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const std::optional<DType> dtype = ctx.dtype("dtype");
    const DType actual = ctx.tensor("a")->type().dtype;
    if (dtype && *dtype != actual)
      ctx.unsupported("it asserts dtype " + std::string(dtype_name(*dtype)) + " of a " +
                      std::string(dtype_name(actual)) + " tensor");
    return {nullptr};
  });
  r.add("aten.permute.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("permute", {ctx.tensor("self")}, {{"dims", ctx.integers("dims")}})};
  });
  r.add("aten.transpose.int", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    // PyTorch wraps a 0-d tensor's dims as a 1-d one's (0 and -1), and transposing it is itself.
    if (x->type().rank() == 0) {
      for (int64_t d : {ctx.integer("dim0"), ctx.integer("dim1")}) normalized_dim(ctx, d, 1);
      return {x};
    }
    return {swap_dims(ctx, x, ctx.integer("dim0"), ctx.integer("dim1"))};
  });
  r.add("aten.t.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {x->type().rank() < 2 ? x : swap_dims(ctx, x, 0, 1)};
  });
}

}  // namespace kiln
