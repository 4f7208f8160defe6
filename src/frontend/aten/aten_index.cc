// Slicing, indexing, joining and splitting → Kiln's indexing and concat_split families.
#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include "frontend/converter.h"

namespace kiln {

namespace {

// PyTorch passes None for an open slice end; Kiln's slice clamps like Python slicing.
int64_t optional_integer(ConvertContext& ctx, const std::string& arg, int64_t absent) {
  return ctx.has(arg) ? ctx.integer(arg) : absent;
}

std::vector<Value*> split(ConvertContext& ctx, std::vector<int64_t> sizes) {
  Value* x = ctx.tensor("self");
  int64_t dim = ctx.integer("dim");
  std::vector<Value*> parts = ctx.graph().add_node(
      "split", {x}, {{"split_sizes", std::move(sizes)}, {"dim", dim}}, ctx.node_name());
  return parts;
}

// aten.index.Tensor, x[i0, i1, ...] with None for a dim taken whole. Kiln's index op takes its
// index tensors on the leading dims, so the indexed dims move to the front, and the broadcast
// index dims B then move to where PyTorch puts them: at the first indexed dim when the indexed
// dims are adjacent, else in front (which is where index leaves them).
std::vector<Value*> index_tensor(ConvertContext& ctx) {
  Value* x = ctx.tensor("self");
  const std::vector<Value*> slots = ctx.optional_tensors("indices");
  const size_t rank = x->type().rank();
  if (slots.size() > rank)
    ctx.unsupported(std::to_string(slots.size()) + " indices for a tensor of rank " +
                    std::to_string(rank));
  std::vector<int64_t> indexed, rest;
  std::vector<Value*> inputs = {x};
  for (size_t d = 0; d < rank; ++d) {
    Value* index = d < slots.size() ? slots[d] : nullptr;
    if (!index) {
      rest.push_back(static_cast<int64_t>(d));
      continue;
    }
    if (is_floating(index->type().dtype) || index->type().dtype == DType::Bool ||
        index->type().dtype == DType::U8)
      ctx.unsupported("a boolean mask index (its output size depends on the data)");
    indexed.push_back(static_cast<int64_t>(d));
    inputs.push_back(index);
  }
  if (indexed.empty()) return {x};
  std::vector<int64_t> order = indexed;
  order.insert(order.end(), rest.begin(), rest.end());
  if (!std::is_sorted(order.begin(), order.end()))
    inputs[0] = ctx.add("permute", {x}, {{"dims", order}});
  Value* y = ctx.add("index", inputs);
  const bool adjacent = indexed.back() - indexed.front() + 1 == static_cast<int64_t>(indexed.size());
  if (!adjacent || indexed.front() == 0) return {y};
  // y is B + rest; the first indexed.front() dims of rest came before the indexed dims in x.
  const int64_t out_rank = static_cast<int64_t>(y->type().rank());
  const int64_t b = out_rank - static_cast<int64_t>(rest.size());
  std::vector<int64_t> dims;
  for (int64_t d = b; d < b + indexed.front(); ++d) dims.push_back(d);
  for (int64_t d = 0; d < b; ++d) dims.push_back(d);
  for (int64_t d = b + indexed.front(); d < out_rank; ++d) dims.push_back(d);
  return {ctx.add("permute", {y}, {{"dims", dims}})};
}

// x with src's slices along `dim` (in [0, rank)) written at `positions` (i64 [k]: src has k
// along dim), or added with `accumulate`, in the positions' order: an index_put along the dim
// moved to the front (index_put indexes leading dims) and back.
Value* put_along_dim(ConvertContext& ctx, Value* x, Value* src, int64_t dim, Value* positions,
                     bool accumulate) {
  const AttrMap attrs{{"accumulate", accumulate}};
  if (dim == 0) return ctx.add("index_put", {x, src, positions}, attrs);
  const auto rank = static_cast<int64_t>(x->type().rank());
  std::vector<int64_t> order = {dim}, inverse(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim) order.push_back(d);
  for (int64_t d = 0; d < rank; ++d) inverse[static_cast<size_t>(order[d])] = d;
  Value* y = ctx.add("index_put", {ctx.add("permute", {x}, {{"dims", order}}),
                                   ctx.add("permute", {src}, {{"dims", order}}), positions},
                     attrs);
  return ctx.add("permute", {y}, {{"dims", inverse}});
}

// x with src written into positions start, start + step, ... (before end) of `dim` (in
// [0, rank)), Python slicing's bounds: x.slice_scatter(src, dim, start, end, step).
Value* slice_scatter(ConvertContext& ctx, Value* x, Value* src, int64_t dim,
                     std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  if (step < 1) ctx.unsupported("step " + std::to_string(step));
  const Dim size = x->type().shape[static_cast<size_t>(dim)];
  if (!size.is_static()) ctx.unsupported("scattering along a dynamic dim");
  const int64_t n = size.size();
  auto clamp = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t{0}, n); };
  const int64_t first = clamp(start.value_or(0)), last = std::max(first, clamp(end.value_or(n)));
  Value* positions =
      ctx.add("arange", {}, {{"start", double(first)}, {"end", double(last)},
                             {"step", double(step)}, {"dtype", std::string("i64")}});
  return put_along_dim(ctx, x, src, dim, positions, false);
}

