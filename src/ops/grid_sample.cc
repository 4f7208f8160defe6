// grid_sample: PyTorch's grid_sampler_2d (F.grid_sample of a 4-D x), which samples x at
// arbitrary points: the sampling grids of deformable attention (Deformable DETR, Mask2Former)
// and spatial transformers.
//
//   grid_sample(x, grid; mode = "bilinear", padding_mode = "zeros", align_corners = false)
//
// x [N, C, H, W] and grid [N, OH, OW, 2] of one dtype; grid[n, i, j] = (u, v) locates output
// [n, :, i, j] in x, u along W and v along H, both in [-1, 1] from edge to edge (align_corners
// false: the pixels' outer edges; true: the corner pixels' centres); y [N, C, OH, OW]. mode:
// "bilinear", "nearest" or "bicubic" (GLM-4V resamples its position embeddings so: the 4 x 4
// neighbours weighted by cubic convolution, A = -0.75, each row's then the column's sum).
// padding_mode, for points outside x: "zeros" (the missing neighbours count as 0), "border"
// (the coordinate is clamped into x) or "reflection" (reflected at the edges, then clamped);
// bicubic pads each neighbour's coordinate, as PyTorch does.
//
// The arithmetic is that of PyTorch's vectorized CPU kernel (ATen's GridSamplerKernel.cpp) as
// its AVX2 and AVX-512 builds compute it, operation for operation in x's dtype, so the results
// are eager's bit for bit, NaN and infinite coordinates included. Those builds contract a
// product followed by a sum into one FMA (checked against eager: without the FMAs 35% of
// bilinear results differed in the last bit), so Kiln computes those steps with std::fma: the
// unnormalization (u + 1)·scaling − 0.5, the reflection's |u| − flips·span and the sum of the
// four weighted neighbours. Bilinear weights are (1 − dx)(1 − dy), ... from floor; nearest rounds
// half to even; an index is the coordinate truncated to an integer of the dtype's width (a NaN
// or one beyond that range reads nothing); border and reflection clamp a NaN coordinate to 0.
// f16 and bf16 compute in f32 between casts (computes_low_precision_in_f32).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

#ifdef KILN_X86
#include <immintrin.h>
#endif

namespace kiln {

namespace {

enum class Padding { Zeros, Border, Reflection };

bool parse_padding(const std::string& name, Padding& padding) {
  if (name == "zeros") padding = Padding::Zeros;
  else if (name == "border") padding = Padding::Border;
  else if (name == "reflection") padding = Padding::Reflection;
  else return false;
  return true;
}

void infer_grid_sample(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& grid = ctx.input(1);
  ctx.check(x.rank() == 4, "x must be 4-D [N, C, H, W]");
  ctx.check(grid.rank() == 4 && grid.shape[3] == Dim(2),
            "grid must be 4-D [N, OH, OW, 2]: an (x, y) pair per output point");
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            "grid_sample takes f32 or f64, not " + std::string(dtype_name(x.dtype)));
  ctx.check(grid.dtype == x.dtype, "grid must have x's dtype");
  ctx.check(x.layout == Layout::Plain, "x must be plain");
  const std::string& mode = ctx.attr_string("mode");
  ctx.check(mode == "bilinear" || mode == "nearest" || mode == "bicubic",
            "mode must be \"bilinear\", \"nearest\" or \"bicubic\", got \"" + mode + "\"");
  Padding padding;
  ctx.check(parse_padding(ctx.attr_string("padding_mode"), padding),
            "padding_mode must be \"zeros\", \"border\" or \"reflection\", got \"" +
                ctx.attr_string("padding_mode") + "\"");
  const Dim n = ctx.unify(x.shape[0], grid.shape[0], "x's and grid's batch");
  ctx.set_output(0, TensorType{x.dtype, {n, x.shape[1], grid.shape[1], grid.shape[2]},
                               Layout::Plain});
}

// The integer type of T's width, which PyTorch's kernel converts coordinates to.
template <typename T>
using Index = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;

// A coordinate truncated to Index<T> as the vector conversion does: a NaN or a value out of
// range gives the type's minimum, which no bounds check passes.
template <typename T>
Index<T> to_index(T v) {
  constexpr T kLimit = static_cast<T>(std::numeric_limits<Index<T>>::max()) + T(1);  // 2^31, 2^63
  if (!(v >= -kLimit && v < kLimit)) return std::numeric_limits<Index<T>>::min();
  return static_cast<Index<T>>(v);
}

// PyTorch's ComputeLocation for one spatial axis of `size` elements.
template <typename T>
struct Axis {
  int64_t size;
  Padding padding;
  bool align_corners;
  T max_val, scaling, low, twice_span;
  bool empty;  // reflection over no span: every coordinate is 0

