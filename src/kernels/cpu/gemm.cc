#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>

#include "dnnl.hpp"
#include "kernels/cpu/cpu_features.h"

namespace kiln::cpu {

MatmulGeometry make_matmul_geometry(const std::vector<int64_t>& a_sizes,
                                    const std::vector<int64_t>& b_sizes, bool transpose_b) {
  KILN_ASSERT(!a_sizes.empty() && !b_sizes.empty(), "matmul of a scalar");
  MatmulGeometry g;
  const size_t a_rank = a_sizes.size(), b_rank = b_sizes.size();
  g.m = a_rank == 1 ? 1 : a_sizes[a_rank - 2];
  g.k = a_sizes.back();
  int64_t b_k;
  if (b_rank == 1) {
    // A vector is the same memory as a column [K, 1] and as a transposed row [1, K].
    b_k = b_sizes[0];
    g.n = 1;
  } else {
    g.transpose_b = transpose_b;
    b_k = transpose_b ? b_sizes.back() : b_sizes[b_rank - 2];
    g.n = transpose_b ? b_sizes[b_rank - 2] : b_sizes.back();
  }
  KILN_ASSERT(b_k == g.k, "matmul contraction dims differ: " << g.k << " vs " << b_k);

  const size_t a_batch_rank = a_rank > 2 ? a_rank - 2 : 0;
  const size_t b_batch_rank = b_rank > 2 ? b_rank - 2 : 0;
  const size_t rank = std::max(a_batch_rank, b_batch_rank);
  g.a_batch.assign(rank - a_batch_rank, 1);
  g.a_batch.insert(g.a_batch.end(), a_sizes.begin(), a_sizes.begin() + a_batch_rank);
  g.b_batch.assign(rank - b_batch_rank, 1);
  g.b_batch.insert(g.b_batch.end(), b_sizes.begin(), b_sizes.begin() + b_batch_rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = g.a_batch[i], b = g.b_batch[i];
    KILN_ASSERT(a == b || a == 1 || b == 1,
                "matmul batch dims don't broadcast: " << a << " vs " << b);
    g.batch.push_back(a == 1 ? b : a);
  }

  const bool b_shared =
      std::all_of(g.b_batch.begin(), g.b_batch.end(), [](int64_t d) { return d == 1; });
  if (b_shared && g.a_batch == g.batch) {
    for (int64_t d : g.batch) g.m *= d;
    g.batch.clear();
    g.a_batch.clear();
    g.b_batch.clear();
  }

  int64_t count = 1;
  for (int64_t d : g.batch) count *= d;
  g.a_offsets.reserve(static_cast<size_t>(count));
  g.b_offsets.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t a_index = 0, b_index = 0;  // matrix indices within each operand's own batch
    for (size_t d = 0; d < rank; ++d) {
      a_index = a_index * g.a_batch[d] + (g.a_batch[d] == 1 ? 0 : index[d]);
      b_index = b_index * g.b_batch[d] + (g.b_batch[d] == 1 ? 0 : index[d]);
    }
    g.a_offsets.push_back(a_index * g.m * g.k);
    g.b_offsets.push_back(b_index * g.k * g.n);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < g.batch[d]) break;
      index[d] = 0;
    }
  }
  return g;
}

