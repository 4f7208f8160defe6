#include "runtime/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"

namespace kiln {

namespace {

using Json = nlohmann::json;

double numel(const TensorView& v) {
  double n = 1;
  for (int64_t d : v.sizes) n *= static_cast<double>(d);
  return n;
}

// Elements of output 0 per fused epilogue step (bias, activation, residual, clamp).
double epilogue_flops(const Node& node, double out, bool bias) {
  double steps = bias ? 1 : 0;
  if (node.attrs().count("fused_activation") && node.attr_string("fused_activation") != "none")
    ++steps;
  if (node.attrs().count("residual") && node.attr_bool("residual")) ++steps;
  if (node.attrs().count("clamp_min") &&
      (std::isfinite(node.attr_float("clamp_min")) || std::isfinite(node.attr_float("clamp_max"))))
    ++steps;
  return steps * out;
}

std::string shapes_string(std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i)
    s.append(i ? "x" : "").append(shape_string(inputs[i].sizes));
  s += " -> ";
  for (size_t i = 0; i < outputs.size(); ++i)
    s.append(i ? ", " : "").append(shape_string(outputs[i].sizes));
  return s;
}

double micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// Profilers shared by path. Never destroyed: the exit handler below may run after static
// destructors.
struct Registry {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<Profiler>> by_path;
};

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;
    std::atexit([] {
      for (const std::shared_ptr<Profiler>& p : Profiler::shared_profilers()) {
        if (!p->unwritten()) continue;
        try {
          p->write();
          std::cerr << p->summary();
        } catch (const Error& e) {
          std::cerr << "kiln: " << e.what() << "\n";
        }
      }
    });
    return made;
  }();
  return *r;
}

}  // namespace

double node_flops(const Node& node, std::span<const TensorView> inputs,
                  std::span<const TensorView> outputs) {
  const std::string& op = node.op();
  if (outputs.empty() || inputs.size() < 2) return 0;
  const double out = numel(outputs[0]);
  if (op == "matmul") {
    const TensorView& a = inputs[0];
    const double k = a.sizes.empty() ? 1 : static_cast<double>(a.sizes.back());
    return 2 * out * k + epilogue_flops(node, out, node.attrs().count("bias") && node.attr_bool("bias"));
  }
  if (op == "grouped_matmul")  // every row in a group: offsets[G - 1] = S, as routing gives
    return 2 * out * static_cast<double>(inputs[0].sizes.back());
  if (op == "conv2d" || op == "conv1d" || op == "conv3d") {
    // w [O, C/groups, K...]: each output element is C/groups·prod(K) multiply-adds.
    double per_output = 1;
    for (size_t d = 1; d < inputs[1].sizes.size(); ++d)
      per_output *= static_cast<double>(inputs[1].sizes[d]);
    bool residual = node.attrs().count("residual") && node.attr_bool("residual");
    bool bias = inputs.size() > (residual ? 3u : 2u);
    return 2 * out * per_output + epilogue_flops(node, out, bias);
  }
  if (op == "conv_transpose2d" || op == "conv_transpose3d") {
    // w [C, O/groups, K...]: each input element feeds O/groups·prod(K) multiply-adds.
    double per_input = 1;
    for (size_t d = 1; d < inputs[1].sizes.size(); ++d)
      per_input *= static_cast<double>(inputs[1].sizes[d]);
    return 2 * numel(inputs[0]) * per_input + (inputs.size() > 2 ? out : 0);
  }
  if (op == "scaled_dot_product_attention" && inputs.size() >= 3) {
    // q [..., L, E], k [..., S, E], v [..., S, Ev]: Q·Kᵀ and P·V, each batch matrix. A causal
    // mask skips about half, but the nominal count is kept (the figure compares kernels).
    const auto& q = inputs[0].sizes;
    const auto& k = inputs[1].sizes;
    const auto& v = inputs[2].sizes;
    if (q.size() < 2 || k.size() < 2 || v.size() < 2) return 0;
    // L and S are third last when q or k is given heads second last ([..., L, H, E]).
    const size_t l_at = node.attr_bool("q_heads_second_last") ? 3 : 2;
    const size_t s_at = node.attr_bool("k_heads_second_last") ? 3 : 2;
    if (q.size() < l_at || k.size() < s_at) return 0;
    const double l = static_cast<double>(q[q.size() - l_at]), e = static_cast<double>(q.back());
    const double s = static_cast<double>(k[k.size() - s_at]), ev = static_cast<double>(v.back());
    if (l * ev == 0) return 0;
    const double batch = out / (l * ev);
    return 2 * batch * l * s * (e + ev);
  }
  return 0;
}