// index_copy and index_add: source's slices along dim written or added at index's positions.
// PyTorch takes a 0-d index (and then a source without the dim) as one position.
std::vector<Value*> index_along_dim(ConvertContext& ctx, bool accumulate) {
  Value* x = ctx.tensor("self");
  if (x->type().rank() == 0) ctx.unsupported("indexing a 0-d tensor along a dim");
  const int64_t dim = ctx.dim("dim", x->type().rank());
  Value* index = ctx.tensor("index");
  Value* source = ctx.tensor("source");
  if (index->type().rank() == 0) {
    index = ctx.add("unsqueeze", {index}, {{"dim", int64_t{0}}});
    if (source->type().rank() + 1 == x->type().rank())
      source = ctx.add("unsqueeze", {source}, {{"dim", dim}});
  }
  if (accumulate && ctx.has("alpha") && ctx.number("alpha") != 1.0) {
    // alpha as a Python number (f64, wrapped): source's dtype stays.
    Tensor alpha = Tensor::empty(DType::F64, {});
    *alpha.data<double>() = ctx.number("alpha");
    source = ctx.add("mul", {source, ctx.graph().add_constant(ctx.node_name() + "_alpha", alpha)},
                     {{"wrapped_numbers", std::vector<int64_t>{1}}});
  }
  return {put_along_dim(ctx, x, source, dim, index, accumulate)};
}

bool is_mask(DType dtype) { return dtype == DType::Bool || dtype == DType::U8; }

