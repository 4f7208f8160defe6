// Running folds (cumsum, cumprod, logcumsumexp) of x viewed as [outer, n, inner] along n. Each
// line's accumulator (Acc: f64 for f32 and f64, f32 for f16 and bf16, wrapping 64-bit integers
// for the rest) takes its elements in the line's order and is written at every element: the
// reference's arithmetic, so the same bits; these kernels only change the order in which lines
// are visited, so that memory is read along rows.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/float16.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/reduction_avx2.h"

namespace kiln::cpu {

// inner > 1: blocks of up to 512 adjacent columns step down n together, an accumulator each.
template <typename T, typename Acc, typename Out, typename Step>
void scan_columns(const T* x, Out* y, ReduceExtents e, Acc init, int threads, Step step) {
  constexpr int64_t kBlock = 512;
  const int64_t blocks = (e.inner + kBlock - 1) / kBlock;
  parallel_chunks(e.outer * blocks, e.n * std::min(e.inner, kBlock), threads,
                  [&](int64_t begin, int64_t end) {
                    Acc acc[kBlock];
                    for (int64_t item = begin; item < end; ++item) {
                      const int64_t o = item / blocks, column = (item % blocks) * kBlock;
                      const int64_t width = std::min(kBlock, e.inner - column);
                      std::fill(acc, acc + width, init);
                      const T* in = x + o * e.n * e.inner + column;
                      Out* out = y + o * e.n * e.inner + column;
                      for (int64_t k = 0; k < e.n; ++k, in += e.inner, out += e.inner)
                        for (int64_t c = 0; c < width; ++c) {
                          acc[c] = step(acc[c], widen_to<Acc>(in[c]));
                          out[c] = narrow_to<Out>(acc[c]);
                        }
                    }
                  });
}

#ifdef KILN_X86
namespace avx2 {

// inner = 1, f32: `rows` rows of n elements, 8 rows at a time (two 8x8 transposes a block of 8
// columns, each row's f64 sum in one lane); rows beyond a multiple of 8 one element at a time.
void cumsum_rows(const float* x, float* y, int64_t rows, int64_t n, int threads);

}  // namespace avx2
#endif

}  // namespace kiln::cpu
