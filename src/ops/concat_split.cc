// Joining tensors along one dim and splitting one apart, for every dtype:
//
//   concat(tensors...; dim = 0)    PyTorch's cat: the inputs agree on every other dim; a 1-D
//                                  empty input ([0]) next to inputs of another rank is skipped,
//                                  as in PyTorch. Symbolic dims along `dim` add up to a derived
//                                  symbol "A + B + 3" whose range is the sum of the ranges.
//   stack(tensors...; dim = 0)     a new dim of size N at `dim` (in [-(rank+1), rank]).
//   split(x; split_sizes, dim = 0) one output per size (PyTorch's split_with_sizes); the sizes
//                                  add up to the dim, which must be static.
//   chunk(x; chunks, dim = 0)      PyTorch's chunk: pieces of ceil(n / chunks), the last one
//                                  smaller, so possibly fewer than `chunks` outputs (exactly
//                                  `chunks` empty ones when n = 0); the dim must be static.
//
// All four move the same pieces between one whole tensor and its parts: the whole viewed as
// [outer, total, inner] and piece p as [outer, length_p, inner] at offset_p along the middle dim.
#include <algorithm>
#include <span>

#include "kernels/cpu/block_copy.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

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

int64_t saturating_add(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

// ---------------------------------------------------------------- inference

bool is_legacy_empty(const TensorType& t) { return t.shape == Shape{Dim(0)}; }

void check_same_dtypes(InferContext& ctx) {
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    ctx.check(ctx.input(i).dtype == ctx.input(0).dtype,
              "input " + std::to_string(i) + " is " +
                  std::string(dtype_name(ctx.input(i).dtype)) + " and input 0 is " +
                  std::string(dtype_name(ctx.input(0).dtype)) + "; insert casts to one dtype");
}

void infer_concat(InferContext& ctx) {
  ctx.check(ctx.num_inputs() >= 1, "needs at least one tensor");
  check_same_dtypes(ctx);
  size_t ref = 0;
  while (ref + 1 < ctx.num_inputs() && is_legacy_empty(ctx.input(ref))) ++ref;
  const TensorType& first = ctx.input(ref);
  ctx.check(first.rank() >= 1, "a 0-d tensor can't be concatenated; unsqueeze it first");
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), first.rank());
  Shape out = first.shape;
  int64_t static_total = 0, min_total = 0, max_total = 0;
  std::string symbolic_names;
  size_t symbolic_count = 0;
  Dim last_symbolic;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType& t = ctx.input(i);
    if (first.rank() != 1 && is_legacy_empty(t)) continue;
    ctx.check(t.rank() == first.rank(),
              "input " + std::to_string(i) + " has rank " + std::to_string(t.rank()) +
                  " and input " + std::to_string(ref) + " rank " + std::to_string(first.rank()) +
                  "; concat needs equal ranks");
    for (size_t d = 0; d < t.rank(); ++d)
      if (d != dim)
        out[d] = ctx.unify(out[d], t.shape[d],
                           "dim " + std::to_string(d) + " of input " + std::to_string(i) +
                               " and of input " + std::to_string(ref));
    const Dim along = t.shape[dim];
    if (along.is_static()) {
      static_total = saturating_add(static_total, along.size());
    } else {
      const Symbol& s = ctx.symbols()[along.symbol()];
      if (symbolic_count++) symbolic_names += " + ";
      symbolic_names += s.name;
      min_total = saturating_add(min_total, s.min);
      max_total = saturating_add(max_total, s.max);
      last_symbolic = along;
    }
  }
  if (symbolic_count == 0) {
    out[dim] = Dim(static_total);
  } else if (symbolic_count == 1 && static_total == 0) {
    out[dim] = last_symbolic;
  } else {
    // Named as PyTorch prints the sum ("s0 + 1"), so that the same size reaching Kiln as an
    // expression (a slice end, a reshape) is the same symbol.
    if (static_total) symbolic_names += " + " + std::to_string(static_total);
    out[dim] = ctx.derived_dim(symbolic_names, saturating_add(min_total, static_total),
                           saturating_add(max_total, static_total));
  }
  ctx.set_output(0, TensorType{first.dtype, out, first.layout});
}

void infer_stack(InferContext& ctx) {
  ctx.check(ctx.num_inputs() >= 1, "needs at least one tensor");
  check_same_dtypes(ctx);
  Shape out = ctx.input(0).shape;
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const TensorType& t = ctx.input(i);
    ctx.check(t.rank() == out.size(), "stack needs tensors of one shape; input " +
                                          std::to_string(i) + " has rank " +
                                          std::to_string(t.rank()) + ", input 0 rank " +
                                          std::to_string(out.size()));
    for (size_t d = 0; d < out.size(); ++d)
      out[d] = ctx.unify(out[d], t.shape[d],
                         "stack needs tensors of one shape; dim " + std::to_string(d) +
                             " of input " + std::to_string(i) + " and of input 0");
  }
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), out.size() + 1);
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(dim),
             Dim(static_cast<int64_t>(ctx.num_inputs())));
  ctx.set_output(0, TensorType{ctx.input(0).dtype, out, ctx.input(0).layout});
}

