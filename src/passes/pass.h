// Graph passes and the pipeline that runs them (XLA's pass pipeline, GE's compile stages).
// A pass rewrites a graph in place and reports whether it changed it. The pipeline groups passes
// into named stages in GE's order (prepare, fuse, format, partition, select, schedule), each run
// from an optimization level up; passes between begin_fixed_point and end_fixed_point repeat as a
// group until a round changes nothing (with a round cap). The verifier runs after every pass when
// asked, passes can be disabled by name, and every pass run leaves a PassRecord.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/runtime.h"

namespace kiln {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual bool run(Graph& graph) = 0;  // true when the graph changed
};

struct PipelineOptions {
  bool verify = false;
  std::set<std::string> disabled_passes;
  int optimization_level = 3;  // stages whose level is above it are skipped
  // Called with the graph after each stage that runs (graph dumps).
  std::function<void(const std::string& stage, const Graph& graph)> after_stage;
};

struct PipelineReport {
  std::vector<PassRecord> records;  // one per pass run, in order
  // Fixed-point groups that reached their round cap still changing the graph (with verify on,
  // that is an assertion instead).
  std::vector<std::string> warnings;
};

class PassPipeline {
 public:
  // Starts a stage that runs at optimization levels >= min_level; later add()s go into it.
  void add_stage(std::string name, int min_level);
  // Appends a pass to the last stage (run once, or each round inside a fixed-point group).
  void add(std::unique_ptr<Pass> pass);
  // Passes added until end_fixed_point() form a group repeated until a round changes nothing,
  // at most max_rounds rounds.
  void begin_fixed_point(std::string name, int max_rounds = 8);
  void end_fixed_point();

  // Throws E10001 when options disable a pass that no stage has (a typo must not pass silently)
  // or give a level outside 0..3.
  PipelineReport run(Graph& graph, const PipelineOptions& options) const;
  std::vector<std::string> pass_names() const;
  std::vector<std::string> stage_names() const;

 private:
  struct Group {
    std::string name;  // empty for a single pass run once
    int max_rounds = 1;
    std::vector<std::unique_ptr<Pass>> passes;
  };
  struct Stage {
    std::string name;
    int min_level;
    std::vector<Group> groups;
  };
  std::vector<Stage> stages_;
  bool in_fixed_point_ = false;
};

// Kiln's default pipeline (src/passes/pipeline.cc lists its stages and passes).
PassPipeline default_pipeline();

}  // namespace kiln
