// Splitting a kernel's work over the OpenMP pool that oneDNN and OpenBLAS share.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::cpu {

// Below this much work (in elements touched) waking a thread team costs more than it saves.
inline constexpr int64_t kParallelMinWork = int64_t{1} << 16;

// Calls body(begin, end) over contiguous chunks that cover [0, items) exactly once: one chunk per
// thread when items * work_per_item is large enough to pay for a team, else one chunk on the
// calling thread.
template <typename Body>
void parallel_chunks(int64_t items, int64_t work_per_item, int threads, const Body& body) {
  if (items <= 0) return;
  int64_t work = items * std::max<int64_t>(work_per_item, 1);
  int chunks = static_cast<int>(std::min<int64_t>(std::max(threads, 1), items));
  if (work < kParallelMinWork) chunks = 1;
#pragma omp parallel for num_threads(chunks) if (chunks > 1) schedule(static)
  for (int c = 0; c < chunks; ++c) body(items * c / chunks, items * (c + 1) / chunks);
}

}  // namespace kiln::cpu
