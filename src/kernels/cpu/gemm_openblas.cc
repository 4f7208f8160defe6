// Matmul through OpenBLAS's cblas_sgemm, one call per output batch matrix, then the node's
// epilogue (bias, activation, residual) over the result.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/parallel_chunks.h"

namespace kiln::cpu {

namespace {

class OpenBlasMatmul final : public KernelInstance {
 public:
  OpenBlasMatmul(MatmulGeometry g, GemmEpilogue e, int threads)
      : g_(std::move(g)), e_(e), threads_(std::max(threads, 1)) {}

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void*) const override {
    const auto* a = static_cast<const float*>(inputs[0]);
    const auto* b = static_cast<const float*>(inputs[1]);
    const auto* bias = e_.bias ? static_cast<const float*>(inputs[e_.bias_input()]) : nullptr;
    const auto* residual =
        e_.residual ? static_cast<const float*>(inputs[e_.residual_input()]) : nullptr;
    auto* c = static_cast<float*>(outputs[0]);
    const auto m = static_cast<blasint>(g_.m), n = static_cast<blasint>(g_.n),
               k = static_cast<blasint>(g_.k);
    auto gemm = [&](int64_t i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, g_.transpose_b ? CblasTrans : CblasNoTrans, m, n, k,
                  1.f, a + g_.a_offsets[i], k, b + g_.b_offsets[i], g_.transpose_b ? k : n, 0.f,
                  c + i * g_.m * g_.n, n);
    };
    // The epilogue on rows [row, row + rows) of matrix i.
    auto epilogue = [&](int64_t i, int64_t row, int64_t rows) {
      const int64_t offset = (i * g_.m + row) * g_.n;
      apply_epilogue_f32(e_, c + offset, rows, g_.n, bias, residual ? residual + offset : nullptr);
    };
    const int64_t count = g_.batch_count();
    if (threads_ > 1 && count >= threads_) {
      // One matrix per thread, its epilogue right after: OpenBLAS runs single-threaded inside a
      // parallel region, which beats its own threading on each small matrix of a batch
      // (12x128x64x128: 185 vs 106 GFLOP/s on 2 threads).
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t i = 0; i < count; ++i) {
        gemm(i);
        if (!e_.empty()) epilogue(i, 0, g_.m);
      }
      return;
    }
    // One GEMM on all threads, then the epilogue over its rows on all threads. Row panels of
    // 256 KiB of C, each followed by its epilogue while in cache, lost everywhere: each panel's
    // GEMM packs all of B again (2 threads, bias and gelu, weights cold, GFLOP/s, panels vs this:
    // AVX-512 128x768x3072 79 vs 169, 128x768x768 136 vs 172, 1024x3072x768 185 vs 270;
    // OpenBLAS's Haswell kernels 64-78 vs 132-144, 109-116 vs 144-150, 136-141 vs 184-193).
    for (int64_t i = 0; i < count; ++i) {
      {
        LibraryThreads scope(threads_);
        gemm(i);
      }
      if (!e_.empty())
        parallel_chunks(g_.m, g_.n, threads_, [&](int64_t begin, int64_t end) {
          epilogue(i, begin, end - begin);
        });
    }
  }

 private:
  MatmulGeometry g_;
  GemmEpilogue e_;
  int threads_;
};

}  // namespace

std::unique_ptr<KernelInstance> create_openblas_matmul(const MatmulGeometry& g,
                                                       const KernelSpec& spec) {
  KILN_ASSERT(!g.is_degenerate(), "OpenBLAS matmul given a degenerate geometry");
  return std::make_unique<OpenBlasMatmul>(g, epilogue_of(spec.node), spec.threads);
}

}  // namespace kiln::cpu
