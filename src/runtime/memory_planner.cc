#include "runtime/memory_planner.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>

#include "kiln/error.h"

namespace kiln {

namespace {

size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

bool lifetimes_overlap(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

// Places buffers one by one in `order`, each against the buffers already placed whose lifetimes
// overlap it: at the lowest offset that fits or, with `best_fit`, in the smallest gap that fits
// (the top of the arena when none does).
MemoryPlan place_in_order(const std::vector<BufferLifetime>& buffers,
                          const std::vector<size_t>& order, size_t alignment, bool best_fit,
                          std::string strategy) {
  MemoryPlan plan;
  plan.strategy = std::move(strategy);
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> taken;
  for (size_t i : order) {
    const BufferLifetime& buf = buffers[i];
    KILN_ASSERT(buf.first_step <= buf.last_step, "buffer " << buf.name << " dies before birth");
    taken.clear();
    for (size_t j : placed)
      if (lifetimes_overlap(buf, buffers[j]))
        taken.emplace_back(plan.offsets[j], plan.offsets[j] + align_up(buffers[j].size, alignment));
    std::sort(taken.begin(), taken.end());
    const size_t need = align_up(buf.size, alignment);
    size_t cursor = 0;  // the end of the taken intervals seen so far
    size_t best = 0, best_gap = SIZE_MAX;
    bool found = false;
    for (const auto& [begin, end] : taken) {
      if (begin >= cursor + need && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
        found = true;
        if (!best_fit) break;
      }
      cursor = std::max(cursor, end);
    }
    plan.offsets[i] = found ? best : cursor;
    plan.arena_size = std::max(plan.arena_size, plan.offsets[i] + need);
    placed.push_back(i);
  }
  return plan;
}

std::vector<size_t> indices(size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

}  // namespace

MemoryPlan GreedyBySizePlacement::place(const std::vector<BufferLifetime>& buffers,
                                        size_t alignment) const {
  std::vector<size_t> order = indices(buffers.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].size > buffers[b].size; });
  return place_in_order(buffers, order, alignment, /*best_fit=*/false, name());
}

MemoryPlan GreedyByBreadthPlacement::place(const std::vector<BufferLifetime>& buffers,
                                           size_t alignment) const {
  // Breadth of each step: the bytes of the buffers alive at it.
  std::map<int, size_t> breadth;
  for (const BufferLifetime& b : buffers)
    for (int s = b.first_step; s <= b.last_step; ++s) breadth[s] += align_up(b.size, alignment);
  std::vector<std::pair<int, size_t>> steps(breadth.begin(), breadth.end());
  std::stable_sort(steps.begin(), steps.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<size_t> order;
  std::vector<bool> queued(buffers.size(), false);
  for (const auto& [step, bytes] : steps) {
    std::vector<size_t> live;
    for (size_t i = 0; i < buffers.size(); ++i)
      if (!queued[i] && buffers[i].first_step <= step && step <= buffers[i].last_step)
        live.push_back(i);
    std::stable_sort(live.begin(), live.end(),
                     [&](size_t a, size_t b) { return buffers[a].size > buffers[b].size; });
    for (size_t i : live) {
      queued[i] = true;
      order.push_back(i);
    }
  }
  // Buffers whose lifetime is empty (first > last) reach place_in_order's assertion.
  for (size_t i = 0; i < buffers.size(); ++i)
    if (!queued[i]) order.push_back(i);
  return place_in_order(buffers, order, alignment, /*best_fit=*/true, name());
}

MemoryPlan FirstFitPlacement::place(const std::vector<BufferLifetime>& buffers,
                                    size_t alignment) const {
  std::vector<size_t> order = indices(buffers.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return buffers[a].first_step < buffers[b].first_step;
  });
  return place_in_order(buffers, order, alignment, /*best_fit=*/false, name());
}

const std::vector<std::unique_ptr<PlacementStrategy>>& placement_strategies() {
  static const auto strategies = [] {
    std::vector<std::unique_ptr<PlacementStrategy>> all;
    all.push_back(std::make_unique<GreedyBySizePlacement>());
    all.push_back(std::make_unique<GreedyByBreadthPlacement>());
    all.push_back(std::make_unique<FirstFitPlacement>());
    return all;
  }();
  return strategies;
}

MemoryPlan plan_memory(const std::vector<BufferLifetime>& buffers, size_t alignment,
                       size_t reuse_threshold) {
  // A buffer under the threshold is made to live for the whole run: nothing can share its bytes.
  std::vector<BufferLifetime> placed = buffers;
  if (reuse_threshold > 0 && !buffers.empty()) {
    int first = buffers[0].first_step, last = buffers[0].last_step;
    for (const BufferLifetime& b : buffers) {
      first = std::min(first, b.first_step);
      last = std::max(last, b.last_step);
    }
    for (BufferLifetime& b : placed)
      if (b.size < reuse_threshold) {
        b.first_step = first;
        b.last_step = last;
      }
  }
  MemoryPlan best;
  bool have = false;
  for (const auto& strategy : placement_strategies()) {
    MemoryPlan plan = strategy->place(placed, alignment);
    if (!have || plan.arena_size < best.arena_size) best = std::move(plan);
    have = true;
  }
  return best;
}

size_t peak_live_bytes(const std::vector<BufferLifetime>& buffers, size_t alignment) {
  std::map<int, size_t> born, died;  // bytes that start living at a step, stop after one
  for (const BufferLifetime& b : buffers) {
    born[b.first_step] += align_up(b.size, alignment);
    died[b.last_step] += align_up(b.size, alignment);
  }
  std::map<int, int> steps;
  for (const auto& [s, _] : born) steps[s];
  for (const auto& [s, _] : died) steps[s];
  size_t live = 0, peak = 0;
  for (const auto& [s, _] : steps) {
    live += born[s];
    peak = std::max(peak, live);
    live -= died[s];
  }
  return peak;
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

namespace {

// Buffers by offset, then by first step: the order of the table.
std::vector<size_t> by_offset(const std::vector<BufferLifetime>& buffers,
                              const std::vector<size_t>& offsets) {
  std::vector<size_t> order = indices(buffers.size());
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(offsets[a], buffers[a].first_step) < std::tie(offsets[b], buffers[b].first_step);
  });
  return order;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string MemoryPlan::to_string(const std::vector<BufferLifetime>& buffers) const {
  std::ostringstream out;
  size_t total = 0;
  for (const auto& b : buffers) total += b.size;
  out << "memory plan (" << strategy << "): arena " << arena_size << " bytes for " << buffers.size()
      << " buffers totalling " << total << " bytes\n";
  out << "  offset      size        first  last   producer             buffer\n";
  for (size_t i : by_offset(buffers, offsets)) {
    char line[96];
    std::snprintf(line, sizeof line, "  %-11zu %-11zu %-6d %-6d ", offsets[i], buffers[i].size,
                  buffers[i].first_step, buffers[i].last_step);
    char producer[32];
    std::snprintf(producer, sizeof producer, "%-20s ", buffers[i].producer.c_str());
    out << line << producer << buffers[i].name << "\n";
  }
  return out.str();
}

std::string MemoryPlan::to_svg(const std::vector<BufferLifetime>& buffers,
                               const std::string& title) const {
  int first = 0, last = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    first = i ? std::min(first, buffers[i].first_step) : buffers[i].first_step;
    last = i ? std::max(last, buffers[i].last_step) : buffers[i].last_step;
  }
  const double left = 90, top = 40, width = 900, height = 500;
  const double steps = static_cast<double>(last) - first + 1;
  const double bytes = arena_size ? static_cast<double>(arena_size) : 1.0;
  auto x = [&](double step) { return left + (step - first) * width / steps; };
  auto y = [&](double offset) { return top + height - offset * height / bytes; };
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20
      << "\" height=\"" << top + height + 50 << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << xml_escape(title) << ": arena "
      << arena_size << " bytes, " << buffers.size() << " buffers (" << xml_escape(strategy)
      << ")</text>\n";
  out << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << width << "\" height=\""
      << height << "\" fill=\"none\" stroke=\"#888\"/>\n";
  out << "<text x=\"" << left + width / 2 << "\" y=\"" << top + height + 35
      << "\" text-anchor=\"middle\">step " << first << " .. " << last << "</text>\n";
  out << "<text x=\"10\" y=\"" << top + height / 2 << "\">offset</text>\n";
  out << "<text x=\"" << left - 5 << "\" y=\"" << top + 10 << "\" text-anchor=\"end\">"
      << arena_size << "</text>\n";
  out << "<text x=\"" << left - 5 << "\" y=\"" << top + height << "\" text-anchor=\"end\">0</text>\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferLifetime& b = buffers[i];
    const double x0 = x(b.first_step), x1 = x(b.last_step + 1.0);
    const double y0 = y(static_cast<double>(offsets[i]) + static_cast<double>(b.size));
    const double y1 = y(static_cast<double>(offsets[i]));
    const int hue = static_cast<int>(i * 137 % 360);  // golden-angle hues: neighbours differ
    out << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << x1 - x0 << "\" height=\""
        << std::max(y1 - y0, 0.5) << "\" fill=\"hsl(" << hue
        << ",60%,65%)\" stroke=\"#333\" stroke-width=\"0.3\"><title>" << xml_escape(b.name)
        << " (" << xml_escape(b.producer) << "): " << b.size << " bytes at " << offsets[i]
        << ", steps " << b.first_step << ".." << b.last_step << "</title></rect>\n";
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace kiln
