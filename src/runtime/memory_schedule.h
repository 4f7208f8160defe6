// Stage "schedule": the execution order of a plan's steps, chosen to lower peak memory. The
// graph's node order is one topological order; a greedy list scheduler (after the memory-aware
// schedulers of TVM and TFLite) builds others that finish branches before starting new ones,
// so big intermediates die sooner. The executor lays memory out for each candidate order and
// keeps the one with the smallest arena.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kiln {

// What scheduling needs to know of a plan: the values each step reads and writes (ids) and the
// arena bytes of each value (0 for graph inputs, constants and graph outputs, which live
// outside the arena).
struct StepGraph {
  std::vector<std::vector<size_t>> reads;
  std::vector<std::vector<size_t>> writes;
  std::vector<size_t> value_bytes;
};

enum class ScheduleHeuristic {
  GraphOrder,      // the steps as given
  FreesMost,       // the ready step with the smallest (bytes written - bytes it frees)
  SmallestWrites,  // the ready step writing the fewest bytes; then the one freeing the most
};

const char* schedule_name(ScheduleHeuristic heuristic);

// A topological order of the steps. Ties go to the step given first, so a graph whose order is
// already the greedy choice keeps it.
std::vector<size_t> schedule_steps(const StepGraph& graph, ScheduleHeuristic heuristic);

// The most arena bytes alive at once when the steps run in `order` (values only, unaligned):
// the quantity the schedulers lower.
double peak_bytes(const StepGraph& graph, const std::vector<size_t>& order);

}  // namespace kiln