Profiler::Profiler(std::string path)
    : path_(std::move(path)), epoch_(std::chrono::steady_clock::now()) {}

Profiler::~Profiler() {
  if (path_.empty() || !dirty_) return;
  try {
    write();
    std::cerr << summary();
  } catch (const Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";  // a destructor can't throw
  }
}

std::shared_ptr<Profiler> Profiler::for_path(const std::string& path) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto existing = r.by_path[path].lock()) return existing;
  // Created now (empty), so a path that can't be written fails at compile, not at exit.
  {
    std::ofstream probe(path, std::ios::binary | std::ios::trunc);
    if (!probe)
      throw_error(ErrorCode::DumpFailed, "can't create the profile '", path,
                  "' (debug.profile / KILN_PROFILE); give a path in a writable folder");
  }
  auto made = std::make_shared<Profiler>(path);
  r.by_path[path] = made;
  return made;
}

std::vector<std::shared_ptr<Profiler>> Profiler::shared_profilers() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::shared_ptr<Profiler>> alive;
  for (const auto& [path, weak] : r.by_path)
    if (auto p = weak.lock()) alive.push_back(std::move(p));
  return alive;
}

size_t Profiler::track_of(const Graph& graph, std::thread::id thread) {
  auto [it, added] = track_ids_.try_emplace({&graph, thread}, tracks_.size());
  if (added) tracks_.push_back(Track{graph.name(), thread});
  return it->second;
}

void Profiler::on_node(const NodeRun& run) {
  const double ts = micros(run.start - epoch_), dur = micros(run.end - run.start);
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t track = track_of(run.graph, std::this_thread::get_id());
  Track& t = tracks_[track];
  if (run.step == 0) {
    ++t.runs;
    ++runs_;
    t.run_start_us = ts;
  }
  auto [it, added] = stats_ids_.try_emplace({&run.graph, run.node.name()}, stats_.size());
  if (added) {
    NodeStats s;
    s.graph = run.graph.name();
    s.node = run.node.name();
    s.op = run.node.op();
    s.kernel = run.kernel;
    s.engine = run.engine;
    s.source = run.node.annotation("source");
    s.shapes = shapes_string(run.inputs, run.outputs);
    s.flops = node_flops(run.node, run.inputs, run.outputs);
    for (const TensorView& v : run.inputs) s.bytes += static_cast<double>(v.nbytes());
    for (const TensorView& v : run.outputs) s.bytes += static_cast<double>(v.nbytes());
    s.min_us = dur;
    stats_.push_back(std::move(s));
  }
  NodeStats& s = stats_[it->second];
  ++s.calls;
  s.total_us += dur;
  s.min_us = std::min(s.min_us, dur);
  events_.push_back(Event{track, it->second, ts, dur, t.runs});
  if (run.step + 1 == run.steps) {
    run_spans_.push_back(RunSpan{track, t.runs, t.run_start_us, ts + dur - t.run_start_us});
    // Drop the events of this track's runs older than the last kTraceRuns, now and then (not
    // per node: that would make profiling cost grow with the trace).
    if (events_.size() > 4096 && t.runs > kTraceRuns && t.runs % kTraceRuns == 0) {
      auto old = [&](size_t tr, size_t r) { return tr == track && r + kTraceRuns <= t.runs; };
      std::erase_if(events_, [&](const Event& e) { return old(e.track, e.run); });
      std::erase_if(run_spans_, [&](const RunSpan& e) { return old(e.track, e.run); });
    }
  }
  dirty_ = true;
}

std::vector<Profiler::NodeStats> Profiler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<NodeStats> sorted = stats_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const NodeStats& a, const NodeStats& b) { return a.total_us > b.total_us; });
  return sorted;
}

bool Profiler::unwritten() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dirty_;
}

size_t Profiler::runs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return runs_;
}

