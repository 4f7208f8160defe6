// Helpers for the op tests (test_ops_*.cc): one-node graphs, kernels called directly through
// the registry, random and extreme inputs, and ULP distances.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/float16.h"
#include "kiln/kiln.h"
#include "ops/op_registry.h"

namespace kiln::test {

inline TensorType type_of(DType dtype, const std::vector<int64_t>& sizes) {
  return TensorType{dtype, make_shape(sizes)};
}

// A graph holding one node of `op` on fresh inputs of the given types.
struct OneNode {
  Graph graph;
  Node* node = nullptr;

  OneNode(const std::string& op, const std::vector<TensorType>& input_types, AttrMap attrs = {}) {
    std::vector<Value*> inputs;
    for (size_t i = 0; i < input_types.size(); ++i)
      inputs.push_back(graph.add_input("in" + std::to_string(i), input_types[i]));
    graph.set_outputs(graph.add_node(op, inputs, std::move(attrs)));
    node = graph.nodes()[0];
  }
  const TensorType& output_type(size_t i = 0) const { return node->output(i)->type(); }
};

inline const KernelDef& kernel_of(const std::string& op, const std::string& kernel) {
  const OpDef* def = OpRegistry::instance().find(op);
  KILN_ASSERT(def, "no op " << op);
  for (const KernelDef& k : def->kernels)
    if (k.name == kernel) return k;
  KILN_ASSERT(false, op << " has no kernel " << kernel);
}

inline bool has_kernel(const std::string& op, const std::string& kernel) {
  const OpDef* def = OpRegistry::instance().find(op);
  for (const KernelDef& k : def->kernels)
    if (k.name == kernel) return true;
  return false;
}

inline KernelSpec spec_of(const Node& node, int threads) {
  KernelSpec spec{node, {}, {}, {}, threads};
  for (Value* in : node.inputs()) {
    spec.inputs.push_back(in->type());
    spec.constant_inputs.push_back(nullptr);
  }
  for (Value* out : node.outputs()) spec.outputs.push_back(out->type());
  return spec;
}

// Why `kernel` can't run `node` ("" when it can).
inline std::string unsupported_reason(const Node& node, const std::string& kernel) {
  return kernel_of(node.op(), kernel).unsupported_reason(spec_of(node, 1));
}

// Runs one kernel of the node's op on `inputs`; returns the outputs.
inline std::vector<Tensor> run_kernel(const Node& node, const std::string& kernel,
                                      const std::vector<Tensor>& inputs, int threads = 1) {
  KernelSpec spec = spec_of(node, threads);
  const KernelDef& def = kernel_of(node.op(), kernel);
  KILN_ASSERT(def.unsupported_reason(spec).empty(), def.unsupported_reason(spec));
  std::unique_ptr<KernelInstance> instance = def.create(spec);
  std::vector<const void*> in_ptrs;
  for (const Tensor& t : inputs) in_ptrs.push_back(t.data());
  std::vector<Tensor> outputs;
  std::vector<void*> out_ptrs;
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    outputs.push_back(Tensor::empty(spec.outputs[i].dtype, spec.output_sizes(i)));
    out_ptrs.push_back(outputs.back().data());
  }
  std::vector<std::byte> scratch(instance->scratch_bytes());
  instance->run(in_ptrs, out_ptrs, scratch.data());
  return outputs;
}

inline Tensor tensor_of(const std::vector<int64_t>& sizes, const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::F32, sizes);
  KILN_ASSERT(static_cast<int64_t>(values.size()) == t.numel());
  std::memcpy(t.data(), values.data(), t.nbytes());
  return t;
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Uniform random values in [lo, hi) of any kernel dtype (integers truncated).
inline Tensor random_tensor(DType dtype, const std::vector<int64_t>& sizes, std::mt19937& rng,
                            double lo = -4, double hi = 4) {
  Tensor t = Tensor::empty(dtype, sizes);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::F64: t.data<double>()[i] = v; break;
      case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::I64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::BF16: t.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(static_cast<float>(v)); break;
      case DType::F16: t.data<cpu::Float16>()[i] = cpu::to_float16(static_cast<float>(v)); break;
      default: KILN_ASSERT(false, "random_tensor: unsupported dtype");
    }
  }
  return t;
}

