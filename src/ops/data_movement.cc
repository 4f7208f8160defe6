// Data movement ops, for every dtype:
//
//   reshape(x; shape)  shape may hold one -1, the size that keeps the element count. With a
//                      symbolic input dim the -1 becomes a derived symbol (B*3 for [B, 3, 4] ->
//                      [-1, 4]); a target that can't hold the symbolic dims is an E40002.
//                      sym_shape (optional) gives dims as expressions over the graph's symbols
//                      (["s0", "s1", ""]: "" takes the shape entry), for sizes PyTorch traced
//                      symbolically; then every size is given and none is -1.
//   permute(x; dims)   output dim i is input dim dims[i] (negative dims count from the end).
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

std::string list_string(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// ---------------------------------------------------------------- reshape

// A symbolic dim as base * factor: reshape names the symbols it derives "<base>*<factor>", and
// reading that back lets a later reshape fold the factor again (flatten [B, 128, 768] to
// [B*128, 768], then unflatten to [B, 128, 768]).
std::pair<Dim, int64_t> symbol_factor(Dim dim, const SymbolTable& symbols) {
  const std::string& name = symbols[dim.symbol()].name;
  const size_t star = name.rfind('*');
  if (star == std::string::npos || star + 1 == name.size()) return {dim, 1};
  const std::string digits = name.substr(star + 1);
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    return {dim, 1};
  const int32_t base = symbols.find(name.substr(0, star));
  if (base < 0) return {dim, 1};
  return {Dim::symbolic(base), std::stoll(digits)};
}

// reshape with sym_shape: each dim is its expression, or its `shape` entry where the
// expression is empty. The element counts are compared once every dim is known (each run).
void infer_symbolic_reshape(InferContext& ctx, const std::vector<int64_t>& target,
                            const std::vector<std::string>& sym) {
  const TensorType& x = ctx.input(0);
  ctx.check(sym.size() == target.size(),
            "sym_shape has " + std::to_string(sym.size()) + " entries for the " +
                std::to_string(target.size()) + " of shape " + list_string(target));
  Shape out;
  for (size_t i = 0; i < sym.size(); ++i) {
    ctx.check(!sym[i].empty() || target[i] >= 0,
              "shape " + list_string(target) + " has " + std::to_string(target[i]) +
                  " at dim " + std::to_string(i) + "; with sym_shape every size is given");
    out.push_back(sym[i].empty() ? Dim(target[i]) : ctx.sym_dim(sym[i]));
  }
  if (is_static(x.shape) && is_static(out))
    ctx.check(num_elements(static_sizes(x.shape)) == num_elements(static_sizes(out)),
              "the input " + shape_string(x.shape) + " and the target " + shape_string(out) +
                  " hold different numbers of elements");
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

void infer_reshape(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& target = ctx.attr_ints("shape");
  const auto& sym = std::get<std::vector<std::string>>(ctx.attrs().at("sym_shape"));
  if (!sym.empty()) return infer_symbolic_reshape(ctx, target, sym);
  const std::string target_text = "the target shape " + list_string(target);
  int64_t target_known = 1;
  int inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      ctx.check(inferred < 0, target_text + " has more than one -1");
      inferred = static_cast<int>(i);
    } else {
      ctx.check(target[i] >= 0, target_text + " has a negative size other than -1");
      ctx.check(!__builtin_mul_overflow(target_known, target[i], &target_known),
                target_text + " has more than 2^63 elements");
    }
  }
  int64_t static_numel = 1;
  std::vector<Dim> symbolic;
  for (const Dim& d : x.shape) {
    if (d.is_static()) static_numel *= d.size();
    else symbolic.push_back(d);
  }
  Shape out = make_shape(target);
  if (static_numel == 0) symbolic.clear();  // zero elements whatever the symbols are
  const std::string input_text =
      "the input " + shape_string(x.shape, &ctx.symbols()) + " (" +
      (symbolic.empty() ? std::to_string(static_numel) + " elements" : "dynamic") + ")";
  if (inferred < 0) {
    ctx.check(symbolic.empty(), input_text + " has dynamic dims and " + target_text +
                                    " is static; put -1 at the dim that takes the dynamic size");
    ctx.check(static_numel == target_known,
              input_text + " and " + target_text + " (" + std::to_string(target_known) +
                  " elements) hold different numbers of elements");
  } else if (symbolic.empty()) {
    ctx.check(target_known != 0, "-1 in " + target_text + " is ambiguous next to a size 0");
    ctx.check(static_numel % target_known == 0,
              input_text + " can't be split into " + target_text);
    out[inferred] = Dim(static_numel / target_known);
  } else {
    ctx.check(symbolic.size() == 1,
              input_text + " has several dynamic dims; reshape can fold only one into -1");
    auto [base, base_factor] = symbol_factor(symbolic[0], ctx.symbols());
    int64_t numerator = 0;
    const bool fits = !__builtin_mul_overflow(static_numel, base_factor, &numerator);
    ctx.check(fits && target_known != 0 && numerator % target_known == 0,
              "-1 in " + target_text + " would be " +
                  shape_string(Shape{symbolic[0]}, &ctx.symbols()) + " * " +
                  std::to_string(static_numel) + " / " + std::to_string(target_known) +
                  ", not a whole multiple of a dynamic dim; reshape so that -1 takes whole "
                  "multiples of it");
    const int64_t factor = numerator / target_known;
    out[inferred] = ctx.derive(
        base, [factor](int64_t s) { return s * factor; },
        factor == 1 ? "{}" : "{}*" + std::to_string(factor));
  }
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

// Row-major data is the same bytes under any shape: the planner makes the output a view of the
// input where both live in the arena, and the kernel copies only where they don't.
std::unique_ptr<KernelInstance> reshape_copy(const KernelSpec& spec) {
  const size_t bytes = static_cast<size_t>(num_elements(spec.input_sizes(0))) *
                       dtype_size(spec.inputs[0].dtype);
  return make_kernel([bytes](std::span<const void* const> in, std::span<void* const> out) {
    if (bytes && out[0] != in[0]) std::memcpy(out[0], in[0], bytes);
  });
}

// ---------------------------------------------------------------- permute

// The permutation with negative dims resolved (checked by inference).
std::vector<size_t> permutation(const std::vector<int64_t>& dims, size_t rank) {
  std::vector<size_t> perm;
  for (int64_t d : dims)
    perm.push_back(static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(rank) : d));
  return perm;
}

