#include "kernels/cpu/widened_bf16.h"

#include <array>
#include <cstddef>
#include <vector>

#include "kernels/cpu/cast.h"

namespace kiln::cpu {

namespace {

constexpr size_t kAlign = 64;

void widen_reference(const void* in, void* out, int64_t n) {
  cast_reference(DType::BF16, DType::F32, in, out, 0, n);
}
void narrow_reference(const void* in, void* out, int64_t n) {
  cast_reference(DType::F32, DType::BF16, in, out, 0, n);
}

// The vector cast where the CPU has one (equal to the reference bit for bit).
CastArrayFn cast_fn(DType from, DType to, CastArrayFn reference) {
  return vector_cast_unsupported_reason(from, to).empty() ? vector_cast(from, to) : reference;
}

class WidenedBf16 final : public KernelInstance {
 public:
  WidenedBf16(const KernelSpec& spec, const F32KernelFactory& create_f32)
      : widen_(cast_fn(DType::BF16, DType::F32, widen_reference)),
        narrow_(cast_fn(DType::F32, DType::BF16, narrow_reference)),
        wide_constants_(spec.inputs.size()),
        wide_constant_data_(spec.inputs.size(), nullptr),
        constant_(spec.inputs.size(), false) {
    KILN_ASSERT(spec.outputs.size() == 1 && spec.inputs.size() <= kMaxInputs,
                "widened bf16 kernel for " << spec.node.op() << " with " << spec.inputs.size()
                                           << " inputs and " << spec.outputs.size() << " outputs");
    // Each kernel widens its own constants: nothing to share with the graph's prepared ones.
    KernelSpec f32{spec.node, spec.inputs, spec.outputs, spec.constant_inputs, spec.threads,
                   /*prepared=*/nullptr, spec.gemm_weights_in_place};
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      if (spec.inputs[i].dtype != DType::BF16) continue;
      f32.inputs[i].dtype = DType::F32;
      const int64_t n = num_elements(spec.input_sizes(i));
      const Tensor* constant = i < spec.constant_inputs.size() ? spec.constant_inputs[i] : nullptr;
      if (constant) {
        constant_[i] = true;
        wide_constants_[i] = Tensor::empty(DType::F32, constant->sizes());
        widen_(constant->data(), wide_constants_[i].data(), n);
        f32.constant_inputs[i] = &wide_constants_[i];
        wide_constant_data_[i] = wide_constants_[i].data();
      } else {
        widened_.push_back({i, n, take(n * sizeof(float))});
      }
    }
    if (spec.outputs[0].dtype == DType::BF16) {
      f32.outputs[0].dtype = DType::F32;
      output_elements_ = num_elements(spec.output_sizes(0));
      output_offset_ = take(output_elements_ * sizeof(float));
    }
    inner_ = create_f32(f32);
    inner_offset_ = take(static_cast<int64_t>(inner_->scratch_bytes()));
    // An f32 copy that the f32 kernel prepared its own copy of is read by nobody.
    for (size_t i = 0; i < wide_constants_.size(); ++i)
      if (wide_constant_data_[i] && !inner_->reads_input_at_run_time(i)) {
        wide_constants_[i] = Tensor();
        wide_constant_data_[i] = nullptr;
      }
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }
  // A bf16 constant is read from its f32 copy, or from the f32 kernel's prepared one.
  bool reads_input_at_run_time(size_t input) const override {
    return !constant_.at(input) && inner_->reads_input_at_run_time(input);
  }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    auto* base = static_cast<std::byte*>(scratch);
    std::array<const void*, kMaxInputs> wide{};
    for (size_t i = 0; i < inputs.size(); ++i)
      wide[i] = wide_constant_data_[i] ? wide_constant_data_[i] : inputs[i];
    for (const Widened& w : widened_) {
      widen_(inputs[w.input], base + w.offset, w.elements);
      wide[w.input] = base + w.offset;
    }
    void* out = output_elements_ > 0 ? base + output_offset_ : outputs[0];
    inner_->run(std::span(wide.data(), inputs.size()), std::span(&out, 1), base + inner_offset_);
    if (output_elements_ > 0) narrow_(out, outputs[0], output_elements_);
  }

 private:
  static constexpr size_t kMaxInputs = 8;
  struct Widened {
    size_t input;
    int64_t elements;
    size_t offset;
  };

  // Reserves `bytes` of scratch; returns their offset.
  size_t take(int64_t bytes) {
    const size_t offset = scratch_bytes_;
    scratch_bytes_ += (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
    return offset;
  }

  CastArrayFn widen_, narrow_;
  std::vector<Tensor> wide_constants_;  // per input: its f32 copy when a bf16 constant
  std::vector<const void*> wide_constant_data_;  // that copy's data, else null
  std::vector<bool> constant_;          // per input: a bf16 constant (read from a copy)
  std::vector<Widened> widened_;        // the bf16 inputs widened on each run
  int64_t output_elements_ = 0;         // of a bf16 output, computed in f32 first; else 0
  size_t output_offset_ = 0, inner_offset_ = 0, scratch_bytes_ = 0;
  std::unique_ptr<KernelInstance> inner_;
};

}  // namespace

std::unique_ptr<KernelInstance> create_widened_bf16(const KernelSpec& spec,
                                                    const F32KernelFactory& create_f32) {
  return std::make_unique<WidenedBf16>(spec, create_f32);
}

}  // namespace kiln::cpu
