// Compiling a graph into an executable plan and running it.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln {

struct CompileOptions {
  // Threads each kernel may use; 0 means every core.
  int threads = 0;
  // "best": the first kernel (best first) that supports each node; "reference": the reference
  // kernel of every op (the baseline of differential tests).
  std::string kernel_policy = "best";
  // Run the verifier after every pass (on in tests and debug builds).
  bool verify = false;
  // Passes switched off by name, to bisect a wrong result.
  std::set<std::string> disabled_passes;
  // Plans kept for graphs with symbolic dims, one per concrete input shape seen (LRU).
  size_t plan_cache_capacity = 16;
};

class CompiledGraph {
 public:
  // Copies `graph`, optimizes the copy and prepares plans. Graphs whose inputs are all static get
  // their plan now; graphs with symbolic dims get one per concrete shape on first use.
  static std::shared_ptr<const CompiledGraph> compile(const Graph& graph,
                                                      const CompileOptions& options = {});
  ~CompiledGraph();

  const Graph& graph() const;  // the optimized graph
  const CompileOptions& options() const;

  // Runs with Kiln-allocated outputs. Inputs are read in place (no copies). Safe to call from
  // several threads at once: each run gets its own working memory.
  std::vector<Tensor> run(const std::vector<TensorView>& inputs) const;
  // Runs writing into caller buffers, whose dtypes and sizes must be output_sizes().
  void run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) const;
  // The output sizes for given input sizes (validates them like run()).
  std::vector<std::vector<int64_t>> output_sizes(
      const std::vector<std::vector<int64_t>>& input_sizes) const;

  // Human-readable plan for the given input sizes: kernel per node and the memory plan.
  std::string describe_plan(const std::vector<std::vector<int64_t>>& input_sizes) const;

  struct Impl;

 private:
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
