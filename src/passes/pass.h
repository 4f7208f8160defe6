// Graph passes and the pipeline that runs them (XLA's pass pipeline, ONNX Runtime's transformers).
// A pass rewrites a graph in place and reports whether it changed it. The pipeline groups passes
// into named stages, repeats fixed-point stages until nothing changes (with an iteration cap),
// runs the verifier after every pass when asked, and skips passes disabled by name.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"

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
};

class PassPipeline {
 public:
  void add_stage(std::string name, std::vector<std::unique_ptr<Pass>> passes,
                 bool fixed_point = false, int max_iterations = 8);
  // Throws E10001 when options disable a pass that no stage has (a typo must not pass silently).
  void run(Graph& graph, const PipelineOptions& options) const;
  std::vector<std::string> pass_names() const;

 private:
  struct Stage {
    std::string name;
    std::vector<std::unique_ptr<Pass>> passes;
    bool fixed_point;
    int max_iterations;
  };
  std::vector<Stage> stages_;
};

// Kiln's default pipeline (src/passes/pipeline.cc lists its stages and passes).
PassPipeline default_pipeline();

}  // namespace kiln
