// The execution-order heuristics of stage schedule (src/runtime/memory_schedule.h) on
// hand-made step graphs whose best order is known.
#include <gtest/gtest.h>

#include "runtime/memory_schedule.h"

namespace kiln {
namespace {

// Two branches from an input (value 0): big a1 (1) → small a2 (3), big b1 (2) → small b2 (4),
// joined into a graph output (5). Steps in graph order: a1, b1, a2, b2, join.
StepGraph two_branches() {
  StepGraph g;
  g.reads = {{0}, {0}, {1}, {2}, {3, 4}};
  g.writes = {{1}, {2}, {3}, {4}, {5}};
  g.value_bytes = {0, 4096, 4096, 64, 64, 0};
  return g;
}

TEST(MemorySchedule, GraphOrderKeepsTheSteps) {
  StepGraph g = two_branches();
  EXPECT_EQ(schedule_steps(g, ScheduleHeuristic::GraphOrder),
            (std::vector<size_t>{0, 1, 2, 3, 4}));
  // a1 and b1 live together, then a2 joins them.
  EXPECT_EQ(peak_bytes(g, {0, 1, 2, 3, 4}), 4096 + 4096 + 64);
}

TEST(MemorySchedule, GreedyFinishesABranchBeforeStartingTheNext) {
  StepGraph g = two_branches();
  for (ScheduleHeuristic h : {ScheduleHeuristic::FreesMost, ScheduleHeuristic::SmallestWrites}) {
    std::vector<size_t> order = schedule_steps(g, h);
    EXPECT_EQ(order, (std::vector<size_t>{0, 2, 1, 3, 4})) << schedule_name(h);
    // The best order: one big tensor at a time, beside the two small ones.
    EXPECT_EQ(peak_bytes(g, order), 4096 + 64 + 64) << schedule_name(h);
  }
}

TEST(MemorySchedule, HeuristicsDifferWhereFreeingBeatsSmallWrites) {
  // Step 0 writes big p (1) and tiny s (2); step 1 reads s, writes q (3); step 2 reads p, writes
  // r (4), half p's size; step 3 joins q and r. FreesMost runs step 2 next (net -2048 bytes)
  // and peaks lower; SmallestWrites runs step 1 (64 bytes written) while p is still alive.
  StepGraph g;
  g.reads = {{0}, {2}, {1}, {3, 4}};
  g.writes = {{1, 2}, {3}, {4}, {5}};
  g.value_bytes = {0, 4096, 16, 64, 2048, 0};
  std::vector<size_t> frees = schedule_steps(g, ScheduleHeuristic::FreesMost);
  std::vector<size_t> small = schedule_steps(g, ScheduleHeuristic::SmallestWrites);
  EXPECT_EQ(frees, (std::vector<size_t>{0, 2, 1, 3}));
  EXPECT_EQ(small, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(peak_bytes(g, frees), 4096 + 16 + 2048);
  EXPECT_EQ(peak_bytes(g, small), 4096 + 64 + 2048);
}

TEST(MemorySchedule, RepeatedReadsAndUnreadOutputs) {
  // Step 0 writes two values, one never read (dies at once); step 1 reads the other twice.
  StepGraph g;
  g.reads = {{0}, {1, 1}, {3}};
  g.writes = {{1, 2}, {3}, {4}};
  g.value_bytes = {0, 100, 1000, 10, 0};
  std::vector<size_t> order = schedule_steps(g, ScheduleHeuristic::FreesMost);
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(peak_bytes(g, order), 1100);
}

TEST(MemorySchedule, EveryOrderIsTopological) {
  // A diamond lattice: step i reads the values of steps i-1 and i-2.
  StepGraph g;
  const size_t n = 12;
  g.value_bytes.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    g.reads.push_back(i == 0 ? std::vector<size_t>{0}
                             : (i == 1 ? std::vector<size_t>{1} : std::vector<size_t>{i, i - 1}));
    g.writes.push_back({i + 1});
    g.value_bytes[i + 1] = 64 * ((i * 7) % 5 + 1);
  }
  for (ScheduleHeuristic h : {ScheduleHeuristic::GraphOrder, ScheduleHeuristic::FreesMost,
                              ScheduleHeuristic::SmallestWrites}) {
    std::vector<size_t> order = schedule_steps(g, h);
    ASSERT_EQ(order.size(), n);
    std::vector<bool> done(n + 1, false);
    done[0] = true;
    for (size_t s : order) {
      for (size_t v : g.reads[s]) EXPECT_TRUE(done[v]) << schedule_name(h) << " step " << s;
      for (size_t v : g.writes[s]) done[v] = true;
    }
  }
}

}  // namespace
}  // namespace kiln