  Axis(int64_t size, Padding padding, bool align_corners)
      : size(size),
        padding(padding),
        align_corners(align_corners),
        max_val(static_cast<T>(size - 1)),
        scaling(align_corners ? static_cast<T>(size - 1) / 2 : static_cast<T>(size) / 2),
        low(align_corners ? T(0) : T(-0.5)),
        twice_span(align_corners ? static_cast<T>(size - 1) * 2 : static_cast<T>(size) * 2),
        empty(align_corners ? size <= 1 : size <= 0) {}

  // max(v, 0) then min(., size - 1) in the vector instructions' order: a NaN becomes 0.
  T clip(T v) const {
    v = v > T(0) ? v : T(0);
    return v < max_val ? v : max_val;
  }

  T reflect(T v) const {
    if (empty) return T(0);
    const T in = std::fabs(v - low);
    const T flips = std::trunc(in / twice_span);
    const T extra = std::fma(-flips, twice_span, in);
    const T other = twice_span - extra;
    // minimum() keeps a NaN; clip() then makes it 0.
    const T nearer = std::isnan(extra) || std::isnan(other) ? std::numeric_limits<T>::quiet_NaN()
                     : other < extra                        ? other
                                                            : extra;
    return nearer + low;
  }

  // The source position of normalized coordinate `u`, before and after the padding.
  T unnormalize(T u) const {
    return align_corners ? (u + T(1)) * scaling : std::fma(u + T(1), scaling, T(-0.5));
  }
  T pad(T v) const {
    if (padding == Padding::Border) v = clip(v);
    if (padding == Padding::Reflection) v = clip(reflect(v));
    return v;
  }
  T locate(T u) const { return pad(unnormalize(u)); }

