// Normalization ops: softmax over one axis, layer_norm over the trailing dims.
//
//   softmax(x; axis = -1)                                 axis may be negative
//   layer_norm(x, [weight, [bias]]; normalized_ndim = 1, eps = 1e-5)
//     normalizes over the last normalized_ndim dims; weight and bias, when given, have exactly
//     those dims (PyTorch's elementwise_affine; weight alone is bias=False). A bf16 layer_norm
//     (made by fold_bf16_casts_into_widening_kernels; the builder computes bf16 in f32 between
//     casts) gives the f32 result rounded to bf16: the same bits as those casts.
//
// Reference kernels compute in double for f32 (the yardstick for the AVX2 kernels).
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/normalization_avx2.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/widened_bf16.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;

void check_floating(InferContext& ctx, DType dtype) {
  ctx.check(dtype == DType::F32 || dtype == DType::F64,
            ctx.op() + " takes f32 or f64, not " + std::string(dtype_name(dtype)) +
                "; insert a cast");
}

// x viewed as [outer, n, inner] around a dim or a split point.
struct Extents {
  int64_t outer = 1, n = 1, inner = 1;
};

// ---------------------------------------------------------------- softmax

// The axis in [0, rank) (the builder checked it).
size_t softmax_axis(const Node& node, size_t rank) {
  int64_t axis = node.attr_int("axis");
  return static_cast<size_t>(axis < 0 ? axis + std::max<int64_t>(static_cast<int64_t>(rank), 1)
                                      : axis);
}

Extents softmax_extents(const KernelSpec& spec) {
  std::vector<int64_t> sizes = spec.input_sizes(0);
  size_t axis = softmax_axis(spec.node, sizes.size());
  Extents e;
  for (size_t d = 0; d < sizes.size(); ++d)
    (d < axis ? e.outer : d == axis ? e.n : e.inner) *= sizes[d];
  return e;
}

void infer_softmax(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  if (x.dtype != DType::BF16) check_floating(ctx, x.dtype);
  // A 0-d x is one line of one element, as PyTorch takes it (axis 0 or -1).
  const int64_t rank = std::max<int64_t>(static_cast<int64_t>(x.rank()), 1);
  const int64_t axis = ctx.attr_int("axis");
  ctx.check(axis >= -rank && axis < rank,
            "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) +
                "; use [-" + std::to_string(rank) + ", " + std::to_string(rank - 1) + "]");
  ctx.set_output(0, x);
}

// One column (outer index o, inner index i) of [outer, n, inner]: max, exp, normalize.
template <typename T>
void softmax_reference_column(const T* x, T* y, int64_t n, int64_t inner) {
  using W = Wide<T>;
  W max = -std::numeric_limits<W>::infinity();
  for (int64_t k = 0; k < n; ++k) {
    W v = x[k * inner];
    if (std::isnan(v) || v > max) max = v;  // a NaN stays: no v compares greater
  }
  W sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += std::exp(W(x[k * inner]) - max);
  for (int64_t k = 0; k < n; ++k)
    y[k * inner] = static_cast<T>(std::exp(W(x[k * inner]) - max) / sum);
}

template <typename T>
std::unique_ptr<KernelInstance> softmax_reference(const KernelSpec& spec) {
  return make_kernel([e = softmax_extents(spec), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    const T* x = static_cast<const T*>(in[0]);
    T* y = static_cast<T*>(out[0]);
    cpu::parallel_chunks(e.outer * e.inner, e.n, threads, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t offset = (c / e.inner) * e.n * e.inner + c % e.inner;
        softmax_reference_column(x + offset, y + offset, e.n, e.inner);
      }
    });
  });
}

// bf16 (fold_bf16_casts_into_widening_kernels' form of a softmax between casts): the f32
// reference on a widened copy, rounded.
std::unique_ptr<KernelInstance> softmax_reference_bf16(const KernelSpec& spec) {
  return cpu::create_widened_bf16(spec, softmax_reference<float>);
}

#ifdef KILN_X86
// The avx2 kernel (rows, or blocks of 8 columns) or the avx512 one (rows), in x's dtype.
template <bool kAvx512>
std::unique_ptr<KernelInstance> softmax_vectorized(const KernelSpec& spec) {
  auto make = [&]<typename T>() {
    return make_kernel([e = softmax_extents(spec), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      const T* x = static_cast<const T*>(in[0]);
      T* y = static_cast<T*>(out[0]);
      if (e.inner == 1) {
        cpu::parallel_chunks(e.outer, e.n, threads, [&](int64_t begin, int64_t end) {
          if constexpr (kAvx512)
            cpu::avx512::softmax_rows(x + begin * e.n, y + begin * e.n, end - begin, e.n);
          else
            cpu::avx2::softmax_rows(x + begin * e.n, y + begin * e.n, end - begin, e.n);
        });
        return;
      }
      // Blocks of up to 32 adjacent columns of the inner dim, each [n, inner] slab strided by
      // inner.
      constexpr int64_t kWidth = cpu::avx2::kSoftmaxColumns;
      const int64_t blocks = (e.inner + kWidth - 1) / kWidth;
      cpu::parallel_chunks(e.outer * blocks, kWidth * e.n, threads, [&](int64_t begin,
                                                                        int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          int64_t column = (b % blocks) * kWidth;
          int64_t offset = (b / blocks) * e.n * e.inner + column;
          cpu::avx2::softmax_columns(x + offset, y + offset, e.n, e.inner,
                                     std::min(kWidth, e.inner - column));
        }
      });
    });
  };
  return spec.inputs[0].dtype == DType::BF16 ? make.template operator()<cpu::BFloat16>()
                                             : make.template operator()<float>();
}
#endif

