// The vectorized layer norm, written once over a vector ISA's lanes (normalization_avx2.cc,
// normalization_avx512.cc), in double and rounded to f32 once:
//  * Mean and variance in one pass: with d = x - c (c = the row's first element, so d is exact
//    in double), mean = c + sum(d)/n and var = sum(d^2)/n - (sum(d)/n)^2. The sums' rounding
//    grows with |c - mean|, and the subtraction cancels log2(r) bits of double's 53,
//    r = sum(d^2) / (n var) = 1 + (c - mean)^2 / var. Rows with r above 256 (c more than 16
//    standard deviations out) take a second pass over x - mean that corrects both, as do NaN
//    and infinite rows.
//  * Then y = (x - mean) * rstd * weight + bias, weight and bias widened to double once per
//    call rather than once per row.
// Three passes converting every element to double each time (this kernel before) left it
// compute-bound: ViT-B/16's [1576, 768] at 26 GB/s where memcpy streams 44 (docs/ops.md).
//
// V, the ISA's lanes (all static, each function with its target attribute), has:
//   Doubles (kFloats / 2 of them), Lanes (which lanes of Doubles lie in the row), kFloats;
//   splat, zero, add, sub, mul, fma, load(const double*), sum(Doubles);
//   widen(x, lo, hi): kFloats floats at x as doubles; narrow_store(y, lo, hi): the inverse;
//   for a row's last block of `count` (1..kFloats - 1) floats, widen_tail(x, count, lo, hi,
//   lo_lanes, hi_lanes) (0 off the row), narrow_store_tail(y, count, lo, hi),
//   sub_within(a, b, lanes) (0 off the lanes) and load_within(const double*, lanes).
// The functions here are always inlined into the ISA's entry points (functions with its target
// attribute), where V's functions inline in turn, as pooling.h's loops; hence no lambdas
// calling V here. GCC warns (-Wpsabi) that AVX-512 vectors passed between these functions and
// V's change the calling convention; no such call survives the inlining, and the including
// files silence it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/float16.h"

namespace kiln::cpu::layer_norm_rows {

#define KILN_LAYER_NORM_INLINE __attribute__((always_inline)) inline

// Weight and bias as doubles (null where absent), in a buffer each thread keeps.
struct DoubleParams {
  const double* weight = nullptr;
  const double* bias = nullptr;
};
inline double as_double(float v) { return v; }
inline double as_double(BFloat16 v) { return to_float(v); }

template <typename T>
DoubleParams widen_params(const T* weight, const T* bias, int64_t n) {
  thread_local std::vector<double> buffer;
  buffer.resize(2 * static_cast<size_t>(n));
  DoubleParams p;
  if (weight) {
    for (int64_t i = 0; i < n; ++i) buffer[static_cast<size_t>(i)] = as_double(weight[i]);
    p.weight = buffer.data();
  }
  if (bias) {
    for (int64_t i = 0; i < n; ++i) buffer[static_cast<size_t>(n + i)] = as_double(bias[i]);
    p.bias = buffer.data() + n;
  }
  return p;
}

struct Moments {
  double mean, var;
};

// One block of the row as doubles: kFloats of them, or (kTail) the row's last `count`, with the
// lanes of each half that lie in the row.
template <typename V, bool kTail>
struct Block {
  typename V::Doubles half[2];
  typename V::Lanes lanes[2];

