// Indexing ops, for every dtype: windows of one dim chosen by attributes, and gathers and
// scatters through index tensors (i64 or i32).
//
//   slice(x; dim = 0, start = 0, end = INT64_MAX, step = 1)
//       Python slicing of one dim: a negative start or end counts from the end, both clamp to
//       [0, n]; step >= 1 (PyTorch has no negative step either). Along a symbolic dim the
//       output is a derived symbol named like the slice ("S[1:]", "S[:-1]", "S[::2]") whose
//       range holds every size the slice can have; a static size when that is one number.
//       sym_end (optional) gives the end as a size over the graph's symbols ("s1"), which
//       must stay within the dim; `end` is then unused.
//   select(x; dim, index)           the dim removed, at position index (negative wraps).
//   narrow(x; dim, start, length)   positions [start, start + length) (negative start wraps).
//   index_select(x, index; dim)     index 0-d or 1-d; output dim `dim` has index's size.
//   embedding(weight, indices; padding_idx = -1)
//       rows of weight [V, D] for indices of any shape: indices' shape + [D]. padding_idx only
//       matters to training and is ignored.
//   index(x, indices...)            x[i0, i1, ...]: index tensors on the leading dims, broadcast
//       together to B; output B + the remaining dims of x. Negative indices wrap.
//   gather(x, index; dim)           out[..., j, ...] = x[..., index[..., j, ...], ...]: index has
//       x's rank and is no larger than x on the other dims; output index's shape.
//   scatter(x, index, src; dim, reduce = "")     out = x, then out[..., index[p], ...] = src[p]
//       for each position p of index (src no smaller than index); reduce "add", "multiply",
//       "amax" or "amin" combines instead of storing.
//   index_put(x, values, indices...; accumulate = false)
//       out = x, then out[i0[b], i1[b], ...] = values (broadcast to B + the remaining dims);
//       accumulate adds. Negative indices wrap.
//
// As in PyTorch, index_select, embedding, gather and scatter take indices in [0, n) and index
// and index_put in [-n, n). An index out of range at run time is an E40002 naming the node, the
// index and the valid range, found by a check before any element moves.
#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>

#include "ir/sym_expr.h"
#include "kernels/cpu/block_copy.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------- inference helpers

// `dim` in [0, rank) for a dim attribute that may count from the end.
size_t wrap_dim(InferContext& ctx, int64_t dim, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  ctx.check(dim >= -r && dim < r, "dim " + std::to_string(dim) + " is out of range for rank " +
                                      std::to_string(r) + "; use [" + std::to_string(-r) + ", " +
                                      std::to_string(r - 1) + "]");
  return static_cast<size_t>(dim < 0 ? dim + r : dim);
}

size_t wrapped(int64_t dim, size_t rank) {
  return static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(rank) : dim);
}

void check_rank_at_least_1(InferContext& ctx) {
  ctx.check(ctx.input(0).rank() >= 1,
            ctx.op() + " needs a tensor of rank 1 or more; unsqueeze the 0-d input first");
}

void check_index_dtype(InferContext& ctx, size_t input, const std::string& what) {
  const DType dtype = ctx.input(input).dtype;
  ctx.check(dtype == DType::I64 || dtype == DType::I32,
            what + " must be i64 or i32, not " + std::string(dtype_name(dtype)) +
                (dtype == DType::Bool || dtype == DType::U8
                     ? " (a mask selects a data-dependent number of elements, which Kiln's "
                       "static shapes can't express)"
                     : "; insert a cast"));
}

void check_same_dtype(InferContext& ctx, size_t input, const std::string& what) {
  ctx.check(ctx.input(input).dtype == ctx.input(0).dtype,
            what + " is " + std::string(dtype_name(ctx.input(input).dtype)) + " and x is " +
                std::string(dtype_name(ctx.input(0).dtype)) + "; insert a cast");
}

enum class Reduce { Assign, Add, Multiply, Max, Min };

// Reductions do arithmetic, which Kiln's kernels have for these dtypes.
bool has_arithmetic(DType dtype) {
  return dtype != DType::F16 && dtype != DType::BF16 && dtype != DType::Bool;
}

void check_reducible(InferContext& ctx, const std::string& what) {
  const DType dtype = ctx.input(0).dtype;
  ctx.check(has_arithmetic(dtype), what + " takes f32, f64 or an integer dtype, not " +
                                       std::string(dtype_name(dtype)) + "; insert a cast");
}

// ---------------------------------------------------------------- kernel helpers

// x viewed as [outer, n, inner] around one dim.
struct Extents {
  int64_t outer = 1, n = 1, inner = 1;
};

Extents extents_around(const std::vector<int64_t>& sizes, size_t dim) {
  Extents e;
  for (size_t d = 0; d < sizes.size(); ++d)
    (d < dim ? e.outer : d == dim ? e.n : e.inner) *= sizes[d];
  return e;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return strides;
}

// The strides with which a tensor of `sizes` is read at the positions of `target` when it is
// broadcast to it (aligned at the right; 0 along a dim it stretches).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& sizes,
                                       const std::vector<int64_t>& target) {
  std::vector<int64_t> own = row_major_strides(sizes), strides(target.size(), 0);
  const size_t lead = target.size() - sizes.size();
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] == target[lead + d]) strides[lead + d] = own[d];
  return strides;
}

// Maps a position of a row-major shape to an element offset through per-dim strides.
struct Strided {
  std::vector<int64_t> sizes, strides;
  bool identity = true;  // strides are the shape's own row-major strides

  Strided() = default;
  Strided(std::vector<int64_t> sizes_in, std::vector<int64_t> strides_in)
      : sizes(std::move(sizes_in)), strides(std::move(strides_in)),
        identity(strides == row_major_strides(sizes)) {}

  int64_t offset(int64_t position) const {
    if (identity) return position;
    int64_t offset = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      offset += (position % sizes[d]) * strides[d];
      position /= sizes[d];
    }
    return offset;
  }
};

template <typename Fn>
void with_index_type(DType dtype, Fn fn) {
  if (dtype == DType::I64) fn(int64_t{});
  else fn(int32_t{});
}

