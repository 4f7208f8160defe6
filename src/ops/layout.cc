// Layout ops, for every dtype (attribute names are ATen's):
//
//   expand(x; size)            size-1 dims stretch to `size` (-1 keeps a dim); new leading dims.
//                              sym_size (optional): per dim, a size over the graph's symbols
//                              ("s1"), or "" to take `size`.
//   squeeze(x; dim = [])       drops the listed dims that have size 1 (all size-1 dims when the
//                              list is empty). A symbolic dim whose range holds 1 and other
//                              sizes is an E40002: whether it goes would depend on the run.
//   unsqueeze(x; dim)          a new dim of size 1 at dim, in [-(rank+1), rank].
//   flatten(x; start_dim = 0, end_dim = -1)   the dims start..end become one (a symbolic one
//                              becomes the derived symbol "B*S*8").
//   pad(x; pad, mode = "constant", value = 0)   pad lists (before, after) pairs from the last dim
//                              backwards, as torch.nn.functional.pad; "constant" takes negative
//                              pads (cropping), "reflect" (pads < the dim) and "replicate" don't.
//   roll(x; shifts, dims = []) rotates along each dim; with no dims, the flattened tensor.
//   flip(x; dims)              reverses the listed dims.
//   repeat(x; repeats)         tiles x repeats[i] times along dim i; extra repeats add leading
//                              dims.
//   tril(x; diagonal = 0), triu(x; diagonal = 0)   zero above / below a diagonal of the last two
//                              dims.
//   copy(x)                    a contiguous copy (PyTorch's clone / contiguous).
//   to(x; dtype)               a cast between any two dtypes, with PyTorch's conversion rules
//                              (src/kernels/cpu/convert.h).
//
// expand, repeat, flip, roll and pad send every output element to one input element or to the
// fill value, dim by dim: they are index maps (src/kernels/cpu/index_map.h) that share a row
// kernel and a reference kernel.
#include <algorithm>
#include <cstring>
#include <span>

#include "kernels/cpu/cast.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/index_map.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/dtype_attr.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

