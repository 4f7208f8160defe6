#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
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

// The arena of each strategy on `buffers`, in placement_strategies() order.
std::vector<size_t> arenas(const std::vector<BufferLifetime>& buffers) {
  std::vector<size_t> sizes;
  for (const auto& strategy : placement_strategies()) {
    MemoryPlan plan = strategy->place(buffers, 64);
    EXPECT_TRUE(plan_is_valid(buffers, plan)) << plan.to_string(buffers);
    sizes.push_back(plan.arena_size);
  }
  return sizes;
}

TEST(MemoryPlanner, StrategiesInOrder) {
  std::vector<std::string> names;
  for (const auto& strategy : placement_strategies()) names.push_back(strategy->name());
  EXPECT_EQ(names, (std::vector<std::string>{"greedy_by_size", "greedy_by_breadth", "first_fit"}));
}

TEST(MemoryPlanner, PeakLiveBytesIsTheLowerBound) {
  // Steps 0..3: live bytes 128+64, 128+192, 192, 64 (each aligned to 64).
  std::vector<BufferLifetime> buffers = {
      {"a", 100, 0, 1}, {"b", 10, 0, 0}, {"c", 129, 1, 2}, {"d", 1, 3, 3}};
  EXPECT_EQ(peak_live_bytes(buffers, 64), 128u + 192);
  EXPECT_EQ(peak_live_bytes({}, 64), 0u);
}

TEST(MemoryPlanner, GreedyByBreadthBeatsGreedyBySize) {
  // Greedy by size puts the two 256-byte buffers at 0 and 256, leaving no room for b0 and b1
  // side by side; breadth and first fit reach the lower bound, which is therefore optimal.
  std::vector<BufferLifetime> buffers = {
      {"b0", 128, 2, 4}, {"b1", 128, 2, 2}, {"b2", 192, 3, 4}, {"b3", 256, 0, 1}, {"b4", 256, 0, 2}};
  EXPECT_EQ(peak_live_bytes(buffers, 64), 512u);
  EXPECT_EQ(arenas(buffers), (std::vector<size_t>{640, 512, 512}));
  MemoryPlan best = plan_memory(buffers, 64);
  EXPECT_TRUE(plan_is_valid(buffers, best));
  EXPECT_EQ(best.arena_size, 512u);
  EXPECT_EQ(best.strategy, "greedy_by_breadth");  // ties go to the first strategy
}

TEST(MemoryPlanner, FirstFitWinsWhereTheGreedyOnesDoNot) {
  std::vector<BufferLifetime> buffers = {
      {"b0", 128, 3, 4}, {"b1", 128, 2, 3}, {"b2", 192, 0, 0}, {"b3", 64, 0, 2}};
  EXPECT_EQ(peak_live_bytes(buffers, 64), 256u);
  EXPECT_EQ(arenas(buffers), (std::vector<size_t>{320, 384, 256}));
  MemoryPlan best = plan_memory(buffers, 64);
  EXPECT_EQ(best.arena_size, 256u);
  EXPECT_EQ(best.strategy, "first_fit");
}

TEST(MemoryPlanner, ReuseThresholdKeepsSmallBuffersApart) {
  // A chain: every buffer could share with the one two steps away.
  std::vector<BufferLifetime> buffers = {
      {"small1", 64, 0, 1}, {"big1", 4096, 1, 2}, {"small2", 64, 2, 3}, {"big2", 4096, 3, 4}};
  EXPECT_EQ(plan_memory(buffers, 64).arena_size, 4096u + 64);
  // Under the threshold, small1 and small2 share with nothing; the big ones still reuse memory.
  MemoryPlan plan = plan_memory(buffers, 64, /*reuse_threshold=*/65);
  EXPECT_TRUE(plan_is_valid(buffers, plan));
  EXPECT_EQ(plan.arena_size, 4096u + 64 + 64);
  EXPECT_NE(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3]);
  // Over every size, nothing is shared: the arena is the sum.
  EXPECT_EQ(plan_memory(buffers, 64, SIZE_MAX).arena_size, 2 * 4096u + 2 * 64);
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
    const size_t peak = peak_live_bytes(buffers, 64);
    std::vector<MemoryPlan> plans;
    for (const auto& strategy : placement_strategies())
      plans.push_back(strategy->place(buffers, 64));
    plans.push_back(plan_memory(buffers, 64, /*reuse_threshold=*/rng() % 3000));
    for (const MemoryPlan& plan : plans) {
      ASSERT_TRUE(plan_is_valid(buffers, plan)) << plan.strategy << "\n" << plan.to_string(buffers);
      EXPECT_LE(plan.arena_size, total);
      EXPECT_GE(plan.arena_size, peak);
      for (size_t off : plan.offsets) EXPECT_EQ(off % 64, 0u);
    }
    size_t smallest = SIZE_MAX;
    for (size_t i = 0; i < placement_strategies().size(); ++i)
      smallest = std::min(smallest, plans[i].arena_size);
    EXPECT_EQ(plan_memory(buffers, 64).arena_size, smallest);
  }
}

TEST(MemoryPlanner, PrintsPlan) {
  std::vector<BufferLifetime> buffers = {{"a", 100, 0, 1}, {"b", 50, 1, 1}};
  MemoryPlan plan = GreedyBySizePlacement().place(buffers, 64);
  std::string text = plan.to_string(buffers);
  EXPECT_NE(text.find("greedy_by_size"), std::string::npos);
  EXPECT_NE(text.find("arena 192 bytes"), std::string::npos);
}

TEST(MemoryPlanner, PrintsTableWithProducers) {
  std::vector<BufferLifetime> buffers = {{"x1", 100, 0, 2, "conv_1"}, {"x2", 50, 1, 1, "relu_2"}};
  MemoryPlan plan = plan_memory(buffers, 64);
  std::string text = plan.to_string(buffers);
  // Rows by offset: offset, size, first, last, producer, buffer.
  EXPECT_NE(text.find("  0           100         0      2      conv_1               x1\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("  128         50          1      1      relu_2               x2\n"),
            std::string::npos) << text;
}

TEST(MemoryPlanner, DrawsOneRectanglePerBuffer) {
  std::vector<BufferLifetime> buffers = {
      {"a<1>", 64, 0, 1, "n&1"}, {"b", 64, 1, 2, "n2"}, {"c", 128, 2, 3, "n3"}};
  MemoryPlan plan = plan_memory(buffers, 64);
  std::string svg = plan.to_svg(buffers, "g");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t rects = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1))
    ++rects;
  EXPECT_EQ(rects, buffers.size());
  // Names are escaped; the tooltip gives size, offset and steps.
  EXPECT_NE(svg.find("a&lt;1&gt; (n&amp;1): 64 bytes at " + std::to_string(plan.offsets[0]) +
                     ", steps 0..1"),
            std::string::npos)
      << svg;
  EXPECT_EQ(svg.find("a<1>"), std::string::npos);
}

}  // namespace
}  // namespace kiln