std::string Profiler::trace_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Json events = Json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0},
                    {"args", {{"name", "kiln"}}}});
  // A track per graph and thread; the first thread of a graph shows the graph's name alone.
  std::map<std::string, int> seen;
  for (size_t t = 0; t < tracks_.size(); ++t) {
    int n = seen[tracks_[t].graph]++;
    std::string name = tracks_[t].graph + (n ? " (thread " + std::to_string(n + 1) + ")" : "");
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t + 1},
                      {"args", {{"name", name}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", t + 1},
                      {"args", {{"sort_index", t}}}});
  }
  // Only runs whose events are all still kept (the last kTraceRuns of each track).
  std::vector<size_t> first_kept(tracks_.size(), 0);
  for (size_t t = 0; t < tracks_.size(); ++t)
    first_kept[t] = tracks_[t].runs > kTraceRuns ? tracks_[t].runs - kTraceRuns + 1 : 0;
  for (const RunSpan& r : run_spans_) {
    if (r.run < first_kept[r.track]) continue;
    events.push_back({{"name", "run " + std::to_string(r.run)}, {"cat", "run"}, {"ph", "X"},
                      {"pid", 1}, {"tid", r.track + 1}, {"ts", r.ts_us}, {"dur", r.dur_us},
                      {"args", {{"graph", tracks_[r.track].graph}, {"run", r.run}}}});
  }
  for (const Event& e : events_) {
    if (e.run < first_kept[e.track]) continue;
    const NodeStats& s = stats_[e.stats];
    Json args = {{"op", s.op}, {"kernel", s.kernel}, {"engine", s.engine}, {"shapes", s.shapes},
                 {"run", e.run}};
    if (!s.source.empty()) args["source"] = s.source;
    if (s.flops > 0 && e.dur_us > 0) args["GFLOP/s"] = s.flops / e.dur_us / 1e3;
    else if (e.dur_us > 0) args["GB/s"] = s.bytes / e.dur_us / 1e3;
    events.push_back({{"name", s.node}, {"cat", s.engine + "," + s.kernel}, {"ph", "X"},
                      {"pid", 1}, {"tid", e.track + 1}, {"ts", e.ts_us}, {"dur", e.dur_us},
                      {"args", args}});
  }
  Json stats = Json::array();
  for (const NodeStats& s : stats_)
    stats.push_back({{"graph", s.graph}, {"node", s.node}, {"op", s.op}, {"kernel", s.kernel},
                     {"engine", s.engine}, {"source", s.source}, {"shapes", s.shapes},
                     {"calls", s.calls}, {"total_us", s.total_us}, {"min_us", s.min_us},
                     {"flops", s.flops}, {"bytes", s.bytes}});
  Json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"kilnNodeStats", stats},
                {"kilnRuns", runs_}};
  // Non-finite numbers can't occur (durations and sizes), so dump() can't throw on them.
  return trace.dump(1);
}

std::string Profiler::summary(size_t top) const {
  std::vector<NodeStats> sorted = stats();
  double total = 0;
  for (const NodeStats& s : sorted) total += s.total_us;
  std::ostringstream out;
  out << std::fixed;
  out << "Kiln profile" << (path_.empty() ? "" : " " + path_) << ": " << runs() << " run(s), "
      << sorted.size() << " node(s), " << std::setprecision(3) << total / 1e3
      << " ms in kernels; top " << std::min(top, sorted.size()) << " by total time:\n";
  size_t name_width = 4, kernel_width = 6;
  for (size_t i = 0; i < std::min(top, sorted.size()); ++i) {
    name_width = std::max(name_width, sorted[i].node.size() + sorted[i].op.size() + 3);
    kernel_width = std::max(kernel_width, sorted[i].kernel.size());
  }
  out << std::left << std::setw(static_cast<int>(name_width)) << "node (op)" << "  "
      << std::setw(static_cast<int>(kernel_width)) << "kernel" << std::right << std::setw(7)
      << "calls" << std::setw(11) << "total ms" << std::setw(7) << "share" << std::setw(10)
      << "mean us" << std::setw(9) << "GFLOP/s" << std::setw(7) << "GB/s" << "  shapes\n";
  for (size_t i = 0; i < std::min(top, sorted.size()); ++i) {
    const NodeStats& s = sorted[i];
    out << std::left << std::setw(static_cast<int>(name_width)) << (s.node + " (" + s.op + ")")
        << "  " << std::setw(static_cast<int>(kernel_width)) << s.kernel << std::right
        << std::setw(7) << s.calls << std::setw(11) << std::setprecision(3) << s.total_us / 1e3
        << std::setw(6) << std::setprecision(1) << (total > 0 ? 100 * s.total_us / total : 0)
        << "%" << std::setw(10) << std::setprecision(1) << s.total_us / static_cast<double>(s.calls)
        << std::setw(9);
    if (s.flops > 0) out << std::setprecision(1) << s.gflops();
    else out << "-";
    out << std::setw(7) << std::setprecision(1) << s.gbytes_per_s() << "  " << s.shapes << "\n";
  }
  return out.str();
}

void Profiler::write() const {
  KILN_ASSERT(!path_.empty(), "write() on a profiler without a path");
  std::string text = trace_json();
  std::ofstream file(path_, std::ios::binary | std::ios::trunc);
  file << text;
  if (!file)
    throw_error(ErrorCode::DumpFailed, "can't write the profile '", path_,
                "' (debug.profile / KILN_PROFILE); give a path in a writable folder");
  std::lock_guard<std::mutex> lock(mutex_);
  dirty_ = false;
}

}  // namespace kiln
