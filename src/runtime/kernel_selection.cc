#include "runtime/kernel_selection.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace kiln {

namespace {

Tensor zeros(DType dtype, std::vector<int64_t> sizes) {
  Tensor t = Tensor::empty(dtype, std::move(sizes));
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

// Median seconds of one run of `kernel` on zero-filled inputs (constants are the real weights,
// which a kernel may have prepacked), after one warm-up run.
double median_seconds(const KernelInstance& kernel, const KernelSpec& spec) {
  std::vector<Tensor> buffers;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (const Tensor* c = spec.constant_inputs[i]) {
      inputs.push_back(c->data());
      continue;
    }
    buffers.push_back(zeros(spec.inputs[i].dtype, spec.input_sizes(i)));
    inputs.push_back(buffers.back().data());
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    buffers.push_back(zeros(spec.outputs[i].dtype, spec.output_sizes(i)));
    outputs.push_back(buffers.back().data());
  }
  Tensor scratch = zeros(DType::U8, {static_cast<int64_t>(kernel.scratch_bytes())});
  auto run = [&] { kernel.run(inputs, outputs, scratch.data()); };
  run();
  std::vector<double> seconds;
  for (int r = 0; r < kAutotuneRuns; ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

// The kernel created for `spec`, or null where its library refuses what the kernel's rule
// accepted (oneDNN capped by ONEDNN_MAX_CPU_ISA below the CPU's ISA): `reasons` then says why.
// Kiln's own errors (out of memory) propagate.
std::unique_ptr<KernelInstance> create_or_explain(const KernelDef& k, const KernelSpec& spec,
                                                  std::string& reasons) {
  try {
    return k.create(spec);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    reasons += "\n  kernel '" + k.name + "' failed to create: " + e.what();
    return nullptr;
  }
}

KernelChoice autotune(const std::vector<const KernelDef*>& supporting, const OpDef& def,
                      const KernelSpec& spec, std::string& reasons) {
  std::vector<const KernelDef*> candidates = supporting;
  // The reference kernels accumulate in double and never win; timing them only costs compile time.
  if (candidates.size() > 1 && candidates.back() == &def.kernels.back()) candidates.pop_back();
  KernelChoice best;
  double best_seconds = std::numeric_limits<double>::infinity();
  for (const KernelDef* k : candidates) {
    std::unique_ptr<KernelInstance> instance = create_or_explain(*k, spec, reasons);
    if (!instance) continue;
    if (candidates.size() == 1) {
      best.kernel = k;
      best.instance = std::move(instance);
      return best;
    }
    double seconds = std::numeric_limits<double>::infinity();
    try {
      seconds = median_seconds(*instance, spec);
    } catch (const Error&) {
      // Zero-filled inputs can be invalid data for a kernel (an index into an empty dim): it
      // can't be timed and ranks last.
    }
    best.timings.emplace_back(k->name, seconds);
    if (!best.kernel || seconds < best_seconds) {
      best_seconds = seconds;
      best.kernel = k;
      best.instance = std::move(instance);
    }
  }
  return best;  // no kernel when every candidate's library refused
}

}  // namespace

std::vector<const KernelDef*> supporting_kernels(const OpDef& def, const KernelSpec& spec,
                                                 std::string* reasons) {
  std::vector<const KernelDef*> out;
  for (const KernelDef& k : def.kernels) {
    std::string why = k.unsupported_reason ? k.unsupported_reason(spec) : "";
    if (why.empty())
      out.push_back(&k);
    else if (reasons)
      *reasons += "\n  kernel '" + k.name + "': " + why;
  }
  return out;
}

KernelChoice select_kernel(const OpDef& def, const KernelSpec& spec, const std::string& policy) {
  std::string reasons;
  std::vector<const KernelDef*> supporting = supporting_kernels(def, spec, &reasons);
  if (policy == "reference") {
    if (supporting.empty() || supporting.back() != &def.kernels.back()) supporting.clear();
    else supporting = {supporting.back()};
  }
  if (supporting.empty()) {
    std::string types;
    for (const TensorType& t : spec.inputs) types += (types.empty() ? "" : ", ") + type_string(t);
    throw_error(ErrorCode::UnsupportedOperator, "no kernel of op '", def.name, "' can run node '",
                spec.node.name(), "' with inputs (", types, "):", reasons,
                "\nChange the input dtypes or shapes to ones the op supports (docs/ops.md).");
  }
  if (policy == "autotune")
    if (KernelChoice best = autotune(supporting, def, spec, reasons); best.kernel) return best;
  // A kernel whose library refuses gives the node to the next; the reference kernels, last,
  // need no library.
  for (const KernelDef* k : supporting)
    if (std::unique_ptr<KernelInstance> instance = create_or_explain(*k, spec, reasons)) {
      KernelChoice choice;
      choice.kernel = k;
      choice.instance = std::move(instance);
      return choice;
    }
  throw_error(ErrorCode::UnsupportedOperator, "no kernel of op '", def.name,
              "' could be created for node '", spec.node.name(), "':", reasons,
              "\nCheck library settings such as ONEDNN_MAX_CPU_ISA, or report it as a bug.");
}

std::vector<int> engine_subgraphs(const std::vector<std::string>& engines) {
  std::vector<int> subgraph;
  for (size_t i = 0; i < engines.size(); ++i)
    subgraph.push_back(i == 0 ? 0 : subgraph.back() + (engines[i] != engines[i - 1]));
  return subgraph;
}

void annotate_selection(Graph& graph,
                        const std::vector<std::pair<std::string, std::string>>& node_kernels) {
  std::unordered_map<std::string, Node*> by_name;
  for (Node* node : graph.nodes()) by_name[node->name()] = node;
  std::vector<Node*> nodes;
  std::vector<std::string> engines;
  for (const auto& [name, kernel] : node_kernels) {
    auto found = by_name.find(name);
    KILN_ASSERT(found != by_name.end(), "planned node " << name << " is not in the graph copy");
    Node* node = found->second;
    const OpDef* def = OpRegistry::instance().find(node->op());
    KILN_ASSERT(def, "planned node " << name << " has unknown op " << node->op());
    auto k = std::find_if(def->kernels.begin(), def->kernels.end(),
                          [&](const KernelDef& d) { return d.name == kernel; });
    KILN_ASSERT(k != def->kernels.end(), "op " << node->op() << " has no kernel " << kernel);
    node->annotate("kernel", kernel);
    node->annotate("engine", k->engine);
    nodes.push_back(node);
    engines.push_back(k->engine);
  }
  std::vector<int> subgraphs = engine_subgraphs(engines);
  for (size_t i = 0; i < nodes.size(); ++i)
    nodes[i]->annotate("subgraph", std::to_string(subgraphs[i]));
}

}  // namespace kiln