std::string list_string(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string dim_string(InferContext& ctx, Dim d) { return shape_string(Shape{d}, &ctx.symbols()); }

// `dim` in [0, rank), from an attribute that may count from the end.
size_t wrap_dim(InferContext& ctx, int64_t dim, int64_t rank, const std::string& what) {
  ctx.check(dim >= -rank && dim < rank,
            what + " " + std::to_string(dim) + " is out of range for rank " +
                std::to_string(rank) + "; use [" + std::to_string(-rank) + ", " +
                std::to_string(rank - 1) + "]");
  return static_cast<size_t>(dim < 0 ? dim + rank : dim);
}

int64_t saturating_mul(int64_t a, int64_t b) {
  return b != 0 && a > INT64_MAX / b ? INT64_MAX : a * b;
}

// The product of `dims`: static when they are, else the symbol "A*B*6" whose range is the
// product of the ranges (saturating).
Dim product_dim(InferContext& ctx, std::span<const Dim> dims) {
  int64_t factor = 1, min = 1, max = 1;
  std::string name;
  for (const Dim& d : dims) {
    if (d.is_static()) {
      factor *= d.size();
      continue;
    }
    const Symbol& s = ctx.symbols()[d.symbol()];
    name += (name.empty() ? "" : "*") + s.name;
    min = saturating_mul(min, s.min);
    max = saturating_mul(max, s.max);
  }
  if (name.empty() || factor == 0) return Dim(factor);
  if (factor != 1) name += "*" + std::to_string(factor);
  return ctx.derived_dim(name, saturating_mul(min, factor), saturating_mul(max, factor));
}

// d + delta: static, or the symbol "S+2" / "S-2" over the shifted range.
Dim offset_dim(InferContext& ctx, Dim d, int64_t delta) {
  if (d.is_static()) return Dim(d.size() + delta);
  if (delta == 0) return d;
  const Symbol& s = ctx.symbols()[d.symbol()];
  const std::string name = s.name + (delta > 0 ? "+" : "") + std::to_string(delta);
  // An unbounded symbol stays unbounded; a bounded one saturates.
  const bool saturates = s.max == INT64_MAX || (delta > 0 && s.max > INT64_MAX - delta);
  const int64_t max = saturates ? INT64_MAX : s.max + delta;
  return ctx.derived_dim(name, s.min + delta, max);
}

// The smallest size a dim can have.
int64_t min_size(InferContext& ctx, Dim d) {
  return d.is_static() ? d.size() : ctx.symbols()[d.symbol()].min;
}

// Whether a dim is 1 for every run (true), for none (false); fails for a symbolic dim that may
// or may not be 1, whose squeezing would change the output's rank from run to run.
bool is_always_one(InferContext& ctx, Dim d, size_t index) {
  if (d.is_static()) return d.size() == 1;
  const Symbol& s = ctx.symbols()[d.symbol()];
  if (s.min == 1 && s.max == 1) return true;
  ctx.check(s.min > 1 || s.max < 1,
            "dim " + std::to_string(index) + " is " + s.name + " in [" + std::to_string(s.min) +
                ", " + std::to_string(s.max) +
                "], which may or may not be 1, so squeezing it would change the output's rank "
                "from run to run; list only dims that are always 1 in squeeze's dim, or declare " +
                s.name + " with a minimum of 2");
  return false;
}

// ---------------------------------------------------------------- inference

void infer_expand(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& size = ctx.attr_ints("size");
  const std::string size_text = "size " + list_string(size);
  ctx.check(size.size() >= x.rank(), size_text + " has fewer dims than the input; expand only "
                                                 "adds leading dims");
  const size_t lead = size.size() - x.rank();
  // sym_size: sizes PyTorch traced symbolically, as expressions over the graph's symbols.
  const auto& sym = std::get<std::vector<std::string>>(ctx.attrs().at("sym_size"));
  ctx.check(sym.empty() || sym.size() == size.size(),
            "sym_size has " + std::to_string(sym.size()) + " entries for the " +
                std::to_string(size.size()) + " of " + size_text);
  Shape out;
  for (size_t i = 0; i < size.size(); ++i) {
    int64_t target = size[i];
    const std::string where = size_text + " at dim " + std::to_string(i);
    if (!sym.empty() && !sym[i].empty()) {
      const Dim dynamic = ctx.sym_dim(sym[i]);
      if (!dynamic.is_static()) {
        // Each run re-checks with static sizes; here only a static input dim can be refuted.
        const bool fits = i < lead || !x.shape[i - lead].is_static() ||
                          x.shape[i - lead].size() == 1;
        ctx.check(fits, where + ": the input's dim of size " +
                            std::to_string(fits ? 0 : x.shape[i - lead].size()) +
                            " can't expand to the dynamic size " + sym[i]);
        out.push_back(dynamic);
        continue;
      }
      target = dynamic.size();
    }
    if (i < lead) {
      ctx.check(target >= 0, where + " is a new leading dim and needs a size >= 0");
      out.push_back(Dim(target));
      continue;
    }
    const Dim in = x.shape[i - lead];
    if (target == -1) {
      out.push_back(in);
      continue;
    }
    ctx.check(target >= 0, where + " is " + std::to_string(target) + "; use a size >= 0 or -1");
    if (in.is_static()) {
      ctx.check(in.size() == target || in.size() == 1,
                where + ": the input's dim of size " + std::to_string(in.size()) +
                    " can't expand to " + std::to_string(target) + "; only size-1 dims expand");
    } else {
      const Symbol& s = ctx.symbols()[in.symbol()];
      auto holds = [&](int64_t v) { return s.min <= v && v <= s.max; };
      ctx.check(holds(1) || holds(target),
                where + ": the input's dim " + s.name + " can be neither 1 nor " +
                    std::to_string(target));
    }
    out.push_back(Dim(target));
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_squeeze(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& dims = ctx.attr_ints("dim");
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> listed(x.rank(), dims.empty());
  for (int64_t d : dims) {
    // A 0-d tensor takes dim 0 or -1, as in PyTorch.
    const size_t i = wrap_dim(ctx, d, std::max<int64_t>(rank, 1), "dim");
    if (rank == 0) continue;
    ctx.check(!listed[i],
              "dim " + list_string(dims) + " names dim " + std::to_string(i) + " twice");
    listed[i] = true;
  }
  Shape out;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!listed[i] || !is_always_one(ctx, x.shape[i], i)) out.push_back(x.shape[i]);
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_unsqueeze(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t at = wrap_dim(ctx, ctx.attr_int("dim"), rank + 1, "dim");
  Shape out = x.shape;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), Dim(1));
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_flatten(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t start = wrap_dim(ctx, ctx.attr_int("start_dim"), std::max<int64_t>(rank, 1),
                                "start_dim");
  const size_t end =
      wrap_dim(ctx, ctx.attr_int("end_dim"), std::max<int64_t>(rank, 1), "end_dim");
  ctx.check(start <= end, "start_dim " + std::to_string(start) + " comes after end_dim " +
                              std::to_string(end));
  Shape out;
  if (rank == 0) {
    out = {Dim(1)};  // PyTorch flattens a 0-d tensor to one element
  } else {
    out.assign(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(start));
    out.push_back(product_dim(
        ctx, std::span<const Dim>(x.shape).subspan(start, end - start + 1)));
    out.insert(out.end(), x.shape.begin() + static_cast<std::ptrdiff_t>(end) + 1, x.shape.end());
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

enum class PadMode { Constant, Reflect, Replicate };

PadMode pad_mode(const std::string& mode) {
  return mode == "reflect" ? PadMode::Reflect
         : mode == "replicate" ? PadMode::Replicate
                               : PadMode::Constant;
}

void infer_pad(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& pad = ctx.attr_ints("pad");
  const std::string& mode_name = ctx.attr_string("mode");
  const std::string pad_text = "pad " + list_string(pad);
  ctx.check(mode_name == "constant" || mode_name == "reflect" || mode_name == "replicate",
            "mode \"" + mode_name + "\" is not one of \"constant\", \"reflect\", \"replicate\"");
  const PadMode mode = pad_mode(mode_name);
  ctx.check(pad.size() % 2 == 0, pad_text + " must hold (before, after) pairs");
  ctx.check(pad.size() / 2 <= x.rank(), pad_text + " pads " + std::to_string(pad.size() / 2) +
                                            " dims of a rank-" + std::to_string(x.rank()) +
                                            " input");
  if (mode == PadMode::Constant) {
    const std::string why = cpu::scalar_unrepresentable_reason(x.dtype, ctx.attr_float("value"));
    ctx.check(why.empty(), "value " + why);
  }
  Shape out = x.shape;
  for (size_t p = 0; p < pad.size() / 2; ++p) {
    const size_t d = x.rank() - 1 - p;
    const int64_t before = pad[2 * p], after = pad[2 * p + 1];
    const Dim in = x.shape[d];
    const int64_t smallest = min_size(ctx, in);
    const std::string where = pad_text + " on dim " + std::to_string(d) + " (size " +
                              dim_string(ctx, in) + ")";
    if (mode == PadMode::Constant) {
      ctx.check(smallest + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0) >= 0,
                where + " crops more than the dim holds");
    } else {
      ctx.check(before >= 0 && after >= 0, where + ": " + mode_name + " padding can't be negative");
      if (mode == PadMode::Reflect)
        ctx.check(before < smallest && after < smallest,
                  where + ": reflect padding must be smaller than the dim");
      else
        ctx.check(smallest > 0 || before + after == 0,
                  where + ": replicate padding needs a non-empty dim");
    }
    out[d] = offset_dim(ctx, in, before + after);
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_roll(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& shifts = ctx.attr_ints("shifts");
  const std::vector<int64_t>& dims = ctx.attr_ints("dims");
  if (dims.empty()) {
    ctx.check(shifts.size() == 1, "shifts " + list_string(shifts) +
                                      " must hold one shift when dims is empty (a roll of the "
                                      "flattened tensor)");
  } else {
    ctx.check(shifts.size() == dims.size(), "shifts " + list_string(shifts) + " and dims " +
                                                list_string(dims) + " differ in length");
    for (int64_t d : dims) wrap_dim(ctx, d, static_cast<int64_t>(x.rank()), "dims");
  }
  ctx.set_output(0, x);
}

void infer_flip(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& dims = ctx.attr_ints("dims");
  std::vector<bool> seen(std::max<size_t>(x.rank(), 1), false);
  for (int64_t d : dims) {
    const size_t i = wrap_dim(ctx, d, std::max<int64_t>(static_cast<int64_t>(x.rank()), 1), "dims");
    ctx.check(!seen[i], "dims " + list_string(dims) + " names dim " + std::to_string(i) + " twice");
    seen[i] = true;
  }
  ctx.set_output(0, x);
}

void infer_repeat(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& repeats = ctx.attr_ints("repeats");
  const std::string repeats_text = "repeats " + list_string(repeats);
  ctx.check(repeats.size() >= x.rank(),
            repeats_text + " has fewer entries than the input has dims");
  const size_t lead = repeats.size() - x.rank();
  Shape out;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t r = repeats[i];
    ctx.check(r >= 0, repeats_text + " has the negative count " + std::to_string(r));
    const Dim in = i < lead ? Dim(1) : x.shape[i - lead];
    if (in.is_static() || r == 0) {
      out.push_back(Dim(in.is_static() ? in.size() * r : 0));
    } else {
      out.push_back(product_dim(ctx, std::vector<Dim>{in, Dim(r)}));
    }
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_triangle(InferContext& ctx) {
  ctx.check(ctx.input(0).rank() >= 2, "needs a matrix or a batch of them (rank >= 2)");
  ctx.set_output(0, ctx.input(0));
}

void infer_same(InferContext& ctx) { ctx.set_output(0, ctx.input(0)); }

void infer_to(InferContext& ctx) {
  TensorType out = ctx.input(0);
  out.dtype = dtype_attr(ctx, "dtype");
  ctx.set_output(0, out);
}

// ---------------------------------------------------------------- index maps

// The input's sizes and row-major strides right-aligned to the output's rank: leading dims the
// input lacks have size 1 and stride 0.
struct AlignedInput {
  std::vector<int64_t> sizes, strides;
};

AlignedInput aligned_input(const KernelSpec& spec) {
  const std::vector<int64_t> in = spec.input_sizes(0);
  const size_t rank = spec.outputs[0].rank(), lead = rank - in.size();
  AlignedInput a{std::vector<int64_t>(rank, 1), std::vector<int64_t>(rank, 0)};
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    a.sizes[lead + i] = in[i];
    a.strides[lead + i] = stride;
    stride *= in[i];
  }
  return a;
}

cpu::IndexMap empty_map(const KernelSpec& spec) {
  cpu::IndexMap map;
  map.input_numel = num_elements(spec.input_sizes(0));
  map.element_bytes = dtype_size(spec.inputs[0].dtype);
  return map;
}

cpu::IndexMap expand_map(const KernelSpec& spec) {
  cpu::IndexMap map = empty_map(spec);
  const AlignedInput in = aligned_input(spec);
  const std::vector<int64_t> out = spec.output_sizes(0);
  for (size_t d = 0; d < out.size(); ++d)
    map.dims.push_back(in.sizes[d] == out[d] ? cpu::DimMap::identity(out[d], in.strides[d])
                                             : cpu::DimMap::broadcast(out[d]));
  return map;
}

cpu::IndexMap repeat_map(const KernelSpec& spec) {
  cpu::IndexMap map = empty_map(spec);
  const AlignedInput in = aligned_input(spec);
  const std::vector<int64_t>& repeats = spec.node.attr_ints("repeats");
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (in.sizes[d] == 1) {  // copies of one element: one broadcast run
      map.dims.push_back(cpu::DimMap::broadcast(repeats[d]));
      continue;
    }
    cpu::DimMap& dim = map.dims.emplace_back();
    for (int64_t r = 0; r < repeats[d]; ++r) dim.read(in.sizes[d], 0, in.strides[d]);
  }
  return map;
}

cpu::IndexMap flip_map(const KernelSpec& spec) {
  cpu::IndexMap map = empty_map(spec);
  const AlignedInput in = aligned_input(spec);
  const int64_t rank = static_cast<int64_t>(in.sizes.size());
  std::vector<bool> flipped(in.sizes.size(), false);
  for (int64_t d : spec.node.attr_ints("dims"))
    if (rank > 0) flipped[static_cast<size_t>(d < 0 ? d + rank : d)] = true;
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    const int64_t n = in.sizes[d], stride = in.strides[d];
    map.dims.push_back(flipped[d] ? cpu::DimMap().read(n, (n - 1) * stride, -stride)
                                  : cpu::DimMap::identity(n, stride));
  }
  return map;
}

// Output index i of a dim of n elements reads input index (i - shift) mod n: two runs.
cpu::DimMap rolled(int64_t n, int64_t stride, int64_t shift) {
  if (n == 0) return cpu::DimMap();
  const int64_t k = ((shift % n) + n) % n;
  return cpu::DimMap().read(k, (n - k) * stride, stride).read(n - k, 0, stride);
}

cpu::IndexMap roll_map(const KernelSpec& spec) {
  cpu::IndexMap map = empty_map(spec);
  const AlignedInput in = aligned_input(spec);
  const std::vector<int64_t>& shifts = spec.node.attr_ints("shifts");
  const std::vector<int64_t>& dims = spec.node.attr_ints("dims");
  if (dims.empty()) {  // the flattened tensor: one dim of every element
    map.dims.push_back(rolled(map.input_numel, 1, shifts[0]));
    return map;
  }
  // Shifts of a dim listed twice add up; each reduced mod n first so the sum can't overflow.
  const int64_t rank = static_cast<int64_t>(in.sizes.size());
  std::vector<int64_t> total(in.sizes.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    const size_t d = static_cast<size_t>(dims[i] < 0 ? dims[i] + rank : dims[i]);
    if (in.sizes[d] > 0) total[d] = (total[d] + shifts[i] % in.sizes[d]) % in.sizes[d];
  }
  for (size_t d = 0; d < in.sizes.size(); ++d)
    map.dims.push_back(rolled(in.sizes[d], in.strides[d], total[d]));
  return map;
}

cpu::IndexMap pad_map(const KernelSpec& spec) {
  cpu::IndexMap map = empty_map(spec);
  const AlignedInput in = aligned_input(spec);
  const std::vector<int64_t>& pad = spec.node.attr_ints("pad");
  const PadMode mode = pad_mode(spec.node.attr_string("mode"));
  if (mode == PadMode::Constant)
    map.fill_bits = cpu::scalar_bits(spec.inputs[0].dtype, spec.node.attr_float("value"));
  const size_t rank = in.sizes.size();
  for (size_t d = 0; d < rank; ++d) {
    const int64_t n = in.sizes[d], stride = in.strides[d];
    const size_t p = rank - 1 - d;  // pair p pads dim rank-1-p
    if (2 * p >= pad.size()) {
      map.dims.push_back(cpu::DimMap::identity(n, stride));
      continue;
    }
    const int64_t before = pad[2 * p], after = pad[2 * p + 1];
    cpu::DimMap& dim = map.dims.emplace_back();
    switch (mode) {
      case PadMode::Constant: {
        // Negative pads crop: the run starts `-before` elements in, ends `-after` early.
        const int64_t first = std::max<int64_t>(-before, 0);
        const int64_t kept = n - first - std::max<int64_t>(-after, 0);
        dim.fill(before).read(kept, first * stride, stride).fill(after);
        break;
      }
      case PadMode::Reflect:  // ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...
        dim.read(before, before * stride, -stride)
            .read(n, 0, stride)
            .read(after, (n - 2) * stride, -stride);
        break;
      case PadMode::Replicate:  // 0 0 | 0 1 ... n-1 | n-1 n-1
        dim.read(before, 0, 0).read(n, 0, stride).read(after, (n - 1) * stride, 0);
        break;
    }
  }
  return map;
}

KernelDef native(std::string name,
                 std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> create) {
  return KernelDef{std::move(name), "native", [](const KernelSpec&) { return std::string(); },
                   std::move(create)};
}

using IndexMapBuilder = cpu::IndexMap (*)(const KernelSpec&);

std::vector<KernelDef> index_map_kernels(IndexMapBuilder build) {
  return {native("rows",
                 [build](const KernelSpec& spec) {
                   return make_kernel([plan = cpu::IndexMapRows(build(spec), spec.threads)](
                                          std::span<const void* const> in,
                                          std::span<void* const> out) { plan.run(in[0], out[0]); });
                 }),
          native("reference", [build](const KernelSpec& spec) {
            cpu::IndexMap map = build(spec);
            cpu::check_index_map(map);
            return make_kernel([map = std::move(map)](std::span<const void* const> in,
                                                      std::span<void* const> out) {
              cpu::index_map_reference(map, in[0], out[0]);
            });
          })};
}

// ---------------------------------------------------------------- tril / triu

// Matrix element (r, c) is kept when c - r <= diagonal (tril) or >= diagonal (triu), else 0.
struct Triangle {
  bool lower;
  int64_t diagonal, rows, cols, matrices;
  size_t bytes;

  explicit Triangle(const KernelSpec& spec)
      : lower(spec.node.op() == "tril"), diagonal(spec.node.attr_int("diagonal")) {
    const std::vector<int64_t> sizes = spec.input_sizes(0);
    rows = sizes[sizes.size() - 2];
    cols = sizes.back();
    matrices = num_elements(sizes) / std::max<int64_t>(rows * cols, 1);
    bytes = dtype_size(spec.inputs[0].dtype);
  }
  bool keeps(int64_t r, int64_t c) const { return lower ? c - r <= diagonal : c - r >= diagonal; }
  // Row r keeps the columns [begin, end).
  int64_t keep_begin(int64_t r) const {
    return lower ? 0 : std::clamp(r + diagonal, int64_t{0}, cols);
  }
  int64_t keep_end(int64_t r) const {
    return lower ? std::clamp(r + diagonal + 1, int64_t{0}, cols) : cols;
  }
};

std::unique_ptr<KernelInstance> triangle_reference(const KernelSpec& spec) {
  return make_kernel([t = Triangle(spec)](std::span<const void* const> in,
                                          std::span<void* const> out) {
    const auto* x = static_cast<const std::byte*>(in[0]);
    auto* y = static_cast<std::byte*>(out[0]);
    int64_t i = 0;
    for (int64_t m = 0; m < t.matrices; ++m)
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < t.cols; ++c, ++i) {
          const size_t at = static_cast<size_t>(i) * t.bytes;
          if (t.keeps(r, c)) std::memcpy(y + at, x + at, t.bytes);
          else std::memset(y + at, 0, t.bytes);  // zero is all-zero bytes in every dtype
        }
  });
}

// Each row: a zeroed run, a copied run, a zeroed run.
std::unique_ptr<KernelInstance> triangle_rows(const KernelSpec& spec) {
  return make_kernel([t = Triangle(spec), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    const auto* x = static_cast<const std::byte*>(in[0]);
    auto* y = static_cast<std::byte*>(out[0]);
    const size_t row_bytes = static_cast<size_t>(t.cols) * t.bytes;
    cpu::parallel_chunks(t.matrices * t.rows, t.cols, threads, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t r = row % t.rows;
        const size_t b = static_cast<size_t>(t.keep_begin(r)) * t.bytes;
        const size_t e = std::max(b, static_cast<size_t>(t.keep_end(r)) * t.bytes);
        const size_t at = static_cast<size_t>(row) * row_bytes;
        std::memset(y + at, 0, b);
        std::memcpy(y + at + b, x + at + b, e - b);
        std::memset(y + at + e, 0, row_bytes - e);
      }
    });
  });
}

