#include "kernels/cpu/reduction_avx2.h"

#ifdef KILN_X86
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kiln/error.h"

// One pass = one accumulator policy (the Acc structs) run over one item (a Row, or a Strip of
// adjacent columns) by the same blocked pairwise driver; each op is a short recipe of passes
// (reduce_item). Items of bf16 widen each vector as they load it and round results as they
// store them, so the passes see f32 either way. Every function that touches vector values
// carries KILN_TARGET_AVX2.
namespace kiln::cpu::avx2 {

namespace {

// Always inlined: in a file built without -mavx2, GCC 12 compiles an out-of-line
// KILN_TARGET_AVX2 function returning an aggregate of one 256-bit vector (SumAcc,
// std::array<SumAcc, 1>, ExpSumAcc::Param) to return it in ymm0 and then run vzeroupper, which
// zeroes its upper 128 bits (sums lost their upper 4 lanes once row_block had a second caller;
// -Wpsabi says nothing). So no vector aggregate is returned across a call here.
#define KILN_AVX2_INLINE KILN_TARGET_AVX2 inline __attribute__((always_inline))
#define KILN_AVX2_INLINE_LAMBDA KILN_TARGET_AVX2 __attribute__((always_inline))

KILN_AVX2_INLINE __m256 all_lanes() { return _mm256_castsi256_ps(_mm256_set1_epi32(-1)); }
KILN_AVX2_INLINE __m256d low_half(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
KILN_AVX2_INLINE __m256d high_half(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
// A lane mask of 8 f32 lanes, as the masks of the 4 f64 lanes of its low or high half.
KILN_AVX2_INLINE __m256d low_mask(__m256 m) {
  return _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(_mm256_castps_si256(m))));
}
KILN_AVX2_INLINE __m256d high_mask(__m256 m) {
  return _mm256_castsi256_pd(
      _mm256_cvtepi32_epi64(_mm256_extracti128_si256(_mm256_castps_si256(m), 1)));
}
KILN_AVX2_INLINE __m256 from_doubles(const double* lanes) {
  return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(lanes + 4)),
                         _mm256_cvtpd_ps(_mm256_loadu_pd(lanes)));
}
KILN_AVX2_INLINE void store_doubles(__m256 v, double* lanes) {
  _mm256_storeu_pd(lanes, low_half(v));
  _mm256_storeu_pd(lanes + 4, high_half(v));
}

// 8 elements at p as f32; the first `count` (1..7) of them with the other lanes 0 (`mask` is
// tail_mask(count); `read_back`: the 8 - count elements before p may be read); and the same ways
// of storing. bf16 is widened exactly and rounded to nearest even (bf16_avx2.h).
KILN_AVX2_INLINE __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
KILN_AVX2_INLINE __m256 load8(const BFloat16* p) { return load_bf16(p); }
KILN_AVX2_INLINE __m256 load_part(const float* p, int64_t, __m256i mask, bool) {
  return _mm256_maskload_ps(p, mask);
}
// AVX2 has no 16-bit masked load: the 8 elements ending at p + count moved down count lanes
// (a short row's tail is copied instead, which takes a call to memcpy).
KILN_AVX2_INLINE __m256 load_part(const BFloat16* p, int64_t count, __m256i mask,
                                  bool read_back) {
  if (!read_back) return load_bf16_tail(p, count);
  const __m256i from = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                        _mm256_set1_epi32(static_cast<int>(8 - count)));
  return _mm256_and_ps(_mm256_permutevar8x32_ps(load_bf16(p + count - 8), from),
                       _mm256_castsi256_ps(mask));
}
KILN_AVX2_INLINE void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
KILN_AVX2_INLINE void store8(BFloat16* p, __m256 v) { store_bf16(p, v); }
KILN_AVX2_INLINE void store_part(float* p, int64_t, __m256i mask, __m256 v) {
  _mm256_maskstore_ps(p, mask, v);
}
KILN_AVX2_INLINE void store_part(BFloat16* p, int64_t count, __m256i, __m256 v) {
  store_bf16_tail(p, count, v);
}
// A result as the element type: bf16 rounded from the f32 result, as an f32 kernel's output cast.
template <typename T>
T element_of(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return to_bfloat16(v);
}

// ---------------------------------------------------------------- accumulator policies
//
// Each Acc accumulates 8 lanes: zero() is the empty result, add() takes one vector of x (with
// kMasked, only the lanes set in `keep`: a row's tail), merge() joins two partial results,
// store() writes the 8 lanes as doubles and merge_lanes() joins two lanes (a row's 8 lanes are
// one result). Param is what the pass depends on per lane (a shift, a mean), made by param()
// from 8 per-lane doubles.

struct NoParam {};

// f32 sums: the blocked pairwise tree bounds the error (reduction_avx2.h).
struct SumAcc {
  using Param = NoParam;
  __m256 s;
  static Param param(const double*) { return {}; }
  KILN_AVX2_INLINE static SumAcc zero() { return {_mm256_setzero_ps()}; }
  template <bool kMasked>
  KILN_AVX2_INLINE void add(__m256 x, __m256 keep, const Param&) {
    if constexpr (kMasked) x = _mm256_and_ps(x, keep);
    s = _mm256_add_ps(s, x);
  }
  KILN_AVX2_INLINE static SumAcc merge(const SumAcc& a, const SumAcc& b) {
    return {_mm256_add_ps(a.s, b.s)};
  }
  KILN_AVX2_INLINE void store(double* lanes) const { store_doubles(s, lanes); }
  static double merge_lanes(double a, double b) { return a + b; }
};

