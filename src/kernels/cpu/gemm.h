// GEMM on the CPU: the problem description shared by every GEMM kernel, the measured rule that
// picks a library per shape class, and the library kernels (one file per library).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/op_registry.h"

namespace kiln::cpu {

// C[batch..., M, N] = A[batch..., M, K] · B[batch..., K, N], every operand dense row-major, batch
// dims broadcast NumPy-style. With transpose_b, B is stored as [batch..., N, K] (a linear layer's
// weights).
struct MatmulGeometry {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_b = false;
  // Output batch dims, and each operand's batch dims padded to the same rank (1 where broadcast).
  std::vector<int64_t> batch, a_batch, b_batch;
  // Element offsets of A's and B's matrices for each output batch index (row-major over batch).
  std::vector<int64_t> a_offsets, b_offsets;

  int64_t batch_count() const { return static_cast<int64_t>(a_offsets.size()); }
  // Nothing to multiply: the output is empty or, for K = 0, all zeros.
  bool is_degenerate() const { return m == 0 || n == 0 || k == 0 || batch_count() == 0; }
};

// The geometry of torch.matmul on operands of these sizes (rank 1 included: A [K] is one row, B
// [K] one column). When B has no batch of its own and A isn't broadcast, the batch folds into M:
// one GEMM with M' = batch * M, which is both what the libraries run fastest and what the
// library rule below should judge.
MatmulGeometry make_matmul_geometry(const std::vector<int64_t>& a_sizes,
                                    const std::vector<int64_t>& b_sizes, bool transpose_b);

enum class GemmLibrary { OpenBLAS, OneDNN };

// The kernels each library runs on a CPU: what the measured rule depends on besides the shape.
struct GemmLibraryKernels {
  bool onednn_avx512 = false;  // oneDNN's effective ISA includes AVX-512 (avx512_core)
  // OpenBLAS runs AVX2 kernels on a CPU whose 512-bit FMAs run at full width: half its peak.
  bool openblas_half_width = false;
  std::string openblas_core;  // OpenBLAS's name for the kernels it chose (openblas_get_corename)

  static const GemmLibraryKernels& on_this_cpu();
};

// Which library multiplies f32 matrices of this geometry faster with these kernels, by
// measurement (the figures are in gemm.cc); `why` receives the measured reason for the choice.
// `weights_in_place`: B is a constant that oneDNN must read as stored instead of prepacked
// (gemm_weights_in_place).
GemmLibrary preferred_gemm_library(
    const MatmulGeometry& g, bool weights_in_place = false, std::string* why = nullptr,
    const GemmLibraryKernels& kernels = GemmLibraryKernels::on_this_cpu());

// f32 kernels for non-degenerate geometries. When B is a graph constant (spec.constant_inputs[1]),
// a kernel may prepack it at creation.
std::unique_ptr<KernelInstance> create_openblas_matmul(const MatmulGeometry& g,
                                                       const KernelSpec& spec);
std::unique_ptr<KernelInstance> create_onednn_matmul(const MatmulGeometry& g,
                                                     const KernelSpec& spec);
// bf16 operands take oneDNN's bf16 GEMM on CPUs with AVX512-BF16; elsewhere create_onednn_matmul
// widens them for the f32 GEMM the measured rule picks (widened_bf16.h).

}  // namespace kiln::cpu
