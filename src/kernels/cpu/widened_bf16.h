// bf16 operands through an f32 kernel: where the CPU has no bf16 dot products (no AVX512-BF16),
// how a .kiln model compiled on a CPU with them runs its bf16 matmuls and convolutions
// elsewhere; and the bf16 reference kernels of the ops whose bf16 kernels widen their operands
// (pooling, attention: the f32 loops between a widening and a rounding). Each bf16 input is widened to f32 (a constant once, at creation; the others on each
// run, into scratch memory), the f32 kernel runs, and a bf16 output is rounded from its f32
// result to nearest even, as the reference kernels round. As exact as the bf16 kernels: a product
// of two bf16 values is exact in f32, and both accumulate in f32.
#pragma once

#include <functional>
#include <memory>

#include "ops/op_registry.h"

namespace kiln::cpu {

// Makes the f32 kernel from `spec` with every bf16 input and output made f32.
using F32KernelFactory = std::function<std::unique_ptr<KernelInstance>(const KernelSpec& f32)>;

// One output; at most 8 inputs.
std::unique_ptr<KernelInstance> create_widened_bf16(const KernelSpec& spec,
                                                    const F32KernelFactory& create_f32);

}  // namespace kiln::cpu