  bool contains(Index<T> i) const { return i > -1 && i < size; }
};

enum class Mode { Bilinear, Nearest, Bicubic };

struct Sampling {
  int64_t n, c, h, w, oh, ow;
  Mode mode;
  bool align_corners;
  Padding padding;
};

Sampling sampling_of(const KernelSpec& spec) {
  const std::vector<int64_t> x = spec.input_sizes(0), y = spec.output_sizes(0);
  Padding padding = Padding::Zeros;
  parse_padding(spec.node.attr_string("padding_mode"), padding);
  const std::string& mode = spec.node.attr_string("mode");
  return Sampling{x[0], x[1], x[2], x[3], y[2], y[3],
                  mode == "bilinear" ? Mode::Bilinear
                  : mode == "nearest" ? Mode::Nearest
                                      : Mode::Bicubic,
                  spec.node.attr_bool("align_corners"), padding};
}

// The points of one batch item taken together: x and y point at the item's first channel plane
// (y at its first point of the block), g at the block's first (u, v) pair.
template <typename T>
struct Block {
  const T* x;
  const T* g;
  T* y;
  int64_t count;
};

// Points are taken in blocks: their neighbours' offsets and weights once, then each channel
// plane reads them (PyTorch's order of work: a vector of points, then the channels).
constexpr int64_t kBlock = 64;

template <typename T>
void sample_scalar(const Sampling& s, const Axis<T>& along_w, const Axis<T>& along_h,
                   const Block<T>& b) {
  // Per point: the offsets of its 4 neighbours (nw, ne, sw, se; -1: reads 0) and their weights.
  int64_t offset[4][kBlock];
  T weight[4][kBlock];
  for (int64_t p = 0; p < b.count; ++p) {
    const T u = along_w.locate(b.g[2 * p]), v = along_h.locate(b.g[2 * p + 1]);
    if (s.mode == Mode::Nearest) {
      const Index<T> ix = to_index(std::nearbyint(u)), iy = to_index(std::nearbyint(v));
      offset[0][p] = along_w.contains(ix) && along_h.contains(iy) ? iy * s.w + ix : -1;
      continue;
    }
    const T west = std::floor(u), north = std::floor(v);
    const T dw = u - west, de = T(1) - dw, dn = v - north, ds = T(1) - dn;
    weight[0][p] = ds * de;
    weight[1][p] = ds * dw;
    weight[2][p] = dn * de;
    weight[3][p] = dn * dw;
    const Index<T> ix = to_index(west), iy = to_index(north);
    // The vector kernel adds 1 in the index type, wrapping as the hardware does.
    const Index<T> ie =
        static_cast<Index<T>>(static_cast<std::make_unsigned_t<Index<T>>>(ix) + 1u);
    const Index<T> is =
        static_cast<Index<T>>(static_cast<std::make_unsigned_t<Index<T>>>(iy) + 1u);
    const bool w_in = along_w.contains(ix), e_in = along_w.contains(ie);
    const bool n_in = along_h.contains(iy), s_in = along_h.contains(is);
    offset[0][p] = w_in && n_in ? iy * s.w + ix : -1;
    offset[1][p] = e_in && n_in ? iy * s.w + ie : -1;
    offset[2][p] = w_in && s_in ? is * s.w + ix : -1;
    offset[3][p] = e_in && s_in ? is * s.w + ie : -1;
  }
  const int64_t plane = s.h * s.w, points = s.oh * s.ow;
  for (int64_t c = 0; c < s.c; ++c) {
    const T* xc = b.x + c * plane;
    T* yc = b.y + c * points;
    auto at = [&](int corner, int64_t p) {
      return offset[corner][p] < 0 ? T(0) : xc[offset[corner][p]];
    };
    if (s.mode == Mode::Nearest) {
      for (int64_t p = 0; p < b.count; ++p) yc[p] = at(0, p);
      continue;
    }
    for (int64_t p = 0; p < b.count; ++p)
      yc[p] = std::fma(at(3, p), weight[3][p],
                       std::fma(at(2, p), weight[2][p],
                                std::fma(at(1, p), weight[1][p], at(0, p) * weight[0][p])));
  }
}

// PyTorch's cubic convolution weights (A = -0.75) of the 4 taps around fraction t, with the
// contractions into FMAs of its vector builds (AVX2 and AVX-512 give the same bits; found by
// matching eager on 2000 points: the outer taps' polynomial rounds each step, the inner taps'
// fuses both of its additions).
template <typename T>
void cubic_weights(T t, T (&w)[4]) {
  constexpr T a = T(-0.75);
  const auto outer = [&](T x) {  // ((a x - 5a) x + 8a) x - 4a, for 1 < x < 2
    return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a;
  };
  const auto inner = [&](T x) {  // ((a + 2) x - (a + 3)) x x + 1, for x <= 1
    return std::fma(std::fma(a + T(2), x, -(a + T(3))) * x, x, T(1));
  };
  w[0] = outer(t + T(1));
  w[1] = inner(t);
  w[2] = inner(T(1) - t);
  w[3] = outer(T(2) - t);
}

// Bicubic: per point the 4 x 4 neighbours' offsets (-1: reads 0), each coordinate padded on its
// own, and the weights along each axis; per channel each row's weighted sum, then theirs.
template <typename T>
void sample_bicubic(const Sampling& s, const Axis<T>& along_w, const Axis<T>& along_h,
                    const Block<T>& b) {
  int64_t offset[16][kBlock];
  T wx[4][kBlock], wy[4][kBlock];
  for (int64_t p = 0; p < b.count; ++p) {
    const T u = along_w.unnormalize(b.g[2 * p]), v = along_h.unnormalize(b.g[2 * p + 1]);
    const T west = std::floor(u), north = std::floor(v);
    T cx[4], cy[4];
    cubic_weights(u - west, cx);
    cubic_weights(v - north, cy);
    for (int k = 0; k < 4; ++k) {
      wx[k][p] = cx[k];
      wy[k][p] = cy[k];
    }
    for (int i = 0; i < 4; ++i) {
      const Index<T> iy = to_index(along_h.pad(north + T(i - 1)));
      for (int j = 0; j < 4; ++j) {
        const Index<T> ix = to_index(along_w.pad(west + T(j - 1)));
        offset[4 * i + j][p] = along_w.contains(ix) && along_h.contains(iy) ? iy * s.w + ix : -1;
      }
    }
  }
  const int64_t plane = s.h * s.w, points = s.oh * s.ow;
  for (int64_t c = 0; c < s.c; ++c) {
    const T* xc = b.x + c * plane;
    T* yc = b.y + c * points;
    for (int64_t p = 0; p < b.count; ++p) {
      auto at = [&](int tap) { return offset[tap][p] < 0 ? T(0) : xc[offset[tap][p]]; };
      // The sums as eager's vector builds contract them: a row's first two terms into one FMA,
      // the column's every term after the first.
      T rows[4];
      for (int i = 0; i < 4; ++i)
        rows[i] = std::fma(wx[0][p], at(4 * i), wx[1][p] * at(4 * i + 1)) +
                  wx[2][p] * at(4 * i + 2) + wx[3][p] * at(4 * i + 3);
      yc[p] = std::fma(wy[3][p], rows[3],
                       std::fma(wy[2][p], rows[2], std::fma(wy[1][p], rows[1], wy[0][p] * rows[0])));
    }
  }
}

#ifdef KILN_X86
// Axis<float>::locate on 8 coordinates, with the same operations.
KILN_TARGET_AVX2 __m256 locate8(const Axis<float>& a, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
  const __m256 shifted = _mm256_add_ps(u, one), scaling = _mm256_set1_ps(a.scaling);
  __m256 v = a.align_corners ? _mm256_mul_ps(shifted, scaling)
                             : _mm256_fmadd_ps(shifted, scaling, _mm256_set1_ps(-0.5f));
  if (a.padding == Padding::Zeros) return v;
  if (a.padding == Padding::Reflection) {
    if (a.empty) {
      v = zero;
    } else {
      const __m256 low = _mm256_set1_ps(a.low), span = _mm256_set1_ps(a.twice_span);
      const __m256 in = _mm256_andnot_ps(_mm256_set1_ps(-0.f), _mm256_sub_ps(v, low));
      const __m256 flips =
          _mm256_round_ps(_mm256_div_ps(in, span), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 extra = _mm256_fnmadd_ps(flips, span, in);
      const __m256 other = _mm256_sub_ps(span, extra);
      // minimum() keeps a NaN; the clip below makes it 0.
      const __m256 nearer = _mm256_or_ps(_mm256_min_ps(other, extra),
                                         _mm256_cmp_ps(extra, other, _CMP_UNORD_Q));
      v = _mm256_add_ps(nearer, low);
    }
  }
  // max(v, 0) gives 0 for a NaN v (the second operand), then min(., size - 1).
  return _mm256_min_ps(_mm256_max_ps(v, zero), _mm256_set1_ps(a.max_val));
}

// i in [0, size) lane by lane.
KILN_TARGET_AVX2 __m256i within8(__m256i i, int64_t size) {
  return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(-1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(size)), i));
}

