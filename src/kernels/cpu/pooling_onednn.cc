// 2-D average pooling through oneDNN's pooling, forward inference, f32, source and destination in
// the geometry's layout (plain NCHW, or the channels-last and blocked layouts the format stage
// picks, where oneDNN has jit kernels on AVX2 too).
#include <string>
#include <unordered_map>

#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_layout.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/cpu/pooling.h"

namespace kiln::cpu {

namespace {

dnnl::algorithm onednn_algorithm(PoolAlgorithm algorithm) {
  switch (algorithm) {
    case PoolAlgorithm::AvgIncludePadding: return dnnl::algorithm::pooling_avg_include_padding;
    case PoolAlgorithm::AvgExcludePadding: return dnnl::algorithm::pooling_avg_exclude_padding;
  }
  KILN_ASSERT(false, "unknown pooling algorithm");
}

dnnl::pooling_forward::primitive_desc primitive_desc_of(const Pool2dGeometry& g,
                                                        PoolAlgorithm algorithm) {
  dnnl::pooling_forward::desc desc(
      dnnl::prop_kind::forward_inference, onednn_algorithm(algorithm),
      onednn_desc({g.n, g.c, g.h, g.w}, g.layout, DType::F32),
      onednn_desc({g.n, g.c, g.oh, g.ow}, g.layout, DType::F32),
      {g.stride_h, g.stride_w}, {g.kh, g.kw}, {g.pad_h, g.pad_w}, {g.reach_bottom, g.reach_right});
  return dnnl::pooling_forward::primitive_desc(desc, user_scratchpad_attr(), onednn_engine());
}

class OneDnnPool2d final : public KernelInstance {
 public:
  OneDnnPool2d(const Pool2dGeometry& g, PoolAlgorithm algorithm, const KernelSpec& spec)
      : threads_(spec.threads) {
    LibraryThreads scope(threads_);  // creation sizes the work split by the thread count
    const dnnl::pooling_forward::primitive_desc pd = primitive_desc_of(g, algorithm);
    src_desc_ = pd.src_desc();
    dst_desc_ = pd.dst_desc();
    primitive_ = dnnl::pooling_forward(pd);
    scratchpad_desc_ = pd.scratchpad_desc();
  }

  size_t scratch_bytes() const override { return scratchpad_desc_.get_size(); }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    LibraryThreads scope(threads_);
    const dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(src_desc_, engine, const_cast<void*>(inputs[0]))},
        {DNNL_ARG_DST, dnnl::memory(dst_desc_, engine, outputs[0])},
        {DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_desc_, engine, scratch)}};
    dnnl::stream& stream = onednn_stream();
    primitive_.execute(stream, args);
    stream.wait();
  }

 private:
  int threads_;
  dnnl::memory::desc src_desc_, dst_desc_, scratchpad_desc_;
  dnnl::pooling_forward primitive_;
};

}  // namespace

std::string onednn_pool2d_unsupported_reason(const Pool2dGeometry& g, PoolAlgorithm algorithm,
                                             int threads) {
  LibraryThreads scope(threads);
  const std::string impl = primitive_desc_of(g, algorithm).impl_info_str();
  if (impl.rfind("jit", 0) == 0) return "";
  return "oneDNN has only its reference implementation (" + impl + ") for this on this CPU";
}

std::unique_ptr<KernelInstance> create_onednn_pool2d(const Pool2dGeometry& g,
                                                     PoolAlgorithm algorithm,
                                                     const KernelSpec& spec) {
  return std::make_unique<OneDnnPool2d>(g, algorithm, spec);
}

}  // namespace kiln::cpu