int64_t load_index(const void* data, DType dtype, int64_t position) {
  return dtype == DType::I64 ? static_cast<const int64_t*>(data)[position]
                             : static_cast<const int32_t*>(data)[position];
}

// An index tensor among a kernel's inputs and the dim of x whose positions it holds.
struct IndexOperand {
  size_t input = 0;
  DType dtype = DType::I64;
  int64_t numel = 0;
  size_t dim = 0;
  int64_t dim_size = 0;
  bool wrap = false;  // negative indices count from the end
};

// Where an error comes from: the node and its op.
struct NodeRef {
  std::string name, op;
  NodeRef() = default;
  explicit NodeRef(const Node& node) : name(node.name()), op(node.op()) {}
};

template <typename I>
void check_index_values(const I* idx, const IndexOperand& operand, const NodeRef& where,
                        int threads) {
  const int64_t lo = operand.wrap ? -operand.dim_size : 0, hi = operand.dim_size - 1;
  if (operand.numel == 0) return;
  // Each chunk's extremes on the pool (an index tensor can be tens of MB), then theirs.
  constexpr int kMaxChunks = 64;
  I mins[kMaxChunks], maxs[kMaxChunks];
  const int chunks = std::clamp(threads, 1, kMaxChunks);
  std::fill(mins, mins + chunks, idx[0]);
  std::fill(maxs, maxs + chunks, idx[0]);
  cpu::parallel_chunks(chunks, operand.numel / chunks, chunks, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      I min = idx[0], max = idx[0];
      for (int64_t i = operand.numel * c / chunks; i < operand.numel * (c + 1) / chunks; ++i) {
        min = std::min(min, idx[i]);
        max = std::max(max, idx[i]);
      }
      mins[c] = min;
      maxs[c] = max;
    }
  });
  const I min = *std::min_element(mins, mins + chunks), max = *std::max_element(maxs, maxs + chunks);
  if (min >= lo && max <= hi) return;
  const int64_t bad = min < lo ? min : max;
  const std::string valid =
      operand.dim_size == 0 ? "it has no valid index"
                            : "valid indices are [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "]";
  throw_error(ErrorCode::ShapeInference, "node '", where.name, "' (", where.op, "): index ", bad,
              " (input ", operand.input, ") is out of range for dim ", operand.dim, " of size ",
              operand.dim_size, "; ", valid, ". Check the indices fed to this node.");
}

// Throws E40002 naming the node unless every index is in range. Runs before any element moves
// (and outside the OpenMP pool, which can't carry an exception).
void check_indices(const IndexOperand& operand, std::span<const void* const> in,
                   const NodeRef& where, int threads = 1) {
  if (operand.dtype == DType::I64)
    check_index_values(static_cast<const int64_t*>(in[operand.input]), operand, where, threads);
  else
    check_index_values(static_cast<const int32_t*>(in[operand.input]), operand, where, threads);
}

IndexOperand index_operand(const KernelSpec& spec, size_t input, size_t dim, int64_t dim_size,
                           bool wrap) {
  return IndexOperand{input, spec.inputs[input].dtype, num_elements(spec.input_sizes(input)),
                      dim, dim_size, wrap};
}

KernelDef always(std::string name,
                 std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> create) {
  return KernelDef{std::move(name), "native", [](const KernelSpec&) { return std::string(); },
                   std::move(create)};
}

// ---------------------------------------------------------------- slice, select, narrow

// Positions start, start + step, ... (count of them) along one dim.
struct Window {
  int64_t start = 0, step = 1, count = 0;
};

// Python's slice of a dim of size n.
Window slice_window(int64_t start, int64_t end, int64_t step, int64_t n) {
  auto resolve = [n](int64_t v) { return v < 0 ? std::max<int64_t>(v + n, 0) : std::min(v, n); };
  const int64_t s = resolve(start), e = resolve(end);
  return Window{s, step, e > s ? (e - s - 1) / step + 1 : 0};
}

Window slice_window_of(const Node& node, int64_t n) {
  return slice_window(node.attr_int("start"), node.attr_int("end"), node.attr_int("step"), n);
}

Window select_window_of(const Node& node, int64_t n) {
  const int64_t index = node.attr_int("index");
  return Window{index < 0 ? index + n : index, 1, 1};
}

Window narrow_window_of(const Node& node, int64_t n) {
  const int64_t start = node.attr_int("start");
  return Window{start < 0 ? start + n : start, 1, node.attr_int("length")};
}

// "S[1:]", "S[:-1:2]": the slice in Python's notation, defaults left out.
std::string slice_name(const std::string& symbol, int64_t start, int64_t end, int64_t step) {
  std::string out = symbol + "[" + (start ? std::to_string(start) : "") + ":" +
                    (end != INT64_MAX ? std::to_string(end) : "");
  return out + (step != 1 ? ":" + std::to_string(step) : "") + "]";
}

// The sliced size of a symbolic dim. The size is piecewise linear in the dim's size n, with
// kinks where start or end stop clamping (n = |start|, n = |end|), so its extremes over the
// symbol's range are at the range's ends or next to those points.
Dim sliced_dim(InferContext& ctx, Dim in, int64_t start, int64_t end, int64_t step) {
  auto count = [&](int64_t n) { return slice_window(start, end, step, n).count; };
  if (in.is_static()) return Dim(count(in.size()));
  const Symbol symbol = ctx.symbols()[in.symbol()];
  std::vector<int64_t> points = {symbol.min, symbol.max};
  constexpr int64_t kFar = int64_t{1} << 62;  // |attr| beyond this never meets a real size
  for (int64_t attr : {start, end}) {
    const int64_t kink = std::clamp(attr, -kFar, kFar);
    for (int64_t p : {kink, -kink})
      for (int64_t q : {p - 1, p, p + 1})
        if (q >= symbol.min && q <= symbol.max) points.push_back(q);
  }
  int64_t lo = INT64_MAX, hi = 0;
  bool identity = step == 1;
  for (int64_t p : points) {
    lo = std::min(lo, count(p));
    hi = std::max(hi, count(p));
    identity = identity && count(p) == p;
  }
  if (identity) return in;
  return ctx.derived_dim(slice_name(symbol.name, start, end, step), lo, hi);
}