// nn.EmbeddingBag (recommendation models' sparse features), modes sum (0) and mean (1): the
// rows of weight at 1-D indices, bags starting at offsets. Each index's bag is the running
// count of bag starts up to it (offsets marked by an accumulating index_put, then cumsum), and
// the rows, scaled by per_sample_weights, are added into their bags by an index_put in the
// indices' order, as PyTorch sums each bag. A mean divides by the bag's size, at least 1 (an
// empty bag is 0). Rows at padding_idx count for nothing. max (2) stays in PyTorch; of the four
// outputs only the bags are computed (the others feed the backward).
std::vector<Value*> embedding_bag(ConvertContext& ctx) {
  const int64_t mode = ctx.integer("mode");
  if (mode != 0 && mode != 1) ctx.unsupported("embedding_bag's max mode");
  for (size_t i = 1; i < 4; ++i)
    if (ctx.output_used(i)) ctx.unsupported("embedding_bag's offset2bag, bag_size or max_indices");
  Value* weight = ctx.tensor("weight");
  Value* indices = ctx.tensor("indices");
  Value* offsets = ctx.tensor("offsets");
  if (indices->type().rank() != 1 || offsets->type().rank() != 1)
    ctx.unsupported("embedding_bag with indices or offsets of rank other than 1");
  const Dim count = indices->type().shape[0], starts = offsets->type().shape[0];
  if (!count.is_static() || !starts.is_static())
    ctx.unsupported("embedding_bag with a dynamic number of indices or bags");
  const int64_t n = count.size();
  const int64_t bags = starts.size() - (ctx.boolean("include_last_offset") ? 1 : 0);
  if (bags < 1) ctx.unsupported("embedding_bag without bags");
  auto i64_zeros = [&](int64_t size) {
    return ctx.add("zeros", {}, {{"size", std::vector<int64_t>{size}}, {"dtype", std::string("i64")}});
  };
  auto slice = [&](Value* v, int64_t start, int64_t end) {
    return ctx.add("slice", {v}, {{"dim", int64_t{0}}, {"start", start}, {"end", end},
                                  {"step", int64_t{1}}});
  };
  // marks[offsets[b]] += 1 for b >= 1 (bag 0 starts at 0); n + 1 slots take an empty last bag.
  Value* starts_after_first = ctx.cast(slice(offsets, 1, bags), DType::I64);
  Value* marks = ctx.add("index_put",
                         {i64_zeros(n + 1), ctx.add("ones_like", {starts_after_first}), starts_after_first},
                         {{"accumulate", true}});
  Value* bag_of = ctx.add("cumsum", {slice(marks, 0, n)}, {{"dim", int64_t{0}}});
  Value* rows = ctx.add("embedding", {weight, indices});
  Value* per_row = ctx.optional_tensor("per_sample_weights");
  const int64_t padding = ctx.integer("padding_idx");
  Value* kept = nullptr;
  if (padding >= 0) {
    kept = ctx.add("ne", {indices, ctx.scalar(static_cast<double>(padding), indices->type().dtype)});
    Value* zero = ctx.scalar(0, weight->type().dtype);
    per_row = per_row ? ctx.add("where", {kept, per_row, zero})
                      : ctx.add("where", {kept, ctx.scalar(1, weight->type().dtype), zero});
  }
  if (per_row) rows = ctx.add("mul", {rows, ctx.add("unsqueeze", {per_row}, {{"dim", int64_t{1}}})});
  const Dim width = weight->type().shape[1];
  if (!width.is_static()) ctx.unsupported("embedding_bag of a weight with dynamic width");
  Value* sums = ctx.add("index_put",
                        {ctx.add("zeros", {}, {{"size", std::vector<int64_t>{bags, width.size()}},
                                               {"dtype", std::string(dtype_name(weight->type().dtype))}}),
                         rows, bag_of},
                        {{"accumulate", true}});
  if (mode == 0) return {sums, nullptr, nullptr, nullptr};
  Value* ones = kept ? ctx.cast(kept, DType::I64) : ctx.add("ones_like", {indices}, {{"dtype", std::string("i64")}});
  Value* sizes = ctx.add("index_put", {i64_zeros(bags), ones, bag_of}, {{"accumulate", true}});
  Value* divisors = ctx.add("maximum", {sizes, ctx.scalar(1, DType::I64)});
  return {ctx.add("div", {sums, ctx.add("unsqueeze", {divisors}, {{"dim", int64_t{1}}})}), nullptr,
          nullptr, nullptr};
}

// x.masked_scatter(mask, source) (LLaVA-style VLMs place the image features at the prompt's
// image tokens): the k-th true element of mask, broadcast to x in row-major order, takes
// source's k-th element. Each element's rank among the true ones is the running count of the
// mask, at which source, flattened, is gathered; a where keeps x elsewhere. Pure data movement:
// bit for bit. More true elements than source holds is index_select's E40002 at run time, as
// PyTorch refuses it too.
Value* masked_scatter(ConvertContext& ctx) {
  Value* x = ctx.tensor("self");
  Value* mask = ctx.cast(ctx.tensor("mask"), DType::Bool);
  Value* source = ctx.tensor("source");
  const Shape& from = source->type().shape;
  if (is_static(from) && num_elements(static_sizes(from)) == 0)
    ctx.unsupported("masked_scatter from an empty source");
  Value* hits = ctx.add("where", {mask, ctx.add("ones_like", {x}, {{"dtype", std::string("i64")}}),
                                  ctx.add("zeros_like", {x}, {{"dtype", std::string("i64")}})});
  Value* ranks = ctx.add("cumsum", {ctx.add("reshape", {hits}, {{"shape", std::vector<int64_t>{-1}}})},
                         {{"dim", int64_t{0}}});
  // The rank less one, and 0 where no true element came yet (those positions keep x).
  Value* index = ctx.add("maximum", {ctx.add("sub", {ranks, ctx.scalar(1, DType::I64)}),
                                     ctx.scalar(0, DType::I64)});
  Value* taken = ctx.add(
      "index_select",
      {ctx.add("reshape", {source}, {{"shape", std::vector<int64_t>{-1}}}), index},
      {{"dim", int64_t{0}}});
  return ctx.add("where", {mask, ctx.reshape_to_output(taken), x});
}