// The split dim of x, which must be static: the number of outputs depends on it.
std::pair<size_t, int64_t> static_split_dim(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  ctx.check(x.rank() >= 1, "a 0-d tensor can't be split");
  const size_t dim = wrap_dim(ctx, ctx.attr_int("dim"), x.rank());
  ctx.check(x.shape[dim].is_static(),
            "dim " + std::to_string(dim) + " is dynamic (" +
                shape_string(x.shape, &ctx.symbols()) +
                "), so the pieces' sizes are unknown; split along a static dim, or slice the "
                "dynamic one");
  return {dim, x.shape[dim].size()};
}

void set_pieces(InferContext& ctx, size_t dim, const std::vector<int64_t>& lengths) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    TensorType piece = ctx.input(0);
    piece.shape[dim] = Dim(lengths[i]);
    ctx.set_output(i, piece);
  }
}

void infer_split(InferContext& ctx) {
  auto [dim, n] = static_split_dim(ctx);
  const std::vector<int64_t>& sizes = ctx.attr_ints("split_sizes");
  ctx.check(!sizes.empty(), "split_sizes is empty; give one size per output");
  int64_t total = 0;
  for (int64_t s : sizes) {
    ctx.check(s >= 0, "split_sizes has the negative size " + std::to_string(s));
    total = saturating_add(total, s);
  }
  ctx.check(total == n, "split_sizes add up to " + std::to_string(total) + ", but dim " +
                            std::to_string(dim) + " has size " + std::to_string(n));
  set_pieces(ctx, dim, sizes);
}

void infer_chunk(InferContext& ctx) {
  auto [dim, n] = static_split_dim(ctx);
  const int64_t chunks = ctx.attr_int("chunks");
  ctx.check(chunks >= 1, "chunks is " + std::to_string(chunks) + "; it must be at least 1");
  std::vector<int64_t> lengths;
  if (n == 0) {
    lengths.assign(static_cast<size_t>(chunks), 0);
  } else {
    const int64_t piece = (n - 1) / chunks + 1;
    for (int64_t offset = 0; offset < n; offset += piece)
      lengths.push_back(std::min(piece, n - offset));
  }
  set_pieces(ctx, dim, lengths);
}

// ---------------------------------------------------------------- kernels

struct Pieces {
  int64_t outer = 1, inner = 1, total = 0;
  std::vector<int64_t> lengths, offsets;  // along the middle dim, one per piece
  size_t element_bytes = 0;
  int threads = 1;
  bool join = true;  // parts -> whole (concat, stack); else whole -> parts (split, chunk)
};

// whole_sizes split along `dim` into pieces of `lengths` (zero for skipped inputs).
Pieces pieces_of(const KernelSpec& spec, const std::vector<int64_t>& whole_sizes, size_t dim,
                 std::vector<int64_t> lengths, bool join) {
  Pieces p;
  for (size_t d = 0; d < whole_sizes.size(); ++d)
    if (d < dim) p.outer *= whole_sizes[d];
    else if (d > dim) p.inner *= whole_sizes[d];
  for (int64_t length : lengths) {
    p.offsets.push_back(p.total);
    p.total += length;
  }
  KILN_ASSERT(p.total == whole_sizes[dim], "pieces of " << p.total << " along a dim of "
                                                        << whole_sizes[dim]);
  p.lengths = std::move(lengths);
  p.element_bytes = dtype_size(spec.inputs[0].dtype);
  p.threads = spec.threads;
  p.join = join;
  return p;
}

Pieces concat_pieces(const KernelSpec& spec) {
  const std::vector<int64_t> out = spec.output_sizes(0);
  const size_t dim = wrapped(spec.node.attr_int("dim"), out.size());
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    std::vector<int64_t> in = spec.input_sizes(i);
    lengths.push_back(in.size() == out.size() ? in[dim] : 0);  // a skipped [0]
  }
  return pieces_of(spec, out, dim, std::move(lengths), true);
}

Pieces stack_pieces(const KernelSpec& spec) {
  const std::vector<int64_t> out = spec.output_sizes(0);
  return pieces_of(spec, out, wrapped(spec.node.attr_int("dim"), out.size()),
                   std::vector<int64_t>(spec.inputs.size(), 1), true);
}