// True when size `dim` is at least `end` whatever the symbols' values: both names are linear in
// the symbols and differ by a constant >= 0 (PyTorch's "s0 + 1" for the end "s0", a padded
// "s33*2+2" for the end "2*s33"). Names that aren't expressions ("S[1:]") prove nothing.
bool never_below(const std::string& dim, const std::string& end) {
  std::optional<SymExpr::Linear> size, bound;
  try {
    size = SymExpr::parse(dim).linear();
    bound = SymExpr::parse(end).linear();
  } catch (const Error&) {
    return false;
  }
  return size && bound && size->coefficients == bound->coefficients &&
         size->constant >= bound->constant;
}

void infer_slice(InferContext& ctx) {
  check_rank_at_least_1(ctx);
  const TensorType& x = ctx.input(0);
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  const int64_t step = ctx.attr_int("step");
  ctx.check(step >= 1, "step is " + std::to_string(step) +
                           "; it must be at least 1 (as in PyTorch; flip for a reversed slice)");
  Shape out = x.shape;
  const int64_t start = ctx.attr_int("start");
  const std::string& sym_end = ctx.attr_string("sym_end");
  const Dim end = sym_end.empty() ? Dim(ctx.attr_int("end")) : ctx.sym_dim(sym_end);
  if (end.is_static()) {
    out[dim] = sliced_dim(ctx, x.shape[dim], start, end.size(), step);
  } else {
    // A dynamic end (x[:, :S] traced symbolically): exact while it stays within the dim, which
    // the symbol's range must guarantee; each run re-infers with the end static.
    const Symbol& e = ctx.symbols()[end.symbol()];
    const bool within = x.shape[dim].is_static() ? e.max <= x.shape[dim].size()
                                                 : x.shape[dim] == end ||
                                                       never_below(
                                                           ctx.symbols()[x.shape[dim].symbol()].name,
                                                           e.name);
    ctx.check(start >= 0 && start <= e.min && within,
              "the dynamic end " + sym_end + " in [" + std::to_string(e.min) + ", " +
                  std::to_string(e.max) + "] may leave " +
                  shape_string(Shape{x.shape[dim]}, &ctx.symbols()) + " or fall before start " +
                  std::to_string(start) + "; bound it (dynamic_shape.dims_range)");
    const std::string count = start == 0 && step == 1
                                  ? sym_end
                                  : "((" + sym_end + ") - " + std::to_string(start) + " + " +
                                        std::to_string(step - 1) + ")//" + std::to_string(step);
    out[dim] = ctx.sym_dim(count);
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_select(InferContext& ctx) {
  check_rank_at_least_1(ctx);
  const TensorType& x = ctx.input(0);
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  const int64_t index = ctx.attr_int("index");
  if (x.shape[dim].is_static()) {
    const int64_t n = x.shape[dim].size();
    ctx.check(index >= -n && index < n,
              "index " + std::to_string(index) + " is out of range for dim " +
                  std::to_string(dim) + " of size " + std::to_string(n) +
                  (n ? "; use [" + std::to_string(-n) + ", " + std::to_string(n - 1) + "]" : ""));
  }
  Shape out = x.shape;
  out.erase(out.begin() + static_cast<std::ptrdiff_t>(dim));
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_narrow(InferContext& ctx) {
  check_rank_at_least_1(ctx);
  const TensorType& x = ctx.input(0);
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  const int64_t start = ctx.attr_int("start"), length = ctx.attr_int("length");
  ctx.check(length >= 0, "length is " + std::to_string(length) + "; it must not be negative");
  if (x.shape[dim].is_static()) {
    const int64_t n = x.shape[dim].size();
    ctx.check(start >= -n && start <= n, "start " + std::to_string(start) +
                                             " is out of range for dim " + std::to_string(dim) +
                                             " of size " + std::to_string(n) + "; use [" +
                                             std::to_string(-n) + ", " + std::to_string(n) + "]");
    const int64_t first = start < 0 ? start + n : start;
    ctx.check(length <= n - first, "start " + std::to_string(start) + " + length " +
                                       std::to_string(length) + " exceeds dim " +
                                       std::to_string(dim) + " of size " + std::to_string(n));
  }
  Shape out = x.shape;
  out[dim] = Dim(length);
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

struct SlicePlan {
  Extents e;
  Window w;
  size_t element_bytes = 0;
  int threads = 1;
};

using WindowOf = Window (*)(const Node&, int64_t);

SlicePlan slice_plan(const KernelSpec& spec, WindowOf window_of) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  SlicePlan p;
  const size_t dim = wrapped(spec.node.attr_int("dim"), sizes.size());
  p.e = extents_around(sizes, dim);
  p.w = window_of(spec.node, p.e.n);
  // Where the op keeps the dim (slice, narrow) the output's size is the window's length; it is
  // the only record of a slice's end given as a symbolic size (sym_end).
  if (spec.outputs[0].rank() == sizes.size()) p.w.count = spec.output_sizes(0)[dim];
  p.element_bytes = dtype_size(spec.inputs[0].dtype);
  p.threads = spec.threads;
  return p;
}

// y[o, j, i] = x[o, start + j * step, i], one element at a time.
std::unique_ptr<KernelInstance> slice_reference(SlicePlan p) {
  return make_kernel([p](std::span<const void* const> in, std::span<void* const> out) {
    cpu::with_element_type(p.element_bytes, [&](auto element) {
      using E = decltype(element);
      const E* x = static_cast<const E*>(in[0]);
      E* y = static_cast<E*>(out[0]);
      for (int64_t o = 0; o < p.e.outer; ++o)
        for (int64_t j = 0; j < p.w.count; ++j)
          for (int64_t i = 0; i < p.e.inner; ++i)
            y[(o * p.w.count + j) * p.e.inner + i] =
                x[(o * p.e.n + p.w.start + j * p.w.step) * p.e.inner + i];
    });
  });
}

// One copy per outer row when the window is contiguous (step 1), else one per position.
std::unique_ptr<KernelInstance> slice_rows(SlicePlan p) {
  const int64_t e = static_cast<int64_t>(p.element_bytes);
  const int64_t inner_bytes = p.e.inner * e;
  cpu::BlockGrid grid;
  grid.rows = p.e.outer;
  grid.src_row = p.e.n * inner_bytes;
  grid.dst_row = p.w.count * inner_bytes;
  if (p.w.step == 1 || p.w.count == 1) {
    grid.block_bytes = p.w.count * inner_bytes;
  } else {
    grid.count = p.w.count;
    grid.block_bytes = inner_bytes;
    grid.src_step = p.w.step * inner_bytes;
    grid.dst_step = inner_bytes;
  }
  const int64_t src_offset = p.w.start * inner_bytes;
  return make_kernel([grid, src_offset, threads = p.threads](std::span<const void* const> in,
                                                             std::span<void* const> out) {
    if (grid.rows == 0 || grid.count == 0 || grid.block_bytes == 0) return;
    cpu::copy_blocks(grid, static_cast<const std::byte*>(in[0]) + src_offset, out[0], threads);
  });
}

std::vector<KernelDef> slice_kernels(WindowOf window_of) {
  return {always("rows",
                 [window_of](const KernelSpec& spec) {
                   return slice_rows(slice_plan(spec, window_of));
                 }),
          always("reference", [window_of](const KernelSpec& spec) {
            return slice_reference(slice_plan(spec, window_of));
          })};
}

// ---------------------------------------------------------------- index_select, embedding, index

void infer_index_select(InferContext& ctx) {
  check_rank_at_least_1(ctx);
  const TensorType& x = ctx.input(0);
  const TensorType& index = ctx.input(1);
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  check_index_dtype(ctx, 1, "the index");
  ctx.check(index.rank() <= 1, "the index must be 0-d or 1-d, not " +
                                   shape_string(index.shape, &ctx.symbols()) +
                                   "; flatten it and reshape the result");
  Shape out = x.shape;
  out[dim] = index.rank() == 0 ? Dim(1) : index.shape[0];
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_embedding(InferContext& ctx) {
  const TensorType& weight = ctx.input(0);
  ctx.check(weight.rank() == 2, "the weight must be 2-d [num_embeddings, embedding_dim], not " +
                                    shape_string(weight.shape, &ctx.symbols()));
  check_index_dtype(ctx, 1, "the indices");
  Shape out = ctx.input(1).shape;
  out.push_back(weight.shape[1]);
  ctx.set_output(0, TensorType{weight.dtype, out, weight.layout});
}

// The shape all index tensors broadcast to, for index and index_put: inputs from `first` on.
Shape broadcast_indices(InferContext& ctx, size_t first) {
  const size_t k = ctx.num_inputs() - first;
  ctx.check(k >= 1, "needs at least one index tensor");
  ctx.check(k <= ctx.input(0).rank(), std::to_string(k) + " index tensors for a tensor of rank " +
                                          std::to_string(ctx.input(0).rank()));
  Shape b;
  for (size_t i = first; i < ctx.num_inputs(); ++i) {
    check_index_dtype(ctx, i, "index tensor " + std::to_string(i - first));
    b = ctx.broadcast(b, ctx.input(i).shape);
  }
  return b;
}

// B + the dims of x after the k indexed ones.
Shape indexed_shape(const TensorType& x, Shape b, size_t k) {
  b.insert(b.end(), x.shape.begin() + static_cast<std::ptrdiff_t>(k), x.shape.end());
  return b;
}

void infer_index(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  Shape b = broadcast_indices(ctx, 1);
  ctx.set_output(0, TensorType{x.dtype, indexed_shape(x, b, ctx.num_inputs() - 1), x.layout});
}

// An index tensor of index, index_select or embedding: its value at each position of the
// broadcast index shape B picks a block of x.
struct IndexSource {
  IndexOperand operand;
  int64_t block_stride = 1;  // blocks of x between consecutive positions of its dim
  Strided over_b;            // its element for a position of B
};

// out[o, b, :] = x[o, idx_0[b], ..., idx_k-1[b], :] with x viewed as
// [outer, n_0, ..., n_k-1, inner] and each of its [inner] runs a block.
struct IndexPlan {
  std::vector<IndexSource> sources;
  std::vector<int64_t> b_sizes;
  int64_t outer = 1, blocks_per_outer = 1, inner = 1, b_numel = 1;
  size_t element_bytes = 0;
  int threads = 1;
  NodeRef where;

  void check(std::span<const void* const> in) const {
    for (const IndexSource& s : sources) check_indices(s.operand, in, where);
  }
  // The block of x that output block q = (o, b) copies; the indices are checked.
  int64_t source_block(std::span<const void* const> in, int64_t q) const {
    const int64_t o = q / b_numel, b = q % b_numel;
    int64_t block = o * blocks_per_outer;
    for (const IndexSource& s : sources) {
      int64_t v = load_index(in[s.operand.input], s.operand.dtype, s.over_b.offset(b));
      block += (v < 0 ? v + s.operand.dim_size : v) * s.block_stride;
    }
    return block;
  }
  // fn(q, source_block(q)) for q in [begin, end). With one index tensor of shape B (index_select,
  // embedding, x[i]) the blocks come straight from its values, a row of them at a time.
  template <typename Fn>
  void for_each_block(std::span<const void* const> in, int64_t begin, int64_t end,
                      const Fn& fn) const {
    if (sources.size() != 1 || !sources[0].over_b.identity) {
      for (int64_t q = begin; q < end; ++q) fn(q, source_block(in, q));
      return;
    }
    const IndexOperand& operand = sources[0].operand;
    const int64_t stride = sources[0].block_stride, n = operand.dim_size;
    with_index_type(operand.dtype, [&](auto index_type) {
      using I = decltype(index_type);
      const I* idx = static_cast<const I*>(in[operand.input]);
      for (int64_t o = begin / b_numel, q = begin; q < end; ++o) {
        const int64_t base = o * blocks_per_outer, row_end = std::min(end, (o + 1) * b_numel);
        for (int64_t b = q - o * b_numel; q < row_end; ++q, ++b) {
          const int64_t v = idx[b];
          fn(q, base + (v < 0 ? v + n : v) * stride);
        }
      }
    });
  }
};

IndexPlan plan_for(const KernelSpec& spec, std::vector<int64_t> b_sizes) {
  IndexPlan p;
  p.b_numel = num_elements(b_sizes);
  p.b_sizes = std::move(b_sizes);
  p.element_bytes = dtype_size(spec.inputs[0].dtype);
  p.threads = spec.threads;
  p.where = NodeRef(spec.node);
  return p;
}

// One index tensor (input 1, of any shape) along `dim` of x.
IndexPlan one_index_plan(const KernelSpec& spec, const std::vector<int64_t>& x_sizes, size_t dim,
                         bool wrap) {
  const Extents e = extents_around(x_sizes, dim);
  IndexPlan p = plan_for(spec, {num_elements(spec.input_sizes(1))});
  p.sources.push_back(IndexSource{index_operand(spec, 1, dim, e.n, wrap), 1, Strided()});
  p.outer = e.outer;
  p.blocks_per_outer = e.n;
  p.inner = e.inner;
  return p;
}

IndexPlan index_select_plan(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0);
  return one_index_plan(spec, x, wrapped(spec.node.attr_int("dim"), x.size()), false);
}

IndexPlan embedding_plan(const KernelSpec& spec) {
  return one_index_plan(spec, spec.input_sizes(0), 0, false);
}

// For index and index_put: x is input 0, the index tensors inputs first.. on.
IndexPlan leading_index_plan(const KernelSpec& spec, size_t first) {
  const std::vector<int64_t> x = spec.input_sizes(0);
  const size_t k = spec.inputs.size() - first;
  std::vector<int64_t> b;  // the broadcast index shape, from the index sizes
  for (size_t i = first; i < spec.inputs.size(); ++i) {
    std::vector<int64_t> s = spec.input_sizes(i);
    if (s.size() > b.size()) b.insert(b.begin(), s.size() - b.size(), 1);
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& target = b[b.size() - s.size() + d];
      if (target == 1) target = s[d];
    }
  }
  IndexPlan p = plan_for(spec, b);
  for (size_t d = 0; d < x.size(); ++d) (d < k ? p.blocks_per_outer : p.inner) *= x[d];
  for (size_t dim = 0; dim < k; ++dim) {
    int64_t block_stride = 1;
    for (size_t d = dim + 1; d < k; ++d) block_stride *= x[d];
    const size_t i = first + dim;
    p.sources.push_back(IndexSource{index_operand(spec, i, dim, x[dim], true), block_stride,
                                    Strided(b, broadcast_strides(spec.input_sizes(i), b))});
  }
  return p;
}

IndexPlan index_plan(const KernelSpec& spec) { return leading_index_plan(spec, 1); }

// Each output block from its source block, one element at a time.
std::unique_ptr<KernelInstance> index_reference(IndexPlan p) {
  return make_kernel([p](std::span<const void* const> in, std::span<void* const> out) {
    p.check(in);
    cpu::with_element_type(p.element_bytes, [&](auto element) {
      using E = decltype(element);
      const E* x = static_cast<const E*>(in[0]);
      E* y = static_cast<E*>(out[0]);
      for (int64_t q = 0; q < p.outer * p.b_numel; ++q) {
        const int64_t source = p.source_block(in, q) * p.inner;
        for (int64_t i = 0; i < p.inner; ++i) y[q * p.inner + i] = x[source + i];
      }
    });
  });
}

// One copy per block, on the pool when large.
std::unique_ptr<KernelInstance> index_rows(IndexPlan p) {
  return make_kernel([p](std::span<const void* const> in, std::span<void* const> out) {
    p.check(in);
    const int64_t block_bytes = p.inner * static_cast<int64_t>(p.element_bytes);
    if (block_bytes == 0) return;
    const auto* x = static_cast<const std::byte*>(in[0]);
    auto* y = static_cast<std::byte*>(out[0]);
    cpu::with_block_copier(block_bytes, [&](auto copy) {
      cpu::parallel_chunks(
          p.outer * p.b_numel, cpu::block_work(block_bytes), p.threads,
          [&](int64_t begin, int64_t end) {
            p.for_each_block(in, begin, end, [&](int64_t q, int64_t block) {
              copy(y + q * block_bytes, x + block * block_bytes);
            });
          });
    });
  });
}

std::vector<KernelDef> index_kernels(IndexPlan (*plan)(const KernelSpec&)) {
  return {always("rows", [plan](const KernelSpec& spec) { return index_rows(plan(spec)); }),
          always("reference",
                 [plan](const KernelSpec& spec) { return index_reference(plan(spec)); })};
}

// ---------------------------------------------------------------- gather

// gather and scatter: the index (input 1) may not be larger than `what` (input `other`) along
// dim d (checked where both sizes are static; the concrete shapes are checked before a run).
void check_index_within(InferContext& ctx, size_t d, const std::string& what, size_t other) {
  const Dim i = ctx.input(1).shape[d], o = ctx.input(other).shape[d];
  if (!i.is_static() || !o.is_static()) return;
  ctx.check(i.size() <= o.size(), "the index is larger than " + what + " along dim " +
                                      std::to_string(d) + " (" + std::to_string(i.size()) +
                                      " > " + std::to_string(o.size()) + ")");
}

void infer_gather(InferContext& ctx) {
  check_rank_at_least_1(ctx);
  const TensorType& x = ctx.input(0);
  const TensorType& index = ctx.input(1);
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  check_index_dtype(ctx, 1, "the index");
  ctx.check(index.rank() == x.rank(), "the index has rank " + std::to_string(index.rank()) +
                                          " and x rank " + std::to_string(x.rank()) +
                                          "; gather needs equal ranks");
  for (size_t d = 0; d < x.rank(); ++d)
    if (d != dim) check_index_within(ctx, d, "x", 0);
  ctx.set_output(0, TensorType{x.dtype, index.shape, x.layout});
}

// gather and scatter address x at the positions of the index: x's strides on every dim but
// `dim`, plus the index value times x's stride along `dim`.
struct DimIndexPlan {
  IndexOperand index;
  std::vector<int64_t> index_sizes;
  Strided x_at;             // x's offset for an index position, dim's term left out
  int64_t dim_stride = 1;   // x's stride along dim
  int64_t numel = 0;        // of the index
  size_t element_bytes = 0;
  DType dtype = DType::F32;  // of x
  int threads = 1;
  NodeRef where;
};

DimIndexPlan dim_index_plan(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), index = spec.input_sizes(1);
  const size_t dim = wrapped(spec.node.attr_int("dim"), x.size());
  std::vector<int64_t> x_strides = row_major_strides(x);
  const int64_t dim_stride = x_strides[dim];
  x_strides[dim] = 0;
  return DimIndexPlan{index_operand(spec, 1, dim, x[dim], false),
                      index,
                      Strided(index, x_strides),
                      dim_stride,
                      num_elements(index),
                      dtype_size(spec.inputs[0].dtype),
                      spec.inputs[0].dtype,
                      spec.threads,
                      NodeRef(spec.node)};
}

// y[p] = x[x_at(p) + index[p] * dim_stride], one element at a time.
std::unique_ptr<KernelInstance> gather_reference(DimIndexPlan p) {
  return make_kernel([p](std::span<const void* const> in, std::span<void* const> out) {
    check_indices(p.index, in, p.where);
    cpu::with_element_type(p.element_bytes, [&](auto element) {
      using E = decltype(element);
      const E* x = static_cast<const E*>(in[0]);
      E* y = static_cast<E*>(out[0]);
      for (int64_t i = 0; i < p.numel; ++i)
        y[i] = x[p.x_at.offset(i) + load_index(in[1], p.index.dtype, i) * p.dim_stride];
    });
  });
}

// Rows of the index's last dim on the pool, each row's x offset computed once; along the last
// dim itself (dim_stride 1) a row reads one row of x.
std::unique_ptr<KernelInstance> gather_rows(DimIndexPlan p) {
  const int64_t row = p.index_sizes.back();
  const Strided row_at(std::vector<int64_t>(p.index_sizes.begin(), p.index_sizes.end() - 1),
                       std::vector<int64_t>(p.x_at.strides.begin(), p.x_at.strides.end() - 1));
  const int64_t column_stride = p.x_at.strides.back();  // 0 when dim is the last, else 1
  return make_kernel([p, row, row_at, column_stride](std::span<const void* const> in,
                                                     std::span<void* const> out) {
    check_indices(p.index, in, p.where, p.threads);
    if (p.numel == 0) return;
    cpu::with_element_type(p.element_bytes, [&](auto element) {
      using E = decltype(element);
      with_index_type(p.index.dtype, [&](auto index_type) {
        using I = decltype(index_type);
        const E* x = static_cast<const E*>(in[0]);
        const I* index = static_cast<const I*>(in[1]);
        E* y = static_cast<E*>(out[0]);
        cpu::parallel_chunks(p.numel / row, row, p.threads, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const E* base = x + row_at.offset(r);
            const I* idx = index + r * row;
            E* dst = y + r * row;
            if (column_stride == 0) {  // along the last dim
              for (int64_t j = 0; j < row; ++j) dst[j] = base[idx[j]];
            } else {
              for (int64_t j = 0; j < row; ++j) dst[j] = base[j + int64_t{idx[j]} * p.dim_stride];
            }
          }
        });
      });
    });
  });
}