// Sums of exp(x - shift), the shift per lane.
struct ExpSumAcc {
  struct Param {
    __m256 shift;
  };
  __m256 s;
  KILN_AVX2_INLINE static Param param(const double* lanes) { return {from_doubles(lanes)}; }
  KILN_AVX2_INLINE static ExpSumAcc zero() { return {_mm256_setzero_ps()}; }
  template <bool kMasked>
  KILN_AVX2_INLINE void add(__m256 x, __m256 keep, const Param& p) {
    __m256 e = exp_minus(x, p.shift);
    if constexpr (kMasked) e = _mm256_and_ps(e, keep);
    s = _mm256_add_ps(s, e);
  }
  KILN_AVX2_INLINE static ExpSumAcc merge(const ExpSumAcc& a, const ExpSumAcc& b) {
    return {_mm256_add_ps(a.s, b.s)};
  }
  KILN_AVX2_INLINE void store(double* lanes) const { store_doubles(s, lanes); }
  static double merge_lanes(double a, double b) { return a + b; }
};

// Maximum (kMax) or minimum; a NaN anywhere makes the result NaN, as in PyTorch.
template <bool kMax>
struct ExtremumAcc {
  using Param = NoParam;
  __m256 m;
  static Param param(const double*) { return {}; }
  KILN_AVX2_INLINE static ExtremumAcc zero() { return {splat(kMax ? -INFINITY : INFINITY)}; }
  // max_ps and min_ps return their second operand when either is NaN, which takes x's NaN;
  // the blend keeps a NaN already taken.
  KILN_AVX2_INLINE static __m256 pick(__m256 acc, __m256 x) {
    const __m256 best = kMax ? _mm256_max_ps(acc, x) : _mm256_min_ps(acc, x);
    return _mm256_blendv_ps(best, acc, _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
  }
  template <bool kMasked>
  KILN_AVX2_INLINE void add(__m256 x, __m256 keep, const Param&) {
    if constexpr (kMasked) x = _mm256_blendv_ps(zero().m, x, keep);
    m = pick(m, x);
  }
  KILN_AVX2_INLINE static ExtremumAcc merge(const ExtremumAcc& a, const ExtremumAcc& b) {
    return {pick(a.m, b.m)};
  }
  KILN_AVX2_INLINE void store(double* lanes) const { store_doubles(m, lanes); }
  static double merge_lanes(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    return kMax ? std::max(a, b) : std::min(a, b);
  }
};

// f64 sums of x (var's mean) or products (prod); a masked lane adds 0 or multiplies by 1.
template <bool kProduct>
struct DoubleFoldAcc {
  using Param = NoParam;
  __m256d lo, hi;
  static Param param(const double*) { return {}; }
  KILN_AVX2_INLINE static __m256d combine(__m256d a, __m256d b) {
    return kProduct ? _mm256_mul_pd(a, b) : _mm256_add_pd(a, b);
  }
  KILN_AVX2_INLINE static DoubleFoldAcc zero() {
    const __m256d identity = _mm256_set1_pd(kProduct ? 1.0 : 0.0);
    return {identity, identity};
  }
  template <bool kMasked>
  KILN_AVX2_INLINE void add(__m256 x, __m256 keep, const Param&) {
    if constexpr (kMasked) x = _mm256_blendv_ps(splat(kProduct ? 1.0f : 0.0f), x, keep);
    lo = combine(lo, low_half(x));
    hi = combine(hi, high_half(x));
  }
  KILN_AVX2_INLINE static DoubleFoldAcc merge(const DoubleFoldAcc& a, const DoubleFoldAcc& b) {
    return {combine(a.lo, b.lo), combine(a.hi, b.hi)};
  }
  KILN_AVX2_INLINE void store(double* lanes) const {
    _mm256_storeu_pd(lanes, lo);
    _mm256_storeu_pd(lanes + 4, hi);
  }
  static double merge_lanes(double a, double b) { return kProduct ? a * b : a + b; }
};
using DoubleSumAcc = DoubleFoldAcc<false>;
using ProdAcc = DoubleFoldAcc<true>;

// f64 sums of (x - mean)^2, the mean per lane.
struct SquaredDeviationAcc {
  struct Param {
    __m256d lo, hi;
  };
  __m256d lo, hi;
  KILN_AVX2_INLINE static Param param(const double* lanes) {
    return {_mm256_loadu_pd(lanes), _mm256_loadu_pd(lanes + 4)};
  }
  KILN_AVX2_INLINE static SquaredDeviationAcc zero() {
    return {_mm256_setzero_pd(), _mm256_setzero_pd()};
  }
  template <bool kMasked>
  KILN_AVX2_INLINE void add(__m256 x, __m256 keep, const Param& mean) {
    __m256d d_lo = _mm256_sub_pd(low_half(x), mean.lo);
    __m256d d_hi = _mm256_sub_pd(high_half(x), mean.hi);
    if constexpr (kMasked) {
      d_lo = _mm256_and_pd(d_lo, low_mask(keep));
      d_hi = _mm256_and_pd(d_hi, high_mask(keep));
    }
    lo = _mm256_fmadd_pd(d_lo, d_lo, lo);
    hi = _mm256_fmadd_pd(d_hi, d_hi, hi);
  }
  KILN_AVX2_INLINE static SquaredDeviationAcc merge(const SquaredDeviationAcc& a,
                                                    const SquaredDeviationAcc& b) {
    return {_mm256_add_pd(a.lo, b.lo), _mm256_add_pd(a.hi, b.hi)};
  }
  KILN_AVX2_INLINE void store(double* lanes) const {
    _mm256_storeu_pd(lanes, lo);
    _mm256_storeu_pd(lanes + 4, hi);
  }
  static double merge_lanes(double a, double b) { return a + b; }
};

// ---------------------------------------------------------------- the pairwise tree

// Partial results (one per block, in order) merged along a fixed pairwise tree: like a binary
// counter, at most one node per level is pending. A run of 2^j blocks starting at a multiple of
// 2^j becomes one node of level j whichever thread computed it, so pushing the nodes of such runs
// in order rebuilds exactly the tree of a serial pass.
template <class Acc, int V>
struct PairwiseTree {
  using Partial = std::array<Acc, V>;
  std::array<Partial, 64> nodes;
  std::array<int, 64> levels;
  int size = 0;

