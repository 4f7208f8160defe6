// matmul: torch.matmul on f32 and f64 (and bf16 operands with an f32 result, which
// fold_bf16_casts_into_matmul makes of an f32 matmul of two widened bf16 values, or a bf16
// result, attribute dtype, rounded once after the epilogue: fuse_matmul_epilogue), batch dims
// broadcast, rank-1 operands included, and an optional transpose_b for B stored as [..., N, K]
// (a linear layer's weights), and an optional epilogue fused into it (kernels/cpu/gemm_epilogue.h):
// C = fused_activation(A·B + bias) + residual, with attributes bias and residual saying which of
// the variadic epilogue inputs are present.
//
// Kernels, best first: OpenBLAS and oneDNN (f32), each taking the shape classes where it was
// measured faster (kernels/cpu/gemm.cc), oneDNN for bf16 (its bf16 GEMM on CPUs with AVX512-BF16,
// else an f32 GEMM on widened operands, the result rounded after it), then the reference loops
// (f32, f64, bf16).
#include <algorithm>
#include <climits>

#include "kernels/cpu/float16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/convert.h"
#include "ops/dtype_attr.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

using cpu::MatmulGeometry;

// Bias [N] of the accumulator's dtype, residual of the output's shape and the result's dtype.
void infer_epilogue(InferContext& ctx, const Shape& out, DType accumulator, DType dtype) {
  const std::string& activation = ctx.attr_string("fused_activation");
  ctx.check(cpu::parse_activation(activation).has_value(),
            "fused_activation must be one of " + cpu::activation_names() + ", got \"" +
                activation + "\"");
  const bool bias = ctx.attr_bool("bias"), residual = ctx.attr_bool("residual");
  const size_t expected = 2 + (bias ? 1 : 0) + (residual ? 1 : 0);
  ctx.check(ctx.num_inputs() == expected,
            "expects " + std::to_string(expected) + " inputs (A, B" + (bias ? ", bias" : "") +
                (residual ? ", residual" : "") + ") by its attributes bias and residual, got " +
                std::to_string(ctx.num_inputs()));
  if (bias) {
    const TensorType& t = ctx.input(2);
    ctx.check(t.dtype == accumulator && t.rank() == 1 && !out.empty(),
              "the bias must be a rank-1 tensor of the accumulator's dtype (" +
                  std::string(dtype_name(accumulator)) + ") with one value per output column");
    ctx.unify(t.shape[0], out.back(), "bias size and output columns (N)");
  }
  if (residual) {
    const TensorType& t = ctx.input(bias ? 3 : 2);
    ctx.check(t.dtype == dtype && t.rank() == out.size(),
              "the residual must have the result's dtype and the output's rank");
    for (size_t d = 0; d < out.size(); ++d)
      ctx.unify(t.shape[d], out[d], "residual and output dim " + std::to_string(d));
  }
}

void infer_matmul(InferContext& ctx) {
  const TensorType& a = ctx.input(0);
  const TensorType& b = ctx.input(1);
  ctx.check(a.dtype == b.dtype, "A and B must have the same dtype");
  ctx.check(a.dtype == DType::F32 || a.dtype == DType::F64 || a.dtype == DType::BF16,
            "matmul supports f32 and f64, and bf16 operands (with an f32 result)");
  ctx.check(a.rank() >= 1 && b.rank() >= 1,
            "A and B need at least one dim each; multiply scalars with mul");
  const bool transpose_b = ctx.attr_bool("transpose_b");
  const size_t ar = a.rank(), br = b.rank();
  Dim a_k = a.shape[ar - 1];
  Dim b_k = br == 1 ? b.shape[0] : transpose_b ? b.shape[br - 1] : b.shape[br - 2];
  ctx.unify(a_k, b_k,
            std::string("contraction dims (K: A's last dim, B's ") +
                (br == 1       ? "only dim"
                 : transpose_b ? "last dim with transpose_b"
                               : "second-last dim") +
                ")");
  Shape a_batch(a.shape.begin(), a.shape.begin() + (ar > 2 ? ar - 2 : 0));
  Shape b_batch(b.shape.begin(), b.shape.begin() + (br > 2 ? br - 2 : 0));
  Shape out = ctx.broadcast(a_batch, b_batch);
  if (ar >= 2) out.push_back(a.shape[ar - 2]);
  if (br >= 2) out.push_back(transpose_b ? b.shape[br - 2] : b.shape[br - 1]);
  const DType accumulator = a.dtype == DType::BF16 ? DType::F32 : a.dtype;
  const DType result = dtype_attr(ctx, "dtype", accumulator);
  ctx.check(result == accumulator || (a.dtype == DType::BF16 && result == DType::BF16),
            "dtype must be \"\" or " + std::string(dtype_name(accumulator)) +
                (a.dtype == DType::BF16 ? " or bf16" : "") + " for " +
                std::string(dtype_name(a.dtype)) + " operands");
  infer_epilogue(ctx, out, accumulator, result);
  ctx.set_output(0, TensorType{result, out, Layout::Plain});
}

