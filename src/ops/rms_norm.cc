// rms_norm: PyTorch's torch.nn.RMSNorm / F.rms_norm over the trailing dims.
//
//   rms_norm(x, [weight]; normalized_ndim = 1, eps = -1)
//     y = x / sqrt(mean(x² over the last normalized_ndim dims) + eps) · weight
//     weight, when given, has exactly the normalized dims. eps = -1 (the default) stands for
//     PyTorch's eps=None: the machine epsilon of x's dtype (torch.finfo(dtype).eps).
//
// Both kernels form the sum of squares, the root and the scaling in double and round once; the
// reference is the yardstick of the AVX2 kernel (beside layer norm's in normalization_avx2.cc).
// A bf16 rms_norm (made by fold_bf16_casts_into_widening_kernels; the builder computes bf16 in
// f32 between casts) gives the f32 result, with f32's eps for the marker, rounded to bf16: those casts' bits.
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>

#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/normalization_avx2.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;

// The eps attribute's marker for PyTorch's None.
constexpr double kDtypeEps = -1;

// x viewed as [rows, n]: n the product of the normalized dims.
struct Rows {
  int64_t rows = 1, n = 1;
};

Rows rows_of(const KernelSpec& spec) {
  std::vector<int64_t> sizes = spec.input_sizes(0);
  size_t first = sizes.size() - static_cast<size_t>(spec.node.attr_int("normalized_ndim"));
  Rows r;
  for (size_t d = 0; d < sizes.size(); ++d) (d < first ? r.rows : r.n) *= sizes[d];
  return r;
}

// The eps a kernel adds: the attribute, or the dtype's machine epsilon for the marker.
double effective_eps(const KernelSpec& spec) {
  const double eps = spec.node.attr_float("eps");
  if (eps != kDtypeEps) return eps;
  return spec.inputs[0].dtype == DType::F64 ? std::numeric_limits<double>::epsilon()
                                            : std::numeric_limits<float>::epsilon();
}

void infer_rms_norm(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64 || x.dtype == DType::BF16,
            "rms_norm takes f32, f64 or bf16, not " + std::string(dtype_name(x.dtype)) +
                "; insert a cast");
  const int64_t rank = static_cast<int64_t>(x.rank());
  const int64_t k = ctx.attr_int("normalized_ndim");
  ctx.check(k >= 1 && k <= rank, "normalized_ndim is " + std::to_string(k) +
                                     "; it must be in [1, " + std::to_string(rank) +
                                     "] (the input's rank)");
  const double eps = ctx.attr_float("eps");
  ctx.check(eps >= 0 || eps == kDtypeEps,
            "eps must be non-negative, or -1 for the dtype's machine epsilon (PyTorch's None)");
  ctx.check(ctx.num_inputs() <= 2,
            "takes x and at most a weight, got " + std::to_string(ctx.num_inputs()) + " inputs");
  const Shape normalized(x.shape.end() - k, x.shape.end());
  if (ctx.num_inputs() == 2) {
    const TensorType& w = ctx.input(1);
    ctx.check(w.dtype == x.dtype, "the weight's dtype differs from x's; insert a cast");
    ctx.check(w.shape.size() == normalized.size(),
              "the weight must have the normalized dims " +
                  shape_string(normalized, &ctx.symbols()) + ", not " +
                  shape_string(w.shape, &ctx.symbols()));
    for (size_t d = 0; d < normalized.size(); ++d)
      ctx.unify(normalized[d], w.shape[d], "x's normalized dims and the weight's dims");
  }
  ctx.set_output(0, x);
}

template <typename T>
void rms_norm_reference_row(const T* x, const T* weight, T* y, int64_t n, double eps) {
  using W = Wide<T>;
  W squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += W(x[i]) * W(x[i]);
  const W rstd = 1 / std::sqrt(squares / static_cast<W>(n) + static_cast<W>(eps));
  for (int64_t i = 0; i < n; ++i) {
    W v = x[i] * rstd;
    if (weight) v *= weight[i];
    y[i] = static_cast<T>(v);
  }
}

