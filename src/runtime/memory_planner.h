// Static memory planning, split as in TFLite's arena planner: lifetime analysis (the executor
// computes a BufferLifetime per buffer) and pluggable placement strategies that assign offsets
// in one arena. Like GE, the planner tries every strategy and keeps the smallest arena. Plans are
// offsets, never pointers, so one plan serves any number of arenas.
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
  std::string producer;  // the node that writes it, for dumps
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per BufferLifetime, aligned
  size_t arena_size = 0;
  std::string strategy;

  // A table of buffers (offset, size, first and last step, producer) and the arena size.
  std::string to_string(const std::vector<BufferLifetime>& buffers) const;
  // The offset-over-time chart as an SVG document: x is the step, y the offset, one rectangle
  // per buffer (its name, size and steps in a tooltip).
  std::string to_svg(const std::vector<BufferLifetime>& buffers, const std::string& title) const;
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

// TFLite's greedy-by-breadth (Pisarchyk & Lee, 2020): steps by the bytes live at them, widest
// first; at each, its unplaced buffers largest first, each in the smallest gap that fits.
class GreedyByBreadthPlacement final : public PlacementStrategy {
 public:
  std::string name() const override { return "greedy_by_breadth"; }
  MemoryPlan place(const std::vector<BufferLifetime>& buffers, size_t alignment) const override;
};

// Buffers in execution order (by first step), each at the lowest offset that fits: what a
// bump allocator that reuses freed holes would do.
class FirstFitPlacement final : public PlacementStrategy {
 public:
  std::string name() const override { return "first_fit"; }
  MemoryPlan place(const std::vector<BufferLifetime>& buffers, size_t alignment) const override;
};

// Every strategy, in the order plan_memory tries them.
const std::vector<std::unique_ptr<PlacementStrategy>>& placement_strategies();

// Tries every strategy and keeps the plan with the smallest arena (ties: the first). Buffers
// smaller than `reuse_threshold` bytes get memory of their own, shared with no other buffer.
// The sizes, aligned and summed, must fit in size_t (the executor checks).
MemoryPlan plan_memory(const std::vector<BufferLifetime>& buffers, size_t alignment,
                       size_t reuse_threshold = 0);

// The most bytes (each buffer aligned) alive at one step: no placement fits a smaller arena.
size_t peak_live_bytes(const std::vector<BufferLifetime>& buffers, size_t alignment);

// Checks that no two buffers alive at the same step overlap in the arena (for tests and debug).
bool plan_is_valid(const std::vector<BufferLifetime>& buffers, const MemoryPlan& plan);

}  // namespace kiln
