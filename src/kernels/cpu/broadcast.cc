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
                             const std::vector<int64_t>& out_sizes)
    : BroadcastPlan(std::vector<std::vector<int64_t>>{a_sizes, b_sizes}, out_sizes) {}

BroadcastPlan::BroadcastPlan(const std::vector<std::vector<int64_t>>& input_sizes,
                             const std::vector<int64_t>& out_sizes)
    : num_inputs_(input_sizes.size()) {
  KILN_ASSERT(num_inputs_ >= 1 && num_inputs_ <= kMaxInputs,
              "a broadcast plan takes 1 to " << kMaxInputs << " inputs, not " << num_inputs_);
  const size_t rank = out_sizes.size();
  std::vector<std::vector<int64_t>> strides;
  for (const std::vector<int64_t>& sizes : input_sizes) {
    strides.push_back(broadcast_strides(sizes, rank));
    // Each input dim equals the output's or is 1 (a size-1 output dim has stride 0 anyway).
    for (size_t d = 0; d < rank; ++d) {
      size_t i = d + sizes.size();
      KILN_ASSERT(i < rank || sizes[i - rank] == out_sizes[d] || sizes[i - rank] == 1);
    }
  }
  numel_ = 1;
  for (int64_t size : out_sizes) numel_ *= size;
  for (size_t d = 0; d < rank; ++d) {
    if (out_sizes[d] == 1) continue;  // contributes nothing to any offset
    // Merge into the previous kept dim when every input steps through the pair as one dim.
    bool mergeable = !sizes_.empty();
    for (size_t k = 0; k < num_inputs_ && mergeable; ++k)
      mergeable = strides_.back()[k] == strides[k][d] * out_sizes[d];
    PerInput dim_strides{};
    for (size_t k = 0; k < num_inputs_; ++k) dim_strides[k] = strides[k][d];
    if (mergeable) {
      sizes_.back() *= out_sizes[d];
      strides_.back() = dim_strides;
      continue;
    }
    sizes_.push_back(out_sizes[d]);
    strides_.push_back(dim_strides);
  }
  if (sizes_.empty()) {  // a single element
    sizes_ = {1};
    PerInput ones{};
    for (size_t k = 0; k < num_inputs_; ++k) ones[k] = 1;
    strides_ = {ones};
  }
  for (size_t k = 0; k < num_inputs_; ++k)
    KILN_ASSERT(strides_.back()[k] <= 1, "the inner dim of a contiguous input has stride 0 or 1");
}

}  // namespace kiln::cpu