  KILN_AVX2_INLINE static Partial merge(const Partial& a, const Partial& b) {
    Partial r;
    for (int j = 0; j < V; ++j) r[j] = Acc::merge(a[j], b[j]);
    return r;
  }
  KILN_AVX2_INLINE void push(Partial node, int level) {
    while (size > 0 && levels[size - 1] == level) {
      node = merge(nodes[--size], node);
      ++level;
    }
    nodes[size] = node;
    levels[size++] = level;
  }
  KILN_AVX2_INLINE Partial total() const {
    Partial r;
    if (size == 0) {
      r.fill(Acc::zero());
      return r;
    }
    r = nodes[size - 1];
    for (int i = size - 2; i >= 0; --i) r = merge(nodes[i], r);
    return r;
  }
};

// ---------------------------------------------------------------- items

constexpr int64_t kRowBlock = 256;   // elements: 4 accumulators x 8 vectors x 8 lanes
constexpr int64_t kStripBlock = 8;   // steps down the columns
constexpr int64_t kStripWidth = 32;  // columns of a strip: 4 vectors

// One block of a row: vector v goes to accumulator v % 4 (independent chains), a partial last
// vector masked.
template <class Acc, typename T>
KILN_AVX2_INLINE Acc row_block(const T* x, int64_t count, const typename Acc::Param& p) {
  Acc a0 = Acc::zero(), a1 = Acc::zero(), a2 = Acc::zero(), a3 = Acc::zero();
  const __m256 all = all_lanes();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    a0.template add<false>(load8(x + i), all, p);
    a1.template add<false>(load8(x + i + 8), all, p);
    a2.template add<false>(load8(x + i + 16), all, p);
    a3.template add<false>(load8(x + i + 24), all, p);
  }
  auto rest = [&](Acc& acc) KILN_TARGET_AVX2 {
    if (i >= count) return;
    if (count - i >= 8) {
      acc.template add<false>(load8(x + i), all, p);
    } else {
      const __m256i mask = tail_mask(count - i);
      acc.template add<true>(load_part(x + i, count - i, mask, count >= 8),
                             _mm256_castsi256_ps(mask), p);
    }
    i += 8;
  };
  rest(a0);
  rest(a1);
  rest(a2);
  rest(a3);
  return Acc::merge(Acc::merge(a0, a1), Acc::merge(a2, a3));
}

// n contiguous elements reduced to one result.
template <typename T>
struct Row {
  using Element = T;
  static constexpr int kVectors = 1;
  static constexpr int64_t kStepElements = 1;  // elements per step of n
  static constexpr int64_t kBlockElements = kRowBlock;
  static constexpr bool kOneBlock = false;  // true: one block, its result the item's
  const T* x;
  int64_t n;

  int64_t blocks() const { return (n + kRowBlock - 1) / kRowBlock; }
  int lanes() const { return 1; }

  // params and block return vectors (std::array<SumAcc, 1> is one __m256): inlined, see above.
  template <class Acc>
  KILN_AVX2_INLINE std::array<typename Acc::Param, 1> params(const double* lane_values) const {
    double lanes[8];
    std::fill(lanes, lanes + 8, lane_values ? lane_values[0] : 0.0);
    return {Acc::param(lanes)};
  }
  template <class Acc>
  KILN_AVX2_INLINE std::array<Acc, 1> block(int64_t b,
                                             const std::array<typename Acc::Param, 1>& p) const {
    const int64_t begin = b * kRowBlock;
    return {row_block<Acc>(x + begin, std::min(kRowBlock, n - begin), p[0])};
  }
  // The 8 lanes joined pairwise in f64 into out[0].
  template <class Acc>
  KILN_TARGET_AVX2 void results(const std::array<Acc, 1>& partial, double* out) const {
    double l[8];
    partial[0].store(l);
    auto m = Acc::merge_lanes;
    out[0] = m(m(m(l[0], l[1]), m(l[2], l[3])), m(m(l[4], l[5]), m(l[6], l[7])));
  }
  // y[i] = x[i] - c[0], in f64 and rounded once, over elements [begin, end).
  KILN_TARGET_AVX2 void subtract(const double* c, T* y, int64_t begin, int64_t end) const {
    const __m256d shift = _mm256_set1_pd(c[0]);
    auto shifted = [&](__m256 v) KILN_TARGET_AVX2 {
      return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(high_half(v), shift)),
                             _mm256_cvtpd_ps(_mm256_sub_pd(low_half(v), shift)));
    };
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) store8(y + i, shifted(load8(x + i)));
    if (i < end) {
      const __m256i mask = tail_mask(end - i);
      store_part(y + i, end - i, mask, shifted(load_part(x + i, end - i, mask, end >= 8)));
    }
  }
};