const GemmLibraryKernels& GemmLibraryKernels::on_this_cpu() {
  static const GemmLibraryKernels kernels = [] {
    GemmLibraryKernels k;
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    k.onednn_avx512 = (isa & avx512) == avx512;
    // A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model, and one older than the CPU falls
    // back to AVX2 ones: Debian's 0.3.21 calls a Zen 5 "Haswell". Where 512-bit FMAs take two
    // 256-bit units (Zen 4) that costs nothing; where they run at full width, half the peak.
    k.openblas_core = openblas_get_corename();
    std::string core = k.openblas_core;
    std::transform(core.begin(), core.end(), core.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const bool openblas_avx512 =
        core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
    k.openblas_half_width = k.onednn_avx512 && !openblas_avx512 && avx512_fma_full_width();
    return k;
  }();
  return kernels;
}

// Measured with 2 threads, f32, GFLOP/s, B prepacked for oneDNN (the table is in docs/ops.md):
//  * oneDNN with AVX-512 (its brgemm matmul; a 2-vCPU Zen 4 EPYC): oneDNN is ahead at every
//    shape measured: 128x768x768 (MxKxN) 229 vs OpenBLAS 196, 16x768x768 225 vs 133, 1x768x3072
//    83 vs 9; a batch of 12 128x64x128 216 vs 45; the two exceptions below.
//  * OpenBLAS with AVX2 kernels on full-width AVX-512 FMAs (a 2-vCPU Zen 5 EPYC, OpenBLAS
//    0.3.21 "Haswell"): oneDNN is ahead at every shape, by 2x from M = 128 (128x768x3072 495 vs
//    215; with B [K, N] read in place 446 vs 219; a batch of 12 1x64x128 43 vs 24).
//  * oneDNN without AVX-512 (its gemm-based matmul): on the reference 2-vCPU AVX2 EPYC, oneDNN
//    38-44 vs OpenBLAS 10 at 1x768x768 but 39-72 vs 134-169 at M = 128. With ONEDNN_MAX_CPU_ISA
//    =AVX2 on the Zen 4 EPYC oneDNN is ahead below M = 16 too (1x768x3072: 63 vs 9).
GemmLibrary preferred_gemm_library(const MatmulGeometry& g, bool weights_in_place,
                                   std::string* why, const GemmLibraryKernels& kernels) {
  const bool onednn_has_avx512 = kernels.onednn_avx512;
  constexpr int64_t kOpenBlasMinM = 16;
  auto choose = [&](GemmLibrary lib, const std::string& reason) {
    if (why) *why = reason;
    return lib;
  };
  if (kernels.openblas_half_width)
    return choose(GemmLibrary::OneDNN,
                  "OpenBLAS runs its " + kernels.openblas_core +
                      " kernels (AVX2) on a CPU with full-width AVX-512 FMAs: oneDNN is faster "
                      "at every measured shape (Zen 5, 128x768x3072: 495 vs 215 GFLOP/s)");
  // One row per matrix of a batch (attention's products while decoding): OpenBLAS runs one
  // matrix per thread, oneDNN's batched matmul splits them worse (12 heads of 1x64x128 and
  // 1x128x64, AVX-512: 57.7-58.6 vs 36.6-38.6 GFLOP/s; 51 vs 35-38 on one thread).
  if (onednn_has_avx512 && g.m == 1 && g.batch_count() > 1)
    return choose(GemmLibrary::OpenBLAS,
                  "a batch of " + std::to_string(g.batch_count()) +
                      " products with M=1: OpenBLAS's matrix-per-thread loop is faster "
                      "(12x1x64x128: 58 vs 37 GFLOP/s)");
  // Weights [K, N] read where they lie: oneDNN's brgemm on that layout collapses for N = 3072
  // (128x768x3072: 140 vs OpenBLAS 280 GFLOP/s; 1024x768x3072: 147 vs 326), where OpenBLAS
  // reads either layout at full speed. [N, K] (a linear layer's) stays with oneDNN (128x768x3072:
  // 317 vs 278).
  if (onednn_has_avx512 && weights_in_place && !g.transpose_b && g.m >= kOpenBlasMinM)
    return choose(GemmLibrary::OpenBLAS,
                  "weights [K, N] read in place with M=" + std::to_string(g.m) +
                      " >= 16: oneDNN's matmul is slow on that layout (128x768x3072: 140 vs "
                      "280 GFLOP/s)");
  if (onednn_has_avx512)
    return choose(GemmLibrary::OneDNN,
                  "oneDNN's AVX-512 matmul is faster than OpenBLAS at every measured shape on "
                  "AVX-512 CPUs (128x768x768: 229 vs 196 GFLOP/s)");
  if (g.m < kOpenBlasMinM)
    return choose(GemmLibrary::OneDNN, "M=" + std::to_string(g.m) +
                                           " < 16: oneDNN is faster for small M on AVX2 CPUs "
                                           "(measured 1x768x768: 38-44 vs 10 GFLOP/s)");
  return choose(GemmLibrary::OpenBLAS, "M=" + std::to_string(g.m) +
                                           " >= 16: OpenBLAS is faster on AVX2 CPUs (measured "
                                           "128x768x768: 153 vs 68-72 GFLOP/s)");
}

}  // namespace kiln::cpu
