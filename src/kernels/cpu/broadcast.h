// NumPy-style broadcasting of two contiguous row-major inputs to an output, prepared once per
// kernel: dims collapsed so that each kernel call walks long contiguous runs.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/error.h"

namespace kiln::cpu {

class BroadcastPlan {
 public:
  // The sizes must broadcast to out_sizes (checked by type inference before).
  BroadcastPlan(const std::vector<int64_t>& a_sizes, const std::vector<int64_t>& b_sizes,
                const std::vector<int64_t>& out_sizes);

  int64_t numel() const { return numel_; }

  // Calls run(out_offset, a_offset, b_offset, count, a_step, b_step) for consecutive runs that
  // cover the output elements [begin, end) in order. Within a run the output advances by 1 and
  // each input by its step, which is 1 or 0 (broadcast: the same element throughout).
  template <typename Run>
  void for_each_run(int64_t begin, int64_t end, const Run& run) const;

 private:
  // Collapsed output dims, outermost first, none of size 1 (a scalar output keeps one dim of 1);
  // the last is the inner run. Strides are in elements, 0 where that input is broadcast.
  std::vector<int64_t> sizes_;
  std::vector<int64_t> a_strides_, b_strides_;
  int64_t numel_ = 0;
};

template <typename Run>
void BroadcastPlan::for_each_run(int64_t begin, int64_t end, const Run& run) const {
  if (begin >= end) return;
  const size_t rank = sizes_.size();
  const int64_t inner = sizes_.back();
  // Multi-index of `begin` over the outer dims, and the input offsets it maps to.
  std::vector<int64_t> index(rank, 0);
  int64_t a_off = 0, b_off = 0;
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % sizes_[d];
    rest /= sizes_[d];
    a_off += index[d] * a_strides_[d];
    b_off += index[d] * b_strides_[d];
  }
  const int64_t a_step = a_strides_.back(), b_step = b_strides_.back();
  int64_t pos = begin;
  while (pos < end) {
    int64_t count = std::min(inner - index[rank - 1], end - pos);
    run(pos, a_off, b_off, count, a_step, b_step);
    pos += count;
    if (pos >= end) break;
    // Back to the start of the inner dim, then carry into the outer ones.
    a_off -= index[rank - 1] * a_step;
    b_off -= index[rank - 1] * b_step;
    index[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      a_off += a_strides_[d];
      b_off += b_strides_[d];
      if (++index[d] < sizes_[d]) break;
      a_off -= index[d] * a_strides_[d];
      b_off -= index[d] * b_strides_[d];
      index[d] = 0;
    }
  }
}

}  // namespace kiln::cpu