// kBatchRows rows of n <= kRowBlock contiguous elements (one block each), one lane a row: short
// rows go through a pass 8 at a time, so the pass's per-item work is paid once per 8 rows. Each
// row's arithmetic is Row's, so are its bits.
constexpr int64_t kBatchRows = 8;

template <typename T>
struct RowBatch {
  using Element = T;
  static constexpr int kVectors = kBatchRows;
  static constexpr int64_t kStepElements = 1;
  static constexpr bool kOneBlock = true;
  const T* x;
  int64_t n;

  int lanes() const { return kBatchRows; }
  Row<T> row(int j) const { return {x + j * n, n}; }

  template <class Acc>
  KILN_AVX2_INLINE std::array<typename Acc::Param, kBatchRows> params(
      const double* lane_values) const {
    std::array<typename Acc::Param, kBatchRows> p;
    for (int j = 0; j < kBatchRows; ++j)
      p[j] = row(j).template params<Acc>(lane_values ? lane_values + j : nullptr)[0];
    return p;
  }
  template <class Acc>
  KILN_AVX2_INLINE std::array<Acc, kBatchRows> block(
      int64_t, const std::array<typename Acc::Param, kBatchRows>& p) const {
    std::array<Acc, kBatchRows> a;
    for (int j = 0; j < kBatchRows; ++j) a[j] = row_block<Acc>(x + j * n, n, p[j]);
    return a;
  }
  template <class Acc>
  KILN_TARGET_AVX2 void results(const std::array<Acc, kBatchRows>& partial, double* out) const {
    for (int j = 0; j < kBatchRows; ++j) row(j).template results<Acc>({partial[j]}, out + j);
  }
  // Row's subtract for each row, lane j's shift c[j]; y is the first row's output.
  KILN_TARGET_AVX2 void subtract(const double* c, T* y, int64_t begin, int64_t end) const {
    for (int j = 0; j < kBatchRows; ++j) row(j).subtract(c + j, y + j * n, begin, end);
  }
};

// `width` (1..32) adjacent columns, V = ceil(width / 8) vectors, each of n steps `stride` apart;
// the last vector masked when kMaskLast. Lanes never mix: each is one result.
template <int V, bool kMaskLast, typename T>
struct Strip {
  using Element = T;
  static constexpr int kVectors = V;
  static constexpr int64_t kStepElements = 8 * V;
  static constexpr int64_t kBlockElements = kStripBlock * kStepElements;
  static constexpr bool kOneBlock = false;
  const T* x;
  int64_t n, stride, width;

  int64_t blocks() const { return (n + kStripBlock - 1) / kStripBlock; }
  int lanes() const { return static_cast<int>(width); }

  int64_t last_width() const { return width - 8 * (V - 1); }
  KILN_AVX2_INLINE __m256i last_mask() const { return tail_mask(last_width()); }
  KILN_AVX2_INLINE __m256 load(const T* p, int j, __m256i mask) const {
    return kMaskLast && j == V - 1 ? load_part(p + 8 * j, last_width(), mask, V > 1)
                                   : load8(p + 8 * j);
  }

  // Inlined as Row's (with V = 1 they return one vector).
  template <class Acc>
  KILN_AVX2_INLINE std::array<typename Acc::Param, V> params(const double* lane_values) const {
    static const double zeros[8] = {};
    std::array<typename Acc::Param, V> p;
    for (int j = 0; j < V; ++j) p[j] = Acc::param(lane_values ? lane_values + 8 * j : zeros);
    return p;
  }
  template <class Acc>
  KILN_AVX2_INLINE std::array<Acc, V> block(int64_t b,
                                             const std::array<typename Acc::Param, V>& p) const {
    std::array<Acc, V> a;
    a.fill(Acc::zero());
    const __m256i mask = last_mask();
    const __m256 all = all_lanes();
    const int64_t steps = std::min(kStripBlock, n - b * kStripBlock);
    const T* row = x + b * kStripBlock * stride;
    for (int64_t k = 0; k < steps; ++k, row += stride)
      for (int j = 0; j < V; ++j) a[j].template add<false>(load(row, j, mask), all, p[j]);
    return a;
  }
  template <class Acc>
  KILN_TARGET_AVX2 void results(const std::array<Acc, V>& partial, double* out) const {
    for (int j = 0; j < V; ++j) partial[j].store(out + 8 * j);
  }
};

// ---------------------------------------------------------------- passes

template <class Acc, class Item, class Params, class Tree>
KILN_TARGET_AVX2 void pass_blocks(const Item& item, int64_t begin, int64_t end,
                                  const Params& params, Tree& tree) {
  for (int64_t b = begin; b < end; ++b) tree.push(item.template block<Acc>(b, params), 0);
}

