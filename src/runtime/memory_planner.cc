#include "runtime/memory_planner.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "kiln/error.h"

namespace kiln {

namespace {
size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }
bool lifetimes_overlap(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}
}  // namespace

MemoryPlan GreedyBySizePlacement::place(const std::vector<BufferLifetime>& buffers,
                                        size_t alignment) const {
  MemoryPlan plan;
  plan.strategy = name();
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].size > buffers[b].size; });
  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferLifetime& buf = buffers[i];
    KILN_ASSERT(buf.first_step <= buf.last_step, "buffer " << buf.name << " dies before birth");
    // Intervals already taken by live-at-the-same-time buffers, by offset.
    std::vector<std::pair<size_t, size_t>> taken;
    for (size_t j : placed)
      if (lifetimes_overlap(buf, buffers[j]))
        taken.emplace_back(plan.offsets[j], plan.offsets[j] + align_up(buffers[j].size, alignment));
    std::sort(taken.begin(), taken.end());
    size_t need = align_up(buf.size, alignment);
    size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + need <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[i] = offset;
    plan.arena_size = std::max(plan.arena_size, offset + need);
    placed.push_back(i);
  }
  return plan;
}

bool plan_is_valid(const std::vector<BufferLifetime>& buffers, const MemoryPlan& plan) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (plan.offsets[i] + buffers[i].size > plan.arena_size) return false;
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      if (!lifetimes_overlap(buffers[i], buffers[j]) || !buffers[i].size || !buffers[j].size)
        continue;
      bool apart = plan.offsets[i] + buffers[i].size <= plan.offsets[j] ||
                   plan.offsets[j] + buffers[j].size <= plan.offsets[i];
      if (!apart) return false;
    }
  }
  return true;
}

std::string MemoryPlan::to_string(const std::vector<BufferLifetime>& buffers) const {
  std::ostringstream out;
  size_t total = 0;
  for (const auto& b : buffers) total += b.size;
  out << "memory plan (" << strategy << "): arena " << arena_size << " bytes for " << buffers.size()
      << " buffers totalling " << total << " bytes\n";
  out << "  offset      size        steps    buffer\n";
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(offsets[a], buffers[a].first_step) < std::tie(offsets[b], buffers[b].first_step);
  });
  for (size_t i : order) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-11zu %-11zu %3d..%-4d %s\n", offsets[i], buffers[i].size,
                  buffers[i].first_step, buffers[i].last_step, buffers[i].name.c_str());
    out << line;
  }
  return out.str();
}

}  // namespace kiln
