// An executable plan: the graph bound to concrete input sizes, with a kernel per node and every
// intermediate buffer placed in one arena. Immutable once built; runs concurrently.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "runtime/constant_release.h"
#include "runtime/kernel_cache.h"
#include "runtime/memory_planner.h"

namespace kiln {

// Where a value lives during a run.
struct Slot {
  enum class Kind : uint8_t { Input, Constant, Arena, Output };
  Kind kind;
  size_t index = 0;  // input or output position, or arena offset
  const Tensor* constant = nullptr;  // the graph's, read at each run: it may have been released
};

struct PlanStep {
  const Node* node;
  std::string kernel_name;
  std::shared_ptr<const KernelInstance> kernel;  // shared with other plans (KernelCache)
  std::vector<size_t> inputs;   // slot ids
  std::vector<size_t> outputs;  // slot ids
  size_t scratch_offset = 0;
  std::vector<size_t> in_place_inputs;  // the kernel's declaration (KernelDef::in_place_inputs)
  bool output_aliases_input = false;    // the kernel's declaration (KernelDef's)
  std::string engine;                   // the kernel's (KernelDef::engine)
  // Concrete dtypes and sizes without data, for RunObserver's NodeRun.
  std::vector<TensorView> input_views, output_views;
};

// Per-run working memory, pooled by the plan so repeated runs allocate nothing.
struct RunContext {
  Tensor arena;  // unused with a shared MemoryPool, which lends one per run
  std::vector<void*> slot_pointers;
  std::vector<const void*> step_inputs;
  std::vector<void*> step_outputs;
};

class ExecPlan {
 public:
  // Binds `graph` to `input_sizes` (already validated) and prepares every kernel; kernels share
  // their prepared constants through `prepared`, and take the kernels other plans of the graph
  // made for the same node and sizes from `kernels`; `release` hears of each constant use its
  // kernel was made for (each may be null).
  ExecPlan(const Graph& graph, const std::vector<std::vector<int64_t>>& input_sizes,
           const CompileOptions& options, int threads, PreparedConstants* prepared,
           KernelCache* kernels = nullptr, ConstantRelease* release = nullptr);

  const std::vector<std::vector<int64_t>>& output_sizes() const { return output_sizes_; }
  const std::vector<DType>& output_dtypes() const { return output_dtypes_; }
  // `observer` (may be null) sees every node after its kernel ran.
  void run(const std::vector<TensorView>& inputs, const std::vector<void*>& outputs,
           RunObserver* observer = nullptr) const;
  std::string describe() const;
  const MemoryStats& memory_stats() const { return memory_stats_; }
  // The memory plan as a table ("table") or an offset-over-time chart ("svg").
  std::string memory_plan(const std::string& format, const std::string& title) const;
  const std::vector<PlanStep>& steps() const { return steps_; }  // in execution order

 private:
  std::unique_ptr<RunContext> acquire() const;
  // Runs one step timed, reporting it to `observer`.
  void run_observed(size_t s, const RunContext& context, std::byte* arena,
                    RunObserver& observer) const;
  void release(std::unique_ptr<RunContext> context) const;

  const Graph* graph_;
  std::vector<Slot> slots_;
  std::vector<PlanStep> steps_;
  // Graph outputs that no step writes directly (inputs, constants, repeated outputs): copied
  // from their slot into the output buffer after the steps.
  struct OutputCopy {
    size_t slot;
    size_t output;
    size_t bytes;
  };
  std::vector<OutputCopy> output_copies_;
  std::vector<std::vector<int64_t>> output_sizes_;
  std::vector<DType> output_dtypes_;
  std::vector<BufferLifetime> buffers_;
  MemoryPlan memory_plan_;
  MemoryStats memory_stats_;
  std::shared_ptr<MemoryPool> shared_pool_;
  size_t max_arity_in_ = 0, max_arity_out_ = 0;

  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<RunContext>> idle_contexts_;
};

}  // namespace kiln
