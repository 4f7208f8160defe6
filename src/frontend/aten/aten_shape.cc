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

// The sizes of x, which must all be known: the composites below index with constant tables.
std::vector<int64_t> known_sizes(ConvertContext& ctx, Value* x, const char* what) {
  if (!is_static(x->type().shape)) ctx.unsupported(std::string(what) + " of a dynamic shape");
  return static_sizes(x->type().shape);
}

// A view at constant positions of x's elements (flattened, row-major), in the view's shape.
struct ConstantView {
  std::vector<int64_t> positions, sizes;
};

Value* positions_constant(ConvertContext& ctx, const std::vector<int64_t>& positions) {
  Tensor table = Tensor::empty(DType::I64, {static_cast<int64_t>(positions.size())});
  std::copy(positions.begin(), positions.end(), table.data<int64_t>());
  return ctx.graph().add_constant(ctx.node_name() + "_positions", std::move(table));
}

Value* flattened(ConvertContext& ctx, Value* x) {
  return ctx.add("reshape", {x}, {{"shape", std::vector<int64_t>{-1}}});
}

// The view's elements: x flattened, picked at the positions, shaped as the view.
Value* pick(ConvertContext& ctx, Value* x, const ConstantView& view) {
  Value* picked = ctx.add("index_select", {flattened(ctx, x), positions_constant(ctx, view.positions)},
                          {{"dim", int64_t{0}}});
  return ctx.add("reshape", {picked}, {{"shape", view.sizes}});
}

// x with the view's elements replaced by src's (the *_scatter ops, functionalization's writes
// through a view): a scatter into x flattened. src must have the view's shape.
Value* place(ConvertContext& ctx, Value* x, Value* src, const ConstantView& view) {
  if (src->type().shape != make_shape(view.sizes) || src->type().dtype != x->type().dtype)
    ctx.unsupported("a src that isn't of the view's shape and x's dtype");
  Value* placed = ctx.add("scatter", {flattened(ctx, x), positions_constant(ctx, view.positions),
                                      flattened(ctx, src)},
                          {{"dim", int64_t{0}}});
  return ctx.add("reshape", {placed}, {{"shape", static_sizes(x->type().shape)}});
}

// diagonal(x, offset, dim1, dim2): x's elements [.., i, i + offset] over dims dim1 and dim2, which
// go, as one dim, last; PyTorch's view, here a constant gather.
ConstantView diagonal_view(ConvertContext& ctx, Value* x, int64_t offset, int64_t dim1,
                           int64_t dim2) {
  const std::vector<int64_t> sizes = known_sizes(ctx, x, "diagonal");
  const size_t rank = sizes.size();
  const int64_t d1 = normalized_dim(ctx, dim1, rank), d2 = normalized_dim(ctx, dim2, rank);
  if (d1 == d2) ctx.unsupported("diagonal dims that are the same (PyTorch refuses them)");
  const int64_t n1 = sizes[d1], n2 = sizes[d2];
  const int64_t length = std::max<int64_t>(
      0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
  std::vector<int64_t> out_sizes, strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) strides[d] = strides[d + 1] * sizes[d + 1];
  std::vector<int64_t> others;  // the dims kept, in order
  for (size_t d = 0; d < rank; ++d)
    if (static_cast<int64_t>(d) != d1 && static_cast<int64_t>(d) != d2) {
      others.push_back(static_cast<int64_t>(d));
      out_sizes.push_back(sizes[d]);
    }
  out_sizes.push_back(length);
  std::vector<int64_t> positions;
  const int64_t first = std::max<int64_t>(-offset, 0) * strides[d1] +
                        std::max<int64_t>(offset, 0) * strides[d2];
  const int64_t outer = num_elements(out_sizes) / std::max<int64_t>(length, 1);
  for (int64_t o = 0; o < (length ? outer : 0); ++o) {
    int64_t rest = o, base = first;
    for (size_t k = others.size(); k-- > 0;) {
      base += (rest % sizes[others[k]]) * strides[others[k]];
      rest /= sizes[others[k]];
    }
    for (int64_t i = 0; i < length; ++i) positions.push_back(base + i * (strides[d1] + strides[d2]));
  }
  return {std::move(positions), std::move(out_sizes)};
}
Value* diagonal(ConvertContext& ctx, Value* x, int64_t offset, int64_t dim1, int64_t dim2) {
  return pick(ctx, x, diagonal_view(ctx, x, offset, dim1, dim2));
}

