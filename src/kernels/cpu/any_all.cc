#include "kernels/cpu/any_all.h"

#include <algorithm>

#include "kernels/cpu/parallel_chunks.h"

namespace kiln::cpu {

namespace {

// Rows and columns are read in blocks of this many elements: a row stops at the first block
// that decides it; a strip of columns keeps one flag per column on the stack.
constexpr int64_t kBlock = 256;

// One result per row of x [rows, n]: whether any (all) element is nonzero.
template <bool kAny, typename U>
[[gnu::always_inline]] inline void rows(const U* x, int64_t first, int64_t last, int64_t n,
                                        U mask, uint8_t* y) {
  for (int64_t r = first; r < last; ++r) {
    const U* row = x + r * n;
    bool decided = false;
    for (int64_t k = 0; k < n && !decided; k += kBlock) {
      const int64_t end = std::min(n, k + kBlock);
      U seen = 0;  // any: the OR of the values; all: whether some value is zero
      for (int64_t j = k; j < end; ++j) {
        if constexpr (kAny) seen |= row[j] & mask;
        else seen |= static_cast<U>((row[j] & mask) == 0);
      }
      decided = seen != 0;
    }
    y[r] = kAny ? decided : !decided;
  }
}

// Results for columns [first, last) of x [outer, n, inner], numbered o * inner + i.
template <bool kAny, typename U>
[[gnu::always_inline]] inline void columns(const U* x, int64_t first, int64_t last, int64_t n,
                                           int64_t inner, U mask, uint8_t* y) {
  uint8_t flags[kBlock];
  for (int64_t c = first; c < last;) {
    const int64_t o = c / inner, i = c % inner;
    const int64_t count = std::min({kBlock, last - c, inner - i});
    const U* base = x + o * n * inner + i;
    std::fill(flags, flags + count, uint8_t{kAny ? 0 : 1});
    for (int64_t k = 0; k < n; ++k) {
      const U* step = base + k * inner;
      for (int64_t j = 0; j < count; ++j) {
        const uint8_t nonzero = (step[j] & mask) != 0;
        if constexpr (kAny) flags[j] |= nonzero;
        else flags[j] &= nonzero;
      }
    }
    std::copy(flags, flags + count, y + c);
    c += count;
  }
}

template <bool kAny, typename U>
void run(const U* x, U mask, const ReduceExtents& e, uint8_t* y, int64_t first, int64_t last) {
  if (e.inner == 1) rows<kAny>(x, first, last, e.n, mask, y);
  else columns<kAny>(x, first, last, e.n, e.inner, mask, y);
}

#ifdef KILN_X86
template <bool kAny, typename U>
KILN_TARGET_AVX2 void run_avx2(const U* x, U mask, const ReduceExtents& e, uint8_t* y,
                               int64_t first, int64_t last) {
  if (e.inner == 1) rows<kAny>(x, first, last, e.n, mask, y);
  else columns<kAny>(x, first, last, e.n, e.inner, mask, y);
}
#endif

template <bool kAny, typename U>
void dispatch(const void* x, uint64_t value_bits, const ReduceExtents& e, uint8_t* y,
              int threads) {
  const U* data = static_cast<const U*>(x);
  const U mask = static_cast<U>(value_bits);
#ifdef KILN_X86
  const bool vector = has_avx2_fma();
#endif
  parallel_chunks(e.outer * e.inner, e.n, threads, [&](int64_t first, int64_t last) {
#ifdef KILN_X86
    if (vector) return run_avx2<kAny>(data, mask, e, y, first, last);
#endif
    run<kAny>(data, mask, e, y, first, last);
  });
}

template <bool kAny>
void by_width(const void* x, int bytes, uint64_t value_bits, const ReduceExtents& e, uint8_t* y,
              int threads) {
  switch (bytes) {
    case 1: return dispatch<kAny, uint8_t>(x, value_bits, e, y, threads);
    case 2: return dispatch<kAny, uint16_t>(x, value_bits, e, y, threads);
    case 4: return dispatch<kAny, uint32_t>(x, value_bits, e, y, threads);
    default: return dispatch<kAny, uint64_t>(x, value_bits, e, y, threads);
  }
}

}  // namespace

void any_all(bool any, const void* x, int bytes, uint64_t value_bits, const ReduceExtents& e,
             uint8_t* y, int threads) {
  if (any) by_width<true>(x, bytes, value_bits, e, y, threads);
  else by_width<false>(x, bytes, value_bits, e, y, threads);
}

}  // namespace kiln::cpu
