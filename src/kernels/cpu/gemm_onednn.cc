// Matmul through oneDNN's matmul primitive: the whole broadcast batch in one primitive, B
// reordered once into the primitive's preferred layout when it is a graph constant. An epilogue
// becomes the primitive's bias and post-ops (eltwise activation, binary add of the residual),
// applied by oneDNN to each output block as it is computed. bf16 operands give an f32 or a bf16
// result (AVX512-BF16 dot products, f32 accumulation, oneDNN's bf16 destination; without them,
// the f32 GEMM on widened operands, widened_bf16.h).
#include <algorithm>
#include <climits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/cpu/widened_bf16.h"

namespace kiln::cpu {

namespace {

std::vector<int64_t> with_matrix(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

dnnl::algorithm eltwise_of(Activation a) {
  switch (a) {
    case Activation::Relu: return dnnl::algorithm::eltwise_relu;
    case Activation::GeluErf: return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::GeluTanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::Silu: return dnnl::algorithm::eltwise_swish;  // x * sigmoid(alpha x), alpha 1
    case Activation::Sigmoid: return dnnl::algorithm::eltwise_logistic;
    case Activation::Tanh: return dnnl::algorithm::eltwise_tanh;
    case Activation::None: break;
  }
  KILN_ASSERT(false, "no oneDNN eltwise for activation " << activation_name(a));
  return dnnl::algorithm::undef;
}

class OneDnnMatmul final : public KernelInstance {
 public:
  OneDnnMatmul(const MatmulGeometry& g, const KernelSpec& spec)
      : threads_(spec.threads), e_(epilogue_of(spec.node)) {
    // Creation sizes the primitive's work split by the thread count it sees.
    LibraryThreads scope(threads_);
    const dnnl::memory::data_type operand = spec.inputs[0].dtype == DType::BF16
                                                ? dnnl::memory::data_type::bf16
                                                : dnnl::memory::data_type::f32;
    src_desc_ = plain_desc(with_matrix(g.a_batch, g.m, g.k), operand);
    // f32, or bf16 rounded once after the post-ops (bf16 operands with attribute dtype bf16).
    dst_desc_ = plain_desc(with_matrix(g.batch, g.m, g.n), spec.outputs[0].dtype == DType::BF16
                                                               ? dnnl::memory::data_type::bf16
                                                               : dnnl::memory::data_type::f32);
    dnnl::memory::desc b_desc;
    if (g.transpose_b) {
      // B is stored [..., N, K]: describe it as [..., K, N] with the last two strides swapped.
      dnnl::memory::dims strides = row_major_strides(with_matrix(g.b_batch, g.n, g.k));
      std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
      b_desc = dnnl::memory::desc(to_dims(with_matrix(g.b_batch, g.k, g.n)), operand, strides);
    } else {
      b_desc = plain_desc(with_matrix(g.b_batch, g.k, g.n), operand);
    }
    const Tensor* b_constant = spec.constant_inputs.size() > 1 && !spec.gemm_weights_in_place
                                   ? spec.constant_inputs[1]
                                   : nullptr;
    dnnl::memory::desc weights_request =
        b_constant ? dnnl::memory::desc(b_desc.dims(), operand, dnnl::memory::format_tag::any)
                   : b_desc;
    dnnl::primitive_attr attr = user_scratchpad_attr();
    dnnl::post_ops post_ops;
    if (e_.activation != Activation::None)
      post_ops.append_eltwise(1.f, eltwise_of(e_.activation), e_.activation == Activation::Silu,
                              0.f);
    if (e_.residual) post_ops.append_binary(dnnl::algorithm::binary_add, dst_desc_);
    attr.set_post_ops(post_ops);
    if (e_.bias)  // [1..., 1, N], broadcast over the batch and the rows
      bias_desc_ = plain_f32_desc(with_matrix(std::vector<int64_t>(g.batch.size(), 1), 1, g.n));
    dnnl::matmul::desc desc = e_.bias
                                  ? dnnl::matmul::desc(src_desc_, weights_request, bias_desc_, dst_desc_)
                                  : dnnl::matmul::desc(src_desc_, weights_request, dst_desc_);
    dnnl::matmul::primitive_desc pd(desc, attr, onednn_engine());
    primitive_ = dnnl::matmul(pd);
    scratchpad_desc_ = pd.scratchpad_desc();
    weights_desc_ = pd.weights_desc();
    if (b_constant) packed_b_ = prepacked_constant(spec, 1, b_desc, weights_desc_);
  }

  size_t scratch_bytes() const override { return scratchpad_desc_.get_size(); }
  bool reads_input_at_run_time(size_t input) const override { return input != 1 || !packed_b_; }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    LibraryThreads scope(threads_);
    const dnnl::engine& engine = onednn_engine();
    void* b = packed_b_ ? packed_b_->data() : const_cast<void*>(inputs[1]);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(src_desc_, engine, const_cast<void*>(inputs[0]))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(weights_desc_, engine, b)},
        {DNNL_ARG_DST, dnnl::memory(dst_desc_, engine, outputs[0])},
        {DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_desc_, engine, scratch)}};
    if (e_.bias)
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_desc_, engine,
                                               const_cast<void*>(inputs[e_.bias_input()])));
    if (e_.residual) {
      // The residual post-op is the only one, or follows the activation.
      const int index = e_.activation == Activation::None ? 0 : 1;
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1,
                   dnnl::memory(dst_desc_, engine, const_cast<void*>(inputs[e_.residual_input()])));
    }
    execute_and_wait(primitive_, args);
  }

 private:
  int threads_;
  GemmEpilogue e_;
  dnnl::memory::desc src_desc_, weights_desc_, dst_desc_, bias_desc_, scratchpad_desc_;
  dnnl::matmul primitive_;
  std::shared_ptr<const Tensor> packed_b_;  // B in weights_desc_ when it is a constant, else null
};

}  // namespace

std::unique_ptr<KernelInstance> create_onednn_matmul(const MatmulGeometry& g,
                                                     const KernelSpec& spec) {
  KILN_ASSERT(!g.is_degenerate(), "oneDNN matmul given a degenerate geometry");
  if (spec.inputs[0].dtype == DType::BF16 && !onednn_has_bf16()) {
    // oneDNN would emulate bf16, or refuse it: the f32 GEMM on widened operands instead.
    return create_widened_bf16(spec, [g](const KernelSpec& f32) {
      const bool openblas = std::max({g.m, g.n, g.k}) <= INT_MAX &&
                            (preferred_gemm_library(g, f32.gemm_weights_in_place &&
                                                           f32.constant_inputs.size() > 1 &&
                                                           f32.constant_inputs[1]) ==
                                 GemmLibrary::OpenBLAS ||
                             g.batch.size() > 10);  // oneDNN's limit
      return openblas ? create_openblas_matmul(g, f32) : create_onednn_matmul(g, f32);
    });
  }
  return std::make_unique<OneDnnMatmul>(g, spec);
}

}  // namespace kiln::cpu
