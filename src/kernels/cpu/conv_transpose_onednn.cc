// conv_transpose2d through oneDNN's deconvolution (forward inference, direct algorithm). Source
// and destination stay plain NCHW; the weights take the primitive's preferred layout when they
// are a constant, and are read in PyTorch's [C, O / groups, KH, KW] layout otherwise.
#include <unordered_map>

#include "kernels/cpu/conv_transpose.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_util.h"

namespace kiln::cpu {

namespace {

// PyTorch's weights [groups][C / groups][O / groups][KH][KW] as oneDNN's logical deconvolution
// weights (groups, O / groups, C / groups, KH, KW), or (O, C, KH, KW) without groups: the same
// memory with the channel strides swapped.
dnnl::memory::desc plain_weights_desc(const ConvTranspose2dGeometry& g) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups, k = g.kh * g.kw;
  if (g.groups == 1)
    return dnnl::memory::desc({g.o, g.c, g.kh, g.kw}, dnnl::memory::data_type::f32,
                              dnnl::memory::dims{k, og * k, g.kw, 1});
  return dnnl::memory::desc({g.groups, og, cg, g.kh, g.kw}, dnnl::memory::data_type::f32,
                            dnnl::memory::dims{cg * og * k, k, og * k, g.kw, 1});
}

class OneDnnConvTranspose2d final : public KernelInstance {
 public:
  OneDnnConvTranspose2d(const ConvTranspose2dGeometry& g, bool bias, const KernelSpec& spec)
      : threads_(spec.threads), bias_(bias) {
    LibraryThreads scope(threads_);  // creation sizes the work split by the thread count
    using dt = dnnl::memory::data_type;
    src_desc_ = plain_f32_desc({g.n, g.c, g.h, g.w});
    dst_desc_ = plain_f32_desc({g.n, g.o, g.oh, g.ow});
    const dnnl::memory::desc w_plain = plain_weights_desc(g);
    const Tensor* w_constant = spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
    const dnnl::memory::desc w_request =
        w_constant ? dnnl::memory::desc(w_plain.dims(), dt::f32, dnnl::memory::format_tag::any)
                   : w_plain;
    const dnnl::memory::desc bias_desc = bias_ ? plain_f32_desc({g.o}) : dnnl::memory::desc();
    // oneDNN counts dilation from 0 (no gaps); output_padding extends the bottom and right,
    // which oneDNN expresses as that much less padding there (negative when it exceeds it).
    dnnl::deconvolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src_desc_,
        w_request, bias_desc, dst_desc_, {g.stride_h, g.stride_w},
        {g.dilation_h - 1, g.dilation_w - 1}, {g.pad_h, g.pad_w},
        {g.pad_h - g.output_padding_h, g.pad_w - g.output_padding_w});
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

std::unique_ptr<KernelInstance> create_onednn_conv_transpose2d(const ConvTranspose2dGeometry& g,
                                                               bool bias, const KernelSpec& spec) {
  return std::make_unique<OneDnnConvTranspose2d>(g, bias, spec);
}

}  // namespace kiln::cpu
