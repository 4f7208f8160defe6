// The per-node profiler (debug.profile, the environment variable KILN_PROFILE, `kiln bench
// --profile`): a RunObserver that times every node of every run and writes a Chrome trace-event
// JSON file (open it in Perfetto or chrome://tracing) and a table of the nodes that took the
// most time, with their kernel, shapes, share of the total and GFLOP/s (docs/config.md,
// Profiling).
//
// Several runs: the per-node figures add up over every run; the trace keeps the events of the
// last kTraceRuns runs of each graph, so a long benchmark gives a bounded file. Several graphs
// (the partitions of one torch.compile'd model) given one path share one Profiler: one file, a
// track (trace "thread") per graph and thread that ran it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime.h"

namespace kiln {

// Floating-point operations of one execution of `node` on these shapes, or 0 when not counted:
// convolutions (conv1d, conv2d and conv3d with groups, conv_transpose2d and 3d), matmul (linear, bmm and addmm are
// matmuls in Kiln's IR) and scaled_dot_product_attention, 2 per multiply-add, plus one per
// output element for each fused epilogue step (bias, activation, residual, clamp).
double node_flops(const Node& node, std::span<const TensorView> inputs,
                  std::span<const TensorView> outputs);

class Profiler : public RunObserver {
 public:
  static constexpr size_t kTraceRuns = 20;

  // A profiler writing to `path` ("" for none: only trace_json() and summary()).
  explicit Profiler(std::string path = "");
  // Writes the file (when there is a path and something was recorded since the last write).
  ~Profiler() override;

  // The process's profiler for `path`, shared by every graph compiled with it while any of them
  // lives. Throws E10030 when the file can't be created. At process exit each profiler still
  // alive writes its file and prints its summary to stderr.
  static std::shared_ptr<Profiler> for_path(const std::string& path);
  // The shared profilers alive now.
  static std::vector<std::shared_ptr<Profiler>> shared_profilers();

  void on_node(const NodeRun& run) override;

  // One row per node (graph, node name), over every run recorded.
  struct NodeStats {
    std::string graph, node, op, kernel, engine, source;
    std::string shapes;  // "[1,128,768]x[768,768] -> [1,128,768]"
    size_t calls = 0;
    double total_us = 0, min_us = 0;
    double flops = 0;  // per call; 0 when not counted
    double bytes = 0;  // inputs and outputs, per call
    double gflops() const { return flops > 0 && total_us > 0 ? flops * calls / total_us / 1e3 : 0; }
    double gbytes_per_s() const { return total_us > 0 ? bytes * calls / total_us / 1e3 : 0; }
  };
  std::vector<NodeStats> stats() const;  // by total time, largest first
  size_t runs() const;                   // runs seen, all graphs
  // The Chrome trace: {"traceEvents": [...], "displayTimeUnit": "ms", "kilnNodeStats": [...]}.
  std::string trace_json() const;
  // The top `top` nodes by total time as a text table, with the totals.
  std::string summary(size_t top = 15) const;
  // Writes trace_json() to path(); throws E10030 when it can't.
  void write() const;
  const std::string& path() const { return path_; }
  // True when something was recorded since the last write().
  bool unwritten() const;

 private:
  struct Event {
    size_t track;
    size_t stats;  // index into stats_
    double ts_us, dur_us;
    size_t run;  // the track's run index
  };
  struct Track {
    std::string graph;
    std::thread::id thread;
    size_t runs = 0;
    double run_start_us = 0;
  };
  struct RunSpan {
    size_t track;
    size_t run;
    double ts_us, dur_us;
  };
  size_t track_of(const Graph& graph, std::thread::id thread);

  std::string path_;
  std::chrono::steady_clock::time_point epoch_;
  mutable std::mutex mutex_;
  std::vector<Track> tracks_;
  std::map<std::pair<const Graph*, std::thread::id>, size_t> track_ids_;
  std::vector<NodeStats> stats_;
  std::map<std::pair<const Graph*, std::string>, size_t> stats_ids_;
  std::vector<Event> events_;
  std::vector<RunSpan> run_spans_;
  size_t runs_ = 0;
  mutable bool dirty_ = false;
};

}  // namespace kiln