  KILN_LAYER_NORM_INLINE Block(const float* x, int64_t count) {
    if constexpr (kTail) V::widen_tail(x, count, half[0], half[1], lanes[0], lanes[1]);
    else V::widen(x, half[0], half[1]);
  }
  // half h minus b, 0 off the row
  KILN_LAYER_NORM_INLINE void minus(int h, const typename V::Doubles& b,
                                    typename V::Doubles& out) const {
    if constexpr (kTail) out = V::sub_within(half[h], b, lanes[h]);
    else out = V::sub(half[h], b);
  }
  // the doubles at p for half h's lanes
  KILN_LAYER_NORM_INLINE void load(int h, const double* p, typename V::Doubles& out) const {
    if constexpr (kTail) out = V::load_within(p, lanes[h]);
    else out = V::load(p);
  }
};

// sum(x - c) and sum((x - c)^2) over the row, in double.
template <typename V, bool kTail>
KILN_LAYER_NORM_INLINE void add_shifted(const Block<V, kTail>& block,
                                        const typename V::Doubles& shift,
                                        typename V::Doubles& sum, typename V::Doubles& squares) {
  for (int h = 0; h < 2; ++h) {
    typename V::Doubles d;
    block.minus(h, shift, d);
    sum = V::add(sum, d);
    squares = V::fma(d, d, squares);
  }
}

template <typename V>
KILN_LAYER_NORM_INLINE void shifted_sums(const float* x, int64_t n, double c, double& sum,
                                         double& squares) {
  const typename V::Doubles shift = V::splat(c);
  typename V::Doubles s = V::zero(), q = V::zero();
  int64_t i = 0;
  for (; i + V::kFloats <= n; i += V::kFloats)
    add_shifted(Block<V, false>(x + i, V::kFloats), shift, s, q);
  if (i < n) add_shifted(Block<V, true>(x + i, n - i), shift, s, q);
  sum = V::sum(s);
  squares = V::sum(q);
}

template <typename V>
KILN_LAYER_NORM_INLINE Moments moments(const float* x, int64_t n) {
  const double count = static_cast<double>(n);
  double sum, squares;
  shifted_sums<V>(x, n, x[0], sum, squares);
  const double mean_d = sum / count;
  const double var = squares / count - mean_d * mean_d;
  const double mean = x[0] + mean_d;
  constexpr double kMaxCancellation = 256;  // 8 of double's 53 bits
  if (squares <= kMaxCancellation * count * var) return {mean, var};
  // False for NaN too. Shifted by the first estimate of the mean, r is about 1.
  shifted_sums<V>(x, n, mean, sum, squares);
  const double correction = sum / count;
  return {mean + correction, squares / count - correction * correction};
}

// y = (x - mean) * rstd * weight + bias for one block, rounded to f32 once.
template <typename V, bool kWeight, bool kBias, bool kTail>
KILN_LAYER_NORM_INLINE void normalize_block(const float* x, DoubleParams p, float* y,
                                            int64_t count, const typename V::Doubles& mean,
                                            const typename V::Doubles& rstd) {
  const Block<V, kTail> block(x, count);
  typename V::Doubles out[2], param;
  for (int h = 0; h < 2; ++h) {
    const int64_t offset = h * (V::kFloats / 2);
    block.minus(h, mean, out[h]);
    out[h] = V::mul(out[h], rstd);
    if constexpr (kWeight) {
      block.load(h, p.weight + offset, param);
      out[h] = V::mul(out[h], param);
    }
    if constexpr (kBias) {
      block.load(h, p.bias + offset, param);
      out[h] = V::add(out[h], param);
    }
  }
  if constexpr (kTail) V::narrow_store_tail(y, count, out[0], out[1]);
  else V::narrow_store(y, out[0], out[1]);
}

template <typename V, bool kWeight, bool kBias>
KILN_LAYER_NORM_INLINE void normalize_row(const float* x, DoubleParams p, float* y, int64_t n,
                                          double eps) {
  const Moments mo = moments<V>(x, n);
  const typename V::Doubles mean = V::splat(mo.mean);
  const typename V::Doubles rstd = V::splat(1.0 / std::sqrt(mo.var + eps));
  auto at = [&p](int64_t i) {
    return DoubleParams{p.weight ? p.weight + i : nullptr, p.bias ? p.bias + i : nullptr};
  };
  int64_t i = 0;
  for (; i + V::kFloats <= n; i += V::kFloats)
    normalize_block<V, kWeight, kBias, false>(x + i, at(i), y + i, V::kFloats, mean, rstd);
  if (i < n) normalize_block<V, kWeight, kBias, true>(x + i, at(i), y + i, n - i, mean, rstd);
}

// Rows of n elements; the ISAs' f32 entry points, and their bf16 ones one widened row at a time.
template <typename V>
KILN_LAYER_NORM_INLINE void normalize_rows(const float* x, DoubleParams p, float* y,
                                           int64_t rows, int64_t n, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    float* out = y + r * n;
    if (p.weight && p.bias) normalize_row<V, true, true>(row, p, out, n, eps);
    else if (p.weight) normalize_row<V, true, false>(row, p, out, n, eps);
    else if (p.bias) normalize_row<V, false, true>(row, p, out, n, eps);
    else normalize_row<V, false, false>(row, p, out, n, eps);
  }
}

#undef KILN_LAYER_NORM_INLINE

}  // namespace kiln::cpu::layer_norm_rows
