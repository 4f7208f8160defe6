// Normalization with statistics per channel (dim 1) of x [N, C, *] (any rank >= 2):
//
//   batch_norm(x, weight, bias, running_mean, running_var; eps = 1e-5)
//     inference with the running statistics: y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c]
//     + bias[c]; the four parameters are [C].
//   group_norm(x, [weight, [bias]]; num_groups (required), eps = 1e-5)
//     mean and biased variance over each group of C / num_groups adjacent channels (and all
//     their positions) of each sample; weight and bias, when given, are [C].
//
// Every kernel maps each channel through y = fma(x - mean, scale, shift) in double with
// per-channel mean, scale and shift computed identically, and rounds once; the AVX2 kernels
// (f32) do the same arithmetic in vectors, so batch norm's match the reference bit for bit.
#include <cmath>
#include <span>
#include <type_traits>

#include "kernels/cpu/channel_stats_avx2.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

// x viewed as [outer, channels, inner].
struct Extents {
  int64_t outer = 1, channels = 1, inner = 1;
};

Extents extents_of(const KernelSpec& spec) {
  const std::vector<int64_t> sizes = spec.input_sizes(0);
  Extents e{sizes[0], sizes[1], 1};
  for (size_t d = 2; d < sizes.size(); ++d) e.inner *= sizes[d];
  return e;
}

void check_input(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            ctx.op() + " takes f32 or f64, not " + std::string(dtype_name(x.dtype)) +
                "; insert a cast");
  ctx.check(x.rank() >= 2, "x must be [N, C, ...] (rank 2 or more)");
}

// Every input after x is a [C] parameter of x's dtype.
void check_channel_params(InferContext& ctx, const std::vector<std::string>& names) {
  const TensorType& x = ctx.input(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const TensorType& p = ctx.input(i);
    const std::string& what = names[i - 1];
    ctx.check(p.dtype == x.dtype, what + "'s dtype differs from x's; insert a cast");
    ctx.check(p.rank() == 1, what + " must be 1-D [C], not " + shape_string(p.shape, &ctx.symbols()));
    ctx.unify(x.shape[1], p.shape[0], "x's channels (dim 1) and " + what + "'s size");
  }
}

void infer_batch_norm(InferContext& ctx) {
  check_input(ctx);
  check_channel_params(ctx, {"weight", "bias", "running_mean", "running_var"});
  ctx.set_output(0, ctx.input(0));
}

void infer_group_norm(InferContext& ctx) {
  check_input(ctx);
  ctx.check(ctx.num_inputs() <= 3, "takes x and at most a weight and a bias, got " +
                                       std::to_string(ctx.num_inputs()) + " inputs");
  const int64_t groups = ctx.attr_int("num_groups");
  ctx.check(groups >= 1, "num_groups must be at least 1, got " + std::to_string(groups));
  const Dim channels = ctx.input(0).shape[1];
  if (channels.is_static())
    ctx.check(channels.size() % groups == 0,
              "num_groups=" + std::to_string(groups) + " must divide x's channels " +
                  std::to_string(channels.size()));
  check_channel_params(ctx, {"weight", "bias"});
  ctx.set_output(0, ctx.input(0));
}

template <typename T>
T affine_value(T x, double mean, double scale, double shift) {
  return static_cast<T>(std::fma(static_cast<double>(x) - mean, scale, shift));
}

// ---------------------------------------------------------------- batch_norm

// Per-channel mean, scale and shift in `params` (3 * channels doubles, in that order).
template <typename T>
void batch_norm_params(const T* weight, const T* bias, const T* mean, const T* var, double eps,
                       int64_t channels, double* params) {
  for (int64_t c = 0; c < channels; ++c) {
    params[c] = mean[c];
    params[channels + c] = static_cast<double>(weight[c]) / std::sqrt(static_cast<double>(var[c]) + eps);
    params[2 * channels + c] = bias[c];
  }
}

// Applies the per-channel map: apply(x, y, extents, mean, scale, shift, threads).
template <typename T, typename Apply>
class BatchNormKernel final : public KernelInstance {
 public:
  BatchNormKernel(const KernelSpec& spec, Apply apply)
      : e_(extents_of(spec)), eps_(spec.node.attr_float("eps")), threads_(spec.threads),
        apply_(apply) {}

