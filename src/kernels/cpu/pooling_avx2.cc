#include "kernels/cpu/pooling.h"

#ifdef KILN_X86
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

namespace {

// 8 floats `stride` elements apart from p. Stride 2 reads p[0..15].
KILN_TARGET_AVX2 inline __m256 load_strided(const float* p, int64_t stride, __m256i offsets) {
  if (stride == 1) return _mm256_loadu_ps(p);
  if (stride == 2) {
    // Even lanes of a and b, in the order a0 a2 b0 b2 a4 a6 b4 b6, then 64-bit pairs reordered.
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  return _mm256_i32gather_ps(p, offsets, 4);
}

// A running maximum that ends NaN wherever it saw a NaN, as the reference's. max(v, acc) keeps
// acc when either is NaN, so a NaN in acc stays; NaNs among the v are collected apart. Ties keep
// the earlier value.
struct MaxReduction {
  struct Vector {
    __m256 acc, saw_nan;
    KILN_TARGET_AVX2 Vector()
        : acc(_mm256_set1_ps(-std::numeric_limits<float>::infinity())), saw_nan(_mm256_setzero_ps()) {}
    KILN_TARGET_AVX2 void add(__m256 v) {
      acc = _mm256_max_ps(v, acc);
      saw_nan = _mm256_or_ps(saw_nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    KILN_TARGET_AVX2 __m256 result() const {
      return _mm256_blendv_ps(acc, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), saw_nan);
    }
  };
  struct Scalar {
    float acc = -std::numeric_limits<float>::infinity();
    void add(float v) {
      if (v > acc || std::isnan(v)) acc = v;
    }
    float result() const { return acc; }
  };
};

struct SumReduction {
  struct Vector {
    __m256 acc;
    KILN_TARGET_AVX2 Vector() : acc(_mm256_setzero_ps()) {}
    KILN_TARGET_AVX2 void add(__m256 v) { acc = _mm256_add_ps(acc, v); }
    KILN_TARGET_AVX2 __m256 result() const { return acc; }
  };
  struct Scalar {
    float acc = 0;
    void add(float v) { acc += v; }
    float result() const { return acc; }
  };
};

// Row reductions: out[ox] = the reduction over the window's columns of input row `row`, for
// every output column. Windows crossing the row's ends take the scalar path.
template <typename R>
KILN_TARGET_AVX2 void reduce_row(const Pool2dGeometry& g, const float* row, float* out) {
  // Output columns [first, last) have windows wholly inside the row, a stride-2 load's extra
  // element included.
  const int64_t reach = (g.kw - 1) * g.dilation_w + (g.stride_w == 2 ? 1 : 0);
  const int64_t first = std::min((g.pad_w + g.stride_w - 1) / g.stride_w, g.ow);
  const int64_t span = g.w - 1 - reach + g.pad_w;
  const int64_t last = std::max(first, std::min(g.ow, span >= 0 ? span / g.stride_w + 1 : 0));
  auto scalar = [&](int64_t ox) {
    typename R::Scalar r;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
      if (ix >= 0 && ix < g.w) r.add(row[ix]);
    }
    out[ox] = r.result();
  };
  const __m256i offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(g.stride_w)));
  auto vector = [&](int64_t ox) KILN_TARGET_AVX2 {
    const float* start = row + ox * g.stride_w - g.pad_w;
    typename R::Vector r;
    for (int64_t kx = 0; kx < g.kw; ++kx)
      r.add(load_strided(start + kx * g.dilation_w, g.stride_w, offsets));
    _mm256_storeu_ps(out + ox, r.result());
  };
  for (int64_t ox = 0; ox < first; ++ox) scalar(ox);
  if (last - first >= 8) {
    for (int64_t ox = first; ox + 8 <= last; ox += 8) vector(ox);
    // The last 8 again, overlapping the blocks before: the same values, rewritten.
    if ((last - first) % 8 != 0) vector(last - 8);
  } else {
    for (int64_t ox = first; ox < last; ++ox) scalar(ox);
  }
  for (int64_t ox = last; ox < g.ow; ++ox) scalar(ox);
}

// A window's reduction is the reduction over its rows of each row's: the row reductions of a
// plane first (each input row serves every window that covers it), then down the columns;
// finish(reduced, oy, ox, mask) gives the output vector. Ties and NaNs resolve as row-major
// order does in the reference.
template <typename R, typename Finish>
KILN_TARGET_AVX2 void pool_planes(const Pool2dGeometry& g, const float* x, float* y,
                                  int64_t begin, int64_t end, float* rows, Finish finish) {
  for (int64_t p = begin; p < end; ++p) {
    const float* plane = x + p * g.h * g.w;
    for (int64_t iy = 0; iy < g.h; ++iy) reduce_row<R>(g, plane + iy * g.w, rows + iy * g.ow);
    float* y_plane = y + p * g.oh * g.ow;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ox += 8) {
        const __m256i mask = tail_mask(std::min<int64_t>(8, g.ow - ox));
        typename R::Vector r;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
          if (iy >= 0 && iy < g.h) r.add(_mm256_maskload_ps(rows + iy * g.ow + ox, mask));
        }
        _mm256_maskstore_ps(y_plane + oy * g.ow + ox, mask, finish(r.result(), oy, ox, mask));
      }
    }
  }
}