MatmulGeometry geometry_of(const KernelSpec& spec) {
  return cpu::make_matmul_geometry(spec.input_sizes(0), spec.input_sizes(1),
                                   spec.node.attr_bool("transpose_b"));
}

// Operands of type T, bias and epilogue in the accumulator's type C, result of type R (rounded
// once, after the epilogue).
template <typename T, typename C, typename R>
void reference_matmul(const MatmulGeometry& g, const cpu::GemmEpilogue& e, const T* a,
                      const T* b, const C* bias, const R* residual, R* c, int threads) {
  cpu::parallel_chunks(g.batch_count() * g.m, g.n * g.k, threads, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t batch = row / g.m;
      const T* a_row = a + g.a_offsets[batch] + (row % g.m) * g.k;
      const T* b_mat = b + g.b_offsets[batch];
      for (int64_t j = 0; j < g.n; ++j) {
        // Accumulating in double makes the f32 reference exact to about 2^-53 of the sum of
        // |a*b|: the yardstick the optimized kernels' error bound is checked against.
        double sum = 0;
        for (int64_t p = 0; p < g.k; ++p)
          sum += cpu::convert<double>(a_row[p]) *
                 cpu::convert<double>(g.transpose_b ? b_mat[j * g.k + p] : b_mat[p * g.n + j]);
        const int64_t at = row * g.n + j;
        const C r = e.residual ? cpu::convert<C>(residual[at]) : C{};
        c[at] = cpu::convert<R>(cpu::reference_epilogue(e, static_cast<C>(sum),
                                                        e.bias ? bias + j : nullptr, &r));
      }
    }
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  auto make = [&]<typename T, typename C, typename R>(T*, C*, R*) {
    return make_kernel([g = geometry_of(spec), e = cpu::epilogue_of(spec.node),
                        threads = spec.threads](std::span<const void* const> in,
                                                std::span<void* const> out) {
      reference_matmul(g, e, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                       e.bias ? static_cast<const C*>(in[e.bias_input()]) : nullptr,
                       e.residual ? static_cast<const R*>(in[e.residual_input()]) : nullptr,
                       static_cast<R*>(out[0]), threads);
    });
  };
  auto* f32 = static_cast<float*>(nullptr);
  auto* bf16 = static_cast<cpu::BFloat16*>(nullptr);
  switch (spec.inputs[0].dtype) {
    case DType::F64: {
      auto* f64 = static_cast<double*>(nullptr);
      return make(f64, f64, f64);
    }
    case DType::BF16:
      return spec.outputs[0].dtype == DType::BF16 ? make(bf16, f32, bf16) : make(bf16, f32, f32);
    default: return make(f32, f32, f32);
  }
}

// The libraries can't take empty operands (oneDNN 2.6 traps with SIGFPE creating a K = 0
// primitive), so their kernels leave those to the reference loops, which write the zeros.
using LibraryCreate = std::unique_ptr<KernelInstance> (*)(const MatmulGeometry&, const KernelSpec&);
std::function<std::unique_ptr<KernelInstance>(const KernelSpec&)> library_kernel(
    LibraryCreate create) {
  return [create](const KernelSpec& spec) {
    MatmulGeometry g = geometry_of(spec);
    return g.is_degenerate() ? create_reference(spec) : create(g, spec);
  };
}

// DNNL_MAX_NDIMS is 12: the matrix dims and 10 batch dims.
std::string onednn_unsupported(const KernelSpec& spec) {
  const DType dtype = spec.inputs[0].dtype;
  if (dtype != DType::F32 && dtype != DType::BF16) return "f32 and bf16 only";
  if (geometry_of(spec).batch.size() > 10) return "oneDNN takes at most 10 batch dims";
  return "";
}

std::string openblas_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::F32) return "f32 only";
  MatmulGeometry g = geometry_of(spec);
  if (std::max({g.m, g.n, g.k}) > INT_MAX) return "a dim exceeds OpenBLAS's 32-bit sizes";
  std::string why;
  const bool weights_in_place = spec.gemm_weights_in_place && spec.constant_inputs.size() > 1 &&
                                spec.constant_inputs[1] != nullptr;
  if (cpu::preferred_gemm_library(g, weights_in_place, &why) != cpu::GemmLibrary::OpenBLAS &&
      onednn_unsupported(spec).empty())
    return why;
  return "";
}

}  // namespace

void register_matmul_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "matmul";
  def.inputs = {{"A"}, {"B"}, {"epilogue", /*variadic=*/true}};
  def.attrs = {{"transpose_b", false},
               {"bias", false},
               {"fused_activation", std::string("none")},
               {"residual", false},
               {"dtype", std::string("")}};
  def.infer = infer_matmul;
  def.computes_low_precision_in_f32 = true;
  def.kernels = {
      {"openblas", "openblas", openblas_unsupported, library_kernel(cpu::create_openblas_matmul)},
      {"onednn", "onednn", onednn_unsupported, library_kernel(cpu::create_onednn_matmul)},
      {"reference", "native", nullptr, create_reference},
  };
  registry.add(std::move(def));
}

}  // namespace kiln
