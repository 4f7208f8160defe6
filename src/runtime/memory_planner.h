// Static memory planning, split as in TFLite's arena planner: lifetime analysis (the executor
// computes a BufferLifetime per buffer) and a pluggable placement strategy that assigns offsets
// in one arena. Plans are offsets, never pointers, so one plan serves any number of arenas.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct BufferLifetime {
  std::string name;
  size_t size = 0;
  int first_step = 0;  // the step that writes it
  int last_step = 0;   // the last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per BufferLifetime, aligned
  size_t arena_size = 0;
  std::string strategy;

  // A table of buffers (offset, size, lifetime) and the arena size, for dumps.
  std::string to_string(const std::vector<BufferLifetime>& buffers) const;
};

class PlacementStrategy {
 public:
  virtual ~PlacementStrategy() = default;
  virtual std::string name() const = 0;
  // Offsets (multiples of `alignment`) such that buffers alive at the same step never overlap.
  virtual MemoryPlan place(const std::vector<BufferLifetime>& buffers, size_t alignment) const = 0;
};

// TFLite's greedy-by-size: largest buffers first, each at the lowest offset that fits between
// the buffers already placed whose lifetimes overlap it.
class GreedyBySizePlacement final : public PlacementStrategy {
 public:
  std::string name() const override { return "greedy_by_size"; }
  MemoryPlan place(const std::vector<BufferLifetime>& buffers, size_t alignment) const override;
};

// Checks that no two buffers alive at the same step overlap in the arena (for tests and debug).
bool plan_is_valid(const std::vector<BufferLifetime>& buffers, const MemoryPlan& plan);

}  // namespace kiln
