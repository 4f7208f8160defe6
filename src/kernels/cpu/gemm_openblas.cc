// Matmul through OpenBLAS's cblas_sgemm, one call per output batch matrix (per panel of rows
// when the node carries an epilogue).
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/library_threads.h"

namespace kiln::cpu {

namespace {

// With an epilogue, each matrix is computed in panels of rows small enough to stay in L2, and
// the epilogue runs on a panel right after its GEMM instead of on all of C afterwards.
constexpr int64_t kEpiloguePanelFloats = 64 * 1024;  // 256 KiB of C
constexpr int64_t kMinPanelRows = 16;

class OpenBlasMatmul final : public KernelInstance {
 public:
  OpenBlasMatmul(MatmulGeometry g, GemmEpilogue e, int threads)
      : g_(std::move(g)),
        e_(e),
        threads_(std::max(threads, 1)),
        panel_rows_(e.empty() ? g_.m
                              : std::min(g_.m, std::max(kMinPanelRows, kEpiloguePanelFloats / g_.n))) {
  }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void*) const override {
    const auto* a = static_cast<const float*>(inputs[0]);
    const auto* b = static_cast<const float*>(inputs[1]);
    const auto* bias = e_.bias ? static_cast<const float*>(inputs[e_.bias_input()]) : nullptr;
    const auto* residual =
        e_.residual ? static_cast<const float*>(inputs[e_.residual_input()]) : nullptr;
    auto* c = static_cast<float*>(outputs[0]);
    const auto n = static_cast<blasint>(g_.n), k = static_cast<blasint>(g_.k);
    const int64_t panels = (g_.m + panel_rows_ - 1) / panel_rows_;
    // Unit u: panel u % panels of matrix u / panels.
    auto gemm = [&](int64_t u) {
      const int64_t i = u / panels, row = (u % panels) * panel_rows_;
      const int64_t rows = std::min(panel_rows_, g_.m - row);
      const int64_t c_offset = (i * g_.m + row) * g_.n;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, g_.transpose_b ? CblasTrans : CblasNoTrans,
                  static_cast<blasint>(rows), n, k, 1.f, a + g_.a_offsets[i] + row * g_.k, k,
                  b + g_.b_offsets[i], g_.transpose_b ? k : n, 0.f, c + c_offset, n);
      if (!e_.empty())
        apply_epilogue_f32(e_, c + c_offset, rows, g_.n, bias,
                           residual ? residual + c_offset : nullptr);
    };
    const int64_t count = g_.batch_count() * panels;
    if (threads_ > 1 && count >= threads_) {
      // One matrix or panel per thread: OpenBLAS runs single-threaded inside a parallel region,
      // which beats its own threading on each small matrix of a batch (12x128x64x128: 185 vs
      // 106 GFLOP/s on 2 threads).
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t u = 0; u < count; ++u) gemm(u);
    } else {
      LibraryThreads scope(threads_);
      for (int64_t u = 0; u < count; ++u) gemm(u);
    }
  }

 private:
  MatmulGeometry g_;
  GemmEpilogue e_;
  int threads_;
  int64_t panel_rows_;
};

}  // namespace

std::unique_ptr<KernelInstance> create_openblas_matmul(const MatmulGeometry& g,
                                                       const KernelSpec& spec) {
  KILN_ASSERT(!g.is_degenerate(), "OpenBLAS matmul given a degenerate geometry");
  return std::make_unique<OpenBlasMatmul>(g, epilogue_of(spec.node), spec.threads);
}

}  // namespace kiln::cpu
