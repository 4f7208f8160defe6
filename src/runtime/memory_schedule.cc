// Greedy list scheduling for memory:
//   steps in graph order  →  at each point, of the steps whose inputs are ready, the one that
//   adds the fewest net bytes (written − freed), ties in graph order.
#include "runtime/memory_schedule.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {

namespace {

// Distinct values of a list: a step reading a value twice frees it once.
std::vector<size_t> distinct(std::vector<size_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

struct Analysis {
  std::vector<std::vector<size_t>> reads;      // distinct, per step
  std::vector<std::vector<size_t>> consumers;  // distinct steps, per value
  std::vector<size_t> producer;                // per value; SIZE_MAX for none
};

Analysis analyze(const StepGraph& g) {
  Analysis a;
  const size_t values = g.value_bytes.size();
  a.consumers.resize(values);
  a.producer.assign(values, SIZE_MAX);
  for (size_t s = 0; s < g.reads.size(); ++s) {
    a.reads.push_back(distinct(g.reads[s]));
    for (size_t v : a.reads.back()) {
      KILN_ASSERT(v < values, "step " << s << " reads unknown value " << v);
      a.consumers[v].push_back(s);
    }
    for (size_t v : g.writes[s]) {
      KILN_ASSERT(v < values && a.producer[v] == SIZE_MAX, "value " << v << " written twice");
      a.producer[v] = s;
    }
  }
  return a;
}

}  // namespace

const char* schedule_name(ScheduleHeuristic heuristic) {
  switch (heuristic) {
    case ScheduleHeuristic::GraphOrder: return "graph_order";
    case ScheduleHeuristic::FreesMost: return "frees_most";
    case ScheduleHeuristic::SmallestWrites: return "smallest_writes";
  }
  return "?";
}

std::vector<size_t> schedule_steps(const StepGraph& g, ScheduleHeuristic heuristic) {
  const size_t n = g.reads.size();
  KILN_ASSERT(g.writes.size() == n);
  std::vector<size_t> order;
  if (heuristic == ScheduleHeuristic::GraphOrder) {
    for (size_t s = 0; s < n; ++s) order.push_back(s);
    return order;
  }
  const Analysis a = analyze(g);
  std::vector<size_t> waiting(n, 0);  // producer steps not yet scheduled
  for (size_t s = 0; s < n; ++s)
    for (size_t v : a.reads[s]) waiting[s] += a.producer[v] != SIZE_MAX;
  std::vector<size_t> unread(a.consumers.size());  // consumer steps not yet scheduled
  for (size_t v = 0; v < unread.size(); ++v) unread[v] = a.consumers[v].size();
  std::vector<size_t> ready;
  for (size_t s = 0; s < n; ++s)
    if (!waiting[s]) ready.push_back(s);

  auto written = [&](size_t s) {
    double bytes = 0;
    for (size_t v : g.writes[s]) bytes += static_cast<double>(g.value_bytes[v]);
    return bytes;
  };
  auto freed = [&](size_t s) {
    double bytes = 0;
    for (size_t v : a.reads[s])
      if (unread[v] == 1 && a.producer[v] != SIZE_MAX) bytes += static_cast<double>(g.value_bytes[v]);
    return bytes;
  };
  while (!ready.empty()) {
    size_t best = 0;
    double best_key = 0, best_tie = 0;
    for (size_t i = 0; i < ready.size(); ++i) {
      const size_t s = ready[i];
      const double w = written(s), f = freed(s);
      const double key = heuristic == ScheduleHeuristic::FreesMost ? w - f : w;
      const double tie = -f;
      const bool better = i == 0 || key < best_key || (key == best_key && tie < best_tie) ||
                          (key == best_key && tie == best_tie && s < ready[best]);
      if (better) {
        best = i;
        best_key = key;
        best_tie = tie;
      }
    }
    const size_t s = ready[best];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
    order.push_back(s);
    for (size_t v : a.reads[s]) --unread[v];
    for (size_t v : g.writes[s])
      for (size_t user : a.consumers[v])
        if (--waiting[user] == 0) ready.push_back(user);
  }
  KILN_ASSERT(order.size() == n, "the steps form a cycle");
  return order;
}

double peak_bytes(const StepGraph& g, const std::vector<size_t>& order) {
  const Analysis a = analyze(g);
  std::vector<size_t> unread(a.consumers.size());
  for (size_t v = 0; v < unread.size(); ++v) unread[v] = a.consumers[v].size();
  double live = 0, peak = 0;
  for (size_t s : order) {
    for (size_t v : g.writes[s]) live += static_cast<double>(g.value_bytes[v]);
    peak = std::max(peak, live);
    for (size_t v : a.reads[s])
      if (--unread[v] == 0 && a.producer[v] != SIZE_MAX) live -= static_cast<double>(g.value_bytes[v]);
    // Values nobody reads die as soon as they are written.
    for (size_t v : g.writes[s])
      if (a.consumers[v].empty()) live -= static_cast<double>(g.value_bytes[v]);
  }
  return peak;
}

}  // namespace kiln
