// Stages partition and select, at plan time (they need the concrete shapes): a kernel per node
// by policy, and from it the node's engine.
//   best       the first kernel, best first, that supports the node's shapes and dtypes
//   reference  the op's reference kernel (the baseline of differential tests)
//   autotune   every supporting kernel (the reference kernel only when nothing else supports
//              the node) is created and run on the real shapes, a warm-up and then
//              kAutotuneRuns timed runs on zero-filled inputs; the lowest median wins
//              (torch.compile mode max-autotune). A single candidate is taken without timing.
// The partition groups the nodes, in execution order, into runs of one engine ("onednn",
// "openblas", "native"): the subgraphs that graph dumps draw.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/op_registry.h"

namespace kiln {

constexpr int kAutotuneRuns = 5;

struct KernelChoice {
  const KernelDef* kernel = nullptr;
  std::unique_ptr<KernelInstance> instance;  // created for the spec
  // Autotune: each timed candidate and its median seconds, in kernel-list order.
  std::vector<std::pair<std::string, double>> timings;
};

// The kernels whose unsupported_reason is empty for `spec`, best first; `reasons` collects why
// the others can't run it.
std::vector<const KernelDef*> supporting_kernels(const OpDef& def, const KernelSpec& spec,
                                                 std::string* reasons = nullptr);

// Picks and creates the kernel for one node. A kernel whose library refuses at creation (a
// non-Kiln exception) gives the node to the next supporting one. Throws E50001 listing every
// kernel's reason when none can run or be created for the node.
KernelChoice select_kernel(const OpDef& def, const KernelSpec& spec, const std::string& policy);

// The partition: for nodes in execution order with their engines, the subgraph index of each
// (a new subgraph starts where the engine changes).
std::vector<int> engine_subgraphs(const std::vector<std::string>& engines);

// Annotates `graph` (a copy of a plan's graph: same node names) with each node's "kernel",
// "engine" and engine "subgraph", from the plan's (node name, kernel name) in execution order.
void annotate_selection(Graph& graph,
                        const std::vector<std::pair<std::string, std::string>>& node_kernels);

}  // namespace kiln