// x[mask] = values (x[mask] += values with accumulate), mask over x's leading dims: PyTorch
// writes values broadcast to [count of true, x's other dims]. Where values is the same for every
// true position (its leading dim, if it has one beyond x's other dims, is 1), that is
// where(mask, values, x) with the mask's dims padded to x's rank; values giving each position its
// own row depend on how many are true, which no static graph knows.
Value* masked_put(ConvertContext& ctx, Value* x, Value* mask, Value* values, bool accumulate) {
  const Shape& xs = x->type().shape;
  const Shape& ms = mask->type().shape;
  if (ms.size() > xs.size() || !std::equal(ms.begin(), ms.end(), xs.begin()))
    ctx.unsupported("a boolean mask whose shape is not x's leading dims");
  const size_t rest = xs.size() - ms.size();
  const Shape& vs = values->type().shape;
  if (vs.size() > rest + 1 ||
      (vs.size() == rest + 1 && !(vs[0].is_static() && vs[0].size() == 1)))
    ctx.unsupported("values with a row for each true element of the mask (their count depends "
                    "on the data); Kiln takes values the same at every true element");
  if (vs.size() == rest + 1)
    values = ctx.add("squeeze", {values}, {{"dim", std::vector<int64_t>{0}}});
  values = ctx.cast(values, x->type().dtype);
  if (mask->type().dtype != DType::Bool) mask = ctx.cast(mask, DType::Bool);
  for (size_t d = 0; d < rest; ++d)
    mask = ctx.add("unsqueeze", {mask}, {{"dim", static_cast<int64_t>(ms.size() + d)}});
  if (accumulate) values = ctx.add("add", {x, values});
  return ctx.add("where", {mask, values, x});
}

// PyTorch takes a 0-d operand of scatter and gather as one element along dim; Kiln's ops take
// rank 1 or more: such operands become [1], and a result standing for a 0-d one is squeezed.
Value* at_least_1d(ConvertContext& ctx, Value* v) {
  return v->type().rank() ? v : ctx.add("unsqueeze", {v}, {{"dim", int64_t{0}}});
}
Value* with_rank_of(ConvertContext& ctx, Value* y, const Value* like) {
  if (like->type().rank() == y->type().rank()) return y;
  return ctx.add("squeeze", {y}, {{"dim", std::vector<int64_t>{0}}});
}

// scatter's overloads: src a tensor, or a number (a tensor of it shaped like the index), and an
// optional reduce ("add", "multiply").
Converter scatter(bool value, std::string reduce) {
  return [value, reduce](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    Value* index = at_least_1d(ctx, ctx.tensor("index"));
    Value* src = value ? ctx.add("full_like", {index},
                                 {{"fill_value", ctx.number("value")},
                                  {"dtype", std::string(dtype_name(x->type().dtype))}})
                       : at_least_1d(ctx, ctx.tensor("src"));
    std::string how = reduce;
    if (ctx.has("reduce")) how = ctx.string("reduce");
    if (how != "" && how != "add" && how != "multiply")
      ctx.unsupported("scatter with reduce=\"" + how + "\"");
    Value* y = ctx.add("scatter", {at_least_1d(ctx, x), index, src},
                       {{"dim", ctx.integer("dim")}, {"reduce", how}});
    return {with_rank_of(ctx, y, x)};
  };
}