  size_t scratch_bytes() const override { return 3 * sizeof(double) * e_.channels; }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    auto* params = static_cast<double*>(scratch);
    batch_norm_params(static_cast<const T*>(in[1]), static_cast<const T*>(in[2]),
                      static_cast<const T*>(in[3]), static_cast<const T*>(in[4]), eps_,
                      e_.channels, params);
    apply_(static_cast<const T*>(in[0]), static_cast<T*>(out[0]), e_, params,
           params + e_.channels, params + 2 * e_.channels, threads_);
  }

 private:
  Extents e_;
  double eps_;
  int threads_;
  Apply apply_;
};

template <typename T, typename Apply>
std::unique_ptr<KernelInstance> batch_norm_kernel(const KernelSpec& spec, Apply apply) {
  return std::make_unique<BatchNormKernel<T, Apply>>(spec, apply);
}

template <typename T>
void batch_norm_reference_apply(const T* x, T* y, Extents e, const double* mean,
                                const double* scale, const double* shift, int threads) {
  cpu::parallel_chunks(e.outer * e.channels, e.inner, threads, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row % e.channels;
      for (int64_t i = row * e.inner; i < (row + 1) * e.inner; ++i)
        y[i] = affine_value(x[i], mean[c], scale[c], shift[c]);
    }
  });
}

std::unique_ptr<KernelInstance> batch_norm_reference(const KernelSpec& spec) {
  if (spec.inputs[0].dtype == DType::F64)
    return batch_norm_kernel<double>(spec, batch_norm_reference_apply<double>);
  return batch_norm_kernel<float>(spec, batch_norm_reference_apply<float>);
}

#ifdef KILN_X86
void batch_norm_avx2_apply(const float* x, float* y, Extents e, const double* mean,
                           const double* scale, const double* shift, int threads) {
  if (e.inner == 1) {  // [N, C]: each row maps its C elements with C different parameters
    cpu::parallel_chunks(e.outer, e.channels, threads, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        cpu::avx2::affine_elementwise(x + n * e.channels, y + n * e.channels, e.channels, mean,
                                      scale, shift);
    });
    return;
  }
  cpu::parallel_chunks(e.outer * e.channels, e.inner, threads, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row % e.channels;
      cpu::avx2::affine(x + row * e.inner, y + row * e.inner, e.inner, mean[c], scale[c], shift[c]);
    }
  });
}

std::unique_ptr<KernelInstance> batch_norm_avx2(const KernelSpec& spec) {
  return batch_norm_kernel<float>(spec, batch_norm_avx2_apply);
}
#endif

// ---------------------------------------------------------------- group_norm

// One group at a time: its statistics, then each of its channels mapped with rstd * weight[c]
// and bias[c]. Ops supplies sum, squared_deviations and affine for T (ReferenceOps, Avx2Ops).
template <typename T, typename Ops>
void group_norm(const T* x, const T* weight, const T* bias, T* y, Extents e, int64_t groups,
                double eps, int threads, Ops ops) {
  const int64_t channels_per_group = e.channels / groups;
  const int64_t group_size = channels_per_group * e.inner;
  if (group_size == 0) return;
  cpu::parallel_chunks(e.outer * groups, group_size, threads, [&](int64_t begin, int64_t end) {
    for (int64_t group = begin; group < end; ++group) {
      const T* xg = x + group * group_size;
      T* yg = y + group * group_size;
      const double n = static_cast<double>(group_size);
      const double mean = ops.sum(xg, group_size) / n;
      const double rstd = 1 / std::sqrt(ops.squared_deviations(xg, group_size, mean) / n + eps);
      const int64_t first_channel = group % groups * channels_per_group;
      for (int64_t k = 0; k < channels_per_group; ++k) {
        const int64_t c = first_channel + k;
        const double scale = weight ? rstd * static_cast<double>(weight[c]) : rstd;
        const double shift = bias ? static_cast<double>(bias[c]) : 0.0;
        ops.affine(xg + k * e.inner, yg + k * e.inner, e.inner, mean, scale, shift);
      }
    }
  });
}