// Values that break careless kernels: NaN, +-inf, +-0, subnormals, the extremes of f32.
inline const std::vector<float>& extreme_floats() {
  static const std::vector<float> values = {
      std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), 0.0f, -0.0f,
      std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
      1e-40f, -3e-39f, std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
      -std::numeric_limits<float>::max(), 88.7f, 89.0f, -87.5f, -103.9f, -104.5f, 1e20f, -1e20f,
      10.0f, -10.0f, -13.5f, 0.625f, -0.70710678f, 1.0f, -1.0f};
  return values;
}

// Overwrites about one element in eight of an f32 tensor with an extreme value.
inline void sprinkle_extremes(Tensor& t, std::mt19937& rng) {
  const std::vector<float>& extremes = extreme_floats();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (rng() % 8 == 0) t.data<float>()[i] = extremes[rng() % extremes.size()];
}

// Distance in units in the last place; 0 for two NaNs, +0 vs -0 and equal values.
inline int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float f) {
    int64_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : i;
  };
  int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Largest ULP distance between two f32 tensors of equal size; where = its index.
inline int64_t max_ulp(const Tensor& a, const Tensor& b, int64_t* where = nullptr) {
  KILN_ASSERT(a.numel() == b.numel());
  int64_t worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    int64_t d = ulp_distance(a.data<float>()[i], b.data<float>()[i]);
    if (d > worst) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

// Random bf16 values in [-3, 3] with extremes (NaN, infinities, ±0, subnormals), and the same
// widened to f32: a bf16 kernel's input and its f32 twin's.
inline std::pair<Tensor, Tensor> random_bf16_and_widened(const std::vector<int64_t>& sizes,
                                                          std::mt19937& rng) {
  Tensor x32 = random_tensor(DType::F32, sizes, rng, -3, 3);
  sprinkle_extremes(x32, rng);
  Tensor x = Tensor::empty(DType::BF16, sizes), wide = Tensor::empty(DType::F32, sizes);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(x32.data<float>()[i]);
    wide.data<float>()[i] = cpu::to_float(x.data<cpu::BFloat16>()[i]);
  }
  return {std::move(x), std::move(wide)};
}

// A bf16 tensor holding, bit for bit, an f32 tensor's values rounded to bf16 (what a cast gives):
// the result of a bf16 kernel that widens its operands and rounds the f32 kernel's result.
inline ::testing::AssertionResult is_rounded_to_bf16(const Tensor& got, const Tensor& f32) {
  if (got.dtype() != DType::BF16 || f32.dtype() != DType::F32 || got.numel() != f32.numel())
    return ::testing::AssertionFailure() << "not a bf16 tensor of the f32 one's size";
  for (int64_t i = 0; i < got.numel(); ++i) {
    const uint16_t want = cpu::to_bfloat16(f32.data<float>()[i]).bits;
    if (got.data<cpu::BFloat16>()[i].bits != want)
      return ::testing::AssertionFailure() << "element " << i << ": bits " << std::hex
                                           << got.data<cpu::BFloat16>()[i].bits << " vs " << want;
  }
  return ::testing::AssertionSuccess();
}

// Equal bit for bit, except that any two NaNs match (payloads may differ with operand order).
inline ::testing::AssertionResult same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << "dtypes or sizes differ";
  if (a.dtype() == DType::F32) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      float x = a.data<float>()[i], y = b.data<float>()[i];
      if (std::isnan(x) && std::isnan(y)) continue;
      if (std::bit_cast<uint32_t>(x) != std::bit_cast<uint32_t>(y))
        return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
    }
    return ::testing::AssertionSuccess();
  }
  if (a.same_contents(b)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "contents differ";
}

inline ErrorCode error_code_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no kiln::Error thrown";
  return ErrorCode::InvalidArgument;
}

}  // namespace kiln::test