// The block's points in groups of 8, as PyTorch's AVX2 kernel takes them; returns how many it
// sampled (the rest, fewer than 8, are sample_scalar's). Needs H·W < 2^31: 32-bit offsets.
KILN_TARGET_AVX2 int64_t sample_avx2(const Sampling& s, const Axis<float>& along_w,
                                     const Axis<float>& along_h, const Block<float>& b) {
  const int64_t plane = s.h * s.w, points = s.oh * s.ow;
  const __m256i pairs = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i width = _mm256_set1_epi32(static_cast<int32_t>(s.w)), one = _mm256_set1_epi32(1);
  const __m256 unit = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= b.count; p += 8) {
    const __m256 u = locate8(along_w, _mm256_i32gather_ps(b.g + 2 * p, pairs, 4));
    const __m256 v = locate8(along_h, _mm256_i32gather_ps(b.g + 2 * p + 1, pairs, 4));
    if (s.mode == Mode::Nearest) {
      const int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      const __m256i ix = _mm256_cvttps_epi32(_mm256_round_ps(u, rounding));
      const __m256i iy = _mm256_cvttps_epi32(_mm256_round_ps(v, rounding));
      const __m256 mask = _mm256_castsi256_ps(_mm256_and_si256(within8(ix, s.w), within8(iy, s.h)));
      const __m256i at = _mm256_add_epi32(_mm256_mullo_epi32(iy, width), ix);
      for (int64_t c = 0; c < s.c; ++c)
        _mm256_storeu_ps(b.y + c * points + p,
                         _mm256_mask_i32gather_ps(zero, b.x + c * plane, at, mask, 4));
      continue;
    }
    const __m256 west = _mm256_floor_ps(u), north = _mm256_floor_ps(v);
    const __m256 dw = _mm256_sub_ps(u, west), de = _mm256_sub_ps(unit, dw);
    const __m256 dn = _mm256_sub_ps(v, north), ds = _mm256_sub_ps(unit, dn);
    const __m256 nw = _mm256_mul_ps(ds, de), ne = _mm256_mul_ps(ds, dw);
    const __m256 sw = _mm256_mul_ps(dn, de), se = _mm256_mul_ps(dn, dw);
    const __m256i ix = _mm256_cvttps_epi32(west), iy = _mm256_cvttps_epi32(north);
    const __m256i w_in = within8(ix, s.w), e_in = within8(_mm256_add_epi32(ix, one), s.w);
    const __m256i n_in = within8(iy, s.h), s_in = within8(_mm256_add_epi32(iy, one), s.h);
    const __m256 m_nw = _mm256_castsi256_ps(_mm256_and_si256(w_in, n_in));
    const __m256 m_ne = _mm256_castsi256_ps(_mm256_and_si256(e_in, n_in));
    const __m256 m_sw = _mm256_castsi256_ps(_mm256_and_si256(w_in, s_in));
    const __m256 m_se = _mm256_castsi256_ps(_mm256_and_si256(e_in, s_in));
    const __m256i at_nw = _mm256_add_epi32(_mm256_mullo_epi32(iy, width), ix);
    const __m256i at_ne = _mm256_add_epi32(at_nw, one);
    const __m256i at_sw = _mm256_add_epi32(at_nw, width);
    const __m256i at_se = _mm256_add_epi32(at_sw, one);
    for (int64_t c = 0; c < s.c; ++c) {
      const float* xc = b.x + c * plane;
      const __m256 sum = _mm256_fmadd_ps(
          _mm256_mask_i32gather_ps(zero, xc, at_se, m_se, 4), se,
          _mm256_fmadd_ps(
              _mm256_mask_i32gather_ps(zero, xc, at_sw, m_sw, 4), sw,
              _mm256_fmadd_ps(_mm256_mask_i32gather_ps(zero, xc, at_ne, m_ne, 4), ne,
                              _mm256_mul_ps(_mm256_mask_i32gather_ps(zero, xc, at_nw, m_nw, 4),
                                            nw))));
      _mm256_storeu_ps(b.y + c * points + p, sum);
    }
  }
  return p;
}
#endif

