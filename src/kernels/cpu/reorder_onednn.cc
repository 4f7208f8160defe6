// reorder through oneDNN's reorder primitive: f32 and bf16 4-D tensors between Kiln's layouts.
#include <unordered_map>

#include "kernels/cpu/layout.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_layout.h"
#include "kernels/cpu/onednn_util.h"

namespace kiln::cpu {

namespace {

class OneDnnReorder final : public KernelInstance {
 public:
  explicit OneDnnReorder(const KernelSpec& spec) : threads_(spec.threads) {
    LibraryThreads scope(threads_);
    src_desc_ = onednn_desc(spec.input_sizes(0), spec.inputs[0].layout, spec.inputs[0].dtype);
    dst_desc_ = onednn_desc(spec.output_sizes(0), spec.outputs[0].layout, spec.outputs[0].dtype);
    dnnl::reorder::primitive_desc pd(onednn_engine(), src_desc_, onednn_engine(), dst_desc_,
                                     user_scratchpad_attr());
    scratchpad_desc_ = pd.scratchpad_desc();
    primitive_ = dnnl::reorder(pd);
  }

  size_t scratch_bytes() const override { return scratchpad_desc_.get_size(); }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    LibraryThreads scope(threads_);
    const dnnl::engine& engine = onednn_engine();
    execute_and_wait(
        primitive_,
        {{DNNL_ARG_FROM, dnnl::memory(src_desc_, engine, const_cast<void*>(inputs[0]))},
         {DNNL_ARG_TO, dnnl::memory(dst_desc_, engine, outputs[0])},
         {DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_desc_, engine, scratch)}});
  }

 private:
  int threads_;
  dnnl::memory::desc src_desc_, dst_desc_, scratchpad_desc_;
  dnnl::reorder primitive_;
};

}  // namespace

std::unique_ptr<KernelInstance> create_onednn_reorder(const KernelSpec& spec) {
  return std::make_unique<OneDnnReorder>(spec);
}

}  // namespace kiln::cpu
