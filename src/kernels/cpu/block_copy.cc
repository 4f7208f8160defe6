#include "kernels/cpu/block_copy.h"

#include <algorithm>

namespace kiln::cpu {

void copy_blocks(const BlockGrid& grid, const void* src, void* dst, int threads) {
  if (grid.rows <= 0 || grid.count <= 0 || grid.block_bytes <= 0) return;
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  with_block_copier(grid.block_bytes, [&](auto copy) {
    parallel_chunks(grid.rows * grid.count, block_work(grid.block_bytes), threads,
                    [&](int64_t begin, int64_t end) {
                      // Row by row, each row's blocks [first, last) in a plain strided loop.
                      for (int64_t r = begin / grid.count; r * grid.count < end; ++r) {
                        const int64_t first = std::max(begin - r * grid.count, int64_t{0});
                        const int64_t last = std::min(end - r * grid.count, grid.count);
                        const std::byte* from = s + r * grid.src_row;
                        std::byte* to = d + r * grid.dst_row;
                        for (int64_t j = first; j < last; ++j)
                          copy(to + j * grid.dst_step, from + j * grid.src_step);
                      }
                    });
  });
}

}  // namespace kiln::cpu