// ---------------------------------------------------------------- scatter, index_put

Reduce reduce_of(const std::string& name) {
  return name == "add"        ? Reduce::Add
         : name == "multiply" ? Reduce::Multiply
         : name == "amax"     ? Reduce::Max
         : name == "amin"     ? Reduce::Min
                              : Reduce::Assign;
}

void infer_scatter(InferContext& ctx) {
  check_rank_at_least_1(ctx);
  const TensorType& x = ctx.input(0);
  const TensorType& index = ctx.input(1);
  const TensorType& src = ctx.input(2);
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  check_index_dtype(ctx, 1, "the index");
  check_same_dtype(ctx, 2, "src");
  const std::string& reduce = ctx.attr_string("reduce");
  ctx.check(reduce.empty() || reduce == "add" || reduce == "multiply" || reduce == "amax" ||
                reduce == "amin",
            "reduce is \"" + reduce +
                "\"; use \"\" (store), \"add\", \"multiply\", \"amax\" or \"amin\"");
  if (!reduce.empty()) check_reducible(ctx, "scatter with reduce=\"" + reduce + "\"");
  ctx.check(index.rank() == x.rank() && src.rank() == x.rank(),
            "x, the index and src must have one rank");
  for (size_t d = 0; d < x.rank(); ++d) {
    check_index_within(ctx, d, "src", 2);
    if (d != dim) check_index_within(ctx, d, "x", 0);
  }
  ctx.set_output(0, x);
}