// Every point of x's batch items, blocks split among the threads; with `vector`, 8 at a time
// through sample_avx2.
template <typename T>
void grid_sample(const Sampling& s, const T* x, const T* grid, T* y, bool vector, int threads) {
  const Axis<T> along_w(s.w, s.padding, s.align_corners), along_h(s.h, s.padding, s.align_corners);
  const int64_t points = s.oh * s.ow, plane = s.h * s.w;
  const int64_t blocks = (points + kBlock - 1) / kBlock;
  cpu::parallel_chunks(s.n * blocks, kBlock * s.c * 4, threads, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t batch = item / blocks, first = item % blocks * kBlock;
      Block<T> b{x + batch * s.c * plane, grid + (batch * points + first) * 2,
                 y + batch * s.c * points + first, std::min(kBlock, points - first)};
#ifdef KILN_X86
      if constexpr (std::is_same_v<T, float>) {
        if (vector) {
          const int64_t done = sample_avx2(s, along_w, along_h, b);
          b = Block<T>{b.x, b.g + 2 * done, b.y + done, b.count - done};
        }
      }
#endif
      if (s.mode == Mode::Bicubic)
        sample_bicubic(s, along_w, along_h, b);
      else
        sample_scalar(s, along_w, along_h, b);
    }
  });
}

std::unique_ptr<KernelInstance> create_grid_sample(const KernelSpec& spec, bool vector) {
  auto make = [&]<typename T>() {
    return make_kernel([s = sampling_of(spec), vector, threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      grid_sample(s, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                  static_cast<T*>(out[0]), vector, threads);
    });
  };
  if (spec.inputs[0].dtype == DType::F64) return make.template operator()<double>();
  return make.template operator()<float>();
}

std::string avx2_unsupported(const KernelSpec& spec) {
  if (std::string why = cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype); !why.empty())
    return why;
  if (spec.node.attr_string("mode") == "bicubic") return "bicubic (the reference loop's)";
  const std::vector<int64_t> x = spec.input_sizes(0);
  if (x[2] * x[3] > std::numeric_limits<int32_t>::max())
    return "a plane of 2^31 elements or more (its gathers take 32-bit offsets)";
  return "";
}

}  // namespace

void register_grid_sample_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "grid_sample";
  def.inputs = {{"x"}, {"grid"}};
  def.attrs = {{"mode", std::string("bilinear")},
               {"padding_mode", std::string("zeros")},
               {"align_corners", false}};
  def.infer = infer_grid_sample;
  def.computes_low_precision_in_f32 = true;
  def.kernels = {
      {"avx2", "native", avx2_unsupported,
       [](const KernelSpec& spec) { return create_grid_sample(spec, true); }},
      {"reference", "native", [](const KernelSpec&) { return std::string(); },
       [](const KernelSpec& spec) { return create_grid_sample(spec, false); }}};
  registry.add(std::move(def));
}

}  // namespace kiln
