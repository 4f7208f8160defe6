// Block copies: the optimized core of the data movement kernels that move whole runs of
// elements (concat, split, slice, index_select, embedding, advanced indexing). Each block is one
// memcpy, or one load and store when a block is a single element; large copies are split over
// the OpenMP pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/parallel_chunks.h"
#include "kiln/error.h"

namespace kiln::cpu {

// Calls fn(E{}) with E the unsigned integer type of `bytes` bytes (1, 2, 4 or 8: every dtype's
// size), for kernels that move elements without looking at their values.
template <typename Fn>
void with_element_type(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
  }
  KILN_ASSERT(false, "no element type of " << bytes << " bytes");
}

// Calls body(copy) with copy(dst, src) moving one block of `block_bytes`: a fixed-size copy
// (compiled to a single load and store) for the sizes of one element, memcpy otherwise.
template <typename Body>
void with_block_copier(int64_t block_bytes, const Body& body) {
  auto fixed = [&]<size_t N>() {
    body([](std::byte* dst, const std::byte* src) { std::memcpy(dst, src, N); });
  };
  switch (block_bytes) {
    case 1: return fixed.template operator()<1>();
    case 2: return fixed.template operator()<2>();
    case 4: return fixed.template operator()<4>();
    case 8: return fixed.template operator()<8>();
  }
  const size_t n = static_cast<size_t>(block_bytes);
  body([n](std::byte* dst, const std::byte* src) { std::memcpy(dst, src, n); });
}

// Work per block for parallel_chunks' threshold, whose unit is an element touched: a block's
// bytes in f32-sized words.
inline int64_t block_work(int64_t block_bytes) { return block_bytes / 4 + 1; }

// rows x count blocks of block_bytes: block (r, j) is read at src + r * src_row + j * src_step
// and written at dst + r * dst_row + j * dst_step (all in bytes).
struct BlockGrid {
  int64_t rows = 1, count = 1, block_bytes = 0;
  int64_t src_row = 0, src_step = 0, dst_row = 0, dst_step = 0;
};

void copy_blocks(const BlockGrid& grid, const void* src, void* dst, int threads);

}  // namespace kiln::cpu
