#include "kernels/cpu/gemm_epilogue.h"

#include <array>
#include <utility>

#include "kiln/error.h"

#include "kernels/cpu/elementwise_avx2.h"

namespace kiln::cpu {

namespace {

constexpr std::array<std::pair<Activation, const char*>, 7> kNames{{
    {Activation::None, "none"},
    {Activation::Relu, "relu"},
    {Activation::GeluErf, "gelu_erf"},
    {Activation::GeluTanh, "gelu_tanh"},
    {Activation::Silu, "silu"},
    {Activation::Sigmoid, "sigmoid"},
    {Activation::Tanh, "tanh"},
}};

#ifdef KILN_X86
UnaryArrayFn avx2_activation(Activation a) {
  switch (a) {
    case Activation::None: return nullptr;
    case Activation::Relu: return &avx2::relu;
    case Activation::GeluErf: return &avx2::gelu_erf;
    case Activation::GeluTanh: return &avx2::gelu_tanh;
    case Activation::Silu: return &avx2::silu;
    case Activation::Sigmoid: return &avx2::sigmoid;
    case Activation::Tanh: return &avx2::tanh;
  }
  return nullptr;
}
#endif

}  // namespace

std::optional<Activation> parse_activation(std::string_view name) {
  for (const auto& [a, spelling] : kNames)
    if (name == spelling) return a;
  return std::nullopt;
}

const char* activation_name(Activation a) {
  for (const auto& [candidate, spelling] : kNames)
    if (candidate == a) return spelling;
  return "?";
}

std::string activation_names() {
  std::string out;
  for (const auto& [a, spelling] : kNames) out += (out.empty() ? "" : ", ") + std::string(spelling);
  return out;
}

GemmEpilogue epilogue_of(const Node& node) {
  std::optional<Activation> activation = parse_activation(node.attr_string("fused_activation"));
  KILN_ASSERT(activation, "matmul " << node.name() << " has an unchecked activation");
  return {node.attr_bool("bias"), *activation, node.attr_bool("residual")};
}

void apply_epilogue_f32(const GemmEpilogue& e, float* c, int64_t rows, int64_t n,
                        const float* bias, const float* residual) {
#ifdef KILN_X86
  if (has_avx2_fma()) {
    // cpu::widest: the bits of the unfused op.
    const UnaryArrayFn activation = widest(avx2_activation(e.activation));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = c + r * n;
      if (e.bias) avx2::add(row, 1, bias, 1, row, n);
      if (activation) activation(row, row, n);
      if (e.residual) avx2::add(row, 1, residual + r * n, 1, row, n);
    }
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      c[r * n + j] = reference_epilogue(e, c[r * n + j], e.bias ? bias + j : nullptr,
                                        e.residual ? residual + r * n + j : nullptr);
}

}  // namespace kiln::cpu