// Calls fn(x, weight or null, y, rows, eps, threads) at run time.
template <typename Fn>
std::unique_ptr<KernelInstance> rms_norm_kernel(const KernelSpec& spec, Fn fn) {
  return make_kernel([fn, r = rows_of(spec), eps = effective_eps(spec),
                      weighted = spec.inputs.size() == 2, threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    fn(in[0], weighted ? in[1] : nullptr, out[0], r, eps, threads);
  });
}

template <typename T>
std::unique_ptr<KernelInstance> rms_norm_reference(const KernelSpec& spec) {
  return rms_norm_kernel(spec, [](const void* x, const void* w, void* y, Rows r, double eps,
                                  int threads) {
    cpu::parallel_chunks(r.rows, r.n, threads, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        rms_norm_reference_row(static_cast<const T*>(x) + row * r.n, static_cast<const T*>(w),
                               static_cast<T*>(y) + row * r.n, r.n, eps);
    });
  });
}

std::unique_ptr<KernelInstance> rms_norm_reference_bf16(const KernelSpec& spec) {
  return rms_norm_kernel(spec, [](const void* x, const void* w, void* y, Rows r, double eps,
                                  int threads) {
    using cpu::BFloat16;
    cpu::parallel_chunks(r.rows, r.n, threads, [&](int64_t begin, int64_t end) {
      cpu::bf16_rows_through_f32<1>(
          static_cast<const BFloat16*>(x) + begin * r.n, {static_cast<const BFloat16*>(w)},
          static_cast<BFloat16*>(y) + begin * r.n, end - begin, r.n,
          [&](const float* row, std::array<const float*, 1> params, float* out) {
            rms_norm_reference_row(row, params[0], out, r.n, eps);
          },
          cpu::widen_bf16_row, cpu::narrow_to_bf16_row);
    });
  });
}

#ifdef KILN_X86
std::string avx2_unsupported_reason(const KernelSpec& spec) {
  const DType dtype = spec.inputs[0].dtype;
  return cpu::avx2_f32_unsupported_reason(dtype == DType::BF16 ? DType::F32 : dtype);
}

template <typename T>
std::unique_ptr<KernelInstance> rms_norm_avx2_of(const KernelSpec& spec) {
  return rms_norm_kernel(spec, [](const void* x, const void* w, void* y, Rows r, double eps,
                                  int threads) {
    cpu::parallel_chunks(r.rows, r.n, threads, [&](int64_t begin, int64_t end) {
      cpu::avx2::rms_norm(static_cast<const T*>(x) + begin * r.n, static_cast<const T*>(w),
                          static_cast<T*>(y) + begin * r.n, end - begin, r.n, eps);
    });
  });
}

std::unique_ptr<KernelInstance> rms_norm_avx2(const KernelSpec& spec) {
  return spec.inputs[0].dtype == DType::BF16 ? rms_norm_avx2_of<cpu::BFloat16>(spec)
                                             : rms_norm_avx2_of<float>(spec);
}
#endif

}  // namespace

void register_rms_norm_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "rms_norm";
  def.inputs = {{"x"}, {"weight", /*variadic=*/true}};
  def.attrs = {{"normalized_ndim", int64_t{1}}, {"eps", kDtypeEps}};
  def.infer = infer_rms_norm;
  def.computes_low_precision_in_f32 = true;
  def.low_precision_keeps_input_dtype = true;
#ifdef KILN_X86
  def.kernels.push_back({"avx2", "native", avx2_unsupported_reason, rms_norm_avx2});
#endif
  def.kernels.push_back({"reference", "native", [](const KernelSpec&) { return std::string(); },
                         [](const KernelSpec& spec) {
                           switch (spec.inputs[0].dtype) {
                             case DType::F32: return rms_norm_reference<float>(spec);
                             case DType::BF16: return rms_norm_reference_bf16(spec);
                             default: return rms_norm_reference<double>(spec);
                           }
                         }});
  // Each row's sum of squares is complete before y[i] is written from x[i].
  for (KernelDef& k : def.kernels) k.in_place_inputs = {0};
  registry.add(std::move(def));
}

}  // namespace kiln