void infer_index_put(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& values = ctx.input(1);
  check_same_dtype(ctx, 1, "values");
  if (ctx.attr_bool("accumulate")) check_reducible(ctx, "index_put with accumulate");
  const Shape target = indexed_shape(x, broadcast_indices(ctx, 2), ctx.num_inputs() - 2);
  const std::string mismatch = "values " + shape_string(values.shape, &ctx.symbols()) +
                               " can't be broadcast to the indexed shape " +
                               shape_string(target, &ctx.symbols());
  ctx.check(values.rank() <= target.size(), mismatch);
  const size_t lead = target.size() - values.rank();
  for (size_t d = 0; d < values.rank(); ++d) {
    const Dim v = values.shape[d], t = target[lead + d];
    ctx.check(v == t || (v.is_static() && v.size() == 1) || !v.is_static() || !t.is_static(),
              mismatch);
  }
  ctx.set_output(0, x);
}

// Wrapping integer arithmetic (as PyTorch's), exact float arithmetic; amax and amin keep a NaN
// from either side, as PyTorch's scatter_reduce does.
template <typename T>
T combine(Reduce reduce, T old, T value) {
  if constexpr (std::is_integral_v<T>) {
    const uint64_t a = static_cast<uint64_t>(old), b = static_cast<uint64_t>(value);
    if (reduce == Reduce::Add) return static_cast<T>(a + b);
    if (reduce == Reduce::Multiply) return static_cast<T>(a * b);
  } else {
    if (reduce == Reduce::Add) return old + value;
    if (reduce == Reduce::Multiply) return old * value;
    if ((reduce == Reduce::Max || reduce == Reduce::Min) && (old != old || value != value))
      return old != old ? old : value;
  }
  if (reduce == Reduce::Max) return std::max(old, value);
  if (reduce == Reduce::Min) return std::min(old, value);
  return value;
}

