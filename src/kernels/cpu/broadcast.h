// NumPy-style broadcasting of contiguous row-major inputs to an output, prepared once per
// kernel: dims collapsed so that each kernel call walks long contiguous runs.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "kiln/error.h"

namespace kiln::cpu {

class BroadcastPlan {
 public:
  // The most inputs a plan takes (where's condition and two values).
  static constexpr size_t kMaxInputs = 4;

  // Two inputs. The sizes must broadcast to out_sizes (checked by type inference before).
  BroadcastPlan(const std::vector<int64_t>& a_sizes, const std::vector<int64_t>& b_sizes,
                const std::vector<int64_t>& out_sizes);
  // Any number of inputs, 1 to kMaxInputs.
  BroadcastPlan(const std::vector<std::vector<int64_t>>& input_sizes,
                const std::vector<int64_t>& out_sizes);

  int64_t numel() const { return numel_; }
  size_t num_inputs() const { return num_inputs_; }

  // Calls run(out_offset, a_offset, b_offset, count, a_step, b_step) for consecutive runs that
  // cover the output elements [begin, end) in order. Within a run the output advances by 1 and
  // each input by its step, which is 1 or 0 (broadcast: the same element throughout).
  template <typename Run>
  void for_each_run(int64_t begin, int64_t end, const Run& run) const {
    for_each_run_n(begin, end,
                   [&](int64_t o, const int64_t* offsets, int64_t count, const int64_t* steps) {
                     run(o, offsets[0], offsets[1], count, steps[0], steps[1]);
                   });
  }

  // The same for any number of inputs: run(out_offset, offsets, count, steps), with one offset
  // and one step (1 or 0) per input.
  template <typename Run>
  void for_each_run_n(int64_t begin, int64_t end, const Run& run) const;

 private:
  using PerInput = std::array<int64_t, kMaxInputs>;
  // Collapsed output dims, outermost first, none of size 1 (a scalar output keeps one dim of 1);
  // the last is the inner run. Strides are in elements, 0 where that input is broadcast.
  std::vector<int64_t> sizes_;
  std::vector<PerInput> strides_;  // per collapsed dim, one stride per input
  size_t num_inputs_ = 0;
  int64_t numel_ = 0;
};

template <typename Run>
void BroadcastPlan::for_each_run_n(int64_t begin, int64_t end, const Run& run) const {
  if (begin >= end) return;
  const size_t rank = sizes_.size();
  const size_t n_in = num_inputs_;
  const int64_t inner = sizes_.back();
  // Multi-index of `begin` over the outer dims, and the input offsets it maps to.
  std::vector<int64_t> index(rank, 0);
  PerInput offsets{};
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % sizes_[d];
    rest /= sizes_[d];
    for (size_t k = 0; k < n_in; ++k) offsets[k] += index[d] * strides_[d][k];
  }
  const PerInput& steps = strides_.back();
  int64_t pos = begin;
  while (pos < end) {
    int64_t count = std::min(inner - index[rank - 1], end - pos);
    run(pos, offsets.data(), count, steps.data());
    pos += count;
    if (pos >= end) break;
    // Back to the start of the inner dim, then carry into the outer ones.
    for (size_t k = 0; k < n_in; ++k) offsets[k] -= index[rank - 1] * steps[k];
    index[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      for (size_t k = 0; k < n_in; ++k) offsets[k] += strides_[d][k];
      if (++index[d] < sizes_[d]) break;
      for (size_t k = 0; k < n_in; ++k) offsets[k] -= index[d] * strides_[d][k];
      index[d] = 0;
    }
  }
}

}  // namespace kiln::cpu
