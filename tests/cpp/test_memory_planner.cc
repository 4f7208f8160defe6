#include <gtest/gtest.h>

#include <random>

#include "runtime/memory_planner.h"

namespace kiln {
namespace {

TEST(MemoryPlanner, ReusesMemoryOfDeadBuffers) {
  // A chain a -> b -> c: a and c never live together, so they share offset 0.
  std::vector<BufferLifetime> buffers = {{"a", 1000, 0, 1}, {"b", 1000, 1, 2}, {"c", 1000, 2, 3}};
  MemoryPlan plan = GreedyBySizePlacement().place(buffers, 64);
  EXPECT_TRUE(plan_is_valid(buffers, plan));
  EXPECT_EQ(plan.arena_size, 2 * 1024u);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[1] % 64, 0u);
}

TEST(MemoryPlanner, FillsGapsBetweenLiveBuffers) {
  std::vector<BufferLifetime> buffers = {
      {"big", 4096, 0, 5}, {"small1", 64, 0, 1}, {"small2", 64, 2, 3}, {"mid", 128, 1, 2}};
  MemoryPlan plan = GreedyBySizePlacement().place(buffers, 64);
  EXPECT_TRUE(plan_is_valid(buffers, plan));
  EXPECT_EQ(plan.arena_size, 4096u + 128 + 64);
}

TEST(MemoryPlanner, RandomLifetimesNeverOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferLifetime> buffers;
    size_t total = 0;
    for (int i = 0; i < 30; ++i) {
      int first = static_cast<int>(rng() % 20);
      int last = first + static_cast<int>(rng() % 6);
      size_t size = rng() % 5000;
      total += (size + 63) / 64 * 64;
      buffers.push_back({"b" + std::to_string(i), size, first, last});
    }
    MemoryPlan plan = GreedyBySizePlacement().place(buffers, 64);
    ASSERT_TRUE(plan_is_valid(buffers, plan)) << plan.to_string(buffers);
    EXPECT_LE(plan.arena_size, total);
    for (size_t off : plan.offsets) EXPECT_EQ(off % 64, 0u);
  }
}

TEST(MemoryPlanner, PrintsPlan) {
  std::vector<BufferLifetime> buffers = {{"a", 100, 0, 1}, {"b", 50, 1, 1}};
  MemoryPlan plan = GreedyBySizePlacement().place(buffers, 64);
  std::string text = plan.to_string(buffers);
  EXPECT_NE(text.find("greedy_by_size"), std::string::npos);
  EXPECT_NE(text.find("arena 192 bytes"), std::string::npos);
}

}  // namespace
}  // namespace kiln