// Calls fn(std::integral_constant<Reduce, reduce>{}), so that a loop's combine() is decided
// once, at compile time, not per element.
template <typename Fn>
void with_reduce(Reduce reduce, Fn fn) {
  switch (reduce) {
    case Reduce::Assign: return fn(std::integral_constant<Reduce, Reduce::Assign>{});
    case Reduce::Add: return fn(std::integral_constant<Reduce, Reduce::Add>{});
    case Reduce::Multiply: return fn(std::integral_constant<Reduce, Reduce::Multiply>{});
    case Reduce::Max: return fn(std::integral_constant<Reduce, Reduce::Max>{});
    case Reduce::Min: return fn(std::integral_constant<Reduce, Reduce::Min>{});
  }
}

// Calls fn(T{}) with the type that stores elements for `reduce`: any type of the element's size
// for a plain store, the dtype's own arithmetic type otherwise.
template <typename Fn>
void with_store_type(Reduce reduce, DType dtype, Fn fn) {
  if (reduce == Reduce::Assign) return cpu::with_element_type(dtype_size(dtype), fn);
  switch (dtype) {
    case DType::F32: return fn(float{});
    case DType::F64: return fn(double{});
    case DType::I64: return fn(int64_t{});
    case DType::I32: return fn(int32_t{});
    case DType::I16: return fn(int16_t{});
    case DType::I8: return fn(int8_t{});
    case DType::U8: return fn(uint8_t{});
    default: KILN_ASSERT(false, "no arithmetic for " << dtype_name(dtype));
  }
}

