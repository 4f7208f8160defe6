// Compiling a graph into an executable plan and running it.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln {

// One run of one pass during compile (PassPipeline), for benchmarks and dumps.
struct PassRecord {
  std::string pass;
  std::string stage;
  int round = 0;  // round of its fixed-point group, from 0; 0 outside groups
  bool changed = false;
  size_t nodes_before = 0;
  size_t nodes_after = 0;
  double seconds = 0;
};

// One arena lent in turn to several compiled graphs (memory.enable_shared_pool): the
// partitions of one model run one after another, so they can share working memory. Every plan
// built with the pool reserves its arena size; each run borrows an arena of the largest size
// reserved and returns it after. Threading rule: runs from several threads at once each borrow
// their own arena (so nothing is ever shared by two running plans); a thread that runs the
// graphs one after another reuses one arena, and the pool holds as many arenas as runs that
// ever overlapped in time.
class MemoryPool {
 public:
  size_t arena_bytes() const;  // the largest arena reserved so far
  size_t arenas() const;       // arenas allocated so far (at most the runs that overlapped)
  // Used by plans: record an arena size; borrow an arena of at least `bytes`; give it back.
  void reserve(size_t bytes);
  Tensor acquire(size_t bytes);
  void release(Tensor arena);

 private:
  mutable std::mutex mutex_;
  size_t reserved_ = 0;
  size_t allocated_ = 0;
  std::vector<Tensor> idle_;
};

// What the memory planner did for one plan (CompiledGraph::memory_stats).
struct MemoryStats {
  size_t arena_bytes = 0;         // one run's arena
  size_t intermediate_bytes = 0;  // every intermediate tensor and scratch buffer, unshared
  size_t peak_live_bytes = 0;     // the most bytes alive at one step: no arena can be smaller
  size_t buffers = 0;             // buffers placed, after in-place merges
  size_t in_place = 0;            // outputs written over a dying input, or views (reshape)
  std::string placement;          // the placement strategy kept
  std::string schedule;           // the execution order kept
  // Constants reordered for the kernels (oneDNN's blocked weights), held by the compiled graph
  // and shared by all its plans: memory on top of the constants themselves.
  size_t prepacked_bytes = 0;
  // Constants the compile made (batch norms folded into weights, weights cast to bf16) that the
  // graph dropped because only prepared copies of them are read (release_prepacked_constants).
  size_t released_constant_bytes = 0;
};

// One node's execution, reported to a RunObserver after its kernel returned. The views hold
// the node's concrete dtypes and sizes (contiguous; a blocked layout is the node's output
// type's, node.output(i)->type().layout) and point into the run's memory: valid only during
// on_node, and an input may already be overwritten by an output written in place over it; a
// constant the graph released after prepacking it (release_prepacked_constants) has no data.
struct NodeRun {
  const Graph& graph;          // the optimized graph the plan runs
  const Node& node;            // op(), name(), annotations: origin (source, aten, fx) and more
  const std::string& kernel;   // the kernel that ran it ("avx2", "openblas", ...)
  const std::string& engine;   // its engine ("onednn", "openblas", "native")
  size_t step;                 // position in the execution order, from 0
  size_t steps;                // steps in one run of this plan
  std::span<const TensorView> inputs;
  std::span<const TensorView> outputs;
  std::chrono::steady_clock::time_point start, end;  // around the kernel call
};

// Watches a run node by node: the profiler (src/runtime/profiler.h) and the precision check
// are built on it. on_node is called on the thread of the run, once per node in execution
// order; concurrent runs sharing one observer call it from several threads at once. A run
// without an observer costs one null check per node.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_node(const NodeRun& run) = 0;
};

class Profiler;