Pieces split_pieces(const KernelSpec& spec) {
  const std::vector<int64_t> in = spec.input_sizes(0);
  const size_t dim = wrapped(spec.node.attr_int("dim"), in.size());
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < spec.outputs.size(); ++i) lengths.push_back(spec.output_sizes(i)[dim]);
  return pieces_of(spec, in, dim, std::move(lengths), false);
}

// The whole tensor and part k of a run: read-only or written according to p.join.
void* whole_of(const Pieces& p, std::span<const void* const> in, std::span<void* const> out) {
  return p.join ? out[0] : const_cast<void*>(in[0]);
}
void* part_of(const Pieces& p, std::span<const void* const> in, std::span<void* const> out,
              size_t k) {
  return p.join ? const_cast<void*>(in[k]) : out[k];
}

// One element at a time: whole[o, offset_p + a, i] <-> part_p[o, a, i].
std::unique_ptr<KernelInstance> pieces_reference(Pieces p) {
  return make_kernel([p](std::span<const void* const> in, std::span<void* const> out) {
    cpu::with_element_type(p.element_bytes, [&](auto element) {
      using E = decltype(element);
      E* whole = static_cast<E*>(whole_of(p, in, out));
      for (size_t k = 0; k < p.lengths.size(); ++k) {
        E* part = static_cast<E*>(part_of(p, in, out, k));
        for (int64_t o = 0; o < p.outer; ++o)
          for (int64_t a = 0; a < p.lengths[k]; ++a)
            for (int64_t i = 0; i < p.inner; ++i) {
              E& w = whole[(o * p.total + p.offsets[k] + a) * p.inner + i];
              E& q = part[(o * p.lengths[k] + a) * p.inner + i];
              if (p.join) w = q;
              else q = w;
            }
      }
    });
  });
}

// One memcpy per outer row of each piece.
std::unique_ptr<KernelInstance> pieces_rows(Pieces p) {
  return make_kernel([p](std::span<const void* const> in, std::span<void* const> out) {
    if (p.outer == 0 || p.inner == 0) return;
    const int64_t e = static_cast<int64_t>(p.element_bytes);
    for (size_t k = 0; k < p.lengths.size(); ++k) {
      const int64_t part_row = p.lengths[k] * p.inner * e, whole_row = p.total * p.inner * e;
      if (part_row == 0) continue;
      std::byte* whole = static_cast<std::byte*>(whole_of(p, in, out)) + p.offsets[k] * p.inner * e;
      cpu::BlockGrid grid;
      grid.rows = p.outer;
      grid.block_bytes = part_row;
      grid.src_row = p.join ? part_row : whole_row;
      grid.dst_row = p.join ? whole_row : part_row;
      if (p.join) cpu::copy_blocks(grid, part_of(p, in, out, k), whole, p.threads);
      else cpu::copy_blocks(grid, whole, part_of(p, in, out, k), p.threads);
    }
  });
}

std::vector<KernelDef> pieces_kernels(Pieces (*plan)(const KernelSpec&)) {
  auto always = [](const KernelSpec&) { return std::string(); };
  return {KernelDef{"rows", "native", always,
                    [plan](const KernelSpec& spec) { return pieces_rows(plan(spec)); }},
          KernelDef{"reference", "native", always,
                    [plan](const KernelSpec& spec) { return pieces_reference(plan(spec)); }}};
}

OpDef pieces_op(std::string name, std::vector<ArgSpec> inputs, size_t num_outputs,
         std::vector<AttrSpec> attrs, void (*infer)(InferContext&),
         Pieces (*plan)(const KernelSpec&)) {
  OpDef def;
  def.name = std::move(name);
  def.inputs = std::move(inputs);
  def.num_outputs = num_outputs;
  def.attrs = std::move(attrs);
  def.infer = infer;
  def.kernels = pieces_kernels(plan);
  return def;
}

}  // namespace

void register_concat_split_ops(OpRegistry& registry) {
  registry.add(pieces_op("concat", {{"tensors", true}}, 1, {{"dim", int64_t{0}}}, infer_concat,
                  concat_pieces));
  registry.add(pieces_op("stack", {{"tensors", true}}, 1, {{"dim", int64_t{0}}}, infer_stack,
                  stack_pieces));
  registry.add(pieces_op("split", {{"x"}}, 0,
                  {{"split_sizes", std::vector<int64_t>{}, true}, {"dim", int64_t{0}}},
                  infer_split, split_pieces));
  registry.add(pieces_op("chunk", {{"x"}}, 0, {{"chunks", int64_t{0}, true}, {"dim", int64_t{0}}},
                  infer_chunk, split_pieces));
}

}  // namespace kiln