// out = x, unless the planner gave out x's own memory (in place: x dies here).
void copy_input(std::span<const void* const> in, void* out, size_t bytes) {
  if (bytes && out != in[0]) std::memcpy(out, in[0], bytes);
}

// out = x; out[x_at(p) + index[p] * dim_stride] (reduce)= src[src_at(p)] in index order, so
// that the last of duplicate positions wins a store (PyTorch leaves that unspecified).
std::unique_ptr<KernelInstance> scatter_reference(const KernelSpec& spec) {
  const DimIndexPlan p = dim_index_plan(spec);
  const Strided src_at(p.index_sizes,
                       std::vector<int64_t>(row_major_strides(spec.input_sizes(2))));
  const size_t bytes = static_cast<size_t>(num_elements(spec.input_sizes(0))) * p.element_bytes;
  const Reduce reduce = reduce_of(spec.node.attr_string("reduce"));
  return make_kernel([p, src_at, bytes, reduce](std::span<const void* const> in,
                                                std::span<void* const> out) {
    check_indices(p.index, in, p.where);
    copy_input(in, out[0], bytes);
    with_store_type(reduce, p.dtype, [&](auto element) {
      using T = decltype(element);
      const T* src = static_cast<const T*>(in[2]);
      T* y = static_cast<T*>(out[0]);
      for (int64_t i = 0; i < p.numel; ++i) {
        T& target = y[p.x_at.offset(i) + load_index(in[1], p.index.dtype, i) * p.dim_stride];
        target = combine(reduce, target, src[src_at.offset(i)]);
      }
    });
  });
}

// The same on the pool, bit for bit: the index seen as [outer, n, inner] around dim, position
// (o, j, i) writes only x's line (o, ·, i), so lines split among the threads while each keeps
// its index order (the last of duplicates still wins a store, and sums add in order); a thread's
// lines of one o go j by j across their i, reading the index and src row by row.
std::unique_ptr<KernelInstance> scatter_lines(const KernelSpec& spec) {
  const DimIndexPlan p = dim_index_plan(spec);
  const size_t dim = wrapped(spec.node.attr_int("dim"), p.index_sizes.size());
  const std::vector<int64_t>& sizes = p.index_sizes;
  const std::vector<int64_t> x_strides = row_major_strides(spec.input_sizes(0)),
                             src_strides = row_major_strides(spec.input_sizes(2));
  const auto before = static_cast<std::ptrdiff_t>(dim), after = before + 1;
  auto part = [&](const std::vector<int64_t>& strides, bool leading) {
    return leading ? Strided({sizes.begin(), sizes.begin() + before},
                             {strides.begin(), strides.begin() + before})
                   : Strided({sizes.begin() + after, sizes.end()},
                             {strides.begin() + after, strides.end()});
  };
  const Strided x_outer = part(x_strides, true), x_inner = part(x_strides, false);
  const Strided src_outer = part(src_strides, true), src_inner = part(src_strides, false);
  const int64_t n = sizes[dim], inner = num_elements(x_inner.sizes);
  const int64_t lines = n ? p.numel / n : 0, src_step = src_strides[dim];
  const size_t bytes = static_cast<size_t>(num_elements(spec.input_sizes(0))) * p.element_bytes;
  const Reduce reduce = reduce_of(spec.node.attr_string("reduce"));
  return make_kernel([=](std::span<const void* const> in, std::span<void* const> out) {
    check_indices(p.index, in, p.where, p.threads);
    copy_input(in, out[0], bytes);
    if (lines == 0) return;
    with_store_type(reduce, p.dtype, [&](auto element) {
      using T = decltype(element);
      with_index_type(p.index.dtype, [&](auto index_type) {
        using I = decltype(index_type);
        with_reduce(reduce, [&](auto how) {
          constexpr Reduce R = decltype(how)::value;
          const T* src = static_cast<const T*>(in[2]);
          const I* index = static_cast<const I*>(in[1]);
          T* y = static_cast<T*>(out[0]);
          cpu::parallel_chunks(lines, n, p.threads, [&](int64_t begin, int64_t end) {
            for (int64_t line = begin; line < end;) {
              const int64_t o = line / inner, first = line % inner;
              const int64_t last = std::min(inner, first + (end - line));  // this o's lines
              const int64_t x_o = x_outer.offset(o), src_o = src_outer.offset(o);
              if (inner == 1) {  // along the last dim: each line is one row of the index
                T* y_o = y + x_o;
                const I* index_row = index + o * n;
                const T* src_row = src + src_o;
                for (int64_t j = 0; j < n; ++j) {
                  T& target = y_o[int64_t{index_row[j]} * p.dim_stride];
                  target = combine(R, target, src_row[j * src_step]);
                }
              } else {
                for (int64_t j = 0; j < n; ++j) {
                  const I* index_row = index + (o * n + j) * inner;
                  for (int64_t i = first; i < last; ++i) {
                    T& target = y[x_o + x_inner.offset(i) + int64_t{index_row[i]} * p.dim_stride];
                    target = combine(R, target, src[src_o + j * src_step + src_inner.offset(i)]);
                  }
                }
              }
              line += last - first;
            }
          });
        });
      });
    });
  });
}