struct CompileOptions {
  // Threads each kernel may use; 0 means every core.
  int threads = 0;
  // 0: no passes (with reference kernels unless kernel_policy says otherwise: the reference
  // path); 1: stage prepare; 2: + fuse; 3: every stage (docs/passes.md).
  int optimization_level = 3;
  // "best": the first kernel (best first) that supports each node; "reference": the reference
  // kernel of every op (the baseline of differential tests); "" (default): "reference" at
  // optimization_level 0, else "best"; "autotune": at plan time, time every kernel that
  // supports a node on the real shapes (median of a few runs) and keep the fastest.
  std::string kernel_policy = "";
  // Run the verifier after every pass (on in tests and debug builds).
  bool verify = false;
  // Passes switched off by name, to bisect a wrong result.
  std::set<std::string> disabled_passes;
  // Plans kept for graphs with symbolic dims, one per concrete input shape seen (LRU). Gears
  // don't count: their plans are pinned.
  size_t plan_cache_capacity = 16;
  // Gears (dynamic_shape.gears, docs/dynamic-shapes.md): concrete sizes for every input, each
  // in range. compile() builds each gear's plan and pins it in the plan cache. With gears, a run
  // whose sizes are no gear is E20008 listing them, unless pad_to_gear: then its inputs are
  // zero-padded up to the smallest gear covering them and the outputs sliced back along their
  // symbolic dims (correct only for models whose outputs at real positions ignore padding).
  std::vector<std::vector<std::vector<int64_t>>> gears;
  bool pad_to_gear = false;
  // Buffers smaller than this many bytes get memory of their own: never shared with another
  // buffer, never written in place (memory.reuse_threshold).
  size_t memory_reuse_threshold = 0;
  // "default": one execution order (the memory-aware one at optimization_level 3, else the
  // graph's) and the best arena of every placement strategy; "aggressive": every schedule
  // variant with every strategy (memory.optimization_level).
  std::string memory_optimization_level = "default";
  // Matmuls read constant weights where they lie (the caller's or the model file's tensors)
  // instead of a copy reordered into the GEMM library's preferred layout: the compiled graph
  // then holds no second copy of a transformer's weights, at some GEMM speed
  // (memory.gemm_weights_in_place; docs/config.md has the measured cost).
  bool gemm_weights_in_place = false;
  // A graph whose plans are all made at compile (static inputs, or gears) drops each constant
  // the compile made itself (a batch norm folded into a convolution's weights, a weight cast to
  // bf16) that no kernel reads at run time, every one reading a copy prepacked into its layout:
  // otherwise the folded weights stay resident beside their prepacked copies and the model's own
  // (ResNet-50: 94 MB). The caller's constants are never touched. The graph keeps their types;
  // save_model needs their data, so kiln.export compiles with this off.
  bool release_prepacked_constants = true;
  // Non-null: plans borrow their arena from this pool, shared with other compiled graphs
  // (memory.enable_shared_pool); null: each plan pools arenas of its own.
  std::shared_ptr<MemoryPool> memory_pool;
  // Graph dumps: "" for none, else "txt", "json", "dot", "png" or "svg" (png and svg need
  // Graphviz's dot). The graph after each stage goes to dump_path as
  // <graph>_<stage index>_<stage>.<type> (src/ir/graph_dump.h).
  std::string dump_type;
  std::string dump_path = "./kiln_dump";
  // Profile every run into this Chrome-trace JSON file (debug.profile; docs/config.md,
  // Profiling). "" (the default): the path in the environment variable KILN_PROFILE, if set.
  // Graphs given one path share one profile: one file, a track per graph.
  std::string profile_path;
};

class CompiledGraph {
 public:
  // Copies `graph`, optimizes the copy and prepares plans. Graphs whose inputs are all static get
  // their plan now; graphs with symbolic dims get one per concrete shape on first use.
  static std::shared_ptr<const CompiledGraph> compile(const Graph& graph,
                                                      const CompileOptions& options = {});
  ~CompiledGraph();

  const Graph& graph() const;  // the optimized graph
  const CompileOptions& options() const;  // kernel_policy "" resolved to "best" or "reference"
  // Every pass run of the compile, in order, and the pipeline's warnings (a fixed-point group
  // that hit its round cap).
  const std::vector<PassRecord>& pass_records() const;
  const std::vector<std::string>& pipeline_warnings() const;

  // Runs with Kiln-allocated outputs. Inputs are read in place (no copies). Safe to call from
  // several threads at once: each run gets its own working memory. An `observer` sees every
  // node (NodeRun), besides the profiler of profile_path / KILN_PROFILE when there is one.
  std::vector<Tensor> run(const std::vector<TensorView>& inputs) const;
  std::vector<Tensor> run(const std::vector<TensorView>& inputs, RunObserver& observer) const;
  // Runs writing into caller buffers, whose dtypes and sizes must be output_sizes(); a non-null
  // `observer` as above.
  void run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
           RunObserver* observer = nullptr) const;
  // The profiler recording this graph's runs (profile_path or KILN_PROFILE), or null.
  const std::shared_ptr<Profiler>& profiler() const;
  // The output sizes for given input sizes (validates them like run()).
  std::vector<std::vector<int64_t>> output_sizes(
      const std::vector<std::vector<int64_t>>& input_sizes) const;

  // Human-readable plan for the given input sizes: kernel per node and the memory plan.
  std::string describe_plan(const std::vector<std::vector<int64_t>>& input_sizes) const;
  // The memory plan for the given input sizes: what the planner did, and the plan as a table
  // ("table": buffer, size, offset, first and last step, producer) or as an offset-over-time
  // chart ("svg": x = step, y = offset, one rectangle per buffer).
  MemoryStats memory_stats(const std::vector<std::vector<int64_t>>& input_sizes) const;
  std::string memory_plan(const std::vector<std::vector<int64_t>>& input_sizes,
                          const std::string& format = "table") const;
  // The input sizes of the plans in the plan cache, most recently used first (gears included;
  // empty for a graph whose inputs are all static, which has one plan).
  std::vector<std::vector<std::vector<int64_t>>> cached_plans() const;

  struct Impl;

 private:
  std::vector<Tensor> run_allocating(const std::vector<TensorView>& inputs,
                                     RunObserver* observer) const;
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
