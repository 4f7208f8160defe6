// topk of one line: the k elements that rank first, sorted. Rank order (PyTorch's, with its
// unspecified tie order fixed): for the largest, NaN first, then descending values; for the
// smallest, ascending values, then NaN; -0 and +0 equal; ties by lower index. Every dtype is
// ordered through an unsigned key (ascending key = rank order), so one selection and one sort
// serve all of them.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::cpu {

using TopkEntry = std::pair<uint64_t, uint32_t>;  // (rank key, index)

// Buffers one thread reuses from line to line and from call to call.
struct TopkScratch {
  std::vector<TopkEntry> heap;
  std::vector<unsigned char> line;  // a strided line gathered
  std::vector<uint64_t> keys, keys_tmp;
  std::vector<uint32_t> order, order_tmp;
};

// x: n contiguous elements (n < 2^32); 0 <= k <= n. values[j * out_stride] and
// indices[j * out_stride] receive the j-th ranked element and its index. Small k scans the line
// once, keeping the k best in a heap and skipping blocks of 8 that hold nothing better than its
// worst; larger k sorts the line's keys (LSD radix, stable, so ties keep index order).
template <typename T>
void topk_line(const T* x, int64_t n, int64_t k, bool largest, T* values, int64_t* indices,
               int64_t out_stride, TopkScratch& scratch);

}  // namespace kiln::cpu