// as_strided(x, size, stride, storage_offset) and as_strided_scatter read or write x's memory
// through the strides. Kiln's values are dense row-major, so they convert only where PyTorch's x
// is too (the importer's `input_is_dense`: contiguous from offset 0) and every offset falls
// inside x: then the view is x's elements at those offsets.
ConstantView as_strided_view(ConvertContext& ctx, Value* x) {
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
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset = start;
    for (size_t d = size.size(); d-- > 0;) {
      offset += (rest % size[d]) * stride[d];
      rest /= size[d];
    }
    if (offset < 0 || offset >= available)
      ctx.unsupported("as_strided reads element " + std::to_string(offset) + " of a tensor of " +
                      std::to_string(available));
    offsets[static_cast<size_t>(i)] = offset;
  }
  return {std::move(offsets), size};
}

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
  // rot90(x, k, dims) as PyTorch computes it: a flip of one dim, then the two swapped.
  r.add("aten.rot90.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const std::vector<int64_t> dims = ctx.integers("dims");
    if (dims.size() != 2) ctx.unsupported("rot90 over other than two dims");
    switch (((ctx.integer("k") % 4) + 4) % 4) {
      case 1:
        return {swap_dims(ctx, ctx.add("flip", {x}, {{"dims", std::vector<int64_t>{dims[1]}}}),
                          dims[0], dims[1])};
      case 2: return {ctx.add("flip", {x}, {{"dims", dims}})};
      case 3:
        return {swap_dims(ctx, ctx.add("flip", {x}, {{"dims", std::vector<int64_t>{dims[0]}}}),
                          dims[0], dims[1])};
      default: return {x};
    }
  });
  r.add("aten.diagonal.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {diagonal(ctx, ctx.tensor("self"), ctx.integer("offset"), ctx.integer("dim1"),
                     ctx.integer("dim2"))};
  });
  // diagonal_scatter(x, src, offset, dim1, dim2): x with that diagonal replaced by src.
  r.add("aten.diagonal_scatter.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {place(ctx, x, ctx.tensor("src"),
                  diagonal_view(ctx, x, ctx.integer("offset"), ctx.integer("dim1"),
                                ctx.integer("dim2")))};
  });
  // trace: the sum of the main diagonal, as PyTorch's (floats summed in f64, integers to i64).
  r.add("aten.trace.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* d = diagonal(ctx, ctx.tensor("self"), 0, 0, 1);
    return {ctx.add("sum", {d}, {{"dim", std::vector<int64_t>{}}})};
  });
  // diag_embed(x, offset, dim1, dim2): x's last dim on the diagonal of new dims dim1 and dim2,
  // zeros elsewhere: x with one zero appended, gathered by a constant table.
  r.add("aten.diag_embed.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const std::vector<int64_t> sizes = known_sizes(ctx, x, "diag_embed");
    if (sizes.empty()) ctx.unsupported("diag_embed of a 0-d tensor");
    const int64_t offset = ctx.integer("offset"), n = sizes.back();
    const int64_t m = n + std::abs(offset);
    const size_t rank = sizes.size() + 1;
    const int64_t d1 = normalized_dim(ctx, ctx.integer("dim1"), rank);
    const int64_t d2 = normalized_dim(ctx, ctx.integer("dim2"), rank);
    if (d1 == d2) ctx.unsupported("diag_embed dims that are the same (PyTorch refuses them)");
    Value* padded = ctx.add("pad", {x}, {{"pad", std::vector<int64_t>{0, 1}},
                                         {"mode", std::string("constant")}, {"value", 0.0}});
    std::vector<int64_t> blocks(sizes.begin(), sizes.end() - 1);
    const int64_t outer = num_elements(blocks);
    std::vector<int64_t> positions;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j)
          positions.push_back(o * (n + 1) + (j - i == offset ? (offset >= 0 ? i : j) : n));
    blocks.push_back(m);
    blocks.push_back(m);
    Value* y = pick(ctx, padded, {std::move(positions), blocks});
    // The two new dims, last in y, to dim1 and dim2.
    std::vector<int64_t> perm;
    int64_t kept = 0;
    for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d)
      perm.push_back(d == d1 ? static_cast<int64_t>(rank) - 2
                     : d == d2 ? static_cast<int64_t>(rank) - 1
                               : kept++);
    return {ctx.add("permute", {y}, {{"dims", perm}})};
  });
  // block_diag(tensors): each (a 0-d one as [1, 1], a 1-d one as a row) padded with zeros to the
  // full width, then stacked down; in the promoted dtype.
  r.add("aten.block_diag.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const DType out = ctx.output_dtype();
    if (ctx.tensors("tensors").empty()) ctx.unsupported("block_diag of no tensors");
    std::vector<Value*> blocks;
    std::vector<std::vector<int64_t>> shapes;
    int64_t width = 0;
    for (Value* t : ctx.tensors("tensors")) {
      std::vector<int64_t> sizes = known_sizes(ctx, t, "block_diag");
      if (sizes.size() > 2) ctx.unsupported("block_diag of a tensor of more than 2 dims");
      while (sizes.size() < 2) sizes.insert(sizes.begin(), 1);
      blocks.push_back(ctx.add("reshape", {ctx.cast(t, out)}, {{"shape", sizes}}));
      shapes.push_back(sizes);
      width += sizes[1];
    }
    int64_t left = 0;
    for (size_t k = 0; k < blocks.size(); ++k) {
      const int64_t right = width - left - shapes[k][1];
      blocks[k] = ctx.add("pad", {blocks[k]}, {{"pad", std::vector<int64_t>{left, right}},
                                               {"mode", std::string("constant")}, {"value", 0.0}});
      left += shapes[k][1];
    }
    return {ctx.add("concat", blocks, {{"dim", int64_t{0}}})};
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
  // as_strided(x, size, stride, storage_offset) (as_strided_view): strides that walk `size` in
  // row-major order (size-1 dims aside) read one run of x, a slice and a reshape; others a
  // gather of the flattened x at constant offsets. as_strided_scatter writes src there instead.
  r.add("aten.as_strided.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const ConstantView view = as_strided_view(ctx, x);
    const std::vector<int64_t>& at = view.positions;
    const auto count = static_cast<int64_t>(at.size());
    bool one_run = true;
    for (int64_t i = 0; i < count && one_run; ++i) one_run = at[i] == at[0] + i;
    if (!one_run) return {pick(ctx, x, view)};
    Value* flat = flattened(ctx, x);
    if (count < num_elements(static_sizes(x->type().shape))) {
      const int64_t first = count ? at[0] : 0;
      flat = ctx.add("slice", {flat}, {{"dim", int64_t{0}}, {"start", first},
                                       {"end", first + count}, {"step", int64_t{1}}});
    }
    return {ctx.add("reshape", {flat}, {{"shape", view.sizes}})};
  });
  r.add("aten.as_strided_scatter.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    return {place(ctx, x, ctx.tensor("src"), as_strided_view(ctx, x))};
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