struct Unchanged {
  KILN_TARGET_AVX2 __m256 operator()(__m256 v, int64_t, int64_t, __m256i) const { return v; }
};

struct DivideByCount {
  const float* row_divisors;
  const float* column_divisors;
  KILN_TARGET_AVX2 __m256 operator()(__m256 sum, int64_t oy, int64_t ox, __m256i mask) const {
    // Masked-off lanes divide by 0 harmlessly: they are not stored.
    const __m256 divisor = _mm256_mul_ps(_mm256_set1_ps(row_divisors[oy]),
                                         _mm256_maskload_ps(column_divisors + ox, mask));
    return _mm256_div_ps(sum, divisor);
  }
  // One output pixel's divisor, for every channel lane.
  KILN_TARGET_AVX2 __m256 operator()(__m256 sum, int64_t oy, int64_t ox) const {
    return _mm256_div_ps(sum, _mm256_set1_ps(row_divisors[oy] * column_divisors[ox]));
  }
};

struct UnchangedPixel {
  KILN_TARGET_AVX2 __m256 operator()(__m256 v, int64_t, int64_t) const { return v; }
};

// Up to 8 channels at p, as f32 lanes (the others 0), and back: f32 under a mask, bf16 widened
// and narrowed.
KILN_TARGET_AVX2 inline __m256 load_channels(const float* p, int64_t count, __m256i mask) {
  (void)count;
  return _mm256_maskload_ps(p, mask);
}
KILN_TARGET_AVX2 inline __m256 load_channels(const BFloat16* p, int64_t count, __m256i) {
  return count == 8 ? load_bf16(p) : load_bf16_tail(p, count);
}
KILN_TARGET_AVX2 inline void store_channels(float* p, int64_t, __m256i mask, __m256 v) {
  _mm256_maskstore_ps(p, mask, v);
}
KILN_TARGET_AVX2 inline void store_channels(BFloat16* p, int64_t count, __m256i, __m256 v) {
  if (count == 8) store_bf16(p, v);
  else store_bf16_tail(p, count, v);
}

// Channels-inner pooling (see pooling.h): the channels are the vector lanes, so every window
// element is one contiguous load of up to 8 channels.
template <typename R, typename T, typename Finish>
KILN_TARGET_AVX2 void pool_channels_inner(const Pool2dGeometry& g, const T* x, T* y,
                                          int64_t begin, int64_t end, Finish finish) {
  for_each_channels_inner_output<8>(
      g, x, y, begin, end,
      [&](const T* in, T* out, int64_t count, int64_t block, int64_t oy,
          int64_t ox) KILN_TARGET_AVX2 {
        const __m256i mask = tail_mask(count);
        typename R::Vector r;
        for_each_window_element(g, oy, ox, [&](int64_t pixel) KILN_TARGET_AVX2 {
          r.add(load_channels(in + pixel * block, count, mask));
        });
        store_channels(out, count, mask, finish(r.result(), oy, ox));
      });
}

}  // namespace

KILN_TARGET_AVX2 void max_pool_planes(const Pool2dGeometry& g, const float* x, float* y,
                                      int64_t begin, int64_t end, float* rows) {
  pool_planes<MaxReduction>(g, x, y, begin, end, rows, Unchanged{});
}

KILN_TARGET_AVX2 void avg_pool_planes(const Pool2dGeometry& g, const float* x, float* y,
                                      int64_t begin, int64_t end, float* rows,
                                      const float* row_divisors, const float* column_divisors) {
  pool_planes<SumReduction>(g, x, y, begin, end, rows, DivideByCount{row_divisors, column_divisors});
}

KILN_TARGET_AVX2 void max_pool_channels_inner(const Pool2dGeometry& g, const float* x, float* y,
                                              int64_t begin, int64_t end) {
  pool_channels_inner<MaxReduction>(g, x, y, begin, end, UnchangedPixel{});
}

KILN_TARGET_AVX2 void max_pool_channels_inner(const Pool2dGeometry& g, const BFloat16* x,
                                              BFloat16* y, int64_t begin, int64_t end) {
  pool_channels_inner<MaxReduction>(g, x, y, begin, end, UnchangedPixel{});
}

KILN_TARGET_AVX2 void avg_pool_channels_inner(const Pool2dGeometry& g, const float* x, float* y,
                                              int64_t begin, int64_t end,
                                              const float* row_divisors,
                                              const float* column_divisors) {
  pool_channels_inner<SumReduction>(g, x, y, begin, end,
                                    DivideByCount{row_divisors, column_divisors});
}

KILN_TARGET_AVX2 void avg_pool_channels_inner(const Pool2dGeometry& g, const BFloat16* x,
                                              BFloat16* y, int64_t begin, int64_t end,
                                              const float* row_divisors,
                                              const float* column_divisors) {
  pool_channels_inner<SumReduction>(g, x, y, begin, end,
                                    DivideByCount{row_divisors, column_divisors});
}

}  // namespace kiln::cpu::avx2
#endif