// ---------------------------------------------------------------- copies and casts

// The same bytes (copy, and the ops that only change the shape).
std::unique_ptr<KernelInstance> byte_copy(const KernelSpec& spec) {
  const int64_t bytes = num_elements(spec.input_sizes(0)) *
                        static_cast<int64_t>(dtype_size(spec.inputs[0].dtype));
  return make_kernel([bytes, threads = spec.threads](std::span<const void* const> in,
                                                     std::span<void* const> out) {
    const auto* x = static_cast<const std::byte*>(in[0]);
    auto* y = static_cast<std::byte*>(out[0]);
    // Chunks of whole cache lines; parallel_chunks counts work in f32-sized elements.
    constexpr int64_t kLine = 64;
    cpu::parallel_chunks((bytes + kLine - 1) / kLine, kLine / 4, threads,
                         [&](int64_t begin, int64_t end) {
                           const int64_t first = begin * kLine;
                           const int64_t last = std::min(end * kLine, bytes);
                           std::memcpy(y + first, x + first, static_cast<size_t>(last - first));
                         });
  });
}

// A cast over [0, n) in chunks: fn(in, out, begin, end).
template <typename Fn>
std::unique_ptr<KernelInstance> chunked_cast(const KernelSpec& spec, Fn fn) {
  return make_kernel([fn, n = num_elements(spec.input_sizes(0)), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    cpu::parallel_chunks(n, 1, threads,
                         [&](int64_t begin, int64_t end) { fn(in[0], out[0], begin, end); });
  });
}