// ---------------------------------------------------------------- layer_norm

Extents layer_norm_extents(const KernelSpec& spec) {
  std::vector<int64_t> sizes = spec.input_sizes(0);
  size_t first = sizes.size() - static_cast<size_t>(spec.node.attr_int("normalized_ndim"));
  Extents e;
  for (size_t d = 0; d < sizes.size(); ++d) (d < first ? e.outer : e.n) *= sizes[d];
  return e;
}

void infer_layer_norm(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  if (x.dtype != DType::BF16) check_floating(ctx, x.dtype);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const int64_t k = ctx.attr_int("normalized_ndim");
  ctx.check(k >= 1 && k <= rank, "normalized_ndim is " + std::to_string(k) +
                                     "; it must be in [1, " + std::to_string(rank) +
                                     "] (the input's rank)");
  ctx.check(ctx.num_inputs() <= 3, "takes x and at most a weight and a bias, got " +
                                       std::to_string(ctx.num_inputs()) + " inputs");
  const Shape normalized(x.shape.end() - k, x.shape.end());
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const TensorType& p = ctx.input(i);
    const std::string what = i == 1 ? "weight" : "bias";
    ctx.check(p.dtype == x.dtype, "the " + what + "'s dtype differs from x's; insert a cast");
    ctx.check(p.shape.size() == normalized.size(),
              "the " + what + " must have the normalized dims " +
                  shape_string(normalized, &ctx.symbols()) + ", not " +
                  shape_string(p.shape, &ctx.symbols()));
    for (size_t d = 0; d < normalized.size(); ++d)
      ctx.unify(normalized[d], p.shape[d], "x's normalized dims and the " + what + "'s dims");
  }
  ctx.set_output(0, x);
}

template <typename T>
void layer_norm_reference_row(const T* x, const T* weight, const T* bias, T* y, int64_t n,
                              double eps) {
  using W = Wide<T>;
  W sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const W mean = sum / static_cast<W>(n);
  W squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const W rstd = 1 / std::sqrt(squares / static_cast<W>(n) + static_cast<W>(eps));
  for (int64_t i = 0; i < n; ++i) {
    W v = (x[i] - mean) * rstd;
    if (weight) v *= weight[i];
    if (bias) v += bias[i];
    y[i] = static_cast<T>(v);
  }
}

// Calls fn(x, weight or null, bias or null, y, extents, eps, threads) at run time.
template <typename Fn>
std::unique_ptr<KernelInstance> layer_norm_kernel(const KernelSpec& spec, Fn fn) {
  return make_kernel([fn, e = layer_norm_extents(spec), eps = spec.node.attr_float("eps"),
                      params = spec.inputs.size() - 1, threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    fn(in[0], params >= 1 ? in[1] : nullptr, params >= 2 ? in[2] : nullptr, out[0], e, eps,
       threads);
  });
}

template <typename T>
std::unique_ptr<KernelInstance> layer_norm_reference(const KernelSpec& spec) {
  return layer_norm_kernel(spec, [](const void* x, const void* w, const void* b, void* y,
                                    Extents e, double eps, int threads) {
    cpu::parallel_chunks(e.outer, e.n, threads, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        layer_norm_reference_row(static_cast<const T*>(x) + r * e.n, static_cast<const T*>(w),
                                 static_cast<const T*>(b), static_cast<T*>(y) + r * e.n, e.n, eps);
    });
  });
}

// bf16 as the builder's casts compute it: each row widened, normalized in f32 (the f32
// reference), each result rounded to bf16.
std::unique_ptr<KernelInstance> layer_norm_reference_bf16(const KernelSpec& spec) {
  return layer_norm_kernel(spec, [](const void* x, const void* w, const void* b, void* y,
                                    Extents e, double eps, int threads) {
    using cpu::BFloat16;
    cpu::parallel_chunks(e.outer, e.n, threads, [&](int64_t begin, int64_t end) {
      cpu::bf16_rows_through_f32<2>(
          static_cast<const BFloat16*>(x) + begin * e.n,
          {static_cast<const BFloat16*>(w), static_cast<const BFloat16*>(b)},
          static_cast<BFloat16*>(y) + begin * e.n, end - begin, e.n,
          [&](const float* row, std::array<const float*, 2> params, float* out) {
            layer_norm_reference_row(row, params[0], params[1], out, e.n, eps);
          },
          cpu::widen_bf16_row, cpu::narrow_to_bf16_row);
    });
  });
}