// One pass of Acc over the item, its lanes set up from lane_params (null: none); writes one
// result per lane to out. With split > 1 the blocks are shared out in runs of 2^j blocks (about
// 2 to 4 runs per thread), whose trees join into the serial pass's tree.
template <class Acc, class Item>
KILN_TARGET_AVX2 void reduce_lanes(const Item& item, const double* lane_params, int split,
                                   double* out) {
  const auto params = item.template params<Acc>(lane_params);
  if constexpr (Item::kOneBlock) {  // the one block is the result: no tree to build
    item.results(item.template block<Acc>(0, params), out);
  } else {
    using Tree = PairwiseTree<Acc, Item::kVectors>;
    const int64_t blocks = item.blocks();
    Tree tree;
    if (split <= 1) {
      pass_blocks<Acc>(item, 0, blocks, params, tree);
    } else {
      int64_t run = 1;
      while (run * 4 * split < blocks) run *= 2;
      const int64_t runs = (blocks + run - 1) / run;
      // Aligned by hand: vector types are 32-byte aligned only in code compiled for AVX, and
      // std::allocator is not.
      std::vector<std::byte> storage(static_cast<size_t>(runs) * sizeof(Tree) + alignof(Tree));
      void* start = storage.data();
      size_t space = storage.size();
      Tree* trees = static_cast<Tree*>(
          std::align(alignof(Tree), static_cast<size_t>(runs) * sizeof(Tree), start, space));
      for (int64_t r = 0; r < runs; ++r) new (trees + r) Tree();
      parallel_chunks(runs, run * Item::kBlockElements, split, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
          pass_blocks<Acc>(item, r * run, std::min(blocks, (r + 1) * run), params, trees[r]);
      });
      for (int64_t r = 0; r < runs; ++r)
        for (int i = 0; i < trees[r].size; ++i) tree.push(trees[r].nodes[i], trees[r].levels[i]);
    }
    item.results(tree.total(), out);
  }
}

// The recipe of each op over one item: y is its first result (a reduction) or its first element
// (log_softmax, which has x's layout).
template <class Item>
KILN_TARGET_AVX2 void reduce_item(VectorReduction op, const Item& item,
                                  typename Item::Element* y, double correction, int split) {
  // a zeroed: GCC 12 can't see that results() writes every lane store() reads.
  double a[kStripWidth] = {}, b[kStripWidth];
  const int lanes = item.lanes();
  const double n = static_cast<double>(item.n);
  auto store = [&](auto value) {
    for (int l = 0; l < lanes; ++l)
      y[l] = element_of<typename Item::Element>(static_cast<float>(value(l)));
  };
  switch (op) {
    case VectorReduction::Sum:
      reduce_lanes<SumAcc>(item, nullptr, split, a);
      return store([&](int l) { return a[l]; });
    case VectorReduction::Mean:
      reduce_lanes<SumAcc>(item, nullptr, split, a);
      return store([&](int l) { return a[l] / n; });
    case VectorReduction::Prod:
      reduce_lanes<ProdAcc>(item, nullptr, split, a);
      return store([&](int l) { return a[l]; });
    case VectorReduction::Amax:
      reduce_lanes<ExtremumAcc<true>>(item, nullptr, split, a);
      return store([&](int l) { return a[l]; });
    case VectorReduction::Amin:
      reduce_lanes<ExtremumAcc<false>>(item, nullptr, split, a);
      return store([&](int l) { return a[l]; });
    case VectorReduction::Var:
    case VectorReduction::Std: {
      reduce_lanes<DoubleSumAcc>(item, nullptr, split, a);
      for (int l = 0; l < lanes; ++l) a[l] /= n;
      reduce_lanes<SquaredDeviationAcc>(item, a, split, b);
      const double divisor = std::max(0.0, n - correction);
      const bool root = op == VectorReduction::Std;
      return store([&](int l) {
        const double var = b[l] / divisor;
        return root ? std::sqrt(var) : var;
      });
    }
    case VectorReduction::LogSumExp:
      reduce_lanes<ExtremumAcc<true>>(item, nullptr, split, a);
      // PyTorch's: an infinite maximum shifts nothing (all -inf gives -inf, a +inf gives +inf).
      for (int l = 0; l < lanes; ++l)
        if (std::isinf(a[l])) a[l] = 0;
      reduce_lanes<ExpSumAcc>(item, a, split, b);
      return store([&](int l) { return a[l] + std::log(b[l]); });
    case VectorReduction::LogSoftmax:  // rows: columns take log_softmax_columns
      if constexpr (requires { &Item::subtract; }) {
        reduce_lanes<ExtremumAcc<true>>(item, nullptr, split, a);
        reduce_lanes<ExpSumAcc>(item, a, split, b);
        for (int l = 0; l < lanes; ++l) a[l] += std::log(b[l]);
        parallel_chunks(item.n, Item::kStepElements, split,
                        [&](int64_t begin, int64_t end) { item.subtract(a, y, begin, end); });
      } else {
        KILN_ASSERT(false, "log_softmax over columns goes through log_softmax_columns");
      }
      return;
  }
}

template <typename T>
void reduce_strip(VectorReduction op, const T* x, T* y, int64_t n, int64_t stride, int64_t width,
                  double correction, int split) {
  auto run = [&]<int V>() {
    if (width % 8) reduce_item(op, Strip<V, true, T>{x, n, stride, width}, y, correction, split);
    else reduce_item(op, Strip<V, false, T>{x, n, stride, width}, y, correction, split);
  };
  switch ((width + 7) / 8) {
    case 1: return run.template operator()<1>();
    case 2: return run.template operator()<2>();
    case 3: return run.template operator()<3>();
    default: return run.template operator()<4>();
  }
}

// Calls run(item, split) for each item: over the threads when there are enough items, else one
// item at a time with each pass split over the threads (a sum over all of a large tensor).
template <class Run>
void for_items(int64_t items, int64_t work_per_item, int threads, const Run& run) {
  if (threads > 1 && items < threads && work_per_item >= 2 * kParallelMinWork) {
    for (int64_t i = 0; i < items; ++i) run(i, threads);
    return;
  }
  parallel_chunks(items, work_per_item, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) run(i, 1);
  });
}