void infer_permute(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& dims = ctx.attr_ints("dims");
  const int64_t rank = static_cast<int64_t>(x.rank());
  const std::string dims_text = "dims " + list_string(dims);
  ctx.check(static_cast<int64_t>(dims.size()) == rank,
            dims_text + " must list each of the input's " + std::to_string(rank) + " dims once");
  std::vector<bool> seen(x.rank(), false);
  for (int64_t d : dims) {
    ctx.check(d >= -rank && d < rank, dims_text + " has " + std::to_string(d) +
                                          ", out of range for rank " + std::to_string(rank));
    size_t i = static_cast<size_t>(d < 0 ? d + rank : d);
    ctx.check(!seen[i], dims_text + " names dim " + std::to_string(i) + " twice");
    seen[i] = true;
  }
  Shape out;
  for (size_t i : permutation(dims, x.rank())) out.push_back(x.shape[i]);
  ctx.set_output(0, TensorType{x.dtype, out, x.layout});
}

// Output dims in order, each with its input stride (elements; the input is row-major).
struct PermutedDims {
  std::vector<int64_t> sizes, in_strides;
};

PermutedDims permuted_dims(const KernelSpec& spec) {
  std::vector<int64_t> in_sizes = spec.input_sizes(0);
  std::vector<int64_t> in_strides(in_sizes.size(), 1);
  for (size_t d = in_sizes.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in_sizes[d];
  PermutedDims p;
  for (size_t d : permutation(spec.node.attr_ints("dims"), in_sizes.size())) {
    p.sizes.push_back(in_sizes[d]);
    p.in_strides.push_back(in_strides[d]);
  }
  return p;
}

// Copies elements of `bytes` bytes (1, 2, 4 or 8: every dtype's size) as one integer type.
template <typename Fn>
void with_element_type(size_t bytes, Fn fn) {
  switch (bytes) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
  }
  KILN_ASSERT(false, "no element type of " << bytes << " bytes");
}

// The reference: each output element from its multi-index, one at a time.
std::unique_ptr<KernelInstance> permute_reference(const KernelSpec& spec) {
  return make_kernel([p = permuted_dims(spec), bytes = dtype_size(spec.inputs[0].dtype)](
                         std::span<const void* const> in, std::span<void* const> out) {
    with_element_type(bytes, [&](auto element) {
      using E = decltype(element);
      const E* x = static_cast<const E*>(in[0]);
      E* y = static_cast<E*>(out[0]);
      const int64_t numel = num_elements(p.sizes);
      for (int64_t i = 0; i < numel; ++i) {
        int64_t rest = i, offset = 0;
        for (size_t d = p.sizes.size(); d-- > 0;) {
          offset += (rest % p.sizes[d]) * p.in_strides[d];
          rest /= p.sizes[d];
        }
        y[i] = x[offset];
      }
    });
  });
}