// out = x; out[block of b] (+)= values broadcast to [B, inner], in order of b.
std::unique_ptr<KernelInstance> index_put_reference(const KernelSpec& spec) {
  const IndexPlan p = leading_index_plan(spec, 2);
  const std::vector<int64_t> target = spec.output_sizes(0);
  const size_t k = spec.inputs.size() - 2;
  std::vector<int64_t> indexed = p.b_sizes;
  indexed.insert(indexed.end(), target.begin() + static_cast<std::ptrdiff_t>(k), target.end());
  const Strided values_at(indexed, broadcast_strides(spec.input_sizes(1), indexed));
  const size_t bytes = static_cast<size_t>(num_elements(target)) * p.element_bytes;
  const Reduce reduce = spec.node.attr_bool("accumulate") ? Reduce::Add : Reduce::Assign;
  return make_kernel([p, values_at, bytes, reduce, dtype = spec.inputs[0].dtype](
                         std::span<const void* const> in, std::span<void* const> out) {
    p.check(in);
    copy_input(in, out[0], bytes);
    with_store_type(reduce, dtype, [&](auto element) {
      using T = decltype(element);
      const T* values = static_cast<const T*>(in[1]);
      T* y = static_cast<T*>(out[0]);
      for (int64_t q = 0; q < p.b_numel; ++q) {
        T* block = y + p.source_block(in, q) * p.inner;
        for (int64_t i = 0; i < p.inner; ++i)
          block[i] = combine(reduce, block[i], values[values_at.offset(q * p.inner + i)]);
      }
    });
  });
}

// ---------------------------------------------------------------- registration

OpDef make_op(std::string name, std::vector<ArgSpec> inputs, std::vector<AttrSpec> attrs,
              void (*infer)(InferContext&), std::vector<KernelDef> kernels) {
  OpDef def;
  def.name = std::move(name);
  def.inputs = std::move(inputs);
  def.attrs = std::move(attrs);
  def.infer = infer;
  def.kernels = std::move(kernels);
  return def;
}

}  // namespace

void register_indexing_ops(OpRegistry& registry) {
  const int64_t zero = 0;
  registry.add(make_op("slice", {{"x"}},
                       {{"dim", zero}, {"start", zero}, {"end", INT64_MAX}, {"step", int64_t{1}},
                        {"sym_end", std::string()}},
                       infer_slice, slice_kernels(slice_window_of)));
  registry.add(make_op("select", {{"x"}}, {{"dim", zero, true}, {"index", zero, true}},
                       infer_select, slice_kernels(select_window_of)));
  registry.add(make_op("narrow", {{"x"}},
                       {{"dim", zero, true}, {"start", zero, true}, {"length", zero, true}},
                       infer_narrow, slice_kernels(narrow_window_of)));
  registry.add(make_op("index_select", {{"x"}, {"index"}}, {{"dim", zero, true}},
                       infer_index_select, index_kernels(index_select_plan)));
  registry.add(make_op("embedding", {{"weight"}, {"indices"}}, {{"padding_idx", int64_t{-1}}},
                       infer_embedding, index_kernels(embedding_plan)));
  registry.add(make_op("index", {{"x"}, {"indices", true}}, {}, infer_index,
                       index_kernels(index_plan)));
  registry.add(make_op("gather", {{"x"}, {"index"}}, {{"dim", zero, true}}, infer_gather,
                       {always("rows",
                               [](const KernelSpec& spec) {
                                 return gather_rows(dim_index_plan(spec));
                               }),
                        always("reference", [](const KernelSpec& spec) {
                          return gather_reference(dim_index_plan(spec));
                        })}));
  // Both write into x's copy: in x's own memory where x dies at the node, which then writes
  // only the positions it scatters to (each reads its own position's value first).
  OpDef scatter = make_op("scatter", {{"x"}, {"index"}, {"src"}},
                          {{"dim", zero, true}, {"reduce", std::string()}}, infer_scatter,
                          {always("lines", scatter_lines), always("reference", scatter_reference)});
  OpDef index_put = make_op("index_put", {{"x"}, {"values"}, {"indices", true}},
                            {{"accumulate", false}}, infer_index_put,
                            {always("reference", index_put_reference)});
  for (OpDef* def : {&scatter, &index_put})
    for (KernelDef& k : def->kernels) k.in_place_inputs = {0};
  registry.add(std::move(scatter));
  registry.add(std::move(index_put));
}

}  // namespace kiln