// (v, i) ranks before (best, at): a NaN first (the earliest), then the larger (kMax) or smaller
// value, then the earlier index.
template <bool kMax>
bool ranks_before(float v, int64_t i, float best, int64_t at) {
  if (std::isnan(best)) return std::isnan(v) && i < at;
  if (std::isnan(v)) return true;
  if (v == best) return i < at;
  return kMax ? v > best : v < best;
}

// The lanes where a later element v replaces `best`: larger (kMax) or smaller, or a NaN over a
// number; never an equal one, so the first of equals and the first NaN stay.
template <bool kMax>
KILN_AVX2_INLINE __m256 ranks_strictly_before(__m256 v, __m256 best) {
  return _mm256_or_ps(_mm256_cmp_ps(v, best, kMax ? _CMP_GT_OQ : _CMP_LT_OQ),
                      _mm256_andnot_ps(_mm256_cmp_ps(best, best, _CMP_UNORD_Q),
                                       _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

// Each lane keeps its best element and its index (the first of equals, the first NaN), over
// whole vectors; the lanes then meet in ranks_before's order and the tail goes element by
// element.
template <bool kMax>
KILN_TARGET_AVX2 int64_t row_arg_extremum(const float* x, int64_t n) {
  int64_t i = 0;
  float best = x[0];
  int64_t at = 0;
  if (n >= 8) {
    __m256 lane_best = _mm256_loadu_ps(x);
    __m256i lane_at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i position = lane_at;
    const __m256i step = _mm256_set1_epi32(8);
    for (i = 8; i + 8 <= n; i += 8) {
      position = _mm256_add_epi32(position, step);
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 better = ranks_strictly_before<kMax>(v, lane_best);
      lane_best = _mm256_blendv_ps(lane_best, v, better);
      lane_at = _mm256_castps_si256(_mm256_blendv_ps(
          _mm256_castsi256_ps(lane_at), _mm256_castsi256_ps(position), better));
    }
    alignas(32) float values[8];
    alignas(32) int32_t indices[8];
    _mm256_store_ps(values, lane_best);
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices), lane_at);
    best = values[0];
    at = indices[0];
    for (int l = 1; l < 8; ++l)
      if (ranks_before<kMax>(values[l], indices[l], best, at)) {
        best = values[l];
        at = indices[l];
      }
  }
  for (; i < n; ++i)
    if (ranks_before<kMax>(x[i], i, best, at)) {
      best = x[i];
      at = i;
    }
  return at;
}

// The same over columns: each lane is one column of a block of `width` (1..kColumnBlock)
// adjacent columns, stepping down n rows `stride` apart.
constexpr int64_t kColumnBlock = 128;

template <bool kMax>
KILN_TARGET_AVX2 void columns_arg_extremum(const float* x, int64_t n, int64_t stride,
                                           int64_t width, int64_t* index, float* values) {
  constexpr int kVectors = kColumnBlock / 8;
  const int vectors = static_cast<int>((width + 7) / 8);
  const __m256i last = tail_mask(width - 8 * (vectors - 1));
  auto load = [&](const float* p, int j) KILN_TARGET_AVX2 {
    return j == vectors - 1 ? _mm256_maskload_ps(p + 8 * j, last) : _mm256_loadu_ps(p + 8 * j);
  };
  __m256 best[kVectors];
  __m256i at[kVectors];
  for (int j = 0; j < vectors; ++j) {
    best[j] = load(x, j);
    at[j] = _mm256_setzero_si256();
  }
  for (int64_t k = 1; k < n; ++k) {
    const float* row = x + k * stride;
    const __m256i position = _mm256_set1_epi32(static_cast<int32_t>(k));
    for (int j = 0; j < vectors; ++j) {
      const __m256 v = load(row, j);
      const __m256 better = ranks_strictly_before<kMax>(v, best[j]);
      best[j] = _mm256_blendv_ps(best[j], v, better);
      at[j] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at[j]),
                                                   _mm256_castsi256_ps(position), better));
    }
  }
  alignas(32) float lane_values[kColumnBlock];
  alignas(32) int32_t lane_at[kColumnBlock];
  for (int j = 0; j < vectors; ++j) {
    _mm256_store_ps(lane_values + 8 * j, best[j]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lane_at + 8 * j), at[j]);
  }
  for (int64_t c = 0; c < width; ++c) {
    index[c] = lane_at[c];
    if (values) values[c] = lane_values[c];
  }
}

// RowFold's state: the tree of a Row's pass. Only pointers cross into these, never vectors.
template <class Acc>
using RowTree = PairwiseTree<Acc, 1>;

template <class Acc>
KILN_TARGET_AVX2 void fold_start(void* state) {
  new (state) RowTree<Acc>;  // default-init: size 0, nodes unset (no 2 KiB clear per row)
}
template <class Acc>
KILN_TARGET_AVX2 void fold_block(void* state, const float* x, int64_t count) {
  static_cast<RowTree<Acc>*>(state)->push({row_block<Acc>(x, count, {})}, 0);
}
template <class Acc>
KILN_TARGET_AVX2 void fold_append(void* state, const void* run) {
  const auto& r = *static_cast<const RowTree<Acc>*>(run);
  for (int i = 0; i < r.size; ++i) static_cast<RowTree<Acc>*>(state)->push(r.nodes[i], r.levels[i]);
}
template <class Acc>
KILN_TARGET_AVX2 double fold_total(const void* state) {
  double out = 0;
  Row<float>{nullptr, 0}.template results<Acc>(
      static_cast<const RowTree<Acc>*>(state)->total(), &out);
  return out;
}

}  // namespace

