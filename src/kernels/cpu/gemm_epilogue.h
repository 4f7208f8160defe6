// The epilogue a matmul node may carry (fused by src/passes/fuse_matmul_epilogue.cc):
//   C = activation(A·B + bias) + residual
// with bias [N] broadcast over the rows and residual of C's shape. The GEMM kernels apply it to
// each block of output rows right after computing it, while the block is still in cache.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/graph.h"

namespace kiln::cpu {

enum class Activation : uint8_t { None, Relu, GeluErf, GeluTanh, Silu, Sigmoid, Tanh };

// The attribute spelling ("none", "relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh");
// nullopt for any other string.
std::optional<Activation> parse_activation(std::string_view name);
const char* activation_name(Activation a);
// Every accepted spelling, for error messages.
std::string activation_names();

struct GemmEpilogue {
  bool bias = false;
  Activation activation = Activation::None;
  bool residual = false;

  bool empty() const { return !bias && activation == Activation::None && !residual; }
  // Epilogue inputs follow A and B: the bias first, then the residual.
  size_t bias_input() const { return 2; }
  size_t residual_input() const { return bias ? 3 : 2; }
};

// The epilogue of a matmul node whose attributes the op registry has checked.
GemmEpilogue epilogue_of(const Node& node);

// The activation as the elementwise ops' reference kernels compute it (src/ops/elementwise.cc):
// in double, rounded once to T, so that a fused reference matmul equals the unfused reference.
template <typename T>
T reference_activation(Activation a, T value) {
  const double x = value;
  switch (a) {
    case Activation::None: return value;
    case Activation::Relu: return value < T(0) ? T(0) : value;
    case Activation::GeluErf:
      return static_cast<T>(0.5 * x * std::erfc(-x * std::numbers::sqrt2 / 2));
    case Activation::GeluTanh:
      return static_cast<T>(
          x / (1 + std::exp(-2 * std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x))));
    case Activation::Silu: return static_cast<T>(x / (1 + std::exp(-x)));
    case Activation::Sigmoid: return static_cast<T>(1 / (1 + std::exp(-x)));
    case Activation::Tanh: return static_cast<T>(std::tanh(x));
  }
  return value;
}

// One output element through the epilogue, rounded after each step as the unfused ops round.
template <typename T>
T reference_epilogue(const GemmEpilogue& e, T c, const T* bias, const T* residual) {
  if (e.bias) c = c + *bias;
  c = reference_activation(e.activation, c);
  if (e.residual) c = c + *residual;
  return c;
}

// Applies the epilogue in place to `rows` rows of n f32 values, with the elementwise ops' best
// kernels (AVX2 where the CPU has it), so a fused GEMM rounds exactly as the unfused chain does.
// bias has n values; residual (when the epilogue has one) holds the same rows as c.
void apply_epilogue_f32(const GemmEpilogue& e, float* c, int64_t rows, int64_t n,
                        const float* bias, const float* residual);

}  // namespace kiln::cpu