std::vector<KernelDef> cast_kernels() {
  KernelDef vector{
      "vector", "native",
      [](const KernelSpec& spec) {
        return cpu::vector_cast_unsupported_reason(spec.inputs[0].dtype, spec.outputs[0].dtype);
      },
      [](const KernelSpec& spec) {
        const size_t in_bytes = dtype_size(spec.inputs[0].dtype);
        const size_t out_bytes = dtype_size(spec.outputs[0].dtype);
        return chunked_cast(
            spec, [fn = cpu::vector_cast(spec.inputs[0].dtype, spec.outputs[0].dtype), in_bytes,
                   out_bytes](const void* x, void* y, int64_t begin, int64_t end) {
              fn(static_cast<const std::byte*>(x) + static_cast<size_t>(begin) * in_bytes,
                 static_cast<std::byte*>(y) + static_cast<size_t>(begin) * out_bytes, end - begin);
            });
      }};
  KernelDef reference = native("reference", [](const KernelSpec& spec) {
    return chunked_cast(spec, [from = spec.inputs[0].dtype, to = spec.outputs[0].dtype](
                                  const void* x, void* y, int64_t begin, int64_t end) {
      cpu::cast_reference(from, to, x, y, begin, end);
    });
  });
  return {std::move(vector), std::move(reference)};
}