RowFold::RowFold(VectorReduction op) : op_(op) {
  static_assert(sizeof(RowTree<SumAcc>) <= sizeof(state_) && alignof(RowTree<SumAcc>) <= 32 &&
                sizeof(RowTree<ExtremumAcc<true>>) <= sizeof(state_));
  static_assert(kBlock == kRowBlock);
  switch (op) {
    case VectorReduction::Sum:
    case VectorReduction::Mean: fold_start<SumAcc>(state_); break;
    case VectorReduction::Amax: fold_start<ExtremumAcc<true>>(state_); break;
    case VectorReduction::Amin: fold_start<ExtremumAcc<false>>(state_); break;
    default: KILN_ASSERT(false, "RowFold takes sum, mean, amax and amin");
  }
}

void RowFold::add(const float* block, int64_t count) {
  switch (op_) {
    case VectorReduction::Amax: return fold_block<ExtremumAcc<true>>(state_, block, count);
    case VectorReduction::Amin: return fold_block<ExtremumAcc<false>>(state_, block, count);
    default: return fold_block<SumAcc>(state_, block, count);
  }
}

void RowFold::append(const RowFold& run) {
  KILN_ASSERT(run.op_ == op_, "RowFold::append of another reduction");
  switch (op_) {
    case VectorReduction::Amax: return fold_append<ExtremumAcc<true>>(state_, run.state_);
    case VectorReduction::Amin: return fold_append<ExtremumAcc<false>>(state_, run.state_);
    default: return fold_append<SumAcc>(state_, run.state_);
  }
}

int64_t RowFold::run_blocks(int64_t blocks, int threads) {
  int64_t run = 1;  // as reduce_lanes shares out a row's blocks
  while (run * 4 * threads < blocks) run *= 2;
  return run;
}

float RowFold::result(int64_t n) const {
  switch (op_) {
    case VectorReduction::Amax: return static_cast<float>(fold_total<ExtremumAcc<true>>(state_));
    case VectorReduction::Amin: return static_cast<float>(fold_total<ExtremumAcc<false>>(state_));
    case VectorReduction::Mean:
      return static_cast<float>(fold_total<SumAcc>(state_) / static_cast<double>(n));
    default: return static_cast<float>(fold_total<SumAcc>(state_));
  }
}

namespace {

// ---------------------------------------------------------------- log_softmax over columns

constexpr int64_t kChunkColumns = 512;       // a chunk's maxima, sums and shifts stay in L1
constexpr int64_t kChunkBytes = 128 * 1024;  // and its rows in L2 across its three passes

// The 8 columns of row from c, or the `rest` (1..7) that end the chunk (zeros past them).
template <typename T>
KILN_AVX2_INLINE __m256 load_columns(const T* row, int64_t c, int64_t full, int64_t rest,
                                     __m256i mask, bool read_back) {
  return c < full ? load8(row + c) : load_part(row + c, rest, mask, read_back);
}

// log_softmax down `width` (<= kChunkColumns) adjacent columns of n steps `stride` apart: the
// columns' maxima, their f64 sums of exp(x - max) (x - max carried exactly into exp), then
// x - (max + log(sum)) in f64, rounded once. Each pass reads whole rows of the chunk: strips of
// 32 columns at a power-of-two stride (4 KB) put all their rows in 2 of L1's 64 sets and missed
// on every pass (3x eager's time on [64, 32, 1024] over dim 1).
template <typename T>
KILN_TARGET_AVX2 void log_softmax_chunk(const T* x, T* y, int64_t n, int64_t stride,
                                        int64_t width) {
  alignas(32) float max[kChunkColumns];
  alignas(32) double sum[kChunkColumns], shift[kChunkColumns];
  const int64_t full = width / 8 * 8, rest = width - full;
  const __m256i mask = tail_mask(rest);
  const bool read_back = width >= 8;
  auto load = [&](int64_t k, int64_t c) KILN_AVX2_INLINE_LAMBDA {
    return load_columns(x + k * stride, c, full, rest, mask, read_back);
  };
  // Each pass takes rows kRows at a time, loading and storing a column's state once for them:
  // the same order of operations as a row at a time.
  constexpr int kRows = 4;
  auto over_rows = [&](auto&& rows) KILN_TARGET_AVX2 {
    int64_t k = 0;
    for (; k + kRows <= n; k += kRows) rows.template operator()<kRows>(k);
    for (; k < n; ++k) rows.template operator()<1>(k);
  };
  for (int64_t c = 0; c < width; c += 8) {
    _mm256_store_ps(max + c, splat(-INFINITY));
    _mm256_store_pd(sum + c, _mm256_setzero_pd());
    _mm256_store_pd(sum + c + 4, _mm256_setzero_pd());
  }
  over_rows([&]<int R>(int64_t k) KILN_TARGET_AVX2 {
    for (int64_t c = 0; c < width; c += 8) {
      __m256 m = _mm256_load_ps(max + c);
      for (int r = 0; r < R; ++r) m = ExtremumAcc<true>::pick(m, load(k + r, c));
      _mm256_store_ps(max + c, m);
    }
  });
  over_rows([&]<int R>(int64_t k) KILN_TARGET_AVX2 {
    for (int64_t c = 0; c < width; c += 8) {
      const __m256 m = _mm256_load_ps(max + c);
      __m256 e[R];
      for (int r = 0; r < R; ++r) e[r] = exp_minus(load(k + r, c), m);
      if constexpr (R == 4) {
        e[0] = _mm256_add_ps(_mm256_add_ps(e[0], e[1]), _mm256_add_ps(e[2], e[3]));
      }
      _mm256_store_pd(sum + c, _mm256_add_pd(_mm256_load_pd(sum + c), low_half(e[0])));
      _mm256_store_pd(sum + c + 4, _mm256_add_pd(_mm256_load_pd(sum + c + 4), high_half(e[0])));
    }
  });
  for (int64_t c = 0; c < width; ++c) shift[c] = static_cast<double>(max[c]) + std::log(sum[c]);
  over_rows([&]<int R>(int64_t k) KILN_TARGET_AVX2 {
    for (int64_t c = 0; c < width; c += 8) {
      const __m256d low = _mm256_load_pd(shift + c), high = _mm256_load_pd(shift + c + 4);
      for (int r = 0; r < R; ++r) {
        const __m256 v = load(k + r, c);
        const __m256 out = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(high_half(v), high)),
                                           _mm256_cvtpd_ps(_mm256_sub_pd(low_half(v), low)));
        T* to = y + (k + r) * stride + c;
        if (c < full) store8(to, out);
        else store_part(to, rest, mask, out);
      }
    }
  });
}

