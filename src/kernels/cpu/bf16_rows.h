// A row kernel of f32 run on bf16 rows: each row widened into an f32 buffer, the f32 kernel run
// there, its results rounded to bf16 (the norms' bf16 kernels). The bits are those of the f32
// kernel between two casts, with the row in L1 instead of a cast kernel's pass over the tensor
// each way.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cpu/float16.h"

namespace kiln::cpu {

inline void widen_bf16_row(const BFloat16* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(x[i]);
}
inline void narrow_to_bf16_row(const float* x, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bfloat16(x[i]);
}

// row_fn(x32, params32, y32) for each of `rows` rows of n elements of x into y; `params` (null
// or n elements each, the same for every row: weights, biases) are widened once. Widen and
// Narrow convert a row (the scalar functions above, or vector ones).
template <size_t kParams, typename RowFn, typename Widen, typename Narrow>
void bf16_rows_through_f32(const BFloat16* x, std::array<const BFloat16*, kParams> params,
                           BFloat16* y, int64_t rows, int64_t n, RowFn row_fn, Widen widen,
                           Narrow narrow) {
  // The row and the widened params, in a buffer each thread keeps: no allocation per call once
  // it has seen rows this long.
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(n) * (kParams + 1));
  float* row = buffer.data();
  std::array<const float*, kParams> params32{};
  for (size_t p = 0; p < kParams; ++p) {
    if (!params[p]) continue;
    float* wide = buffer.data() + static_cast<size_t>(n) * (p + 1);
    widen(params[p], wide, n);
    params32[p] = wide;
  }
  for (int64_t r = 0; r < rows; ++r) {
    widen(x + r * n, row, n);
    row_fn(row, params32, row);
    narrow(row, y + r * n, n);
  }
}

}  // namespace kiln::cpu
