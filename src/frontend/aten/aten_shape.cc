// Views, reshapes and permutations. Kiln values are immutable, so a view is a new value (a
// reshape or permute) and a clone or contiguous is the value itself.
#include <algorithm>
#include <numeric>

#include "frontend/converter.h"

namespace kiln {

namespace {

// The output shape PyTorch computed: static sizes as they are, symbolic ones resolved to
// expressions over the symbols.
std::vector<Value*> reshape(ConvertContext& ctx) {
  return {ctx.reshape_to_output(ctx.tensor("self"))};
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

// x's sizes from `first` on, a dynamic one as -1 (reshape infers it); E50001 when more than
// one is dynamic.
std::vector<int64_t> sizes_from(ConvertContext& ctx, Value* x, size_t first, size_t last) {
  std::vector<int64_t> out;
  int dynamic = 0;
  for (size_t d = first; d < last; ++d) {
    const Dim& dim = x->type().shape[d];
    out.push_back(dim.is_static() ? dim.size() : -1);
    dynamic += !dim.is_static();
  }
  if (dynamic > 1) ctx.unsupported("more than one dynamic dim");
  return out;
}

// x [*, C·r², H, W] → [*, C, H·r, W·r] (pixel_shuffle: super-resolution's sub-pixel
// convolution) or its inverse (pixel_unshuffle): a reshape, a permute, a reshape. C, H and W
// static; at most one leading dim dynamic.
Value* pixel_shuffle(ConvertContext& ctx, bool shuffle) {
  Value* x = ctx.tensor("self");
  const size_t rank = x->type().rank();
  if (rank < 3) ctx.unsupported("pixel shuffling of a tensor of rank below 3");
  const int64_t r = ctx.integer(shuffle ? "upscale_factor" : "downscale_factor");
  std::vector<int64_t> lead = sizes_from(ctx, x, 0, rank - 3);
  const std::vector<int64_t> chw = sizes_from(ctx, x, rank - 3, rank);
  if (std::count(chw.begin(), chw.end(), -1) > 0)
    ctx.unsupported("pixel shuffling with dynamic channels, height or width");
  if (r < 1 || (shuffle ? chw[0] % (r * r) : chw[1] % r + chw[2] % r) != 0)
    ctx.unsupported("a factor that doesn't divide the channels or the image (PyTorch refuses it)");
  auto with_lead = [&](std::vector<int64_t> dims) {
    dims.insert(dims.begin(), lead.begin(), lead.end());
    return dims;
  };
  const int64_t n = static_cast<int64_t>(lead.size());
  std::vector<int64_t> order(lead.size());
  std::iota(order.begin(), order.end(), 0);
  Value* split;
  if (shuffle) {  // [*, C, r, r, H, W] → [*, C, H, r, W, r]
    const int64_t c = chw[0] / (r * r);
    split = ctx.add("reshape", {x}, {{"shape", with_lead({c, r, r, chw[1], chw[2]})}});
    for (int64_t d : {0, 3, 1, 4, 2}) order.push_back(n + d);
  } else {  // [*, C, H, r, W, r] → [*, C, r, r, H, W]
    split = ctx.add("reshape", {x}, {{"shape", with_lead({chw[0], chw[1] / r, r, chw[2] / r, r})}});
    for (int64_t d : {0, 2, 4, 1, 3}) order.push_back(n + d);
  }
  Value* moved = ctx.add("permute", {split}, {{"dims", order}});
  const std::vector<int64_t> out =
      shuffle ? with_lead({chw[0] / (r * r), chw[1] * r, chw[2] * r})
              : with_lead({chw[0] * r * r, chw[1] / r, chw[2] / r});
  return ctx.add("reshape", {moved}, {{"shape", out}});
}

}  // namespace

void register_aten_shape_converters(ConverterRegistry& r) {
  r.add("aten.pixel_shuffle.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {pixel_shuffle(ctx, true)};
  });
  r.add("aten.pixel_unshuffle.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {pixel_shuffle(ctx, false)};
  });
  // channel_shuffle (ShuffleNet): x [N, C, *] with C = g·k read as [N, g, k, *], the two swapped.
  r.add("aten.channel_shuffle.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const size_t rank = x->type().rank();
    if (rank < 3) ctx.unsupported("channel_shuffle of a tensor of rank below 3");
    const int64_t groups = ctx.integer("groups");
    const std::vector<int64_t> sizes = sizes_from(ctx, x, 0, rank);
    if (sizes[1] < 0) ctx.unsupported("channel_shuffle of dynamic channels");
    if (groups < 1 || sizes[1] % groups != 0)
      ctx.unsupported("groups that don't divide the channels (PyTorch refuses them)");
    std::vector<int64_t> split = sizes;
    split[1] = sizes[1] / groups;
    split.insert(split.begin() + 1, groups);
    Value* y = swap_dims(ctx, ctx.add("reshape", {x}, {{"shape", split}}), 1, 2);
    return {ctx.add("reshape", {y}, {{"shape", sizes}})};
  });
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
  // as_strided(x, size, stride, storage_offset) reads x's memory through the strides. Kiln's
  // values are dense row-major, so it converts only where PyTorch's x is too (the importer's
  // `input_is_dense`: contiguous from offset 0) and every offset falls inside x: strides that
  // walk `size` in row-major order (size-1 dims aside) read one run of x, a slice and a reshape;
  // others a gather of the flattened x at constant offsets.
  r.add("aten.as_strided.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    if (!ctx.has("input_is_dense") || !ctx.boolean("input_is_dense"))
      ctx.unsupported("as_strided of a tensor PyTorch doesn't lay out dense row-major");
    if (!ctx.sizes("size").syms.empty() || !ctx.sizes("stride").syms.empty() ||
        !is_static(x->type().shape))
      ctx.unsupported("as_strided with dynamic sizes");
    const std::vector<int64_t> size = ctx.integers("size"), stride = ctx.integers("stride");
    const int64_t start = ctx.has("storage_offset") ? ctx.integer("storage_offset") : 0;
    if (size.size() != stride.size()) ctx.unsupported("as many strides as sizes are needed");
    const int64_t available = num_elements(static_sizes(x->type().shape));
    const int64_t count = num_elements(size);
    constexpr int64_t kMaxGather = int64_t{1} << 24;
    if (count > kMaxGather) ctx.unsupported("an as_strided view of over 2^24 elements");
    Tensor offsets = Tensor::empty(DType::I64, {count});
    auto* at = offsets.data<int64_t>();
    bool one_run = true;
    for (int64_t i = 0; i < count; ++i) {
      int64_t rest = i, offset = start;
      for (size_t d = size.size(); d-- > 0;) {
        offset += (rest % size[d]) * stride[d];
        rest /= size[d];
      }
      if (offset < 0 || offset >= available)
        ctx.unsupported("as_strided reads element " + std::to_string(offset) +
                        " of a tensor of " + std::to_string(available));
      at[i] = offset;
      one_run &= offset == at[0] + i;
    }
    Value* flat = ctx.add("reshape", {x}, {{"shape", std::vector<int64_t>{available}}});
    if (!one_run) {
      Value* index = ctx.graph().add_constant(ctx.node_name() + "_offsets", std::move(offsets));
      flat = ctx.add("index_select", {flat, index}, {{"dim", int64_t{0}}});
    } else if (count < available) {
      const int64_t first = count ? at[0] : 0;
      flat = ctx.add("slice", {flat}, {{"dim", int64_t{0}}, {"start", first},
                                       {"end", first + count}, {"step", int64_t{1}}});
    }
    return {ctx.add("reshape", {flat}, {{"shape", size}})};
  });
  // Tensor.unfold(dimension, size, step) (PatchTST's patches, sliding frames): windows of `size`
  // elements `step` apart along the dim, which becomes [W] with a new last dim [size]. An
  // index_select at w·step + j, the dim split into [W, size], the window's elements moved last.
  // The dim's size must be static (the positions are constants), and at most one other dim
  // dynamic (the split's -1).
  r.add("aten.unfold.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const Shape& shape = x->type().shape;
    if (shape.empty()) ctx.unsupported("unfold of a 0-d tensor");
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t dim = normalized_dim(ctx, ctx.integer("dimension"), shape.size());
    const int64_t size = ctx.integer("size"), step = ctx.integer("step");
    if (!shape[dim].is_static())
      ctx.unsupported("unfold along a dynamic dim (the windows' positions are constants)");
    const int64_t n = shape[dim].size();
    if (size < 0 || size > n || step < 1)
      ctx.unsupported("unfold windows that don't fit the dim (PyTorch refuses them)");
    const int64_t windows = (n - size) / step + 1;
    Tensor positions = Tensor::empty(DType::I64, {windows * size});
    int64_t* at = positions.data<int64_t>();
    for (int64_t w = 0; w < windows; ++w)
      for (int64_t j = 0; j < size; ++j) *at++ = w * step + j;
    Value* picked = ctx.add(
        "index_select",
        {x, ctx.graph().add_constant(ctx.node_name() + "_positions", std::move(positions))},
        {{"dim", dim}});
    std::vector<int64_t> split;
    for (int64_t d = 0; d < rank; ++d) {
      if (d == dim) {
        split.push_back(windows);
        split.push_back(size);
      } else {
        split.push_back(shape[d].is_static() ? shape[d].size() : -1);
      }
    }
    if (std::count(split.begin(), split.end(), -1) > 1)
      ctx.unsupported("unfold of a tensor with more than one dynamic dim");
    Value* y = ctx.add("reshape", {picked}, {{"shape", split}});
    if (dim == rank - 1) return {y};
    std::vector<int64_t> order(static_cast<size_t>(rank) + 1);
    std::iota(order.begin(), order.end(), 0);
    order.erase(order.begin() + dim + 1);
    order.push_back(dim + 1);
    return {ctx.add("permute", {y}, {{"dims", order}})};
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