// Chunks of columns as wide as kChunkBytes allows (a cache line at least), narrower where there
// would be fewer chunks than threads. A column's arithmetic doesn't depend on its chunk: the
// results don't change with the thread count.
template <typename T>
void log_softmax_columns(const T* x, T* y, ReduceExtents e, int threads) {
  int64_t width = std::clamp<int64_t>(kChunkBytes / (std::max<int64_t>(e.n, 1) * 4) / 16 * 16,
                                      16, kChunkColumns);
  if (e.outer < threads) {
    const int64_t per_outer = (threads + e.outer - 1) / e.outer;
    width = std::min(width, std::max<int64_t>(16, (e.inner + per_outer - 1) / per_outer));
  }
  width = std::min(width, e.inner);
  const int64_t chunks = (e.inner + width - 1) / width;
  parallel_chunks(e.outer * chunks, e.n * width, threads, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t o = item / chunks, column = (item % chunks) * width;
      const int64_t offset = o * e.n * e.inner + column;
      log_softmax_chunk(x + offset, y + offset, e.n, e.inner, std::min(width, e.inner - column));
    }
  });
}

template <typename T>
void reduce_elements(VectorReduction op, const T* x, T* y, ReduceExtents e, double correction,
                     int threads) {
  if (e.outer <= 0 || e.inner <= 0) return;
  // log_softmax writes x's layout, the reductions one value per (outer, inner).
  const int64_t out_step = op == VectorReduction::LogSoftmax ? e.n : 1;
  if (e.inner == 1) {
    const int64_t batches = e.n <= kRowBlock ? e.outer / kBatchRows : 0;
    for_items(batches, kBatchRows * e.n, threads, [&](int64_t b, int split) {
      const int64_t r = b * kBatchRows;
      reduce_item(op, RowBatch<T>{x + r * e.n, e.n}, y + r * out_step, correction, split);
    });
    const int64_t batched = batches * kBatchRows;
    for_items(e.outer - batched, e.n, threads, [&](int64_t i, int split) {
      const int64_t r = batched + i;
      reduce_item(op, Row<T>{x + r * e.n, e.n}, y + r * out_step, correction, split);
    });
    return;
  }
  if (op == VectorReduction::LogSoftmax) return log_softmax_columns(x, y, e, threads);
  const int64_t strips = (e.inner + kStripWidth - 1) / kStripWidth;
  for_items(e.outer * strips, e.n * std::min(e.inner, kStripWidth), threads,
            [&](int64_t item, int split) {
              const int64_t o = item / strips, column = (item % strips) * kStripWidth;
              reduce_strip(op, x + o * e.n * e.inner + column,
                           y + o * e.inner + column, e.n, e.inner,
                           std::min(kStripWidth, e.inner - column), correction, split);
            });
}

}  // namespace

void reduce(VectorReduction op, const float* x, float* y, ReduceExtents e, double correction,
            int threads) {
  reduce_elements(op, x, y, e, correction, threads);
}

void arg_extremum(bool max, const float* x, ReduceExtents e, int64_t* index, float* values,
                  int threads) {
  KILN_ASSERT(e.n >= 1 && e.n <= INT32_MAX, "arg_extremum takes 1 to 2^31 - 1 elements a result");
  if (e.inner == 1) {
    parallel_chunks(e.outer, e.n, threads, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* row = x + r * e.n;
        index[r] = max ? row_arg_extremum<true>(row, e.n) : row_arg_extremum<false>(row, e.n);
        if (values) values[r] = row[index[r]];
      }
    });
    return;
  }
  const int64_t blocks = (e.inner + kColumnBlock - 1) / kColumnBlock;
  parallel_chunks(e.outer * blocks, e.n * std::min(e.inner, kColumnBlock), threads,
                  [&](int64_t begin, int64_t end) {
                    for (int64_t item = begin; item < end; ++item) {
                      const int64_t o = item / blocks, column = (item % blocks) * kColumnBlock;
                      const int64_t width = std::min(kColumnBlock, e.inner - column);
                      const int64_t first = o * e.inner + column;
                      auto run = max ? columns_arg_extremum<true> : columns_arg_extremum<false>;
                      run(x + o * e.n * e.inner + column, e.n, e.inner, width, index + first,
                          values ? values + first : nullptr);
                    }
                  });
}

void reduce(VectorReduction op, const BFloat16* x, BFloat16* y, ReduceExtents e,
            double correction, int threads) {
  reduce_elements(op, x, y, e, correction, threads);
}

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
