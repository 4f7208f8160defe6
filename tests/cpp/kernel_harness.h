// What the tests of matmul and conv2d add to ops_test_util.h: kernel specs that carry constant
// inputs (which the oneDNN kernels prepack), running any kernel whatever its selection rule says,
// and the error bound that optimized dot-product kernels are held to against their reference.
#pragma once

#include "kernels/cpu/widened_bf16.h"
#include "ops_test_util.h"

namespace kiln::test {

// The spec the executor builds for `node`, constants included (all types must be static).
inline KernelSpec spec_with_constants(const Node& node, int threads = 2) {
  KernelSpec spec{node, {}, {}, {}, threads};
  for (const Value* in : node.inputs()) {
    spec.inputs.push_back(in->type());
    spec.constant_inputs.push_back(in->kind() == Value::Kind::Constant ? &in->constant() : nullptr);
  }
  for (const Value* out : node.outputs()) spec.outputs.push_back(out->type());
  return spec;
}

// Runs an instance into a fresh output that starts as NaN, so that an element the kernel fails to
// write shows up; scratch of scratch_bytes(), as the executor gives.
inline Tensor run_instance(const KernelInstance& kernel, const KernelSpec& spec,
                           const std::vector<Tensor>& inputs) {
  Tensor out = Tensor::empty(spec.outputs.at(0).dtype, spec.output_sizes(0));
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (out.dtype() == DType::F64)
      out.data<double>()[i] = std::numeric_limits<double>::quiet_NaN();
    else if (out.dtype() == DType::BF16)
      out.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(std::numeric_limits<float>::quiet_NaN());
    else
      out.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  }
  Tensor scratch = Tensor::empty(DType::U8, {static_cast<int64_t>(kernel.scratch_bytes())});
  std::vector<const void*> in;
  for (const Tensor& t : inputs) in.push_back(t.data());
  std::vector<void*> outs{out.data()};
  kernel.run(in, outs, scratch.data());
  return out;
}

// Creates and runs a kernel without asking unsupported_reason: the GEMM kernels step aside for
// each other by measured speed, but each must be right on every shape it can take.
inline Tensor create_and_run(const std::string& op, const std::string& kernel,
                             const KernelSpec& spec, const std::vector<Tensor>& inputs) {
  return run_instance(*kernel_of(op, kernel).create(spec), spec, inputs);
}

// Element-wise |t| (f32 or bf16), for the magnitudes that bound rounding errors.
inline Tensor abs_of(const Tensor& t) {
  Tensor out = Tensor::empty(t.dtype(), t.sizes());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::BF16)
      out.data<cpu::BFloat16>()[i].bits = t.data<cpu::BFloat16>()[i].bits & 0x7fff;
    else
      out.data<float>()[i] = std::fabs(t.data<float>()[i]);
  }
  return out;
}

// tensor_of and values_of for f32 or f64, for hand-computed values of the reference kernels.
inline Tensor tensor_of(DType dtype, const std::vector<int64_t>& sizes,
                        const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  KILN_ASSERT(static_cast<int64_t>(values.size()) == t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F64)
      t.data<double>()[i] = values[i];
    else
      t.data<float>()[i] = static_cast<float>(values[i]);
  }
  return t;
}
inline std::vector<double> values_as_double(const Tensor& t) {
  if (t.dtype() == DType::F64) return values_of<double>(t);
  if (t.dtype() == DType::BF16) {
    std::vector<double> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(cpu::to_float(t.data<cpu::BFloat16>()[i]));
    return v;
  }
  std::vector<float> v = values_of<float>(t);
  return std::vector<double>(v.begin(), v.end());
}

// A dot product of n terms computed in f32 in any order, FMA or not, is within
// gamma_n = n*u/(1 - n*u) of the sum of |terms| (Higham, Accuracy and Stability of Numerical
// Algorithms, 3.1), u = 2^-24; the reference (accumulated in double, then rounded) is within u of
// it. So the two may differ by (n + 2) * u * sum|a_i b_i|, while a kernel that drops or doubles a
// term, or reads a wrong element, is off by far more (about sum/n). The absolute term covers
// products that underflow to subnormals, which a kernel may flush to zero.
inline void expect_within_dot_bound(const Tensor& got, const Tensor& reference,
                                    const Tensor& magnitude, int64_t terms,
                                    const std::string& what) {
  ASSERT_EQ(got.sizes(), reference.sizes()) << what;
  const double u = std::ldexp(1.0, -24);
  const double tiny = static_cast<double>(terms) * std::numeric_limits<float>::min();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data<float>()[i], r = reference.data<float>()[i];
    const double bound = static_cast<double>(terms + 2) * u * magnitude.data<float>()[i] + tiny;
    ASSERT_LE(std::fabs(g - r), bound)
        << what << ": element " << i << " is " << g << ", the reference " << r;
  }
}

// A kernel of a node with bf16 operands against the reference loops, as it is (oneDNN's bf16
// kernel with AVX512-BF16, else its f32 one on widened operands) and explicitly widened
// (cpu::create_widened_bf16 around the kernel made for f32): each result within f32_bound(i) of
// the reference's, plus, for a bf16 result, one bf16 step at the value (at most 2^-7 of it): the
// two round nearly equal f32 values, possibly to neighbours.
inline void expect_bf16_kernel_close(const std::string& op, const std::string& kernel,
                                     const KernelSpec& spec, const std::vector<Tensor>& inputs,
                                     const std::function<double(size_t)>& f32_bound) {
  const KernelDef& def = kernel_of(op, kernel);
  ASSERT_EQ(def.unsupported_reason(spec), "");
  const std::vector<double> want = values_as_double(create_and_run(op, "reference", spec, inputs));
  const bool bf16 = spec.outputs[0].dtype == DType::BF16;
  auto widened =
      cpu::create_widened_bf16(spec, [&](const KernelSpec& f32) { return def.create(f32); });
  for (const auto& [name, instance] :
       {std::pair{kernel, def.create(spec)}, std::pair{"widened " + kernel, std::move(widened)}}) {
    const std::vector<double> got = values_as_double(run_instance(*instance, spec, inputs));
    for (size_t i = 0; i < want.size(); ++i) {
      const double bound = f32_bound(i) + (bf16 ? std::ldexp(std::fabs(want[i]), -7) : 0);
      ASSERT_LE(std::fabs(got[i] - want[i]), bound) << name << ": element " << i;
    }
  }
}

// The message of the kiln::Error that `fn` throws, which must have the code `expected`.
inline std::string error_message(const std::function<void()>& fn, ErrorCode expected) {
  std::string message;
  EXPECT_EQ(error_code_of(fn, &message), expected) << message;
  return message;
}

}  // namespace kiln::test