#ifdef KILN_X86
template <typename T>
using LayerNormRows = void (*)(const T*, const T*, const T*, T*, int64_t, int64_t, double);

// A vectorized layer norm (cpu::avx2::layer_norm, cpu::avx512::layer_norm: f32 and bf16
// overloads) on each thread's rows.
template <LayerNormRows<float> kF32, LayerNormRows<cpu::BFloat16> kBf16>
std::unique_ptr<KernelInstance> layer_norm_vectorized(const KernelSpec& spec) {
  auto rows_kernel = [&]<typename T>(LayerNormRows<T> rows) {
    return layer_norm_kernel(spec, [rows](const void* x, const void* w, const void* b, void* y,
                                          Extents e, double eps, int threads) {
      cpu::parallel_chunks(e.outer, e.n, threads, [&](int64_t begin, int64_t end) {
        rows(static_cast<const T*>(x) + begin * e.n, static_cast<const T*>(w),
             static_cast<const T*>(b), static_cast<T*>(y) + begin * e.n, end - begin, e.n, eps);
      });
    });
  };
  return spec.inputs[0].dtype == DType::BF16 ? rows_kernel(kBf16) : rows_kernel(kF32);
}

// The vectorized softmax and layer norm kernels take f32 and bf16.
std::string avx2_unsupported_reason(const KernelSpec& spec) {
  return cpu::avx2_f32_unsupported_reason(
      spec.inputs[0].dtype == DType::BF16 ? DType::F32 : spec.inputs[0].dtype);
}

std::string avx512_unsupported_reason(const KernelSpec& spec) {
  if (std::string why = cpu::isa_unavailable_reason(cpu::Isa::Avx512); !why.empty()) return why;
  return avx2_unsupported_reason(spec);
}

std::string softmax_avx512_unsupported_reason(const KernelSpec& spec) {
  if (softmax_extents(spec).inner != 1)
    return "softmax over an axis that isn't the last (columns): the avx2 kernel takes them";
  return avx512_unsupported_reason(spec);
}
#endif

// The reference kernel: make(T{}, spec) for T = float or double.
template <typename Make>
KernelDef reference_kernel(Make make) {
  return KernelDef{"reference", "native", [](const KernelSpec&) { return std::string(); },
                   [make](const KernelSpec& spec) {
                     return spec.inputs[0].dtype == DType::F32 ? make(float{}, spec)
                                                               : make(double{}, spec);
                   }};
}

}  // namespace

void register_normalization_ops(OpRegistry& registry) {
  OpDef softmax;
  softmax.name = "softmax";
  softmax.inputs = {{"x"}};
  softmax.attrs = {{"axis", int64_t{-1}}};
  softmax.infer = infer_softmax;
  softmax.computes_low_precision_in_f32 = true;
#ifdef KILN_X86
  softmax.kernels.push_back({"avx512", "native", softmax_avx512_unsupported_reason,
                             softmax_vectorized<true>});
  softmax.kernels.push_back({"avx2", "native", avx2_unsupported_reason, softmax_vectorized<false>});
#endif
  softmax.kernels.push_back(reference_kernel([](auto t, const KernelSpec& spec) {
    return spec.inputs[0].dtype == DType::BF16 ? softmax_reference_bf16(spec)
                                               : softmax_reference<decltype(t)>(spec);
  }));
  for (KernelDef& k : softmax.kernels) k.in_place_inputs = {0};  // row read before written
  registry.add(std::move(softmax));

  OpDef layer_norm;
  layer_norm.name = "layer_norm";
  layer_norm.inputs = {{"x"}, {"weight_bias", true}};
  layer_norm.attrs = {{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}};
  layer_norm.infer = infer_layer_norm;
  layer_norm.computes_low_precision_in_f32 = true;
  layer_norm.low_precision_keeps_input_dtype = true;
#ifdef KILN_X86
  layer_norm.kernels.push_back(
      {"avx512", "native", avx512_unsupported_reason,
       layer_norm_vectorized<cpu::avx512::layer_norm, cpu::avx512::layer_norm>});
  layer_norm.kernels.push_back({"avx2", "native", avx2_unsupported_reason,
                                layer_norm_vectorized<cpu::avx2::layer_norm, cpu::avx2::layer_norm>});
#endif
  layer_norm.kernels.push_back(KernelDef{
      "reference", "native", [](const KernelSpec&) { return std::string(); },
      [](const KernelSpec& spec) {
        switch (spec.inputs[0].dtype) {
          case DType::F32: return layer_norm_reference<float>(spec);
          case DType::BF16: return layer_norm_reference_bf16(spec);
          default: return layer_norm_reference<double>(spec);
        }
      }});
  for (KernelDef& k : layer_norm.kernels) k.in_place_inputs = {0};  // stats, then y[i] from x[i]
  registry.add(std::move(layer_norm));
}

}  // namespace kiln
