// Constants a compiled graph drops while its plans are made (CompileOptions::
// release_prepacked_constants). A batch norm folded into a convolution's weights, or a weight
// cast to bf16, is a constant the compile made: once every kernel that reads it has prepacked
// its own copy (oneDNN's blocked or Winograd layout), nothing reads it again, and keeping it
// would hold those weights a third time beside the model's own and the prepacked copy. Only for
// graphs whose plans are all made at compile (static inputs, or gears): a later plan's kernels
// would need the data. Each constant goes as soon as its last reader is planned, so the folded
// copies shrink while the prepacked ones grow and the compile's peak holds one of the two.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <utility>

#include "kiln/graph.h"

namespace kiln {

class ConstantRelease {
 public:
  // The constants of `graph` (the compile's optimized copy) that `source` (the caller's graph)
  // doesn't hold, each awaiting its uses in `plans` plans. Graph outputs stay: runs copy them.
  ConstantRelease(Graph& graph, const Graph& source, size_t plans);

  // A plan's kernel for one use of `constant` was made; `read_at_run_time` when it reads the
  // constant's data at run time (no prepacked copy), which keeps it.
  void planned(const Value* constant, bool read_at_run_time);

  size_t released_bytes() const { return released_bytes_; }
  // Plans still expected: a plan made beyond them would find constants gone.
  size_t plans_left() const { return plans_left_; }
  void plan_made() { --plans_left_; }

 private:
  Graph& graph_;
  // The constants that may go, with their uses left to plan; erased when released or kept.
  std::unordered_map<const Value*, std::pair<Value*, size_t>> uses_left_;
  size_t plans_left_;
  size_t released_bytes_ = 0;
};

}  // namespace kiln