// scatter_reduce(x, dim, index, src, reduce, include_self) (TAPAS's and BLT's segment
// reductions, graph networks' aggregations): "sum", "prod", "amax" and "amin" are Kiln's scatter
// with that reduce; without include_self, each position the index reaches starts from the
// reduction's identity instead of x. "mean" is the scatter sum over a scatter count (1 for x
// itself with include_self), floor-divided for integers; a position no index reaches keeps x.
std::vector<Value*> scatter_reduce(ConvertContext& ctx) {
  Value* x = at_least_1d(ctx, ctx.tensor("self"));
  Value* index = at_least_1d(ctx, ctx.tensor("index"));
  Value* src = at_least_1d(ctx, ctx.tensor("src"));
  const std::string reduce = ctx.string("reduce");
  const bool include_self = !ctx.has("include_self") || ctx.boolean("include_self");
  const DType dtype = x->type().dtype;
  const std::string dtype_name_of_x(dtype_name(dtype));
  const AttrMap along{{"dim", ctx.integer("dim")}};
  auto scattered = [&](Value* into, Value* values, const std::string& how) {
    AttrMap attrs = along;
    attrs["reduce"] = how;
    return ctx.add("scatter", {into, index, values}, std::move(attrs));
  };
  auto filled_like = [&](Value* like, double value) {
    return ctx.add("full_like", {like}, {{"fill_value", value}, {"dtype", dtype_name_of_x}});
  };
  // How many values the index brings to each position (1 more for x with include_self).
  auto counts = [&](double start) {
    return scattered(filled_like(x, start), filled_like(src, 1), "add");
  };
  Value* arrivals = include_self ? nullptr : counts(0);
  Value* reached = include_self ? nullptr : ctx.add("ne", {arrivals, ctx.scalar(0, dtype)});
  auto starting_from = [&](double identity) {
    return include_self ? x : ctx.add("where", {reached, filled_like(x, identity), x});
  };
  const bool floating = is_floating(dtype);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Value* y = nullptr;
  if (reduce == "sum" || reduce == "prod") {
    const bool sum = reduce == "sum";
    y = scattered(starting_from(sum ? 0 : 1), src, sum ? "add" : "multiply");
  } else if (reduce == "amax" || reduce == "amin") {
    const bool max = reduce == "amax";
    if (!floating && !include_self)
      ctx.unsupported("integer scatter_reduce amax or amin without include_self");
    y = scattered(starting_from(max ? -kInf : kInf), src, reduce);
  } else if (reduce == "mean") {
    Value* total = scattered(starting_from(0), src, "add");
    AttrMap division;
    if (!floating) division["rounding_mode"] = std::string("floor");
    // A count of 0 (unreached, without include_self) divides by 1; the where keeps x there.
    Value* mean = ctx.add(
        "div", {total, ctx.add("maximum", {include_self ? counts(1) : arrivals, ctx.scalar(1, dtype)})},
        std::move(division));
    y = include_self ? mean : ctx.add("where", {reached, mean, x});
  } else {
    ctx.unsupported("scatter_reduce with reduce=\"" + reduce + "\"");
  }
  return {with_rank_of(ctx, y, ctx.tensor("self"))};
}

}  // namespace

