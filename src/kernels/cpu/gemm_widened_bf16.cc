// Matmul of bf16 operands where oneDNN has no bf16 GEMM (a CPU without AVX512-BF16 running a
// .kiln model compiled on one with it): A widened to f32 on each run, a constant B once at
// creation, then the f32 GEMM that the measured rule picks. As exact as the bf16 GEMM: every
// product of two bf16 values is exact in f32, and both accumulate in f32.
#include <algorithm>
#include <array>
#include <climits>

#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm.h"

namespace kiln::cpu {

namespace {

constexpr size_t kAlign = 64;

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void widen_reference(const void* bf16, void* out, int64_t n) {
  cast_reference(DType::BF16, DType::F32, bf16, out, 0, n);
}

// The vector cast where the CPU has one.
CastArrayFn widener() {
  return vector_cast_unsupported_reason(DType::BF16, DType::F32).empty()
             ? vector_cast(DType::BF16, DType::F32)
             : widen_reference;
}

class WidenedBf16Matmul final : public KernelInstance {
 public:
  WidenedBf16Matmul(const MatmulGeometry& g, const KernelSpec& spec)
      : a_elements_(num_elements(spec.input_sizes(0))),
        b_elements_(num_elements(spec.input_sizes(1))),
        widen_(widener()) {
    KernelSpec f32{spec.node, spec.inputs, spec.outputs, spec.constant_inputs, spec.threads,
                   /*prepared=*/nullptr};  // the widened B belongs to this kernel alone
    f32.inputs[0].dtype = f32.inputs[1].dtype = DType::F32;
    const Tensor* b = spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
    if (b) {
      b_constant_ = true;
      wide_b_ = Tensor::empty(DType::F32, b->sizes());
      widen_(b->data(), wide_b_.data(), b_elements_);
      f32.constant_inputs[1] = &wide_b_;
    }
    const bool openblas = std::max({g.m, g.n, g.k}) <= INT_MAX &&
                          (preferred_gemm_library(g) == GemmLibrary::OpenBLAS ||
                           g.batch.size() > 10);  // oneDNN's limit
    inner_ = openblas ? create_openblas_matmul(g, f32) : create_onednn_matmul(g, f32);
  }

  size_t scratch_bytes() const override {
    return aligned(inner_->scratch_bytes()) + aligned(a_elements_ * sizeof(float)) +
           (b_constant_ ? 0 : aligned(b_elements_ * sizeof(float)));
  }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    auto* bytes = static_cast<std::byte*>(scratch);
    void* inner_scratch = bytes;
    bytes += aligned(inner_->scratch_bytes());
    auto* a = reinterpret_cast<float*>(bytes);
    bytes += aligned(a_elements_ * sizeof(float));
    widen_(inputs[0], a, a_elements_);
    const float* b = b_constant_ ? wide_b_.data<float>() : reinterpret_cast<float*>(bytes);
    if (!b_constant_) widen_(inputs[1], bytes, b_elements_);
    // A, B, then the epilogue's bias and residual: at most 4.
    std::array<const void*, 4> wide{};
    KILN_ASSERT(inputs.size() <= wide.size(), "matmul with " << inputs.size() << " inputs");
    std::copy(inputs.begin(), inputs.end(), wide.begin());
    wide[0] = a;
    wide[1] = b;
    inner_->run(std::span(wide.data(), inputs.size()), outputs, inner_scratch);
  }

 private:
  size_t a_elements_, b_elements_;
  CastArrayFn widen_;
  bool b_constant_ = false;
  Tensor wide_b_;  // B in f32 when it is a constant
  std::unique_ptr<KernelInstance> inner_;
};

}  // namespace

std::unique_ptr<KernelInstance> create_widened_bf16_matmul(const MatmulGeometry& g,
                                                           const KernelSpec& spec) {
  KILN_ASSERT(!g.is_degenerate(), "widened bf16 matmul given a degenerate geometry");
  KILN_ASSERT(spec.inputs[0].dtype == DType::BF16, "widened bf16 matmul given "
                                                      << dtype_name(spec.inputs[0].dtype));
  return std::make_unique<WidenedBf16Matmul>(g, spec);
}

}  // namespace kiln::cpu