// The blocked kernel, planned once: dims of size 1 dropped and output dims that are also
// adjacent in the input merged; then either contiguous runs are copied (the input's last dim
// stays last) or 2-D tiles are transposed between the input's and the output's last dims, so
// both sides are read and written a cache line at a time.
class BlockedPermute final : public KernelInstance {
 public:
  explicit BlockedPermute(const KernelSpec& spec)
      : bytes_(dtype_size(spec.inputs[0].dtype)), threads_(spec.threads) {
    PermutedDims p = permuted_dims(spec);
    numel_ = num_elements(p.sizes);
    std::vector<int64_t> sizes, in_strides;
    for (size_t d = 0; d < p.sizes.size(); ++d) {
      if (p.sizes[d] == 1) continue;
      if (!sizes.empty() && in_strides.back() == p.in_strides[d] * p.sizes[d]) {
        sizes.back() *= p.sizes[d];
        in_strides.back() = p.in_strides[d];
        continue;
      }
      sizes.push_back(p.sizes[d]);
      in_strides.push_back(p.in_strides[d]);
    }
    std::vector<int64_t> out_strides(sizes.size(), 1);
    for (size_t d = sizes.size(); d-- > 1;) out_strides[d - 1] = out_strides[d] * sizes[d];
    if (sizes.empty() || in_strides.back() == 1) {
      // Runs of the last dim (all of it when nothing moves).
      run_ = sizes.empty() ? numel_ : sizes.back();
      if (!sizes.empty()) {
        sizes.pop_back();
        in_strides.pop_back();
        out_strides.pop_back();
      }
    } else {
      // Tiles of [rows = input dim that ends the output] x [cols = input's last dim].
      size_t q = static_cast<size_t>(
          std::find(in_strides.begin(), in_strides.end(), int64_t{1}) - in_strides.begin());
      KILN_ASSERT(q < sizes.size(), "a permuted input has no unit-stride dim");
      rows_ = sizes.back();
      row_in_stride_ = in_strides.back();
      cols_ = sizes[q];
      col_out_stride_ = out_strides[q];
      for (std::vector<int64_t>* v : {&sizes, &in_strides, &out_strides}) {
        v->pop_back();
        v->erase(v->begin() + static_cast<std::ptrdiff_t>(q));
      }
    }
    outer_sizes_ = std::move(sizes);
    outer_in_strides_ = std::move(in_strides);
    outer_out_strides_ = std::move(out_strides);
  }

  void run(std::span<const void* const> in, std::span<void* const> out, void*) const override {
    if (numel_ == 0) return;
    with_element_type(bytes_, [&](auto element) {
      using E = decltype(element);
      const E* x = static_cast<const E*>(in[0]);
      E* y = static_cast<E*>(out[0]);
      const int64_t outer = num_elements(outer_sizes_);
      const int64_t per_outer = numel_ / outer;
      cpu::parallel_chunks(outer, per_outer, threads_, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          int64_t rest = o, in_offset = 0, out_offset = 0;
          for (size_t d = outer_sizes_.size(); d-- > 0;) {
            int64_t i = rest % outer_sizes_[d];
            rest /= outer_sizes_[d];
            in_offset += i * outer_in_strides_[d];
            out_offset += i * outer_out_strides_[d];
          }
          if (run_)
            std::memcpy(y + out_offset, x + in_offset, static_cast<size_t>(run_) * sizeof(E));
          else
            transpose_tile(x + in_offset, y + out_offset);
        }
      });
    });
  }

 private:
  // y[c * col_out_stride + r] = x[r * row_in_stride + c] over rows_ x cols_, in square tiles.
  template <typename E>
  void transpose_tile(const E* x, E* y) const {
    constexpr int64_t kTile = 16;
    for (int64_t c0 = 0; c0 < cols_; c0 += kTile)
      for (int64_t r0 = 0; r0 < rows_; r0 += kTile) {
        const int64_t c1 = std::min(cols_, c0 + kTile), r1 = std::min(rows_, r0 + kTile);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) y[c * col_out_stride_ + r] = x[r * row_in_stride_ + c];
      }
  }

  size_t bytes_;
  int threads_;
  int64_t numel_ = 0;
  int64_t run_ = 0;  // > 0: copy runs of this many elements; 0: transpose tiles
  int64_t rows_ = 0, cols_ = 0, row_in_stride_ = 0, col_out_stride_ = 0;
  std::vector<int64_t> outer_sizes_, outer_in_strides_, outer_out_strides_;
};

KernelDef always(std::string name,
                 std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> create) {
  return KernelDef{std::move(name), "native", [](const KernelSpec&) { return std::string(); },
                   std::move(create)};
}

}  // namespace

void register_data_movement_ops(OpRegistry& registry) {
  OpDef reshape;
  reshape.name = "reshape";
  reshape.inputs = {{"x"}};
  reshape.attrs = {{"shape", std::vector<int64_t>{}, true},
                   {"sym_shape", std::vector<std::string>{}}};
  reshape.infer = infer_reshape;
  reshape.kernels = {always("reference", reshape_copy)};
  reshape.kernels[0].output_aliases_input = true;
  registry.add(std::move(reshape));

  OpDef permute;
  permute.name = "permute";
  permute.inputs = {{"x"}};
  permute.attrs = {{"dims", std::vector<int64_t>{}, true}};
  permute.infer = infer_permute;
  permute.kernels = {
      always("blocked",
             [](const KernelSpec& spec) { return std::make_unique<BlockedPermute>(spec); }),
      always("reference", permute_reference)};
  registry.add(std::move(permute));
}

}  // namespace kiln
