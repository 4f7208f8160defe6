#include "kernels/cpu/broadcast.h"

#include <algorithm>

namespace kiln::cpu {

namespace {

// Row-major element strides of `sizes` right-aligned to `rank` dims, 0 where the size is 1
// (a broadcast dim reads the same element at every index).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& sizes, size_t rank) {
  KILN_ASSERT(sizes.size() <= rank, "broadcast input has a higher rank than the output");
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    size_t d = rank - 1 - i;
    int64_t size = sizes[sizes.size() - 1 - i];
    strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return strides;
}

}  // namespace

BroadcastPlan::BroadcastPlan(const std::vector<int64_t>& a_sizes,
                             const std::vector<int64_t>& b_sizes,
                             const std::vector<int64_t>& out_sizes) {
  const size_t rank = out_sizes.size();
  std::vector<int64_t> a = broadcast_strides(a_sizes, rank);
  std::vector<int64_t> b = broadcast_strides(b_sizes, rank);
  numel_ = 1;
  for (size_t d = 0; d < rank; ++d) {
    numel_ *= out_sizes[d];
    // Each input dim equals the output's or is 1 (a size-1 output dim has stride 0 anyway).
    size_t ia = d + a_sizes.size(), ib = d + b_sizes.size();
    KILN_ASSERT(ia < rank || a_sizes[ia - rank] == out_sizes[d] || a_sizes[ia - rank] == 1);
    KILN_ASSERT(ib < rank || b_sizes[ib - rank] == out_sizes[d] || b_sizes[ib - rank] == 1);
  }
  for (size_t d = 0; d < rank; ++d) {
    if (out_sizes[d] == 1) continue;  // contributes nothing to any offset
    // Merge into the previous kept dim when both inputs step through the pair as one dim.
    if (!sizes_.empty() && a_strides_.back() == a[d] * out_sizes[d] &&
        b_strides_.back() == b[d] * out_sizes[d]) {
      sizes_.back() *= out_sizes[d];
      a_strides_.back() = a[d];
      b_strides_.back() = b[d];
      continue;
    }
    sizes_.push_back(out_sizes[d]);
    a_strides_.push_back(a[d]);
    b_strides_.push_back(b[d]);
  }
  if (sizes_.empty()) {  // a single element
    sizes_ = {1};
    a_strides_ = {1};
    b_strides_ = {1};
  }
  KILN_ASSERT(a_strides_.back() <= 1 && b_strides_.back() <= 1,
              "the inner dim of a contiguous input has stride 0 or 1");
}

}  // namespace kiln::cpu