// The statistics of a group and the map of a channel, one element at a time in double.
template <typename T>
struct ReferenceOps {
  static double sum(const T* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
    return s;
  }
  static double squared_deviations(const T* x, int64_t n, double mean) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(x[i]) - mean;
      s += d * d;
    }
    return s;
  }
  static void affine(const T* x, T* y, int64_t n, double mean, double scale, double shift) {
    for (int64_t i = 0; i < n; ++i) y[i] = affine_value(x[i], mean, scale, shift);
  }
};

#ifdef KILN_X86
struct Avx2Ops {
  static double sum(const float* x, int64_t n) { return cpu::avx2::sum(x, n); }
  static double squared_deviations(const float* x, int64_t n, double mean) {
    return cpu::avx2::squared_deviations(x, n, mean);
  }
  static void affine(const float* x, float* y, int64_t n, double mean, double scale,
                     double shift) {
    cpu::avx2::affine(x, y, n, mean, scale, shift);
  }
};
#endif

template <typename T, typename Ops>
std::unique_ptr<KernelInstance> group_norm_kernel(const KernelSpec& spec) {
  return make_kernel([e = extents_of(spec), groups = spec.node.attr_int("num_groups"),
                      eps = spec.node.attr_float("eps"), params = spec.inputs.size() - 1,
                      threads = spec.threads](std::span<const void* const> in,
                                              std::span<void* const> out) {
    group_norm(static_cast<const T*>(in[0]), params >= 1 ? static_cast<const T*>(in[1]) : nullptr,
               params >= 2 ? static_cast<const T*>(in[2]) : nullptr, static_cast<T*>(out[0]), e,
               groups, eps, threads, Ops{});
  });
}

std::unique_ptr<KernelInstance> group_norm_reference(const KernelSpec& spec) {
  if (spec.inputs[0].dtype == DType::F64) return group_norm_kernel<double, ReferenceOps<double>>(spec);
  return group_norm_kernel<float, ReferenceOps<float>>(spec);
}

std::string always_supported(const KernelSpec&) { return ""; }

#ifdef KILN_X86
std::string avx2_unsupported(const KernelSpec& spec) {
  return cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
}
#endif

}  // namespace

void register_batch_norm_ops(OpRegistry& registry) {
  OpDef batch_norm;
  batch_norm.name = "batch_norm";
  batch_norm.inputs = {{"x"}, {"weight"}, {"bias"}, {"running_mean"}, {"running_var"}};
  batch_norm.attrs = {{"eps", 1e-5}};
  batch_norm.infer = infer_batch_norm;
  batch_norm.computes_low_precision_in_f32 = true;
  batch_norm.low_precision_keeps_input_dtype = true;
#ifdef KILN_X86
  batch_norm.kernels.push_back({"avx2", "native", avx2_unsupported, batch_norm_avx2});
#endif
  batch_norm.kernels.push_back({"reference", "native", always_supported, batch_norm_reference});
  for (KernelDef& k : batch_norm.kernels) k.in_place_inputs = {0};  // y[i] from x[i] alone
  registry.add(std::move(batch_norm));

  OpDef group_norm;
  group_norm.name = "group_norm";
  group_norm.inputs = {{"x"}, {"weight_bias", /*variadic=*/true}};
  group_norm.attrs = {{"num_groups", int64_t{1}, /*required=*/true}, {"eps", 1e-5}};
  group_norm.infer = infer_group_norm;
  group_norm.computes_low_precision_in_f32 = true;
  group_norm.low_precision_keeps_input_dtype = true;
#ifdef KILN_X86
  group_norm.kernels.push_back({"avx2", "native", avx2_unsupported,
                                group_norm_kernel<float, Avx2Ops>});
#endif
  group_norm.kernels.push_back({"reference", "native", always_supported, group_norm_reference});
  for (KernelDef& k : group_norm.kernels) k.in_place_inputs = {0};  // group stats, then affine
  registry.add(std::move(group_norm));
}

}  // namespace kiln
