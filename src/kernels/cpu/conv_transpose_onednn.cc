// conv_transpose2d and conv_transpose3d through oneDNN's deconvolution (forward inference, direct
// algorithm). Source and destination stay plain NC(D)HW; the weights take the primitive's
// preferred layout when they are a constant, and are read in PyTorch's [C, O / groups, K...]
// layout otherwise.
#include <unordered_map>

#include "kernels/cpu/conv_transpose.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_util.h"

namespace kiln::cpu {

namespace {

// The problem's spatial axes of `axes` ([h, w] or [d, h, w]), after `leading` dims.
dnnl::memory::dims spatial_dims(const ConvTransposeGeometry& g,
                                const ConvTransposeGeometry::Axes& axes,
                                dnnl::memory::dims leading = {}) {
  for (size_t i = static_cast<size_t>(3 - g.spatial); i < 3; ++i) leading.push_back(axes[i]);
  return leading;
}

// PyTorch's weights [groups][C / groups][O / groups][K...] as oneDNN's logical deconvolution
// weights (groups, O / groups, C / groups, K...), or (O, C, K...) without groups: the same memory
// with the channel strides swapped.
dnnl::memory::desc plain_weights_desc(const ConvTransposeGeometry& g) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  const int64_t k = g.kernel[0] * g.kernel[1] * g.kernel[2];
  const ConvTransposeGeometry::Axes kernel_strides{g.kernel[1] * g.kernel[2], g.kernel[2], 1};
  if (g.groups == 1)
    return dnnl::memory::desc(spatial_dims(g, g.kernel, {g.o, g.c}), dnnl::memory::data_type::f32,
                              spatial_dims(g, kernel_strides, {k, og * k}));
  return dnnl::memory::desc(spatial_dims(g, g.kernel, {g.groups, og, cg}),
                            dnnl::memory::data_type::f32,
                            spatial_dims(g, kernel_strides, {cg * og * k, k, og * k}));
}

ConvTransposeGeometry::Axes minus(const ConvTransposeGeometry::Axes& a,
                                  const ConvTransposeGeometry::Axes& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}

class OneDnnConvTranspose final : public KernelInstance {
 public:
  OneDnnConvTranspose(const ConvTransposeGeometry& g, bool bias, const KernelSpec& spec)
      : threads_(spec.threads), bias_(bias) {
    LibraryThreads scope(threads_);  // creation sizes the work split by the thread count
    using dt = dnnl::memory::data_type;
    src_desc_ = plain_f32_desc(spatial_dims(g, g.in, {g.n, g.c}));
    dst_desc_ = plain_f32_desc(spatial_dims(g, g.out, {g.n, g.o}));
    const dnnl::memory::desc w_plain = plain_weights_desc(g);
    const Tensor* w_constant = spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
    const dnnl::memory::desc w_request =
        w_constant ? dnnl::memory::desc(w_plain.dims(), dt::f32, dnnl::memory::format_tag::any)
                   : w_plain;
    const dnnl::memory::desc bias_desc = bias_ ? plain_f32_desc({g.o}) : dnnl::memory::desc();
    // oneDNN counts dilation from 0 (no gaps); output_padding extends each axis at its end,
    // which oneDNN expresses as that much less padding there (negative when it exceeds it).
    dnnl::deconvolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src_desc_,
        w_request, bias_desc, dst_desc_, spatial_dims(g, g.stride),
        spatial_dims(g, minus(g.dilation, {1, 1, 1})), spatial_dims(g, g.pad),
        spatial_dims(g, minus(g.pad, g.output_padding)));
    dnnl::deconvolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), onednn_engine());
    primitive_ = dnnl::deconvolution_forward(pd);
    weights_desc_ = pd.weights_desc();
    bias_desc_ = pd.bias_desc();
    scratchpad_desc_ = pd.scratchpad_desc();
    if (w_constant) packed_w_ = prepacked_constant(spec, 1, w_plain, weights_desc_);
  }

  size_t scratch_bytes() const override { return scratchpad_desc_.get_size(); }
  bool reads_input_at_run_time(size_t input) const override { return input != 1 || !packed_w_; }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    LibraryThreads scope(threads_);
    const dnnl::engine& engine = onednn_engine();
    void* w = packed_w_ ? packed_w_->data() : const_cast<void*>(inputs[1]);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(src_desc_, engine, const_cast<void*>(inputs[0]))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(weights_desc_, engine, w)},
        {DNNL_ARG_DST, dnnl::memory(dst_desc_, engine, outputs[0])},
        {DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_desc_, engine, scratch)}};
    if (bias_)
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_desc_, engine, const_cast<void*>(inputs[2])));
    dnnl::stream& stream = onednn_stream();
    primitive_.execute(stream, args);
    stream.wait();
  }

 private:
  int threads_;
  bool bias_;
  dnnl::memory::desc src_desc_, weights_desc_, bias_desc_, dst_desc_, scratchpad_desc_;
  dnnl::deconvolution_forward primitive_;
  std::shared_ptr<const Tensor> packed_w_;  // w in weights_desc_ when it is a constant, else null
};

}  // namespace

std::unique_ptr<KernelInstance> create_onednn_conv_transpose(const ConvTransposeGeometry& g,
                                                             bool bias, const KernelSpec& spec) {
  return std::make_unique<OneDnnConvTranspose>(g, bias, spec);
}

}  // namespace kiln::cpu