OpDef op(std::string name, std::vector<AttrSpec> attrs, std::function<void(InferContext&)> infer,
         std::vector<KernelDef> kernels) {
  OpDef def;
  def.name = std::move(name);
  def.inputs = {{"x"}};
  def.attrs = std::move(attrs);
  def.infer = std::move(infer);
  def.kernels = std::move(kernels);
  return def;
}

}  // namespace

void register_layout_ops(OpRegistry& registry) {
  using Ints = std::vector<int64_t>;
  registry.add(op("expand", {{"size", Ints{}, true}, {"sym_size", std::vector<std::string>{}}},
                  infer_expand, index_map_kernels(expand_map)));
  registry.add(op("repeat", {{"repeats", Ints{}, true}}, infer_repeat,
                  index_map_kernels(repeat_map)));
  registry.add(op("flip", {{"dims", Ints{}, true}}, infer_flip, index_map_kernels(flip_map)));
  registry.add(op("roll", {{"shifts", Ints{}, true}, {"dims", Ints{}}}, infer_roll,
                  index_map_kernels(roll_map)));
  registry.add(op("pad",
                  {{"pad", Ints{}, true}, {"mode", std::string("constant")}, {"value", 0.0}},
                  infer_pad, index_map_kernels(pad_map)));
  for (const char* name : {"tril", "triu"})
    registry.add(op(name, {{"diagonal", int64_t{0}}}, infer_triangle,
                    {native("rows", triangle_rows), native("reference", triangle_reference)}));
  registry.add(op("squeeze", {{"dim", Ints{}}}, infer_squeeze, {native("reference", byte_copy)}));
  registry.add(op("unsqueeze", {{"dim", int64_t{0}, true}}, infer_unsqueeze,
                  {native("reference", byte_copy)}));
  registry.add(op("flatten", {{"start_dim", int64_t{0}}, {"end_dim", int64_t{-1}}},
                  infer_flatten, {native("reference", byte_copy)}));
  registry.add(op("copy", {}, infer_same, {native("reference", byte_copy)}));
  registry.add(op("to", {{"dtype", std::string("f32"), true}}, infer_to, cast_kernels()));
}

}  // namespace kiln
