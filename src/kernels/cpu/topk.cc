#include "kernels/cpu/topk.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/cpu/cpu_features.h"
#include "kiln/error.h"

#ifdef KILN_X86
#include <immintrin.h>
#endif

namespace kiln::cpu {

namespace {

template <typename T>
using KeyOf = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

// The unsigned key of v: ascending keys are the rank order (topk.h).
template <typename T>
uint64_t rank_key(T v, bool largest) {
  using Key = KeyOf<T>;
  Key ascending;  // ascending with the value
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return largest ? Key{0} : std::numeric_limits<Key>::max();
    const Key bits = std::bit_cast<Key>(v == 0 ? T{0} : v);  // -0 as +0
    constexpr Key sign = Key{1} << (8 * sizeof(T) - 1);
    ascending = (bits & sign) ? ~bits : bits | sign;
  } else if constexpr (std::is_signed_v<T>) {
    using Unsigned = std::make_unsigned_t<T>;
    constexpr Unsigned sign = Unsigned{1} << (8 * sizeof(T) - 1);
    ascending = static_cast<Key>(static_cast<Unsigned>(static_cast<Unsigned>(v) ^ sign));
  } else {
    ascending = static_cast<Key>(v);
  }
  // Floats: a non-NaN key is never 0 (largest) nor all ones (smallest), NaN's.
  return largest ? static_cast<Key>(~ascending) : ascending;
}

// True when v might rank before `bar` (never false when it does; NaN either way): one compare,
// so that the compiler can test a block of 8 at once.
template <typename T>
bool may_rank_before(T v, T bar, bool largest) {
  return largest ? !(v <= bar) : !(v >= bar);
}

// 8 elements from `at`; bit j of `mask` set where element at + j may rank before the bar.
struct Block {
  int64_t at;
  unsigned mask;
};

// From i on, in steps of 8: the first block holding an element that may rank before `bar`, or
// an empty mask at the first i with fewer than 8 elements left.
template <typename T>
Block next_candidates(const T* x, int64_t i, int64_t n, T bar, bool largest) {
  for (; i + 8 <= n; i += 8) {
    unsigned mask = 0;
    for (int j = 0; j < 8; ++j) mask |= unsigned{may_rank_before(x[i + j], bar, largest)} << j;
    if (mask) return {i, mask};
  }
  return {i, 0};
}

#ifdef KILN_X86
// may_rank_before on 8 lanes. Always inlined: an AVX2 function returning a vector out of line is
// called through memory from code built without -mavx2.
KILN_TARGET_AVX2 inline __attribute__((always_inline)) __m256 may_rank_before(__m256 v,
                                                                             __m256 bar,
                                                                             bool largest) {
  return largest ? _mm256_cmp_ps(v, bar, _CMP_NLE_UQ) : _mm256_cmp_ps(v, bar, _CMP_NGE_UQ);
}

// next_candidates for f32 in AVX2: 32 elements a step (most of a line is skipped once the bar
// is high), then the block of 8.
KILN_TARGET_AVX2 Block next_candidates_avx2(const float* x, int64_t i, int64_t n, float bar,
                                            bool largest) {
  const __m256 w = _mm256_set1_ps(bar);
  for (; i + 32 <= n; i += 32) {
    const __m256 any = _mm256_or_ps(
        _mm256_or_ps(may_rank_before(_mm256_loadu_ps(x + i), w, largest),
                     may_rank_before(_mm256_loadu_ps(x + i + 8), w, largest)),
        _mm256_or_ps(may_rank_before(_mm256_loadu_ps(x + i + 16), w, largest),
                     may_rank_before(_mm256_loadu_ps(x + i + 24), w, largest)));
    if (!_mm256_testz_ps(any, any)) break;
  }
  for (; i + 8 <= n; i += 8)
    if (const int mask = _mm256_movemask_ps(may_rank_before(_mm256_loadu_ps(x + i), w, largest)))
      return {i, static_cast<unsigned>(mask)};
  return {i, 0};
}
#endif

// (key, index): a ranks before b. A lambda, so that the standard algorithms inline it.
constexpr auto before = [](const TopkEntry& a, const TopkEntry& b) {
  return a.first != b.first ? a.first < b.first : a.second < b.second;
};

// Replaces the root of a heap whose every parent ranks after its children (the root ranks last
// of all) by e, which ranks before the root, and sifts e down.
void replace_last(std::vector<TopkEntry>& heap, const TopkEntry& e) {
  const size_t size = heap.size();
  size_t i = 0;
  for (size_t child = 1; child < size; child = 2 * i + 1) {
    if (child + 1 < size && before(heap[child], heap[child + 1])) ++child;
    if (!before(e, heap[child])) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = e;
}

// The k best so far in a heap whose root, the k-th best, is the bar: an element must rank before
// it to enter, which costs log k. Blocks of 8 with nothing above the bar cost one compare.
template <typename T>
void select_with_heap(const T* x, int64_t n, int64_t k, bool largest, T* values,
                      int64_t* indices, int64_t out_stride, std::vector<TopkEntry>& heap,
                      bool vector_scan) {
  heap.clear();
  for (int64_t i = 0; i < k; ++i) heap.emplace_back(rank_key(x[i], largest), static_cast<uint32_t>(i));
  std::make_heap(heap.begin(), heap.end(), before);
  auto offer = [&](int64_t i) {
    const TopkEntry e{rank_key(x[i], largest), static_cast<uint32_t>(i)};
    if (before(e, heap.front())) replace_last(heap, e);
  };
  auto next = [&](int64_t i) {
    const T bar = x[heap.front().second];
#ifdef KILN_X86
    if constexpr (std::is_same_v<T, float>)
      if (vector_scan) return next_candidates_avx2(x, i, n, bar, largest);
#endif
    return next_candidates(x, i, n, bar, largest);
  };
  // A block's mask was taken against the bar before its first entry; offer checks exactly.
  for (Block b = next(k); b.mask; b = next(b.at + 8))
    for (unsigned m = b.mask; m; m &= m - 1) offer(b.at + std::countr_zero(m));
  for (int64_t i = k + (n - k) / 8 * 8; i < n; ++i) offer(i);
  std::sort_heap(heap.begin(), heap.end(), before);
  for (int64_t j = 0; j < k; ++j) {
    values[j * out_stride] = x[heap[static_cast<size_t>(j)].second];
    indices[j * out_stride] = heap[static_cast<size_t>(j)].second;
  }
}

// LSD radix sort of the line's keys, 8 bits a pass; a pass whose digit is the same for every key
// is skipped. Stable, so equal keys keep index order.
template <typename T>
void select_by_sorting(const T* x, int64_t n, int64_t k, bool largest, T* values,
                       int64_t* indices, int64_t out_stride, TopkScratch& s) {
  const size_t count = static_cast<size_t>(n);
  s.keys.resize(count);
  s.keys_tmp.resize(count);
  s.order.resize(count);
  s.order_tmp.resize(count);
  uint64_t* keys = s.keys.data();
  uint64_t* keys_tmp = s.keys_tmp.data();
  uint32_t* order = s.order.data();
  uint32_t* order_tmp = s.order_tmp.data();
  constexpr int kDigits = sizeof(KeyOf<T>);
  uint32_t histogram[kDigits][256] = {};
  for (size_t i = 0; i < count; ++i) {
    const uint64_t key = rank_key(x[i], largest);
    keys[i] = key;
    order[i] = static_cast<uint32_t>(i);
    for (int d = 0; d < kDigits; ++d) ++histogram[d][(key >> (8 * d)) & 0xff];
  }
  for (int d = 0; d < kDigits; ++d) {
    const uint32_t* h = histogram[d];
    if (std::find(h, h + 256, static_cast<uint32_t>(count)) != h + 256) continue;
    uint32_t start[256];
    uint32_t sum = 0;
    for (int b = 0; b < 256; ++b) {
      start[b] = sum;
      sum += h[b];
    }
    for (size_t i = 0; i < count; ++i) {
      const uint32_t at = start[(keys[i] >> (8 * d)) & 0xff]++;
      keys_tmp[at] = keys[i];
      order_tmp[at] = order[i];
    }
    std::swap(keys, keys_tmp);
    std::swap(order, order_tmp);
  }
  for (int64_t j = 0; j < k; ++j) {
    values[j * out_stride] = x[order[j]];
    indices[j * out_stride] = order[j];
  }
}

}  // namespace

template <typename T>
void topk_line(const T* x, int64_t n, int64_t k, bool largest, T* values, int64_t* indices,
               int64_t out_stride, TopkScratch& scratch) {
  KILN_ASSERT(k >= 0 && k <= n && n <= std::numeric_limits<uint32_t>::max(),
              "topk_line: k " << k << " of " << n);
  if (k == 0) return;
  // The heap pays log k per element that enters it, the sort a few passes over every element.
  if (k * 64 <= n)
    select_with_heap(x, n, k, largest, values, indices, out_stride, scratch.heap,
                     has_avx2_fma());
  else select_by_sorting(x, n, k, largest, values, indices, out_stride, scratch);
}

#define KILN_TOPK_LINE(T)                                                                      \
  template void topk_line<T>(const T*, int64_t, int64_t, bool, T*, int64_t*, int64_t,        \
                             TopkScratch&);
KILN_TOPK_LINE(float)
KILN_TOPK_LINE(double)
KILN_TOPK_LINE(int64_t)
KILN_TOPK_LINE(int32_t)
KILN_TOPK_LINE(int16_t)
KILN_TOPK_LINE(int8_t)
KILN_TOPK_LINE(uint8_t)
#undef KILN_TOPK_LINE

}  // namespace kiln::cpu
