// The epilogue activations (gemm_epilogue.h) as oneDNN eltwise post-ops.
#pragma once

#include "dnnl.hpp"
#include "kernels/cpu/gemm_epilogue.h"
#include "kiln/error.h"

namespace kiln::cpu {

// Appends `a` (not None) to `ops`.
inline void append_activation(dnnl::post_ops& ops, Activation a) {
  dnnl::algorithm algorithm = dnnl::algorithm::undef;
  float alpha = 0.f;
  switch (a) {
    case Activation::Relu: algorithm = dnnl::algorithm::eltwise_relu; break;
    case Activation::GeluErf: algorithm = dnnl::algorithm::eltwise_gelu_erf; break;
    case Activation::GeluTanh: algorithm = dnnl::algorithm::eltwise_gelu_tanh; break;
    case Activation::Silu:  // x * sigmoid(alpha x), alpha 1
      algorithm = dnnl::algorithm::eltwise_swish;
      alpha = 1.f;
      break;
    case Activation::Sigmoid: algorithm = dnnl::algorithm::eltwise_logistic; break;
    case Activation::Tanh: algorithm = dnnl::algorithm::eltwise_tanh; break;
    case Activation::None: KILN_ASSERT(false, "no oneDNN eltwise for activation none");
  }
  ops.append_eltwise(1.f, algorithm, alpha, 0.f);
}

}  // namespace kiln::cpu