void register_aten_index_converters(ConverterRegistry& r) {
  r.add("aten.scatter_reduce.two", scatter_reduce);
  r.add("aten.slice.Tensor", [](ConvertContext& ctx) -> std::vector<Value*> {
    AttrMap attrs{{"dim", ctx.integer("dim")},
                  {"start", optional_integer(ctx, "start", 0)},
                  {"step", ctx.integer("step")}};
    const std::string sym_end = ctx.has("end") ? ctx.sym("end") : "";
    if (sym_end.empty()) attrs["end"] = optional_integer(ctx, "end", INT64_MAX);
    else attrs["sym_end"] = sym_end;  // x[:, :S] traced with S symbolic
    return {ctx.add("slice", {ctx.tensor("self")}, std::move(attrs))};
  });
  r.add("aten.select.int", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("select", {ctx.tensor("self")},
                    {{"dim", ctx.integer("dim")}, {"index", ctx.integer("index")}})};
  });
  r.add("aten.narrow.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("narrow", {ctx.tensor("self")},
                    {{"dim", ctx.integer("dim")},
                     {"start", ctx.integer("start")},
                     {"length", ctx.integer("length")}})};
  });
  // take(x, index): x flattened, read at index (negative ones count from the end), in index's
  // shape; an index out of range is index_select's run-time E40002.
  r.add("aten.take.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    Value* index = ctx.tensor("index");
    if (!is_static(x->type().shape)) ctx.unsupported("take from a tensor of dynamic shape");
    const int64_t count = num_elements(static_sizes(x->type().shape));
    Value* flat_index = ctx.add("reshape", {index}, {{"shape", std::vector<int64_t>{-1}}});
    Value* zero = ctx.scalar(0, DType::I64);
    flat_index = ctx.add("where", {ctx.add("lt", {flat_index, zero}),
                                   ctx.add("add", {flat_index, ctx.scalar(count, DType::I64)}),
                                   flat_index});
    Value* flat = ctx.add("reshape", {x}, {{"shape", std::vector<int64_t>{count}}});
    return {ctx.reshape_to_output(ctx.add("index_select", {flat, flat_index}, {{"dim", int64_t{0}}}))};
  });
  // isin(elements, test_elements): each element against every test element (PyTorch's own
  // algorithm for small test sets), in torch.result_type of both; NaN is never in.
  // (The Scalar overloads name their number `element` or `test_element`.)
  for (const auto& [overload, elements_arg, tests_arg] :
       {std::tuple{".Tensor_Tensor", "elements", "test_elements"},
        std::tuple{".Tensor_Scalar", "elements", "test_element"},
        std::tuple{".Scalar_Tensor", "element", "test_elements"}})
    r.add(std::string("aten.isin") + overload, [elements_arg, tests_arg](
                                                   ConvertContext& ctx) -> std::vector<Value*> {
      auto operand = [&](const char* arg) {
        return ctx.is_tensor(arg) ? ctx.tensor(arg) : ctx.number_tensor(arg);
      };
      Value* elements = operand(elements_arg);
      Value* tests = operand(tests_arg);
      if (!is_static(tests->type().shape)) ctx.unsupported("isin of a dynamic set");
      const int64_t count = num_elements(static_sizes(tests->type().shape));
      constexpr int64_t kMaxTests = 1024;
      if (count > kMaxTests)
        ctx.unsupported("isin of a set of over 1024 elements (PyTorch sorts such sets)");
      tests = ctx.add("reshape", {tests}, {{"shape", std::vector<int64_t>{count}}});
      Value* column = ctx.add("unsqueeze", {elements}, {{"dim", int64_t{-1}}});
      Value* in = ctx.add("any", {ctx.add("eq", {column, tests})},
                          {{"dim", std::vector<int64_t>{-1}}});
      return {ctx.boolean("invert") ? ctx.add("logical_not", {in}) : in};
    });
  r.add("aten.index_select.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("index_select", {ctx.tensor("self"), ctx.tensor("index")},
                    {{"dim", ctx.integer("dim")}})};
  });
  r.add("aten.index.Tensor", index_tensor);
  // What the upsample decompositions emit; Kiln's index op checks the bounds either way.
  r.add("aten._unsafe_index.Tensor", index_tensor);
  r.add("aten.scatter.src", scatter(false, ""));
  r.add("aten.scatter.value", scatter(true, ""));
  r.add("aten.scatter.reduce", scatter(false, ""));
  r.add("aten.scatter.value_reduce", scatter(true, ""));
  r.add("aten.scatter_add.default", scatter(false, "add"));
  // x[i0, i1, ...] = values (or +=) with index tensors on leading dims.
  r.add("aten.index_put.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const std::vector<Value*> indices = ctx.optional_tensors("indices");
    if (indices.size() == 1 && indices[0] && is_mask(indices[0]->type().dtype))
      return {masked_put(ctx, ctx.tensor("self"), indices[0], ctx.tensor("values"),
                         ctx.boolean("accumulate"))};
    std::vector<Value*> inputs = {ctx.tensor("self"), ctx.tensor("values")};
    for (Value* index : indices) {
      if (!index) ctx.unsupported("an index of None before another index");
      if (is_floating(index->type().dtype) || is_mask(index->type().dtype))
        ctx.unsupported("a boolean mask index beside other indices");
      inputs.push_back(index);
    }
    return {ctx.add("index_put", inputs, {{"accumulate", ctx.boolean("accumulate")}})};
  });
  r.add("aten.slice_scatter.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    auto optional = [&](const char* arg) {
      return ctx.has(arg) ? std::optional<int64_t>(ctx.integer(arg)) : std::nullopt;
    };
    Value* x = ctx.tensor("self");
    return {slice_scatter(ctx, x, ctx.tensor("src"), ctx.dim("dim", x->type().rank()),
                          optional("start"), optional("end"), ctx.integer("step"))};
  });
  r.add("aten._embedding_bag_forward_only.default", embedding_bag);
  r.add("aten._embedding_bag.default", embedding_bag);
  r.add("aten.masked_scatter.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {masked_scatter(ctx)};
  });
  // x.index_copy(dim, index, source) (transformers' StaticCache writes each step's keys and
  // values at cache_position with it); index_add adds, in the index's order, as PyTorch does.
  r.add("aten.index_copy.default",
        [](ConvertContext& ctx) { return index_along_dim(ctx, false); });
  r.add("aten.index_add.default", [](ConvertContext& ctx) { return index_along_dim(ctx, true); });
  r.add("aten.select_scatter.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const int64_t dim = ctx.dim("dim", x->type().rank());
    const Dim size = x->type().shape[static_cast<size_t>(dim)];
    int64_t index = ctx.integer("index");
    if (size.is_static() && index < 0) index += size.size();
    if (index < 0 || (size.is_static() && index >= size.size()))
      ctx.unsupported("index " + std::to_string(ctx.integer("index")) + " out of range");
    Value* src = ctx.add("unsqueeze", {ctx.tensor("src")}, {{"dim", dim}});
    return {slice_scatter(ctx, x, src, dim, index, index + 1, 1)};
  });
  r.add("aten.gather.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (ctx.boolean("sparse_grad")) ctx.unsupported("sparse_grad");
    Value* index = ctx.tensor("index");
    Value* y = ctx.add("gather", {at_least_1d(ctx, ctx.tensor("self")), at_least_1d(ctx, index)},
                       {{"dim", ctx.integer("dim")}});
    return {with_rank_of(ctx, y, index)};
  });
  r.add("aten.embedding.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    // padding_idx, scale_grad_by_freq and sparse only change gradients.
    return {ctx.add("embedding", {ctx.tensor("weight"), ctx.tensor("indices")},
                    {{"padding_idx", ctx.integer("padding_idx")}})};
  });
  r.add("aten.cat.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("concat", ctx.tensors("tensors"), {{"dim", ctx.integer("dim")}})};
  });
  r.add("aten.stack.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("stack", ctx.tensors("tensors"), {{"dim", ctx.integer("dim")}})};
  });
  r.add("aten.split_with_sizes.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return split(ctx, ctx.integers("split_sizes"));
  });
  // split(x, n): pieces of n along dim, the last one shorter.
  r.add("aten.split.Tensor", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const int64_t dim = ctx.dim("dim", x->type().rank());
    const Dim& extent = x->type().shape[static_cast<size_t>(dim)];
    if (!extent.is_static()) ctx.unsupported("split along a dynamic dim");
    int64_t piece = ctx.integer("split_size");
    if (piece <= 0) ctx.unsupported("split_size must be positive");
    std::vector<int64_t> sizes;
    for (int64_t left = extent.size(); left > 0; left -= piece) sizes.push_back(std::min(piece, left));
    if (sizes.empty()) sizes.push_back(0);
    return split(ctx, sizes);
  });
  // x.unbind(dim): one select per position (q, k, v = qkv.unbind(0) in many ViTs).
  r.add("aten.unbind.int", [](ConvertContext& ctx) -> std::vector<Value*> {
    Value* x = ctx.tensor("self");
    const int64_t dim = ctx.dim("dim", x->type().rank());
    const Dim& extent = x->type().shape[static_cast<size_t>(dim)];
    if (!extent.is_static()) ctx.unsupported("unbind along a dynamic dim");
    std::vector<Value*> parts;
    for (int64_t i = 0; i < extent.size(); ++i)
      parts.push_back(ctx.add("select", {x}, {{"dim", dim}, {"index", i}}));
    return parts;
  });
}

}  // namespace kiln
