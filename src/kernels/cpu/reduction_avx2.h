// AVX2+FMA kernels for f32 reductions over the middle dim of x viewed as [outer, n, inner]: the
// last dim (inner = 1: contiguous rows) and any block of adjacent dims (inner > 1: 8 adjacent
// columns per vector). x86 only; call them only when has_avx2_fma().
//
// Accuracy (tests/cpp/test_ops_reduction.cc checks each bound against the reference kernels):
//  * Sums of f32 accumulate in f32 along a fixed pairwise tree: blocks of 256 elements of a row
//    (each of 32 lanes summing 8 of them) or of 8 steps down the columns, blocks then merged
//    pairwise. An element passes through at most T(n) = ceil(log2 n) + 10 roundings, so
//    |sum - exact| <= T(n) * 2^-24 * sum|x| (1.8e-6 * sum|x| at n = 1e6, where a plain loop's bound
//    is n * 2^-24 = 0.06). The tree depends on n only: results do not change with the thread
//    count.
//  * prod multiplies in f64 along the same tree: within one f32 ULP of the reference's serial f64
//    product (both are within (n - 1) * 2^-53 of the exact one), unless an f64 partial product
//    overflows or underflows, which depends on the order.
//  * var and std accumulate in f64 (two passes: mean, then squared deviations from it).
//  * logsumexp and log_softmax sum exp(x - max) as above (x - max carried exactly into exp), then
//    add log(sum) and max in f64: the error is at most one f32 ULP of the result plus
//    (T(n) + 3) * 2^-24. log_softmax over columns sums each column's terms serially in f64
//    (chunks of whole rows, for the caches), well within that bound.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"

namespace kiln::cpu {

enum class VectorReduction : uint8_t { Sum, Mean, Prod, Amax, Amin, Var, Std, LogSumExp, LogSoftmax };

// x viewed as [outer, n, inner], reduced over n.
struct ReduceExtents {
  int64_t outer = 1, n = 1, inner = 1;
};

#ifdef KILN_X86
namespace avx2 {

// y[o, i] = op over k of x[o, k, i]; for LogSoftmax y has x's shape. `correction` is var's and
// std's divisor offset (divide by max(0, n - correction)). Uses up to `threads` threads: over
// rows or column strips when there are enough of them, else over blocks of the reduced dim.
// amax and amin need n >= 1.
void reduce(VectorReduction op, const float* x, float* y, ReduceExtents e, double correction,
            int threads);
// The same on bf16 x and y: each element widened to f32 as it is read, each result rounded from
// the f32 one (the f32 kernel's bits between casts, without the widened copy).
void reduce(VectorReduction op, const BFloat16* x, BFloat16* y, ReduceExtents e,
            double correction, int threads);

// For each result of x viewed as [outer, n, inner] (1 <= n < 2^31): the index along n of its
// first largest (max) or smallest element, or of its first NaN (PyTorch's argmax and max.dim),
// into index, and with `values` that element into values. Rows when inner = 1, else blocks of
// adjacent columns, one lane each.
void arg_extremum(bool max, const float* x, ReduceExtents e, int64_t* index, float* values,
                  int threads);

// Folds one row block by block exactly as reduce() folds a row in memory (x as [1, n, 1]), for
// kernels that compute the row's elements a block at a time instead of writing the row out
// (fused_elementwise's reduction stage): Sum, Mean, Amax, Amin. Serial, one row per object.
class RowFold {
 public:
  static constexpr int64_t kBlock = 256;
  explicit RowFold(VectorReduction op);
  // The row's next kBlock elements (fewer only in its last block).
  void add(const float* block, int64_t count);
  // Several threads fold one row: each a run of run_blocks(...) blocks (the last run may be
  // shorter) starting at a multiple of it, into its own RowFold; appending the runs' folds in
  // order gives the serial fold's tree, so the result doesn't depend on the split.
  static int64_t run_blocks(int64_t blocks, int threads);
  void append(const RowFold& run);
  // The result of the row of n elements added so far.
  float result(int64_t n) const;

 private:
  VectorReduction op_;
  alignas(32) unsigned char state_[2432];  // the pass's pairwise tree (reduction_avx2.cc)
};

}  // namespace avx2
#endif

}  // namespace kiln::cpu
